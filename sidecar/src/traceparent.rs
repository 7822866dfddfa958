//! W3C `traceparent`: kept from the client when valid, otherwise started here, and carried to the app;
//! with it the client's `tracestate` (`switchyard_protocol::tracestate`), when the traceparent is kept.

/// The header name.
pub(crate) const HEADER: &str = "traceparent";

/// The `tracestate` header name.
pub(crate) const TRACESTATE: &str = switchyard_protocol::tracestate::HEADER;

/// The client's `tracestate` (its header lines `lines`) to carry with its `traceparent`: dropped
/// when that traceparent is not kept, as W3C says (a tracestate belongs to the trace it came with),
/// and when it is invalid.
pub(crate) fn tracestate<'a>(
    traceparent: Option<&[u8]>,
    lines: impl IntoIterator<Item = &'a [u8]>,
) -> String {
    match traceparent.and_then(|v| std::str::from_utf8(v).ok()) {
        Some(v) if is_valid(v.trim()) => switchyard_protocol::tracestate::accept(lines),
        _ => String::new(),
    }
}

/// [`tracestate`] of the `tracestate` lines in `headers`.
pub(crate) fn tracestate_in(traceparent: Option<&[u8]>, headers: &http::HeaderMap) -> String {
    tracestate(
        traceparent,
        headers
            .get_all(TRACESTATE)
            .iter()
            .map(http::HeaderValue::as_bytes),
    )
}

/// [`tracestate`] of the `tracestate` entries in gRPC metadata `meta`.
pub(crate) fn tracestate_in_meta(
    traceparent: Option<&[u8]>,
    meta: &tonic::metadata::MetadataMap,
) -> String {
    tracestate(
        traceparent,
        meta.get_all(TRACESTATE).iter().map(|v| v.as_bytes()),
    )
}

/// Returns the client's traceparent when it is well formed, otherwise a new sampled root one.
pub(crate) fn extract_or_new(value: Option<&[u8]>) -> String {
    match value.and_then(|v| std::str::from_utf8(v).ok()) {
        Some(v) if is_valid(v.trim()) => v.trim().to_owned(),
        _ => new_root(),
    }
}

/// A fresh `00-<trace id>-<span id>-01`.
pub(crate) fn new_root() -> String {
    let trace = loop {
        let t = fastrand::u128(..);
        if t != 0 {
            break t;
        }
    };
    let span = fastrand::u64(1..);
    let mut out = String::with_capacity(55);
    out.push_str("00-");
    crate::hex::push(&mut out, trace, 32);
    out.push('-');
    crate::hex::push(&mut out, span.into(), 16);
    out.push_str("-01");
    out
}

/// Version 00 layout, lowercase hex, non-zero ids.
pub(crate) fn is_valid(v: &str) -> bool {
    let parts: Vec<&str> = v.split('-').collect();
    let [version, trace, span, flags] = parts.as_slice() else {
        return false;
    };
    let hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    *version == "00"
        && hex(trace, 32)
        && hex(span, 16)
        && hex(flags, 2)
        && trace.bytes().any(|b| b != b'0')
        && span.bytes().any(|b| b != b'0')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_valid_one_and_replaces_junk() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(extract_or_new(Some(good.as_bytes())), good);
        for bad in [
            "",
            "00-0-0-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "xyz",
        ] {
            let got = extract_or_new(Some(bad.as_bytes()));
            assert_ne!(got, bad);
            assert!(is_valid(&got), "{got}");
        }
        assert!(is_valid(&extract_or_new(None)));
    }

    #[test]
    fn tracestate_goes_with_a_kept_traceparent_only() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let lines = [&b"a=1"[..], b" b=2"];
        assert_eq!(tracestate(Some(good.as_bytes()), lines), "a=1,b=2");
        assert_eq!(tracestate(Some(b"00-0-0-01"), lines), "");
        assert_eq!(tracestate(None, lines), "");
        assert_eq!(tracestate(Some(good.as_bytes()), [&b"A=1"[..]]), "");
    }
}
