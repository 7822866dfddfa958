//! The WebSocket opening handshake (RFC 6455 section 4.2): is this request an upgrade we accept?
//!
//! Pure. Only HTTP/1.1 `Upgrade: websocket` is served; anything else on the WebSocket path gets a
//! problem naming what is missing (426 with `Upgrade: websocket` for a plain request).

use http::header::{CONNECTION, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION, UPGRADE};
use http::{HeaderMap, Method, Version};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

/// Why the request on the WebSocket path is not an acceptable upgrade.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refused {
    /// HTTP status (405, 426 or 400).
    pub status: u16,
    /// Problem detail.
    pub detail: String,
    /// Headers the answer carries, telling the client what to send instead.
    pub headers: Vec<(&'static str, &'static str)>,
}

fn has_token(headers: &HeaderMap, name: http::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Checks an upgrade request; the `Sec-WebSocket-Accept` value when it is acceptable.
pub(super) fn check(
    method: &Method,
    version: Version,
    headers: &HeaderMap,
) -> Result<String, Refused> {
    if method != Method::GET {
        return Err(Refused {
            status: 405,
            detail: format!(
                "{method} is not allowed here; this is a WebSocket endpoint (GET with Upgrade: websocket)"
            ),
            headers: vec![("allow", "GET")],
        });
    }
    if version != Version::HTTP_11
        || !has_token(headers, UPGRADE, "websocket")
        || !has_token(headers, CONNECTION, "upgrade")
    {
        return Err(Refused {
            status: 426,
            detail: "this path is a WebSocket endpoint: send an HTTP/1.1 GET with \
                     `Connection: Upgrade` and `Upgrade: websocket`"
                .into(),
            headers: vec![("upgrade", "websocket"), ("connection", "Upgrade")],
        });
    }
    let version_ok = headers
        .get(SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v.as_bytes() == b"13");
    if !version_ok {
        return Err(Refused {
            status: 426,
            detail: "only WebSocket version 13 is supported (Sec-WebSocket-Version: 13)".into(),
            headers: vec![("sec-websocket-version", "13")],
        });
    }
    let Some(key) = headers.get(SEC_WEBSOCKET_KEY) else {
        return Err(Refused {
            status: 400,
            detail: "the upgrade request has no Sec-WebSocket-Key".into(),
            headers: Vec::new(),
        });
    };
    Ok(derive_accept_key(key.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, http::HeaderValue::from_static(v));
        }
        h
    }

    const GOOD: [(&str, &str); 4] = [
        ("connection", "keep-alive, Upgrade"),
        ("upgrade", "WebSocket"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn accepts_the_rfc_example() {
        assert_eq!(
            check(&Method::GET, Version::HTTP_11, &headers(&GOOD)),
            Ok("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".to_owned())
        );
    }

    #[test]
    fn refusals_say_what_to_send() {
        let r = check(&Method::POST, Version::HTTP_11, &headers(&GOOD)).expect_err("post");
        assert_eq!(r.status, 405);
        assert_eq!(r.headers, vec![("allow", "GET")]);
        let r = check(&Method::GET, Version::HTTP_11, &HeaderMap::new()).expect_err("plain");
        assert_eq!(r.status, 426);
        assert!(r.headers.contains(&("upgrade", "websocket")));
        let r = check(&Method::GET, Version::HTTP_2, &headers(&GOOD)).expect_err("h2");
        assert_eq!(r.status, 426);
        let r = check(
            &Method::GET,
            Version::HTTP_11,
            &headers(&[GOOD[0], GOOD[1], ("sec-websocket-version", "8"), GOOD[3]]),
        )
        .expect_err("version");
        assert_eq!(r.status, 426);
        assert_eq!(r.headers, vec![("sec-websocket-version", "13")]);
        let r = check(&Method::GET, Version::HTTP_11, &headers(&GOOD[..3])).expect_err("key");
        assert_eq!(r.status, 400);
    }
}
