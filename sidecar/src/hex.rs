//! Lowercase hex of ids, as `format!("{v:0Nx}")` writes it, without the formatter: the router
//! makes ids on its hot path (a CloudEvents id and often a traceparent for every request).

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends the low `digits` (at most 32) hex digits of `v` to `out`, zero-padded.
pub(crate) fn push(out: &mut String, v: u128, digits: u32) {
    for i in (0..digits.min(32)).rev() {
        out.push(char::from(DIGITS[((v >> (i * 4)) & 0xf) as usize]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_what_the_formatter_writes() {
        for v in [
            0,
            1,
            0xabc,
            u128::from(u64::MAX),
            u128::MAX,
            0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
        ] {
            let mut s = String::new();
            push(&mut s, v, 32);
            assert_eq!(s, format!("{v:032x}"));
            let low = v & u128::from(u64::MAX);
            let mut s = String::from("x");
            push(&mut s, low, 16);
            assert_eq!(s, format!("x{low:016x}"));
        }
    }
}
