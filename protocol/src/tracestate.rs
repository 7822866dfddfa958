//! W3C `tracestate` (Trace Context level 1): which values the mesh carries, and their frame field.
//!
//! A value is a list of at most 32 `key=value` members. The mesh adds no member of its own, so it
//! passes the list on as it came: same members, same order, written without the optional spaces
//! (`a=1,b=2`). A value that breaks the grammar, repeats a key or has more than 32 members is
//! dropped whole, never an error: tracing is the caller's business, not a reason to refuse its
//! event. Lists longer than [`MAX_LEN`] (the 512 characters W3C asks every participant to pass on)
//! are cut the way W3C says: members over 128 characters go first, then members from the end.
//!
//! On the wire (see [`crate::frame`]) the value is `tracestate:str16` after `traceparent`, present
//! only when the frame's flag [`crate::frame::FLAG_TRACESTATE`] is set, so a frame without one is
//! byte for byte what older sidecars read.
//!
//! Pure: no I/O.

use crate::frame_error::FrameError;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::fmt;

/// Flag on a REQUEST or PUSH: a `tracestate:str16` follows the traceparent (set by the encoder when
/// the frame carries one). Older sidecars do not read it, so only a peer whose HELLO carried
/// [`FLAG_READS_TRACESTATE`] is sent a frame with it; a frame without it is the older encoding.
pub const FLAG_TRACESTATE: u8 = 0x40;
/// Flag on a HELLO: the sender reads [`FLAG_TRACESTATE`] frames. The accepting side reads the
/// connecting side's HELLO and answers with its own before its first CREDIT, so the connecting side
/// knows before its first REQUEST; a peer whose HELLO had neither this nor [`crate::frame::FLAG_STREAMS`] (an
/// older version, which would log it as unexpected) gets no HELLO, and so never a tracestate.
pub const FLAG_READS_TRACESTATE: u8 = 0x40;

/// The header (and gRPC metadata key) name.
pub const HEADER: &str = "tracestate";
/// Longest value carried, in bytes (commas included): what W3C asks every participant to propagate.
pub const MAX_LEN: usize = 512;
/// Most members a list may have.
pub const MAX_MEMBERS: usize = 32;
/// Members longer than this are the first cut from a list over [`MAX_LEN`].
const LONG_MEMBER: usize = 128;

/// Why a `tracestate` value was dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// The value is not ASCII text.
    NotText,
    /// A member is not `key=value` with a key and value of the W3C grammar.
    Member(String),
    /// Two members have the same key.
    Duplicate(String),
    /// More members than [`MAX_MEMBERS`].
    TooMany(usize),
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::NotText => write!(f, "tracestate is not ASCII text"),
            Invalid::Member(m) => write!(f, "tracestate member {m:?} is not key=value"),
            Invalid::Duplicate(k) => write!(f, "tracestate repeats the key {k:?}"),
            Invalid::TooMany(n) => {
                write!(f, "tracestate has {n} members, more than {MAX_MEMBERS}")
            }
        }
    }
}

impl std::error::Error for Invalid {}

/// The value to carry for the `tracestate` header lines `lines` (several lines are one list, as
/// HTTP combines them): the members joined by commas, cut to [`MAX_LEN`]; empty when there are none.
pub fn parse<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Result<String, Invalid> {
    let mut members: Vec<&str> = Vec::new();
    for line in lines {
        let line = std::str::from_utf8(line).map_err(|_| Invalid::NotText)?;
        for member in line.split(',') {
            let member = member.trim_matches([' ', '\t']);
            if member.is_empty() {
                continue;
            }
            let key = member_key(member).ok_or_else(|| Invalid::Member(member.to_owned()))?;
            if members.iter().any(|m| m.split('=').next() == Some(key)) {
                return Err(Invalid::Duplicate(key.to_owned()));
            }
            members.push(member);
        }
    }
    if members.len() > MAX_MEMBERS {
        return Err(Invalid::TooMany(members.len()));
    }
    cut(&mut members);
    Ok(members.join(","))
}

/// The value to carry, or empty when `lines` has none or is invalid (dropped, as W3C says).
pub fn accept<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> String {
    parse(lines).unwrap_or_default()
}

/// Whether `value` is one [`parse`] gives back unchanged: what a frame may carry.
pub fn is_carried(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_LEN
        && parse([value.as_bytes()]).is_ok_and(|v| v == value)
}

/// Drops members until the list fits in [`MAX_LEN`]: the last one over 128 characters while there
/// is one, else the last one.
fn cut(members: &mut Vec<&str>) {
    let len = |m: &[&str]| m.iter().map(|s| s.len()).sum::<usize>() + m.len().saturating_sub(1);
    while len(members) > MAX_LEN {
        match members.iter().rposition(|m| m.len() > LONG_MEMBER) {
            Some(i) => members.remove(i),
            None => members.pop().unwrap_or_default(),
        };
    }
}

/// The key of `member` when it is `key=value` by the grammar.
fn member_key(member: &str) -> Option<&str> {
    let (key, value) = member.split_once('=')?;
    (valid_key(key) && valid_value(value)).then_some(key)
}

fn key_char(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'*' | b'/')
}

/// `simple-key` (a lowercase letter, then up to 255 key characters) or `multi-tenant-key`
/// (`tenant@system`: up to 241 characters starting with a letter or digit, then up to 14 starting
/// with a letter).
fn valid_key(key: &str) -> bool {
    let b = key.as_bytes();
    let rest_ok = |s: &[u8]| s.iter().all(|&c| key_char(c));
    match key.split_once('@') {
        None => (1..=256).contains(&b.len()) && b[0].is_ascii_lowercase() && rest_ok(&b[1..]),
        Some((tenant, system)) => {
            let (t, s) = (tenant.as_bytes(), system.as_bytes());
            (1..=241).contains(&t.len())
                && (t[0].is_ascii_lowercase() || t[0].is_ascii_digit())
                && rest_ok(&t[1..])
                && (1..=14).contains(&s.len())
                && s[0].is_ascii_lowercase()
                && rest_ok(&s[1..])
        }
    }
}

/// Up to 256 printable ASCII characters but `,` and `=`, not ending in a space.
fn valid_value(value: &str) -> bool {
    let b = value.as_bytes();
    (1..=256).contains(&b.len())
        && b.iter()
            .all(|&c| (0x20..=0x7e).contains(&c) && c != b',' && c != b'=')
        && b[b.len() - 1] != b' '
}

/// Bytes the field takes in a frame: none when `value` is not carried.
pub(crate) fn wire_len(value: &str) -> usize {
    if is_carried(value) {
        2 + value.len()
    } else {
        0
    }
}

/// The flag bit a frame carrying `value` sets.
pub(crate) fn flag(value: &str) -> u8 {
    if is_carried(value) {
        FLAG_TRACESTATE
    } else {
        0
    }
}

/// Writes the field when `value` is carried (a value that is not is dropped, not an error).
pub(crate) fn put(dst: &mut BytesMut, value: &str) {
    if let Ok(len) = u16::try_from(value.len())
        && is_carried(value)
    {
        dst.put_u16(len);
        dst.put_slice(value.as_bytes());
    }
}

/// Reads the field when the frame's `flags` say it is there; a value that is not carried (too
/// long, or not by the grammar) is dropped, the frame kept.
pub(crate) fn get(src: &mut Bytes, flags: u8) -> Result<String, FrameError> {
    if flags & FLAG_TRACESTATE == 0 {
        return Ok(String::new());
    }
    if src.remaining() < 2 {
        return Err(FrameError::Truncated("tracestate"));
    }
    let len = usize::from(src.get_u16());
    if src.remaining() < len {
        return Err(FrameError::Truncated("tracestate"));
    }
    let raw = src.split_to(len);
    Ok(std::str::from_utf8(&raw)
        .ok()
        .filter(|v| is_carried(v))
        .map(str::to_owned)
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(v: &str) -> Result<String, Invalid> {
        parse([v.as_bytes()])
    }

    #[test]
    fn members_pass_in_order_without_optional_spaces() {
        assert_eq!(
            one("congo=t61rcWkgMzE, rojo=00f067aa0ba902b7").as_deref(),
            Ok("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        // Several header lines are one list; empty members are allowed and dropped.
        assert_eq!(
            parse([&b"a=1,,"[..], b" \t", b"b=2 , tenant@vendor=x y"]).as_deref(),
            Ok("a=1,b=2,tenant@vendor=x y")
        );
        // Spaces around a member are optional whitespace, not part of its value.
        assert_eq!(one("a=b ").as_deref(), Ok("a=b"));
        assert_eq!(one("").as_deref(), Ok(""));
        assert_eq!(one(" , ").as_deref(), Ok(""));
        assert!(is_carried("a=1,b=2"));
        assert!(!is_carried("a=1, b=2"), "spaces are not what is sent");
        assert!(!is_carried(""), "nothing to carry");
    }

    #[test]
    fn invalid_values_are_dropped_whole() {
        for bad in [
            "a",
            "=1",
            "A=1",
            "1a=1",
            "a=",
            "a=1=2",
            "a=b\tc",
            "a=\u{7f}",
            "a=é",
            "a@=1",
            "a@1b=1",
            "a@bcdefghijklmnop=1",
            "a=1,a=2",
            "ok=1,bad",
        ] {
            assert!(one(bad).is_err(), "{bad:?}");
            assert_eq!(accept([bad.as_bytes()]), "", "{bad:?}");
        }
        assert_eq!(parse([&b"a=\xff"[..]]), Err(Invalid::NotText));
        assert_eq!(one("a=1,a=2"), Err(Invalid::Duplicate("a".into())));
        let k = "k".repeat(257);
        assert!(one(&format!("{k}=1")).is_err(), "key over 256");
        assert!(
            one(&format!("a={}", "v".repeat(257))).is_err(),
            "value over 256"
        );
        assert!(one(&format!("{}=1", "k".repeat(256))).is_ok());
        let members: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        assert_eq!(one(&members.join(",")), Err(Invalid::TooMany(33)));
        assert!(one(&members[..32].join(",")).is_ok());
    }

    #[test]
    fn long_lists_are_cut_long_members_first_then_from_the_end() {
        // 32 members of 15 characters: 511 with commas, kept whole.
        let members: Vec<String> = (0..32)
            .map(|i| format!("key{i:02}=v{}", "x".repeat(8)))
            .collect();
        let whole = members.join(",");
        assert_eq!(whole.len(), 32 * 15 + 31);
        assert_eq!(one(&whole).as_deref(), Ok(whole.as_str()));
        // A long member in the middle goes first, then the last ones.
        let long = format!("long={}", "l".repeat(200));
        let mut with_long = members.clone();
        with_long.insert(3, long.clone());
        assert_eq!(
            one(&with_long[..32].join(",")).as_deref(),
            Ok(members[..31].join(",").as_str())
        );
        let big: Vec<String> = (0..4)
            .map(|i| format!("b{i}={}", "x".repeat(150)))
            .collect();
        let got = one(&big.join(",")).expect("valid");
        assert_eq!(got, big[..3].join(","), "the last long one goes");
        assert!(got.len() <= MAX_LEN);
        assert!(is_carried(&got));
    }

    #[test]
    fn the_field_reads_back_and_drops_what_is_not_carried() {
        let mut buf = BytesMut::new();
        put(&mut buf, "a=1,b=2");
        assert_eq!(wire_len("a=1,b=2"), buf.len());
        let mut bytes = buf.freeze();
        assert_eq!(get(&mut bytes, FLAG_TRACESTATE).as_deref(), Ok("a=1,b=2"));
        assert!(bytes.is_empty());
        // Not flagged: not there.
        let mut rest = Bytes::from_static(b"\x00\x03a=1");
        assert_eq!(get(&mut rest, 0).as_deref(), Ok(""));
        assert_eq!(rest.len(), 5, "nothing read");
        // Oversize or not by the grammar on the wire: dropped, the rest of the frame read on.
        for bad in [
            "x".repeat(3),
            format!("a={}", "v".repeat(600)),
            "a=1,a=2".into(),
        ] {
            let mut raw = BytesMut::new();
            raw.put_u16(bad.len() as u16);
            raw.put_slice(bad.as_bytes());
            raw.put_slice(b"tail");
            let mut raw = raw.freeze();
            assert_eq!(get(&mut raw, FLAG_TRACESTATE).as_deref(), Ok(""), "{bad:?}");
            assert_eq!(&raw[..], b"tail");
        }
        // Nothing written for what is not carried.
        let mut none = BytesMut::new();
        put(&mut none, "A=1");
        put(&mut none, "");
        assert!(none.is_empty());
        assert_eq!(
            (wire_len("A=1"), flag("A=1"), flag("a=1")),
            (0, 0, FLAG_TRACESTATE)
        );
        let mut short = Bytes::from_static(b"\x00\x09a=1");
        assert_eq!(
            get(&mut short, FLAG_TRACESTATE),
            Err(FrameError::Truncated("tracestate"))
        );
    }

    use crate::frame::{
        self, FLAG_ACK, FLAG_NO_REPLY, FLAG_READS_TRACESTATE, Frame, Push, Request,
    };

    fn request(tracestate: &str) -> Request {
        Request {
            headers: Vec::new(),
            id: 9,
            flags: FLAG_NO_REPLY | FLAG_ACK,
            deadline_ms: 500,
            event: "orders.create".into(),
            ce_id: "abc".into(),
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
            tracestate: tracestate.into(),
            content_type: "application/json".into(),
            payload: Bytes::from_static(b"{\"value\":1}"),
        }
    }

    fn encoded(f: &Frame) -> BytesMut {
        let mut buf = BytesMut::new();
        frame::encode(f, &mut buf).expect("encodes");
        assert_eq!(
            frame::check(f, buf.len() - 4),
            Ok(()),
            "check agrees: {f:?}"
        );
        buf
    }

    fn decoded(mut buf: BytesMut) -> Frame {
        let f = frame::decode(&mut buf, frame::DEFAULT_MAX_FRAME)
            .expect("decodes")
            .expect("whole");
        assert!(buf.is_empty());
        f
    }

    #[test]
    fn frames_carry_it_up_to_the_limit_and_every_prefix_waits() {
        let longest = format!("a={},b={}", "x".repeat(254), "y".repeat(253));
        assert_eq!(longest.len(), MAX_LEN);
        for ts in ["congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", longest.as_str()] {
            let frames = [
                Frame::Request(request(ts)),
                Frame::Push(Push {
                    event: "prices.tick".into(),
                    traceparent: String::new(),
                    tracestate: ts.into(),
                    content_type: "application/json".into(),
                    payload: Bytes::from_static(b"{}"),
                }),
            ];
            for f in frames {
                let buf = encoded(&f);
                assert_eq!(buf[5] & FLAG_TRACESTATE, FLAG_TRACESTATE, "flagged");
                for cut in 0..buf.len() {
                    let mut part = BytesMut::from(&buf[..cut]);
                    assert_eq!(frame::decode(&mut part, frame::DEFAULT_MAX_FRAME), Ok(None));
                }
                assert_eq!(decoded(buf), f);
            }
        }
    }

    #[test]
    fn without_one_a_frame_is_the_older_encoding() {
        // What a sidecar before tracestate writes and reads, byte for byte.
        let r = request("");
        let mut old = BytesMut::new();
        old.put_u32(0);
        old.put_u8(1);
        old.put_u8(FLAG_NO_REPLY | FLAG_ACK);
        old.put_u64(9);
        old.put_u32(500);
        for s in [&r.event, &r.ce_id, &r.traceparent, &r.content_type] {
            old.put_u8(s.len() as u8);
            old.put_slice(s.as_bytes());
        }
        old.put_slice(&r.payload);
        let len = (old.len() - 4) as u32;
        old[..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(encoded(&Frame::Request(r.clone())), old);
        // A value that is not carried is dropped on encode: the same older bytes, no flag.
        assert_eq!(encoded(&Frame::Request(request("A=1, b"))), old);
        // A stray flag bit without a value is not sent either (the peer would read a field).
        let mut stray = r.clone();
        stray.flags |= FLAG_TRACESTATE;
        assert_eq!(encoded(&Frame::Request(stray)), old);
        assert_eq!(decoded(old), Frame::Request(r));
        // An older router's HELLO (bits 0 to 2) does not read tracestate; a newer one's does.
        let hello =
            |flags: u8| BytesMut::from(&[0, 0, 0, 10, 9, flags, 0, 0, 0, 0, 0, 0, 0, 0][..]);
        assert!(matches!(
            decoded(hello(0x07)),
            Frame::Hello {
                reads_tracestate: false,
                ..
            }
        ));
        assert!(matches!(
            decoded(hello(FLAG_READS_TRACESTATE)),
            Frame::Hello {
                reads_tracestate: true,
                takes_pushes: false,
                ..
            }
        ));
    }

    #[test]
    fn a_bad_value_on_the_wire_is_dropped_and_the_frame_kept() {
        let r = request("");
        // An oversize value (a peer that does not bound it): the event arrives without it.
        let big = format!(
            "a={},b={},c={}",
            "v".repeat(200),
            "w".repeat(250),
            "z".repeat(250)
        );
        assert!(big.len() > MAX_LEN);
        let mut buf = BytesMut::new();
        buf.put_u32(0);
        buf.put_u8(1);
        buf.put_u8(FLAG_TRACESTATE);
        buf.put_u64(9);
        buf.put_u32(500);
        for s in [&r.event, &r.ce_id, &r.traceparent] {
            buf.put_u8(s.len() as u8);
            buf.put_slice(s.as_bytes());
        }
        buf.put_u16(big.len() as u16);
        buf.put_slice(big.as_bytes());
        buf.put_u8(r.content_type.len() as u8);
        buf.put_slice(r.content_type.as_bytes());
        buf.put_slice(&r.payload);
        let len = (buf.len() - 4) as u32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        let Frame::Request(got) = decoded(buf) else {
            panic!("not a request")
        };
        assert_eq!((got.flags, got.tracestate.as_str()), (0, ""));
        assert_eq!((got.content_type, got.payload), (r.content_type, r.payload));
    }
}
