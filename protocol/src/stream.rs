//! The stream kinds of the frame protocol (issue 14): a REQUEST or RESPONSE flagged MORE is a head,
//! its body follows in DATA frames, the last with END (or TRAILERS end it), and RESET abandons the
//! stream; WINDOW returns flow-control window per stream. Pure: no I/O. `frame.rs` holds the grammar
//! of the whole protocol and calls the body codecs here.
//!
//! ```text
//! DATA     kind 12, id = stream; flags bit 0 END: the last chunk of this direction
//!                                flags bit 1 (with END): the stream's credit comes back with it
//!                                body := bytes
//! TRAILERS kind 13, id = stream; ends this direction; flags bit 1: returns the stream's credit
//!                                body := queue_us:u32 app_us:u32 n:u8 (name:str8 value:str16)*n
//! RESET    kind 14, id = stream; both directions end; flags bit 1: returns the stream's credit
//!                                body := code:u32 (see [`code`])
//! WINDOW   kind 15, id = stream; body := increment:u32 (more DATA bytes the sender may send)
//! str16   := len:u16 bytes (UTF-8)
//! ```
//! Windows: each side says in its HELLO how many DATA bytes it takes per stream before a WINDOW
//! ([`DEFAULT_WINDOW`]); a receiver returns window once it consumed (not received) half of it. A
//! sender never has more than the window in flight on a stream; a receiver resets one that does
//! ([`code::FLOW_CONTROL`]).

use crate::frame_error::FrameError;
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Flag on a REQUEST or RESPONSE head: its body continues in DATA frames (the inline payload, if
/// any, is its first chunk). A head without it is a whole event, as before streams.
pub const FLAG_MORE: u8 = 0x80;
/// Flag on a DATA frame: the last chunk of its direction.
pub const FLAG_END: u8 = 0x01;
/// Flag on a DATA with END, a TRAILERS or a RESET towards the router: the stream's credit comes
/// back with it (the stream's last frame; [`crate::frame::FLAG_RETURNS_CREDIT`] for streams). Only
/// sent to a peer whose HELLO asked for implicit credit.
pub const FLAG_STREAM_CREDIT: u8 = 0x02;
/// DATA bytes a receiver takes per stream before it returns window, unless its HELLO says otherwise.
pub const DEFAULT_WINDOW: u32 = 256 * 1024;
/// Largest DATA chunk a sidecar writes: small enough that streams beside a large body interleave.
pub const MAX_DATA: usize = 16 * 1024;

/// Why a stream was reset. Unknown codes are carried as they are (a newer peer's reasons).
pub mod code {
    /// The sender gave up: the client went away, or the deadline passed.
    pub const CANCEL: u32 = 1;
    /// The sender could not go on (the app's body failed, or its connection broke).
    pub const INTERNAL: u32 = 2;
    /// The receiver's window was overrun.
    pub const FLOW_CONTROL: u32 = 3;
    /// The body is larger than the receiver takes (a route's `bodyLimit`).
    pub const TOO_LARGE: u32 = 4;

    /// The code's name, for logs.
    pub fn name(code: u32) -> &'static str {
        match code {
            CANCEL => "cancel",
            INTERNAL => "internal",
            FLOW_CONTROL => "flow control",
            TOO_LARGE => "too large",
            _ => "unknown",
        }
    }
}

/// A chunk of a stream's body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Data {
    /// The stream (its head's request id).
    pub id: u64,
    /// The last chunk of this direction ([`FLAG_END`]).
    pub end: bool,
    /// The stream's credit comes back with it ([`FLAG_STREAM_CREDIT`]; only with `end`).
    pub returns_credit: bool,
    /// The bytes.
    pub data: Bytes,
}

/// The end of a stream's direction, with what was only known at the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trailers {
    /// The stream.
    pub id: u64,
    /// Microseconds the event waited in the manager's queue (0 towards a manager).
    pub queue_us: u32,
    /// Microseconds the app took, head to end of body (0 towards a manager).
    pub app_us: u32,
    /// Trailer fields of the body (the app's HTTP trailers), lower-case names.
    pub fields: Vec<(String, String)>,
    /// The stream's credit comes back with it.
    pub returns_credit: bool,
}

/// A stream abandoned by its sender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reset {
    /// The stream.
    pub id: u64,
    /// Why ([`code`]).
    pub code: u32,
    /// The stream's credit comes back with it.
    pub returns_credit: bool,
}

pub(crate) mod kind {
    pub const DATA: u8 = 12;
    pub const TRAILERS: u8 = 13;
    pub const RESET: u8 = 14;
    pub const WINDOW: u8 = 15;
}

impl Data {
    pub(crate) fn flags(&self) -> u8 {
        let mut f = 0;
        if self.end {
            f |= FLAG_END;
            if self.returns_credit {
                f |= FLAG_STREAM_CREDIT;
            }
        }
        f
    }

    pub(crate) fn decode(id: u64, flags: u8, body: Bytes) -> Data {
        let end = flags & FLAG_END != 0;
        Data {
            id,
            end,
            returns_credit: end && flags & FLAG_STREAM_CREDIT != 0,
            data: body,
        }
    }
}

impl Trailers {
    pub(crate) fn body_len(&self) -> Result<usize, FrameError> {
        if self.fields.len() > 255 {
            return Err(FrameError::FieldTooLong("trailers"));
        }
        let mut n = 4 + 4 + 1;
        for (name, value) in &self.fields {
            if name.len() > 255 {
                return Err(FrameError::FieldTooLong("trailer name"));
            }
            if value.len() > usize::from(u16::MAX) {
                return Err(FrameError::FieldTooLong("trailer value"));
            }
            n += 1 + name.len() + 2 + value.len();
        }
        Ok(n)
    }

    pub(crate) fn flags(&self) -> u8 {
        if self.returns_credit {
            FLAG_STREAM_CREDIT
        } else {
            0
        }
    }

    pub(crate) fn encode_body(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        let len = self.body_len()?;
        dst.reserve(len);
        dst.put_u32(self.queue_us);
        dst.put_u32(self.app_us);
        // Checked by `body_len`.
        dst.put_u8(self.fields.len() as u8);
        for (name, value) in &self.fields {
            dst.put_u8(name.len() as u8);
            dst.put_slice(name.as_bytes());
            dst.put_u16(value.len() as u16);
            dst.put_slice(value.as_bytes());
        }
        Ok(())
    }

    pub(crate) fn decode(id: u64, flags: u8, mut body: Bytes) -> Result<Trailers, FrameError> {
        if body.remaining() < 9 {
            return Err(FrameError::Truncated("trailer timing"));
        }
        let queue_us = body.get_u32();
        let app_us = body.get_u32();
        let n = body.get_u8();
        let mut fields = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            let name = take_str(&mut body, 1, "trailer name")?;
            let value = take_str(&mut body, 2, "trailer value")?;
            fields.push((name, value));
        }
        Ok(Trailers {
            id,
            queue_us,
            app_us,
            fields,
            returns_credit: flags & FLAG_STREAM_CREDIT != 0,
        })
    }
}

impl Reset {
    pub(crate) fn flags(&self) -> u8 {
        if self.returns_credit {
            FLAG_STREAM_CREDIT
        } else {
            0
        }
    }

    pub(crate) fn decode(id: u64, flags: u8, mut body: Bytes) -> Result<Reset, FrameError> {
        if body.remaining() < 4 {
            return Err(FrameError::Truncated("reset code"));
        }
        Ok(Reset {
            id,
            code: body.get_u32(),
            returns_credit: flags & FLAG_STREAM_CREDIT != 0,
        })
    }
}

/// A length-prefixed (`width` bytes: 1 or 2) UTF-8 string.
fn take_str(body: &mut Bytes, width: usize, field: &'static str) -> Result<String, FrameError> {
    if body.remaining() < width {
        return Err(FrameError::Truncated(field));
    }
    let n = if width == 1 {
        usize::from(body.get_u8())
    } else {
        usize::from(body.get_u16())
    };
    if body.remaining() < n {
        return Err(FrameError::Truncated(field));
    }
    String::from_utf8(body.split_to(n).to_vec()).map_err(|_| FrameError::NotUtf8(field))
}

/// Splits `data` into DATA-sized chunks without copying (the last may be shorter; none when empty).
pub fn chunks(mut data: Bytes) -> impl Iterator<Item = Bytes> {
    std::iter::from_fn(move || {
        if data.is_empty() {
            return None;
        }
        let n = data.len().min(MAX_DATA);
        Some(data.split_to(n))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{DEFAULT_MAX_FRAME, Frame, Request, Response, check, decode, encode};

    fn roundtrip(f: Frame) {
        let mut buf = BytesMut::new();
        encode(&f, &mut buf).expect("encodes");
        assert_eq!(check(&f, buf.len() - 4), Ok(()), "check agrees: {f:?}");
        assert!(
            matches!(check(&f, buf.len() - 5), Err(FrameError::TooLarge { .. })),
            "one byte over: {f:?}"
        );
        for cut in 0..buf.len() {
            let mut part = BytesMut::from(&buf[..cut]);
            assert_eq!(
                decode(&mut part, DEFAULT_MAX_FRAME),
                Ok(None),
                "prefix {cut}"
            );
        }
        assert_eq!(decode(&mut buf, DEFAULT_MAX_FRAME), Ok(Some(f)));
        assert!(buf.is_empty());
    }

    #[test]
    fn every_stream_kind_roundtrips() {
        for (end, returns_credit) in [(false, false), (true, false), (true, true)] {
            roundtrip(Frame::Data(Data {
                id: 9,
                end,
                returns_credit,
                data: Bytes::from_static(b"chunk"),
            }));
        }
        roundtrip(Frame::Data(Data {
            id: 9,
            end: true,
            returns_credit: false,
            data: Bytes::new(),
        }));
        roundtrip(Frame::Trailers(Trailers {
            id: 9,
            queue_us: 12,
            app_us: 3456,
            fields: vec![
                ("grpc-status".into(), "0".into()),
                ("x".into(), String::new()),
            ],
            returns_credit: true,
        }));
        roundtrip(Frame::Trailers(Trailers {
            id: 1,
            queue_us: 0,
            app_us: 0,
            fields: Vec::new(),
            returns_credit: false,
        }));
        for returns_credit in [false, true] {
            roundtrip(Frame::Reset(Reset {
                id: 9,
                code: code::CANCEL,
                returns_credit,
            }));
        }
        roundtrip(Frame::Window {
            id: 9,
            increment: DEFAULT_WINDOW,
        });
        for streams in [None, Some(DEFAULT_WINDOW), Some(0)] {
            roundtrip(Frame::Hello {
                reads_headers: false,
                takes_pushes: true,
                implicit_credit: true,
                releases_credit: false,
                streams,
                reads_tracestate: true,
            });
        }
    }

    #[test]
    fn heads_carry_more_in_bit_7_beside_the_other_flags() {
        let head = Frame::Response(Response {
            headers: Vec::new(),
            id: 3,
            status: 200,
            queue_us: 1,
            app_us: 2,
            content_type: "text/event-stream".into(),
            payload: Bytes::new(),
            returns_credit: false,
            from_mesh: false,
            more: true,
        });
        let mut buf = BytesMut::new();
        encode(&head, &mut buf).expect("encodes");
        assert_eq!(buf[5], FLAG_MORE);
        roundtrip(head);
        let req = Request {
            headers: Vec::new(),
            id: 4,
            flags: FLAG_MORE | crate::frame::FLAG_NO_REPLY,
            deadline_ms: 100,
            event: "upload".into(),
            ce_id: "c".into(),
            traceparent: String::new(),
            tracestate: "a=1".into(),
            content_type: "application/octet-stream".into(),
            payload: Bytes::from_static(b"first"),
        };
        assert!(req.more());
        // MORE (bit 7) and the tracestate flag (bit 6) sit side by side on one head.
        let mut buf = BytesMut::new();
        encode(&Frame::Request(req.clone()), &mut buf).expect("encodes");
        assert_eq!(
            buf[5],
            FLAG_MORE | crate::frame::FLAG_TRACESTATE | crate::frame::FLAG_NO_REPLY
        );
        roundtrip(Frame::Request(req));
    }

    #[test]
    fn only_a_streams_last_frame_returns_its_credit() {
        let data = |end, returns_credit| {
            Frame::Data(Data {
                id: 1,
                end,
                returns_credit,
                data: Bytes::new(),
            })
        };
        assert_eq!(data(true, true).credits_returned(), 1);
        assert_eq!(data(true, false).credits_returned(), 0);
        // The credit bit on a DATA that is not the last is not written, and ignored when read.
        let mut buf = BytesMut::new();
        encode(&data(false, true), &mut buf).expect("encodes");
        assert_eq!(buf[5], 0);
        let mut forged = BytesMut::from(
            &[
                0,
                0,
                0,
                10,
                kind::DATA,
                FLAG_STREAM_CREDIT,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                1,
            ][..],
        );
        assert_eq!(decode(&mut forged, 1024), Ok(Some(data(false, false))));
        let reset = Frame::Reset(Reset {
            id: 1,
            code: code::INTERNAL,
            returns_credit: true,
        });
        assert_eq!(reset.credits_returned(), 1);
        assert_eq!(
            Frame::Window {
                id: 1,
                increment: 5
            }
            .credits_returned(),
            0
        );
    }

    #[test]
    fn short_and_oversized_stream_frames_are_refused() {
        // RESET and WINDOW without their u32, TRAILERS without its timing, a HELLO saying streams
        // without its window.
        for (k, flags, what) in [
            (kind::RESET, 0, "reset code"),
            (kind::WINDOW, 0, "increment"),
            (kind::TRAILERS, 0, "trailer timing"),
            (9, crate::frame::FLAG_STREAMS, "window"),
        ] {
            let mut buf = BytesMut::from(&[0, 0, 0, 10, k, flags, 0, 0, 0, 0, 0, 0, 0, 1][..]);
            assert_eq!(decode(&mut buf, 1024), Err(FrameError::Truncated(what)));
        }
        // A trailer whose value runs past the frame.
        let mut buf = BytesMut::from(&[0, 0, 0, 24, kind::TRAILERS, 0, 0, 0, 0, 0, 0, 0, 0, 1][..]);
        buf.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 1, 1, b'a', 0, 9, b'x']);
        assert_eq!(
            decode(&mut buf, 1024),
            Err(FrameError::Truncated("trailer value"))
        );
        // A DATA frame larger than the limit is refused on its length, before it is buffered.
        let mut big = BytesMut::from(&[0x40, 0, 0, 0, kind::DATA][..]);
        assert!(matches!(
            decode(&mut big, 1024),
            Err(FrameError::TooLarge { .. })
        ));
        let long = Frame::Trailers(Trailers {
            id: 1,
            queue_us: 0,
            app_us: 0,
            fields: vec![("n".repeat(256), String::new())],
            returns_credit: false,
        });
        assert_eq!(
            encode(&long, &mut BytesMut::new()),
            Err(FrameError::FieldTooLong("trailer name"))
        );
        assert_eq!(
            check(&long, 1 << 20),
            Err(FrameError::FieldTooLong("trailer name"))
        );
    }

    #[test]
    fn an_old_decoder_reads_a_streams_hello_as_its_own() {
        // A HELLO of this version carries a body; the previous decoder ignored HELLO bodies and
        // read its flag bits 0-2 as before, so an old manager keeps working with a new router.
        let mut buf = BytesMut::new();
        encode(
            &Frame::Hello {
                reads_headers: false,
                takes_pushes: true,
                implicit_credit: true,
                releases_credit: true,
                streams: Some(DEFAULT_WINDOW),
                reads_tracestate: false,
            },
            &mut buf,
        )
        .expect("encodes");
        assert_eq!(buf[5] & 0x07, 0x07);
        assert_eq!(&buf[14..], &DEFAULT_WINDOW.to_be_bytes());
    }

    #[test]
    fn chunks_split_without_copying_and_cover_the_body() {
        let body = Bytes::from(vec![7u8; MAX_DATA * 2 + 5]);
        let parts: Vec<Bytes> = chunks(body.clone()).collect();
        assert_eq!(
            parts.iter().map(Bytes::len).collect::<Vec<_>>(),
            vec![MAX_DATA, MAX_DATA, 5]
        );
        assert_eq!(parts[0].as_ptr(), body.as_ptr());
        assert_eq!(chunks(Bytes::new()).count(), 0);
    }
}
