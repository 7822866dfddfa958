//! What one tap asks to see (pure): the query of `GET /tap`, parsed and checked once, and the test
//! each event passes through. Every value is bounded here, so a tap cannot ask this sidecar for an
//! unbounded payload copy or rate.

use super::record::Seen;

/// Most payload bytes a tap may ask for per event.
pub(crate) const MAX_PAYLOAD: usize = 4096;
/// Events a tap is sent per second when it does not say (as `linkerd viz tap --max-rps`).
pub(crate) const DEFAULT_MAX_RPS: u32 = 100;
/// Most events per second a tap may ask for.
pub(crate) const MAX_RPS: u32 = 10_000;
/// Most headers a tap may mark hidden, and the longest name.
const MAX_HIDDEN: usize = 32;
const MAX_NAME: usize = 128;

/// A status filter: one code, or a class (`5xx`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Exactly this code.
    Code(u16),
    /// Codes `n00..=n99`.
    Class(u16),
}

impl Status {
    fn matches(self, status: u16) -> bool {
        match self {
            Status::Code(c) => status == c,
            Status::Class(c) => status / 100 == c,
        }
    }
}

/// One tap's filter and bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Filter {
    /// Event types shown (any when empty).
    pub types: Vec<String>,
    /// Statuses shown (any when empty).
    pub statuses: Vec<Status>,
    /// Request paths shown, by prefix (any when `None`; an event with no path, on a manager, never
    /// matches one).
    pub path: Option<String>,
    /// Payload bytes shown per event; 0: none.
    pub payload: usize,
    /// Events sent per second at most; more are skipped and counted.
    pub max_rps: u32,
    /// Header names (lower case) the tapper marks sensitive: their values never leave the sidecar.
    pub hide: Vec<String>,
}

impl Default for Filter {
    fn default() -> Filter {
        Filter {
            types: Vec::new(),
            statuses: Vec::new(),
            path: None,
            payload: 0,
            max_rps: DEFAULT_MAX_RPS,
            hide: Vec::new(),
        }
    }
}

/// A query a tap cannot be opened with; the text names the parameter and what it takes.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct FilterError(String);

impl Filter {
    /// Parses `type=a&type=b,c&status=5xx&path=/orders&payload=256&max_rps=50&hide=x-token`.
    pub(crate) fn parse(query: Option<&str>) -> Result<Filter, FilterError> {
        let mut f = Filter::default();
        let Some(query) = query else {
            return Ok(f);
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = unescape(value)?;
            let values = value.split(',').map(str::trim).filter(|v| !v.is_empty());
            match key {
                "type" => f.types.extend(values.map(str::to_owned)),
                "status" => {
                    for v in values {
                        f.statuses.push(status(v)?);
                    }
                }
                "path" if value.starts_with('/') => f.path = Some(value),
                "path" => return Err(err(format!("path={value:?}: a path prefix starts with /"))),
                "payload" => f.payload = number(key, &value, MAX_PAYLOAD as u64)? as usize,
                "max_rps" => {
                    f.max_rps = number(key, &value, MAX_RPS.into())? as u32;
                    if f.max_rps == 0 {
                        return Err(err(format!("max_rps=0: at least 1, at most {MAX_RPS}")));
                    }
                }
                "hide" => {
                    for v in values {
                        if v.len() > MAX_NAME {
                            return Err(err(format!(
                                "hide: a header name is at most {MAX_NAME} bytes"
                            )));
                        }
                        f.hide.push(v.to_ascii_lowercase());
                    }
                    if f.hide.len() > MAX_HIDDEN {
                        return Err(err(format!("hide: at most {MAX_HIDDEN} header names")));
                    }
                }
                _ => {
                    return Err(err(format!(
                        "unknown parameter {key:?}: this takes type, status, path, payload, max_rps and hide"
                    )));
                }
            }
        }
        Ok(f)
    }

    /// Whether `seen` is one this tap shows.
    pub(crate) fn matches(&self, seen: &Seen) -> bool {
        (self.types.is_empty() || self.types.iter().any(|t| *t == *seen.event))
            && (self.statuses.is_empty() || self.statuses.iter().any(|s| s.matches(seen.status)))
            && self
                .path
                .as_deref()
                .is_none_or(|p| seen.path.as_deref().is_some_and(|sp| sp.starts_with(p)))
    }
}

fn err(s: String) -> FilterError {
    FilterError(s)
}

fn status(v: &str) -> Result<Status, FilterError> {
    let bad = || {
        err(format!(
            "status={v:?}: a status code (503) or a class (5xx)"
        ))
    };
    let b = v.as_bytes();
    if b.len() != 3 || !(b'1'..=b'5').contains(&b[0]) {
        return Err(bad());
    }
    if v[1..].eq_ignore_ascii_case("xx") {
        return Ok(Status::Class(u16::from(b[0] - b'0')));
    }
    v.parse::<u16>().map(Status::Code).map_err(|_| bad())
}

fn number(key: &str, v: &str, max: u64) -> Result<u64, FilterError> {
    match v.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(err(format!("{key}={v:?}: a whole number from 0 to {max}"))),
    }
}

/// Percent-decoding of one query value (`+` stays a plus: paths and types have none to mean space).
fn unescape(v: &str) -> Result<String, FilterError> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| err(format!("{v:?}: a % is followed by two hex digits")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| err(format!("{v:?} is not UTF-8")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn seen(event: &str, status: u16, path: Option<&str>) -> Seen {
        Seen {
            event: Arc::from(event),
            status,
            path: path.map(str::to_owned),
            ..Seen::default()
        }
    }

    #[test]
    fn an_empty_query_shows_everything_at_the_default_rate() {
        let f = Filter::parse(None).expect("parse");
        assert_eq!(f, Filter::default());
        assert!(f.matches(&seen("orders.create", 500, None)));
        assert_eq!(Filter::parse(Some("")).expect("parse"), Filter::default());
    }

    #[test]
    fn types_statuses_and_paths_filter() {
        let f =
            Filter::parse(Some("type=a,b&type=c&status=5xx,404&path=%2Forders")).expect("parse");
        assert_eq!(f.types, ["a", "b", "c"]);
        assert_eq!(f.statuses, [Status::Class(5), Status::Code(404)]);
        assert_eq!(f.path.as_deref(), Some("/orders"));
        assert!(f.matches(&seen("b", 503, Some("/orders/7"))));
        assert!(f.matches(&seen("c", 404, Some("/orders"))));
        assert!(!f.matches(&seen("d", 503, Some("/orders"))), "type");
        assert!(!f.matches(&seen("a", 200, Some("/orders"))), "status");
        assert!(!f.matches(&seen("a", 500, Some("/users"))), "path");
        assert!(!f.matches(&seen("a", 500, None)), "no path");
    }

    #[test]
    fn bounds_and_mistakes_are_refused_with_the_parameter_named() {
        for (q, names) in [
            ("payload=4097", "payload"),
            ("payload=-1", "payload"),
            ("max_rps=0", "max_rps"),
            ("max_rps=10001", "max_rps"),
            ("status=6xx", "status"),
            ("status=20", "status"),
            ("path=orders", "path"),
            ("kind=x", "unknown parameter \"kind\""),
            ("type=%zz", "hex"),
        ] {
            let e = Filter::parse(Some(q)).expect_err(q).to_string();
            assert!(e.contains(names), "{q}: {e}");
        }
        let many = (0..33)
            .map(|i| format!("x-{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(Filter::parse(Some(&format!("hide={many}"))).is_err());
    }

    #[test]
    fn hidden_names_are_lower_case_and_payload_and_rate_are_kept() {
        let f = Filter::parse(Some("hide=X-Token,Cookie&payload=64&max_rps=7")).expect("parse");
        assert_eq!(f.hide, ["x-token", "cookie"]);
        assert_eq!((f.payload, f.max_rps), (64, 7));
    }
}
