//! The W3C trace context an event came with (`traceparent` and `tracestate`), carried onwards as it
//! came, or naming the app's own span as the parent when the app traces.

use opentelemetry::propagation::{Extractor, Injector};

/// The two headers of W3C Trace Context; either may be missing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// `traceparent`.
    pub parent: Option<String>,
    /// `tracestate`: vendors' entries, passed on unchanged.
    pub state: Option<String>,
}

pub(crate) const PARENT: &str = "traceparent";
pub(crate) const STATE: &str = "tracestate";

impl Trace {
    /// Reads both from a lookup by header (or CloudEvents extension) name.
    pub fn from_lookup<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Trace {
        Trace {
            parent: get(PARENT).map(str::to_owned),
            state: get(STATE).map(str::to_owned),
        }
    }

    /// Each present header, by name.
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [(PARENT, &self.parent), (STATE, &self.state)]
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.as_deref()?)))
    }
}

impl Extractor for Trace {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            PARENT => self.parent.as_deref(),
            STATE => self.state.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        self.headers().map(|(k, _)| k).collect()
    }
}

impl Injector for Trace {
    fn set(&mut self, key: &str, value: String) {
        match key {
            PARENT => self.parent = Some(value),
            STATE => self.state = Some(value),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_the_present_ones() {
        let t = Trace::from_lookup(|k| (k == STATE).then_some("a=1"));
        assert_eq!(t.headers().collect::<Vec<_>>(), vec![(STATE, "a=1")]);
        assert_eq!(Trace::default().headers().count(), 0);
    }
}
