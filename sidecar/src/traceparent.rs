//! W3C `traceparent`: kept from the client when valid, otherwise started here, and carried to the app.

/// The header name.
pub const HEADER: &str = "traceparent";

/// Returns the client's traceparent when it is well formed, otherwise a new sampled root one.
pub fn extract_or_new(value: Option<&[u8]>) -> String {
    match value.and_then(|v| std::str::from_utf8(v).ok()) {
        Some(v) if is_valid(v.trim()) => v.trim().to_owned(),
        _ => new_root(),
    }
}

/// A fresh `00-<trace id>-<span id>-01`.
pub fn new_root() -> String {
    let trace = loop {
        let t = fastrand::u128(..);
        if t != 0 {
            break t;
        }
    };
    let span = fastrand::u64(1..);
    format!("00-{trace:032x}-{span:016x}-01")
}

/// Version 00 layout, lowercase hex, non-zero ids.
pub fn is_valid(v: &str) -> bool {
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
}
