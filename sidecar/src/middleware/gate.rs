//! What every gate shares: the request head it sees, the refusal it gives, the token the JWT gate
//! verified, and the [`Gate`] trait itself.

use crate::answer::Answer;
use futures::future::BoxFuture;
use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use std::net::IpAddr;
use std::time::SystemTime;
use tokio::sync::watch;

/// What a gate sees of a request.
pub(crate) struct Head<'a> {
    /// Request headers.
    pub headers: &'a HeaderMap,
    /// The client's address (the TCP peer).
    pub peer: IpAddr,
}

/// A refused request: which middleware, why (a metric label), and what the client is told.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Denial {
    /// Middleware name (metric label).
    pub middleware: &'static str,
    /// Short reason (metric label).
    pub reason: &'static str,
    /// HTTP status (401, 403, 429).
    pub status: u16,
    /// Problem detail naming the problem.
    pub detail: String,
    /// `WWW-Authenticate` value (401).
    pub challenge: Option<HeaderValue>,
    /// `Retry-After` seconds (429).
    pub retry_after: Option<u64>,
}

impl Denial {
    /// The answer every protocol renders: the status's gRPC code (UNAUTHENTICATED, RESOURCE_EXHAUSTED,
    /// PERMISSION_DENIED), the detail, and Retry-After when the limiter gave one.
    pub(crate) fn answer(&self) -> Answer {
        let a = Answer::refusal(self.status, self.detail.clone());
        match self.retry_after {
            Some(secs) => a.retry_after(secs),
            None => a,
        }
    }
}

/// What the JWT gate verified of a token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    /// Its claims.
    pub claims: Map<String, Value>,
    /// When it stops being accepted: `exp` plus the leeway.
    pub expires: SystemTime,
}

/// A check on the request head that admits or refuses it.
pub(crate) trait Gate: Send + Sync {
    /// Admits the request (with the token it carried, for the JWT gate), or says why not.
    fn check(&self, head: &Head<'_>) -> Result<Option<Token>, Denial>;

    /// Work to finish before [`Gate::check`] can decide on this request (the OIDC gate fetching
    /// the key set a token names), already bounded in time; `None` when there is none.
    fn prepare(&self, _head: &Head<'_>) -> Option<BoxFuture<'static, ()>> {
        None
    }

    /// The header with the credential an auth gate checks; `None` for gates that check none (a
    /// rate limit), which a session never needs to re-check.
    fn credential(&self) -> Option<&HeaderName> {
        None
    }

    /// Changes at each reload of the gate's key material.
    fn changes(&self) -> Option<watch::Receiver<u64>> {
        None
    }
}
