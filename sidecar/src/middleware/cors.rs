//! CORS policy: preflights answered at the edge, `Access-Control-Allow-Origin` on the answers to
//! allowed origins. Pure: a decision from the request's method and headers.

use hyper::Method;
use hyper::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_METHOD, HeaderMap, HeaderName, HeaderValue,
    ORIGIN, VARY,
};
use std::time::Duration;
use switchyard_crds::router::{Cors, HttpMethod, RouterSpec};

/// The compiled policy.
#[derive(Debug)]
pub(crate) struct Policy {
    any_origin: bool,
    origins: Vec<String>,
    methods: Vec<HttpMethod>,
    allow_methods: HeaderValue,
    allow_headers: Option<HeaderValue>,
    max_age: Option<HeaderValue>,
}

/// What to do with a request.
#[derive(Debug, PartialEq)]
pub(crate) enum Decision {
    /// Not a CORS request (no `Origin`): pass it on untouched.
    Pass,
    /// A cross-origin request: pass it on, then add these headers to the answer.
    Decorate(Vec<(HeaderName, HeaderValue)>),
    /// An allowed preflight: answer 204 with these headers, right here.
    Preflight(Vec<(HeaderName, HeaderValue)>),
    /// A preflight this policy refuses: reason (metric label) and detail.
    Refuse(&'static str, String),
}

/// A `cors` entry that cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CorsError {
    /// No origin is allowed.
    #[error("allowOrigins needs at least one origin (or \"*\")")]
    NoOrigins,
    /// The methods cannot form a header value.
    #[error("allowMethods cannot be written as a header")]
    Methods,
    /// A header name is not a token.
    #[error("allowHeaders must be header names (letters, digits, `-`)")]
    Headers,
}

impl Policy {
    /// Compiles the policy; allowed methods default to every method of the spec's HTTP routes.
    pub(crate) fn build(spec: &Cors, router: &RouterSpec) -> Result<Policy, CorsError> {
        if spec.allow_origins.is_empty() {
            return Err(CorsError::NoOrigins);
        }
        let mut methods = spec.allow_methods.clone();
        if methods.is_empty() {
            methods = router
                .routes
                .iter()
                .filter_map(|r| r.http.as_ref().map(|h| h.method))
                .collect();
        }
        methods.sort();
        methods.dedup();
        let join = |items: Vec<&str>| HeaderValue::from_str(&items.join(", "));
        let allow_methods =
            join(methods.iter().map(|m| m.as_str()).collect()).map_err(|_| CorsError::Methods)?;
        let allow_headers = if spec.allow_headers.is_empty() {
            None
        } else {
            Some(
                join(spec.allow_headers.iter().map(String::as_str).collect())
                    .map_err(|_| CorsError::Headers)?,
            )
        };
        let max_age = spec
            .max_age
            .map(|d| HeaderValue::from(Duration::from(d).as_secs()));
        Ok(Policy {
            any_origin: spec.allow_origins.iter().any(|o| o == "*"),
            origins: spec.allow_origins.clone(),
            methods,
            allow_methods,
            allow_headers,
            max_age,
        })
    }

    fn allow_origin(&self, origin: &HeaderValue) -> Option<HeaderValue> {
        if self.any_origin {
            Some(HeaderValue::from_static("*"))
        } else {
            let o = origin.to_str().ok()?;
            self.origins.iter().any(|a| a == o).then(|| origin.clone())
        }
    }

    /// Decides what to do with a request.
    pub(crate) fn decide(&self, method: &Method, headers: &HeaderMap) -> Decision {
        let Some(origin) = headers.get(ORIGIN) else {
            return Decision::Pass;
        };
        let vary = (VARY, HeaderValue::from_static("Origin"));
        let requested = headers.get(ACCESS_CONTROL_REQUEST_METHOD);
        let allowed = self.allow_origin(origin);
        match (method == Method::OPTIONS, requested) {
            (true, Some(requested)) => {
                let Some(allowed) = allowed else {
                    return Decision::Refuse(
                        "origin",
                        format!(
                            "origin {} is not allowed",
                            origin.to_str().unwrap_or("(not text)")
                        ),
                    );
                };
                let ok = self
                    .methods
                    .iter()
                    .any(|m| m.as_str().as_bytes() == requested.as_bytes());
                if !ok {
                    return Decision::Refuse(
                        "method",
                        format!(
                            "method {} is not allowed; allowed: {}",
                            requested.to_str().unwrap_or("(not text)"),
                            self.allow_methods.to_str().unwrap_or("")
                        ),
                    );
                }
                let mut out = vec![
                    (ACCESS_CONTROL_ALLOW_ORIGIN, allowed),
                    (ACCESS_CONTROL_ALLOW_METHODS, self.allow_methods.clone()),
                    vary,
                ];
                if let Some(h) = &self.allow_headers {
                    out.push((ACCESS_CONTROL_ALLOW_HEADERS, h.clone()));
                }
                if let Some(m) = &self.max_age {
                    out.push((ACCESS_CONTROL_MAX_AGE, m.clone()));
                }
                Decision::Preflight(out)
            }
            _ => {
                let mut out = vec![vary];
                if let Some(a) = allowed {
                    out.push((ACCESS_CONTROL_ALLOW_ORIGIN, a));
                }
                Decision::Decorate(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(cors: serde_json::Value) -> Policy {
        let router: RouterSpec = serde_json::from_value(json!({
            "listeners": {"http": {"port": 8080}},
            "routes": [
                {"event": "a", "http": {"method": "GET", "path": "/a"}},
                {"event": "b", "http": {"method": "POST", "path": "/b"}},
            ],
        }))
        .expect("spec");
        let cors: Cors = serde_json::from_value(cors).expect("cors");
        Policy::build(&cors, &router).expect("policy")
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    HeaderName::from_bytes(k.as_bytes()).expect("name"),
                    HeaderValue::from_str(v).expect("value"),
                )
            })
            .collect()
    }

    fn get<'a>(out: &'a [(HeaderName, HeaderValue)], name: &HeaderName) -> Option<&'a str> {
        out.iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.to_str().ok())
    }

    #[test]
    fn preflight_from_an_allowed_origin() {
        let p = policy(
            json!({"allowOrigins": ["https://app.example"], "allowHeaders": ["content-type", "authorization"], "maxAge": "10m"}),
        );
        let h = headers(&[
            ("origin", "https://app.example"),
            ("access-control-request-method", "POST"),
        ]);
        let Decision::Preflight(out) = p.decide(&Method::OPTIONS, &h) else {
            panic!("not a preflight answer");
        };
        assert_eq!(
            get(&out, &ACCESS_CONTROL_ALLOW_ORIGIN),
            Some("https://app.example")
        );
        assert_eq!(get(&out, &ACCESS_CONTROL_ALLOW_METHODS), Some("GET, POST"));
        assert_eq!(
            get(&out, &ACCESS_CONTROL_ALLOW_HEADERS),
            Some("content-type, authorization")
        );
        assert_eq!(get(&out, &ACCESS_CONTROL_MAX_AGE), Some("600"));
        assert_eq!(get(&out, &VARY), Some("Origin"));
    }

    #[test]
    fn preflight_refusals_name_origin_or_method() {
        let p = policy(json!({"allowOrigins": ["https://app.example"], "allowMethods": ["GET"]}));
        let h = headers(&[
            ("origin", "https://evil.example"),
            ("access-control-request-method", "GET"),
        ]);
        assert!(matches!(
            p.decide(&Method::OPTIONS, &h),
            Decision::Refuse("origin", _)
        ));
        let h = headers(&[
            ("origin", "https://app.example"),
            ("access-control-request-method", "DELETE"),
        ]);
        assert!(matches!(
            p.decide(&Method::OPTIONS, &h),
            Decision::Refuse("method", _)
        ));
    }

    #[test]
    fn simple_requests_get_the_origin_when_it_matches() {
        let p = policy(json!({"allowOrigins": ["https://app.example"]}));
        assert_eq!(p.decide(&Method::GET, &HeaderMap::new()), Decision::Pass);
        let Decision::Decorate(out) =
            p.decide(&Method::GET, &headers(&[("origin", "https://app.example")]))
        else {
            panic!("not decorated");
        };
        assert_eq!(
            get(&out, &ACCESS_CONTROL_ALLOW_ORIGIN),
            Some("https://app.example")
        );
        let Decision::Decorate(out) = p.decide(
            &Method::GET,
            &headers(&[("origin", "https://evil.example")]),
        ) else {
            panic!("not decorated");
        };
        assert_eq!(get(&out, &ACCESS_CONTROL_ALLOW_ORIGIN), None);
        assert_eq!(get(&out, &VARY), Some("Origin"));
    }

    #[test]
    fn star_allows_any_origin() {
        let p = policy(json!({"allowOrigins": ["*"]}));
        let Decision::Decorate(out) =
            p.decide(&Method::POST, &headers(&[("origin", "https://x.example")]))
        else {
            panic!("not decorated");
        };
        assert_eq!(get(&out, &ACCESS_CONTROL_ALLOW_ORIGIN), Some("*"));
    }
}
