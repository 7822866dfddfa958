//! The CloudEvents id the mesh gives an event that arrives without one.

/// A new CloudEvents id: 128 random bits in hex.
pub(crate) fn new_ce_id() -> String {
    hex32(fastrand::u128(..))
}

/// `v` as 32 lowercase hex digits, as `format!("{v:032x}")` writes it, without the formatter
/// (one per request on the router's hot path).
fn hex32(v: u128) -> String {
    let mut s = String::with_capacity(32);
    crate::hex::push(&mut s, v, 32);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_ce_id_is_32_hex_digits_as_the_formatter_writes_them() {
        for v in [
            0,
            1,
            0xabc,
            u128::MAX,
            0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
        ] {
            assert_eq!(hex32(v), format!("{v:032x}"));
        }
        assert_eq!(new_ce_id().len(), 32);
    }
}
