//! HTTP header fields a REQUEST or RESPONSE head carries end to end (issue 14: `Range` requests
//! and `Content-Length` pass through). Pure: no I/O; `frame.rs` calls the codec here.
//!
//! ```text
//! headers := n:u8 (name:str8 value:str16)*n      after content_type, when flags bit 5 is set
//! ```
//! Only a peer whose HELLO has bit 5 ([`FLAG_READS_HEADERS`]) is sent a head with them; the encoder
//! sets the bit when the list is not empty, so a head without headers is the older encoding byte
//! for byte. Which fields pass is the sidecars' choice ([`REQUEST`], [`RESPONSE`]), not the
//! grammar's: names are lower case, at most 255 of them.

use crate::frame_error::FrameError;
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Flag on a REQUEST or RESPONSE: a `headers` list follows the content type.
pub const FLAG_HEADERS: u8 = 0x20;
/// Flag on a HELLO: the sender reads [`FLAG_HEADERS`] heads.
pub const FLAG_READS_HEADERS: u8 = 0x20;

/// The client's request fields the router passes to the app: a range request and its validator
/// (a server that ignores them answers the whole body, so an older manager stays correct).
pub const REQUEST: &[&str] = &["range", "if-range"];
/// The app's answer fields the manager passes to the client: the range answered, its validators
/// (what a client's next `If-Range` names) and the length, which a streamed answer would otherwise
/// lose (it reaches the client as it arrives, chunked).
pub const RESPONSE: &[&str] = &[
    "content-range",
    "accept-ranges",
    "content-length",
    "etag",
    "last-modified",
];

/// Longest value [`pick`] passes: the few fields carried fit in a head beside the largest payload.
pub const MAX_VALUE: usize = 512;

/// Header fields, lower-case names, in order.
pub type Fields = Vec<(String, String)>;

/// The fields of `names` that `get` finds, in the order of `names` (each at most once); a value
/// that is not UTF-8 or longer than [`MAX_VALUE`] is left out (as a server may ignore a `Range`).
/// For the sidecars to pick what they pass.
pub fn pick<'a>(names: &[&str], get: impl Fn(&str) -> Option<&'a [u8]>) -> Fields {
    names
        .iter()
        .filter_map(|name| {
            let value = std::str::from_utf8(get(name)?).ok()?;
            (value.len() <= MAX_VALUE).then(|| ((*name).to_owned(), value.to_owned()))
        })
        .collect()
}

/// The flag bit `fields` needs.
pub fn flag(fields: &Fields) -> u8 {
    if fields.is_empty() { 0 } else { FLAG_HEADERS }
}

/// Bytes the list takes on the wire (0 when empty: no flag, no field).
pub fn wire_len(fields: &Fields) -> Result<usize, FrameError> {
    if fields.is_empty() {
        return Ok(0);
    }
    if fields.len() > 255 {
        return Err(FrameError::FieldTooLong("headers"));
    }
    let mut n = 1;
    for (name, value) in fields {
        if name.len() > 255 {
            return Err(FrameError::FieldTooLong("header name"));
        }
        if value.len() > usize::from(u16::MAX) {
            return Err(FrameError::FieldTooLong("header value"));
        }
        n += 1 + name.len() + 2 + value.len();
    }
    Ok(n)
}

/// Appends the list (nothing when empty). Lengths were checked by [`wire_len`].
pub(crate) fn put(dst: &mut BytesMut, fields: &Fields) {
    if fields.is_empty() {
        return;
    }
    dst.put_u8(fields.len() as u8);
    for (name, value) in fields {
        dst.put_u8(name.len() as u8);
        dst.put_slice(name.as_bytes());
        dst.put_u16(value.len() as u16);
        dst.put_slice(value.as_bytes());
    }
}

/// Reads the list when `flags` says it is there.
pub(crate) fn get(src: &mut Bytes, flags: u8) -> Result<Fields, FrameError> {
    if flags & FLAG_HEADERS == 0 {
        return Ok(Fields::new());
    }
    if src.remaining() < 1 {
        return Err(FrameError::Truncated("headers"));
    }
    let n = src.get_u8();
    let mut out = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let name = take(src, 1, "header name")?;
        let value = take(src, 2, "header value")?;
        out.push((name, value));
    }
    Ok(out)
}

fn take(src: &mut Bytes, width: usize, field: &'static str) -> Result<String, FrameError> {
    if src.remaining() < width {
        return Err(FrameError::Truncated(field));
    }
    let len = match width {
        1 => usize::from(src.get_u8()),
        _ => usize::from(src.get_u16()),
    };
    if src.remaining() < len {
        return Err(FrameError::Truncated(field));
    }
    String::from_utf8(src.split_to(len).to_vec()).map_err(|_| FrameError::NotUtf8(field))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_list_takes_no_bytes_and_no_flag() {
        let mut buf = BytesMut::new();
        put(&mut buf, &Fields::new());
        assert!(buf.is_empty());
        assert_eq!(flag(&Fields::new()), 0);
        assert_eq!(wire_len(&Fields::new()), Ok(0));
        let mut src = Bytes::from_static(b"payload");
        assert_eq!(get(&mut src, 0), Ok(Fields::new()));
        assert_eq!(&src[..], b"payload", "nothing read without the flag");
    }

    #[test]
    fn fields_round_trip_and_truncation_is_refused() {
        let fields = vec![
            ("range".to_owned(), "bytes=0-99".to_owned()),
            ("if-range".to_owned(), "\"v1\"".to_owned()),
        ];
        let mut buf = BytesMut::new();
        put(&mut buf, &fields);
        assert_eq!(wire_len(&fields), Ok(buf.len()));
        let whole = buf.freeze();
        assert_eq!(get(&mut whole.clone(), FLAG_HEADERS), Ok(fields));
        for cut in 0..whole.len() {
            assert!(
                get(&mut whole.slice(..cut), FLAG_HEADERS).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn pick_takes_the_named_fields_in_order() {
        let have = [
            ("content-length", "10"),
            ("etag", "\"a\""),
            ("x-other", "1"),
        ];
        let got = pick(RESPONSE, |n| {
            have.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.as_bytes())
        });
        assert_eq!(
            got,
            vec![
                ("content-length".to_owned(), "10".to_owned()),
                ("etag".to_owned(), "\"a\"".to_owned()),
            ]
        );
    }

    #[test]
    fn over_long_fields_do_not_encode() {
        let long_name = vec![("n".repeat(256), String::new())];
        assert_eq!(
            wire_len(&long_name),
            Err(FrameError::FieldTooLong("header name"))
        );
        let many: Fields = (0..256).map(|i| (format!("h{i}"), String::new())).collect();
        assert_eq!(wire_len(&many), Err(FrameError::FieldTooLong("headers")));
    }
}
