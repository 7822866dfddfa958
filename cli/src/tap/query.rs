//! The query of `GET /tap` from the command's flags (pure). The sidecar checks every value again
//! and names what it refuses; this only encodes.

/// What the user asks to see.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ask {
    /// Event types (any when empty).
    pub types: Vec<String>,
    /// Statuses: codes (503) or classes (5xx).
    pub statuses: Vec<String>,
    /// A request path prefix.
    pub path: Option<String>,
    /// Payload bytes per event.
    pub payload: Option<u64>,
    /// Events per second per sidecar.
    pub max_rps: Option<u64>,
    /// Header names whose values the sidecar must not send.
    pub hide: Vec<String>,
}

impl Ask {
    /// `/tap?...`.
    pub fn path_and_query(&self) -> String {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        pairs.extend(self.types.iter().map(|t| ("type", t.clone())));
        pairs.extend(self.statuses.iter().map(|s| ("status", s.clone())));
        if let Some(p) = &self.path {
            pairs.push(("path", p.clone()));
        }
        if let Some(n) = self.payload {
            pairs.push(("payload", n.to_string()));
        }
        if let Some(n) = self.max_rps {
            pairs.push(("max_rps", n.to_string()));
        }
        pairs.extend(self.hide.iter().map(|h| ("hide", h.clone())));
        let query: Vec<String> = pairs
            .into_iter()
            .map(|(k, v)| format!("{k}={}", encode(&v)))
            .collect();
        match query.is_empty() {
            true => "/tap".to_owned(),
            false => format!("/tap?{}", query.join("&")),
        }
    }
}

/// Percent-encodes all but RFC 3986's unreserved characters and `/`.
fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(char::from(b));
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_flags_ask_for_everything() {
        assert_eq!(Ask::default().path_and_query(), "/tap");
    }

    #[test]
    fn flags_become_encoded_parameters() {
        let ask = Ask {
            types: vec!["orders.create".into(), "a b".into()],
            statuses: vec!["5xx".into()],
            path: Some("/orders/&x".into()),
            payload: Some(64),
            max_rps: Some(10),
            hide: vec!["X-Token".into()],
        };
        assert_eq!(
            ask.path_and_query(),
            "/tap?type=orders.create&type=a%20b&status=5xx&path=/orders/%26x&payload=64&max_rps=10&hide=X-Token"
        );
    }
}
