//! W3C trace context to and from OpenTelemetry contexts, through the SDK's propagator (the frame
//! and the app request carry one `traceparent` value; `tracestate` is not carried).
//!
//! Pure.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// A context whose remote parent is `traceparent` when it is valid, or an empty one (a new root).
pub fn remote_parent(traceparent: Option<&[u8]>) -> Context {
    let Some(value) = traceparent
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::trim)
    else {
        return Context::new();
    };
    TraceContextPropagator::new().extract(&One(value))
}

/// The `traceparent` value of the span in `cx`.
pub fn traceparent_of(cx: &Context) -> String {
    let mut out = Out(String::new());
    TraceContextPropagator::new().inject_context(cx, &mut out);
    out.0
}

/// The trace id of the span in `cx` as a number (for `Server-Timing`).
pub fn trace_id_of(cx: &Context) -> u128 {
    u128::from_be_bytes(cx.span().span_context().trace_id().to_bytes())
}

struct One<'a>(&'a str);

impl Extractor for One<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == crate::traceparent::HEADER).then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec![crate::traceparent::HEADER]
    }
}

struct Out(String);

impl Injector for Out {
    fn set(&mut self, key: &str, value: String) {
        if key == crate::traceparent::HEADER {
            self.0 = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_a_valid_traceparent_and_drops_junk() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let cx = remote_parent(Some(tp.as_bytes()));
        let sc = cx.span().span_context().clone();
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(traceparent_of(&cx), tp);
        assert_eq!(trace_id_of(&cx), 0x0af7651916cd43dd8448eb211c80319c);
        let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
        assert!(
            !remote_parent(Some(unsampled.as_bytes()))
                .span()
                .span_context()
                .is_sampled()
        );
        for junk in [&b"xyz"[..], b"00-0-0-01", b"\xff", b""] {
            assert!(!remote_parent(Some(junk)).has_active_span(), "{junk:?}");
        }
        assert!(!remote_parent(None).has_active_span());
        assert_eq!(traceparent_of(&Context::new()), "");
    }
}
