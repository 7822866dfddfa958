//! Who is calling the control plane. Every RPC reads its caller here first, so a per-stream or
//! per-report check of the caller's identity (peer certificates, once the control plane speaks
//! mTLS) has one place to live and every handler already receives its result.

use super::forward::FORWARDED;
use std::net::SocketAddr;
use tonic::Request;

/// The origin of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Remote address of the connection, when the transport knows it.
    pub peer: Option<SocketAddr>,
    /// Another operator replica passed this call on (see `forward`); it is never forwarded again.
    pub forwarded: bool,
}

impl Caller {
    /// The caller of `request`.
    pub fn of<T>(request: &Request<T>) -> Caller {
        Caller {
            peer: request.remote_addr(),
            forwarded: request.metadata().get(FORWARDED).is_some(),
        }
    }
}
