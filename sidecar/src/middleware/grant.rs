//! What a long session (a WebSocket, a gRPC `Connect` stream) keeps of the credential it was
//! admitted with, and when that lapses: at the token's expiry (`exp` plus the leeway), or at a
//! reload of the gate's key material after which the credential is no longer admitted (a rotated
//! JWT key, an API key taken out of the file). A request is checked once; a session lives on, so
//! it is held to the rule a new request would meet.

use super::gate::{Denial, Gate, Head, Token};
use super::jwt;
use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

/// An admitted credential: the gate that checked it and the header value it checked.
#[derive(Clone)]
pub(crate) struct Grant {
    gate: Arc<dyn Gate>,
    header: HeaderName,
    value: HeaderValue,
    peer: IpAddr,
    token: Option<Arc<Token>>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the credential itself.
        f.debug_struct("Grant")
            .field("header", &self.header)
            .field("expires", &self.expires())
            .finish()
    }
}

impl Grant {
    /// The grant of a request `gate` admitted with `token`; `None` for gates that check no
    /// credential.
    pub(super) fn of(gate: &Arc<dyn Gate>, head: &Head<'_>, token: Option<Token>) -> Option<Grant> {
        let header = gate.credential()?;
        let value = head.headers.get(header)?.clone();
        Some(Grant {
            gate: gate.clone(),
            header: header.clone(),
            value,
            peer: head.peer,
            token: token.map(Arc::new),
        })
    }

    /// The token's claims (JWT auth).
    pub(crate) fn claims(&self) -> Option<&Map<String, Value>> {
        self.token.as_ref().map(|t| &t.claims)
    }

    /// When the token stops being accepted (JWT auth).
    pub(crate) fn expires(&self) -> Option<SystemTime> {
        self.token.as_ref().map(|t| t.expires)
    }

    /// The credential checked again by its gate, as a new request carrying it would be.
    fn recheck(&self) -> Result<(), Denial> {
        let mut headers = HeaderMap::with_capacity(1);
        headers.insert(self.header.clone(), self.value.clone());
        self.gate
            .check(&Head {
                headers: &headers,
                peer: self.peer,
            })
            .map(|_| ())
    }

    /// The grant of a new credential value in the same header (an in-band token refresh),
    /// checked by the same gate.
    pub(crate) fn renew(&self, value: HeaderValue) -> Result<Grant, Denial> {
        let mut headers = HeaderMap::with_capacity(1);
        headers.insert(self.header.clone(), value);
        let head = Head {
            headers: &headers,
            peer: self.peer,
        };
        let token = self.gate.check(&head)?;
        Grant::of(&self.gate, &head, token).ok_or_else(jwt::expired)
    }

    /// Resolves, with the refusal the client is told, once the credential lapses: at the
    /// token's expiry, or at a key reload after which the gate no longer admits it. Never
    /// resolves for a credential that cannot lapse.
    pub(crate) async fn lapsed(&self) -> Denial {
        let mut changes = self.gate.changes();
        // The wall clock says when; the monotonic timer waits. A deadline past what the timer
        // can hold never comes.
        let at = self.expires().and_then(|t| {
            let left = t.duration_since(SystemTime::now()).unwrap_or_default();
            tokio::time::Instant::now().checked_add(left)
        });
        loop {
            let changed = async {
                match changes.as_mut() {
                    Some(rx) => {
                        if rx.changed().await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending().await,
                }
            };
            let expired = async {
                match at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // Not re-checked: at the instant itself the timer and the wall clock may differ
                // by a hair, and the token is over either way.
                _ = expired => return jwt::expired(),
                _ = changed => {
                    if let Err(d) = self.recheck() {
                        return d;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    use tokio::sync::watch;

    /// A gate that admits the value `ok` in `x-key` while `open` holds.
    struct Switch {
        open: AtomicBool,
        header: HeaderName,
        changes: watch::Sender<u64>,
        expires: Option<SystemTime>,
    }

    impl Gate for Switch {
        fn check(&self, head: &Head<'_>) -> Result<Option<Token>, Denial> {
            let ok = self.open.load(Ordering::SeqCst)
                && head.headers.get(&self.header).is_some_and(|v| v == "ok");
            if !ok {
                return Err(Denial {
                    middleware: "apiKey",
                    reason: "invalid",
                    status: 401,
                    detail: "the API key in x-key is not valid".into(),
                    challenge: None,
                    retry_after: None,
                });
            }
            Ok(self.expires.map(|expires| Token {
                claims: Map::new(),
                expires,
            }))
        }
        fn credential(&self) -> Option<&HeaderName> {
            Some(&self.header)
        }
        fn changes(&self) -> Option<watch::Receiver<u64>> {
            Some(self.changes.subscribe())
        }
    }

    fn switch(expires: Option<SystemTime>) -> Arc<Switch> {
        Arc::new(Switch {
            open: AtomicBool::new(true),
            header: HeaderName::from_static("x-key"),
            changes: watch::Sender::new(0),
            expires,
        })
    }

    fn grant(gate: &Arc<Switch>) -> Grant {
        let mut headers = HeaderMap::new();
        headers.insert("x-key", HeaderValue::from_static("ok"));
        let head = Head {
            headers: &headers,
            peer: "127.0.0.1".parse().expect("ip"),
        };
        let dyn_gate: Arc<dyn Gate> = gate.clone();
        let token = dyn_gate.check(&head).expect("admitted");
        Grant::of(&dyn_gate, &head, token).expect("a grant")
    }

    #[tokio::test(start_paused = true)]
    async fn a_reload_that_still_admits_keeps_the_session_and_one_that_refuses_ends_it() {
        let gate = switch(None);
        let g = grant(&gate);
        let lapse = tokio::spawn({
            let g = g.clone();
            async move { g.lapsed().await }
        });
        // A reload that still admits the credential: nothing happens.
        gate.changes.send_modify(|n| *n += 1);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!lapse.is_finished());
        gate.open.store(false, Ordering::SeqCst);
        gate.changes.send_modify(|n| *n += 1);
        let d = lapse.await.expect("joined");
        assert_eq!(d.detail, "the API key in x-key is not valid");
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_lapses_at_its_expiry() {
        let gate = switch(Some(SystemTime::now() + Duration::from_secs(90)));
        let g = grant(&gate);
        assert!(g.expires().is_some());
        let started = tokio::time::Instant::now();
        let d = g.lapsed().await;
        assert_eq!(d.detail, "the token has expired");
        let waited = started.elapsed();
        assert!(
            waited > Duration::from_secs(88) && waited <= Duration::from_secs(90),
            "{waited:?}"
        );
    }

    #[test]
    fn renewing_checks_the_new_value_with_the_same_gate() {
        let gate = switch(None);
        let g = grant(&gate);
        assert!(g.renew(HeaderValue::from_static("ok")).is_ok());
        let d = g
            .renew(HeaderValue::from_static("other"))
            .expect_err("refused");
        assert_eq!(d.reason, "invalid");
        assert!(!format!("{g:?}").contains("ok"), "{g:?}");
    }
}
