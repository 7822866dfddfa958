//! The `bytes` event: answers with `n` bytes, so payload-size benches have a handler whose reply size is known.

use bytes::Bytes;

/// Reply size when the event carries no `n`.
pub const DEFAULT_BYTES: usize = 1024;
/// Upper bound of `n`: the frame between the sidecars carries at most 16 MiB, and a bench needs no more.
pub const MAX_BYTES: usize = 4 * 1024 * 1024;

/// Reads `n` from the event data: empty data means the default; otherwise a JSON object whose optional `n` is a
/// non-negative integer (a number, or a string of digits as an untyped query parameter arrives), at most
/// [`MAX_BYTES`].
pub fn parse_n(body: &[u8]) -> Result<usize, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(DEFAULT_BYTES);
    }
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("event data is not JSON: {e}"))?;
    let obj = value
        .as_object()
        .ok_or_else(|| "event data must be a JSON object like {\"n\": 1024}".to_owned())?;
    let n = match obj.get("n") {
        None | Some(serde_json::Value::Null) => return Ok(DEFAULT_BYTES),
        Some(serde_json::Value::String(s)) => s.parse::<u64>().ok(),
        Some(v) => v.as_u64(),
    }
    .ok_or_else(|| "n: must be a non-negative integer".to_owned())?;
    if n > MAX_BYTES as u64 {
        return Err(format!("n: at most {MAX_BYTES} bytes"));
    }
    Ok(n as usize)
}

/// `n` bytes of `x`: cheap to build, and valid as text so a client can print it.
pub fn body(n: usize) -> Bytes {
    Bytes::from(vec![b'x'; n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_defaults_accepts_strings_and_rejects_too_large() {
        assert_eq!(parse_n(b""), Ok(DEFAULT_BYTES));
        assert_eq!(parse_n(b"{}"), Ok(DEFAULT_BYTES));
        assert_eq!(parse_n(br#"{"n":0}"#), Ok(0));
        assert_eq!(parse_n(br#"{"n":1048576}"#), Ok(1 << 20));
        assert_eq!(parse_n(br#"{"n":"102400"}"#), Ok(102_400));
        assert!(parse_n(br#"{"n":-1}"#).is_err_and(|e| e.starts_with("n:")));
        assert!(parse_n(br#"{"n":"x"}"#).is_err());
        assert!(parse_n(br#"{"n":99999999}"#).is_err_and(|e| e.contains("at most")));
        assert!(parse_n(b"[1]").is_err());
        assert_eq!(body(3), Bytes::from_static(b"xxx"));
    }
}
