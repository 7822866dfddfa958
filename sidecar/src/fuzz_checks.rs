//! Properties of request parsing at the edge on arbitrary input, shared by the cargo-fuzz target
//! (`fuzz/fuzz_targets/http_request.rs`) and the randomized unit test below, so `cargo test` exercises the
//! same checks on every run.
//!
//! The input is split into method, path with query, content type and body; it then takes the HTTP
//! listener's pure steps in its order: route lookup with typed path parameters, media type, JSON syntax,
//! schema, payload building, query parameters.

use crate::edge;
use crate::routes::http::{Lookup, RouteTable};
use bytes::Bytes;
use std::sync::OnceLock;

const METHODS: [&str; 8] = [
    "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "BREW",
];
const CONTENT_TYPES: [Option<&str>; 5] = [
    None,
    Some("application/json"),
    Some("application/cloudevents+json; charset=utf-8"),
    Some("text/plain"),
    Some(""),
];

fn table() -> &'static RouteTable {
    static TABLE: OnceLock<RouteTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let spec = serde_json::from_value(serde_json::json!({
            "listeners": {"http": {"port": 8080}},
            "routes": [
                {"event": "noop", "http": {"method": "GET", "path": "/noop"}},
                {"event": "echo", "http": {"method": "POST", "path": "/echo"},
                 "schema": {"type": "object", "required": ["value"],
                            "properties": {"value": {"type": "integer"}, "tags": {"type": "array"}}}},
                {"event": "get", "http": {"method": "GET", "path": "/orders/{id}/items/{item}"},
                 "params": {"id": "integer", "item": "string", "n": "number", "all": "boolean"}},
                {"event": "put", "http": {"method": "PUT", "path": "/orders/{id}"}, "params": {"id": "integer"}},
                {"event": "raw", "http": {"method": "PATCH", "path": "/raw"}},
                {"event": "del", "http": {"method": "DELETE", "path": "/orders/{id}"}},
            ],
        }))
        .unwrap_or_else(|e| panic!("fuzz spec: {e}"));
        RouteTable::build(&spec).unwrap_or_else(|e| panic!("fuzz table: {}", e.message))
    })
}

/// Runs `data` through the edge's parsing. Must never panic; every rejection is a 4xx; every accepted
/// request becomes a JSON payload.
pub fn http_request(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let method = METHODS[usize::from(selector & 7)];
    let content_type = CONTENT_TYPES[usize::from(selector >> 3) % CONTENT_TYPES.len()];
    let (target, body) = match rest.iter().position(|b| *b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let target = String::from_utf8_lossy(target);
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (&*target, None),
    };
    let (route, params) = match table().lookup(method, path) {
        Lookup::Found { route, params } => (route, params),
        Lookup::NotFound | Lookup::MethodNotAllowed(_) | Lookup::BadParam(_) => return,
    };
    let payload = if route.has_body() {
        let result = edge::check_content_type(content_type, Some(body.len() as u64))
            .and_then(|()| edge::body_event(route, Bytes::copy_from_slice(body), params));
        match result {
            Ok(p) => p,
            Err(r) => return assert_client_error(&r),
        }
    } else {
        match edge::params_payload(route, query, params) {
            Ok(p) => p,
            Err(r) => return assert_client_error(&r),
        }
    };
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&payload) {
        panic!("accepted request became a payload that is not JSON: {e}");
    }
}

fn assert_client_error(r: &edge::Rejection) {
    assert!(
        (400..500).contains(&r.status),
        "rejection with status {}: {}",
        r.status,
        r.detail
    );
    assert!(!r.detail.is_empty(), "a rejection says why");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeds() -> Vec<Vec<u8>> {
        let mk = |sel: u8, target: &str, body: &str| {
            let mut v = vec![sel];
            v.extend_from_slice(target.as_bytes());
            v.push(0);
            v.extend_from_slice(body.as_bytes());
            v
        };
        vec![
            mk(0, "/noop", ""),
            mk(1 | 8, "/echo", r#"{"value":1,"tags":["a"]}"#),
            mk(1 | 8, "/echo", r#"{"value":"x"}"#),
            mk(0, "/orders/12/items/ab%20c?n=1.5&all=true&x=%ZZ", ""),
            mk(2 | 8, "/orders/7", r#"{"id":1,"note":"n"}"#),
            mk(4 | 16, "/raw", r#"[1,{"a":null}]"#),
            mk(3, "/orders/x", ""),
        ]
    }

    /// Mutations of valid requests reach deep into the parsers; the seed is fixed so a failure reproduces.
    #[test]
    fn mutated_requests_are_answered_never_panic() {
        let seeds = seeds();
        let mut rng = fastrand::Rng::with_seed(0xed9e);
        let alphabet = b"{}[]\":,0123456789.-eE+truefalsn /?&=%\\u\x00\xff";
        for s in &seeds {
            http_request(s);
        }
        for _ in 0..20_000 {
            let mut data = seeds[rng.usize(..seeds.len())].clone();
            for _ in 0..rng.usize(1..5) {
                let i = rng.usize(..data.len());
                match rng.u8(..4) {
                    0 => data[i] = alphabet[rng.usize(..alphabet.len())],
                    1 => data.insert(i, alphabet[rng.usize(..alphabet.len())]),
                    2 if data.len() > 1 => {
                        data.remove(i);
                    }
                    _ => data[i] ^= 1 << rng.u8(..8),
                }
                if data.is_empty() {
                    data.push(0);
                }
            }
            http_request(&data);
        }
    }
}
