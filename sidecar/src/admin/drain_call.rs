//! `switchyard-sidecar drain`: the manager sidecar's own preStop hook. Run by the kubelet inside the
//! sidecar's container, so its `GET /drain` arrives on loopback, the only place `/drain` answers;
//! it returns once the drain is over, as the endpoint does.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::time::Duration;

/// Why the drain hook failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DrainCallError {
    /// No connection to the admin port, or the exchange broke.
    #[error("GET /drain on {addr}: {detail}")]
    Exchange {
        /// The admin address.
        addr: SocketAddr,
        /// What failed.
        detail: String,
    },
    /// The sidecar answered, but not that the drain is over.
    #[error("GET /drain on {addr}: {status} {body}")]
    Refused {
        /// The admin address.
        addr: SocketAddr,
        /// Its status.
        status: StatusCode,
        /// Its body, as text.
        body: String,
    },
    /// No answer within the drain limit and its margin.
    #[error("GET /drain on {addr}: no answer within {limit:?}")]
    TimedOut {
        /// The admin address.
        addr: SocketAddr,
        /// How long it waited.
        limit: Duration,
    },
}

/// Asks the sidecar at `addr` to drain and waits until it says the drain is over.
pub(crate) async fn call(addr: SocketAddr) -> Result<(), DrainCallError> {
    // A little more than the endpoint's own bound, so that its answer is what ends this.
    let limit = super::drain_hook::FINISH_WAIT + Duration::from_secs(3);
    tokio::time::timeout(limit, exchange(addr))
        .await
        .unwrap_or(Err(DrainCallError::TimedOut { addr, limit }))
}

async fn exchange(addr: SocketAddr) -> Result<(), DrainCallError> {
    let broke = |detail: String| DrainCallError::Exchange { addr, detail };
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| broke(format!("connect: {e}")))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| broke(e.to_string()))?;
    tokio::spawn(conn);
    let req = hyper::Request::get("/drain")
        .header(hyper::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| broke(e.to_string()))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| broke(e.to_string()))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| broke(e.to_string()))?
        .to_bytes();
    if status == StatusCode::OK {
        return Ok(());
    }
    Err(DrainCallError::Refused {
        addr,
        status,
        body: String::from_utf8_lossy(&body).trim().to_owned(),
    })
}
