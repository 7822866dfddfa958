//! W3C trace context to and from OpenTelemetry contexts, through the SDK's propagator: the frame
//! and the app request carry one `traceparent` and one `tracestate` value, and the spans under a
//! remote parent keep its tracestate in their span context (OTLP `trace_state`).
//!
//! Pure.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// A context whose remote parent is `traceparent` when it is valid, with `tracestate` (a value the
/// mesh carries, see `crate::traceparent::tracestate`), or an empty one (a new root).
pub(crate) fn remote_parent(traceparent: Option<&[u8]>, tracestate: &str) -> Context {
    let Some(value) = traceparent
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::trim)
    else {
        return Context::new();
    };
    TraceContextPropagator::new().extract(&Two(value, tracestate))
}

/// The `traceparent` value of the span in `cx`.
pub(crate) fn traceparent_of(cx: &Context) -> String {
    let mut out = Out(String::new());
    TraceContextPropagator::new().inject_context(cx, &mut out);
    out.0
}

/// The trace id of the span in `cx` as a number (for `Server-Timing`).
pub(crate) fn trace_id_of(cx: &Context) -> u128 {
    u128::from_be_bytes(cx.span().span_context().trace_id().to_bytes())
}

/// A traceparent and a tracestate (empty: none).
struct Two<'a>(&'a str, &'a str);

impl Extractor for Two<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            crate::traceparent::HEADER => Some(self.0),
            crate::traceparent::TRACESTATE if !self.1.is_empty() => Some(self.1),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec![crate::traceparent::HEADER, crate::traceparent::TRACESTATE]
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
        let cx = remote_parent(Some(tp.as_bytes()), "");
        let sc = cx.span().span_context().clone();
        assert!(sc.is_remote() && sc.is_sampled());
        assert_eq!(sc.trace_state().header(), "");
        let with_state = remote_parent(Some(tp.as_bytes()), "congo=t61rcWkgMzE,rojo=1");
        assert_eq!(
            with_state.span().span_context().trace_state().header(),
            "congo=t61rcWkgMzE,rojo=1"
        );
        assert_eq!(traceparent_of(&cx), tp);
        assert_eq!(trace_id_of(&cx), 0x0af7651916cd43dd8448eb211c80319c);
        let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
        assert!(
            !remote_parent(Some(unsampled.as_bytes()), "")
                .span()
                .span_context()
                .is_sampled()
        );
        for junk in [&b"xyz"[..], b"00-0-0-01", b"\xff", b""] {
            assert!(
                !remote_parent(Some(junk), "a=1").has_active_span(),
                "{junk:?}"
            );
        }
        assert!(!remote_parent(None, "a=1").has_active_span());
        assert_eq!(traceparent_of(&Context::new()), "");
    }
}
