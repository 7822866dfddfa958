//! The frame protocol of `switchyard_protocol::frame` extended with streams (issue 14).
//! Pure: no I/O.
//!
//! The product's REQUEST and RESPONSE become stream heads; four kinds are added:
//! ```text
//! REQUEST  as today; flags bit 7 (MORE): the body continues in DATA frames (the inline payload is its first chunk)
//! RESPONSE as today; flags bit 7 (MORE): as above
//! DATA     kind 10, id = stream; flags bit 0 (END): the last chunk of this direction; body := bytes
//! TRAILERS kind 11, id = stream; ends this direction; body := n:u8 (name:str8 value_len:u16 value)*n
//! RESET    kind 12, id = stream; both directions end; body := code:u32
//! WINDOW   kind 13, id = stream; body := increment:u32 (more DATA bytes the receiver takes on that stream)
//! ```
//! A stream's last frame towards the router (a RESPONSE without MORE, a DATA with END, TRAILERS or RESET)
//! returns its credit, as `FLAG_RETURNS_CREDIT` does today. Every other kind is the product's codec.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use switchyard_protocol::frame::{self as base, FrameError};

/// Flag on a REQUEST or RESPONSE head: DATA frames follow.
pub const FLAG_MORE: u8 = 0x80;
/// Flag on a DATA frame: the last of its direction.
pub const FLAG_END: u8 = 0x01;

const DATA: u8 = 10;
const TRAILERS: u8 = 11;
const RESET: u8 = 12;
const WINDOW: u8 = 13;
/// `len:u32 kind:u8 flags:u8 id:u64`.
pub const HEADER: usize = 4 + 1 + 1 + 8;

/// Reset codes.
pub mod code {
    /// The sender gave up (client gone, deadline passed).
    pub const CANCEL: u32 = 0;
    /// The answer could not be made.
    pub const INTERNAL: u32 = 2;
    /// The receiver's window was overrun.
    pub const FLOW_CONTROL: u32 = 3;
}

/// One frame of the streamed protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A frame of today's protocol; `more` is the MORE flag of a REQUEST or RESPONSE head.
    Base { frame: base::Frame, more: bool },
    /// A chunk of a stream's body.
    Data { id: u64, end: bool, data: Bytes },
    /// The end of a stream's direction with trailer fields (Server-Timing known at the end).
    Trailers {
        id: u64,
        fields: Vec<(String, String)>,
    },
    /// The stream is abandoned.
    Reset { id: u64, code: u32 },
    /// More window for DATA on stream `id`.
    Window { id: u64, increment: u32 },
}

/// Encodes the frame's header (and small bodies) into `dst`; returns a payload to write after it
/// without copying, when there is one. `dst` then holds a complete frame once `payload` follows.
pub fn encode(frame: &Frame, dst: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
    match frame {
        Frame::Base { frame, more } => {
            let start = dst.len();
            base::encode(frame, dst)?;
            if *more {
                // The flags byte follows len:u32 and kind:u8.
                dst[start + 5] |= FLAG_MORE;
            }
            Ok(None)
        }
        Frame::Data { id, end, data } => {
            let len = u32::try_from(HEADER - 4 + data.len()).map_err(|_| FrameError::TooLarge {
                len: data.len(),
                max: u32::MAX as usize,
            })?;
            dst.put_u32(len);
            dst.put_u8(DATA);
            dst.put_u8(if *end { FLAG_END } else { 0 });
            dst.put_u64(*id);
            Ok((!data.is_empty()).then(|| data.clone()))
        }
        Frame::Trailers { id, fields } => {
            let start = dst.len();
            dst.put_u32(0);
            dst.put_u8(TRAILERS);
            dst.put_u8(0);
            dst.put_u64(*id);
            let n = u8::try_from(fields.len()).map_err(|_| FrameError::FieldTooLong("trailers"))?;
            dst.put_u8(n);
            for (name, value) in fields {
                let nl = u8::try_from(name.len()).map_err(|_| FrameError::FieldTooLong("name"))?;
                let vl =
                    u16::try_from(value.len()).map_err(|_| FrameError::FieldTooLong("value"))?;
                dst.put_u8(nl);
                dst.put_slice(name.as_bytes());
                dst.put_u16(vl);
                dst.put_slice(value.as_bytes());
            }
            let len = (dst.len() - start - 4) as u32;
            dst[start..start + 4].copy_from_slice(&len.to_be_bytes());
            Ok(None)
        }
        Frame::Reset { id, code }
        | Frame::Window {
            id,
            increment: code,
        } => {
            dst.put_u32((HEADER - 4 + 4) as u32);
            dst.put_u8(if matches!(frame, Frame::Reset { .. }) {
                RESET
            } else {
                WINDOW
            });
            dst.put_u8(0);
            dst.put_u64(*id);
            dst.put_u32(*code);
            Ok(None)
        }
    }
}

fn str8(body: &mut Bytes) -> Result<String, FrameError> {
    if body.remaining() < 1 {
        return Err(FrameError::Truncated("trailer name"));
    }
    let n = usize::from(body.get_u8());
    if body.remaining() < n {
        return Err(FrameError::Truncated("trailer name"));
    }
    String::from_utf8(body.split_to(n).to_vec()).map_err(|_| FrameError::NotUtf8("trailer name"))
}

fn str16(body: &mut Bytes) -> Result<String, FrameError> {
    if body.remaining() < 2 {
        return Err(FrameError::Truncated("trailer value"));
    }
    let n = usize::from(body.get_u16());
    if body.remaining() < n {
        return Err(FrameError::Truncated("trailer value"));
    }
    String::from_utf8(body.split_to(n).to_vec()).map_err(|_| FrameError::NotUtf8("trailer value"))
}

/// Decodes one frame from the front of `src`, if a whole one is there.
pub fn decode(src: &mut BytesMut, max: usize) -> Result<Option<Frame>, FrameError> {
    if src.len() < HEADER {
        if src.len() >= 4 {
            let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
            if len > max {
                return Err(FrameError::TooLarge { len, max });
            }
        }
        return Ok(None);
    }
    let kind = src[4];
    let flags = src[5];
    if !matches!(kind, DATA | TRAILERS | RESET | WINDOW) {
        return Ok(base::decode(src, max)?.map(|frame| Frame::Base {
            frame,
            more: flags & FLAG_MORE != 0,
        }));
    }
    let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    if len < HEADER - 4 {
        return Err(FrameError::Truncated("header"));
    }
    if src.len() < 4 + len {
        src.reserve(4 + len - src.len());
        return Ok(None);
    }
    src.advance(6);
    let id = src.get_u64();
    let mut body = src.split_to(len - (HEADER - 4)).freeze();
    Ok(Some(match kind {
        DATA => Frame::Data {
            id,
            end: flags & FLAG_END != 0,
            data: body,
        },
        TRAILERS => {
            if body.remaining() < 1 {
                return Err(FrameError::Truncated("trailers"));
            }
            let n = body.get_u8();
            let mut fields = Vec::with_capacity(usize::from(n));
            for _ in 0..n {
                let name = str8(&mut body)?;
                let value = str16(&mut body)?;
                fields.push((name, value));
            }
            Frame::Trailers { id, fields }
        }
        _ => {
            if body.remaining() < 4 {
                return Err(FrameError::Truncated("code"));
            }
            let v = body.get_u32();
            if kind == RESET {
                Frame::Reset { id, code: v }
            } else {
                Frame::Window { id, increment: v }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_protocol::frame::{DEFAULT_MAX_FRAME, Request, Response};

    fn roundtrip(f: Frame) {
        let mut buf = BytesMut::new();
        if let Some(payload) = encode(&f, &mut buf).expect("encodes") {
            buf.extend_from_slice(&payload);
        }
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
    fn every_stream_kind_roundtrips_and_heads_keep_the_product_encoding() {
        roundtrip(Frame::Base {
            frame: base::Frame::Request(Request {
                headers: Vec::new(),
                id: 3,
                flags: FLAG_MORE,
                deadline_ms: 100,
                event: "upload".into(),
                ce_id: "x".into(),
                traceparent: String::new(),
                tracestate: String::new(),
                content_type: "application/octet-stream".into(),
                payload: Bytes::from_static(b"first"),
            }),
            more: true,
        });
        roundtrip(Frame::Base {
            frame: base::Frame::Response(Response {
                headers: Vec::new(),
                id: 3,
                status: 200,
                queue_us: 1,
                app_us: 2,
                content_type: "text/plain".into(),
                payload: Bytes::new(),
                returns_credit: true,
                from_mesh: false,
                // The product's head now says MORE (bit 7) itself, as the prototype's flag does.
                more: true,
            }),
            more: true,
        });
        roundtrip(Frame::Base {
            frame: base::Frame::Ping { nonce: 1 },
            more: false,
        });
        roundtrip(Frame::Data {
            id: 9,
            end: true,
            data: Bytes::from_static(b"chunk"),
        });
        roundtrip(Frame::Data {
            id: 9,
            end: false,
            data: Bytes::new(),
        });
        roundtrip(Frame::Trailers {
            id: 9,
            fields: vec![("server-timing".into(), "app;dur=0.1".into())],
        });
        roundtrip(Frame::Reset { id: 9, code: 0 });
        roundtrip(Frame::Window {
            id: 9,
            increment: 65536,
        });
    }

    #[test]
    fn an_oversized_data_frame_is_refused_before_it_is_buffered() {
        let mut buf = BytesMut::new();
        buf.put_u32(1 << 30);
        buf.put_u8(DATA);
        assert!(matches!(
            decode(&mut buf, 1024),
            Err(FrameError::TooLarge { .. })
        ));
    }
}
