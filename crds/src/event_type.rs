//! Event-type names: the key that ties a route to the Manager that handles it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Pattern of an event-type name: dot-separated lowercase segments, e.g. `orders.create`.
pub const EVENT_TYPE_PATTERN: &str = r"^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$";
/// Longest event-type name; keeps label values and Deployment names derived from it legal.
pub const EVENT_TYPE_MAX_LEN: usize = 63;

/// The name of a typed event, such as `orders.create`.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(transparent)]
#[schemars(
    description = "Event-type name: dot-separated lowercase segments such as `orders.create`.",
    inline
)]
pub struct EventType(
    #[schemars(
        regex(pattern = r"^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$"),
        length(min = 1, max = 63)
    )]
    pub String,
);

impl EventType {
    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Checks the name against the same rules the CRD schema enforces, for inputs that never pass
    /// through the API server (local `switchyard up`, sidecar config files).
    pub fn check(name: &str) -> Result<(), String> {
        if name.is_empty() || name.len() > EVENT_TYPE_MAX_LEN {
            return Err(format!(
                "event type {name:?} must be 1 to {EVENT_TYPE_MAX_LEN} characters long"
            ));
        }
        let ok = name.split('.').all(|seg| {
            let mut chars = seg.chars();
            matches!(chars.next(), Some('a'..='z'))
                && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_' | '-'))
        });
        if ok {
            Ok(())
        } else {
            Err(format!(
                "event type {name:?} must be dot-separated segments that start with a lowercase letter \
                 and hold only a-z, 0-9, '_' and '-' (e.g. orders.create)"
            ))
        }
    }

    /// A DNS-1123 label fragment for naming per-event-type children (`.` and `_` become `-`).
    pub fn dns_fragment(&self) -> String {
        self.0.replace(['.', '_'], "-")
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl From<&str> for EventType {
    fn from(s: &str) -> Self {
        EventType(s.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_dotted_lowercase_names() {
        for ok in ["noop", "orders.create", "a.b-c.d_e", "x1.y2"] {
            assert!(EventType::check(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_bad_names_with_a_reason() {
        for bad in [
            "",
            "Orders",
            "1abc",
            "a..b",
            ".a",
            "a.",
            "a b",
            &"a".repeat(64),
        ] {
            let err = EventType::check(bad).expect_err(bad);
            assert!(err.contains("event type"), "{err}");
        }
    }

    #[test]
    fn pattern_constant_matches_check() {
        let re = regex::Regex::new(EVENT_TYPE_PATTERN).expect("pattern compiles");
        for name in ["noop", "orders.create", "Orders", "a..b", "a-b.c_d", "9x"] {
            assert_eq!(re.is_match(name), EventType::check(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn dns_fragment_is_a_label() {
        assert_eq!(
            EventType::from("orders.create_v2").dns_fragment(),
            "orders-create-v2"
        );
    }
}
