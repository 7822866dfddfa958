//! Frames between router and manager sidecars: one multiplexed TCP connection per pod pair.
//!
//! Wire format (all integers big-endian):
//! ```text
//! frame   := len:u32 kind:u8 flags:u8 id:u64 body        (len counts everything after itself)
//! REQUEST  body := deadline_ms:u32 event:str8 ce_id:str8 traceparent:str8 [tracestate:str16]
//!                  content_type:str8 [headers] payload
//!                                          flags bit 0: fire-and-forget (no answer body is awaited)
//!                                          flags bit 1: acknowledge: a RESPONSE 202 once the manager
//!                                          admitted it to its queue (or its refusal, 503), then a second
//!                                          RESPONSE, empty, carrying the credit, once it is done
//!                                          flags bit 6: the tracestate field is there (only to a
//!                                          peer whose HELLO has bit 6; `crate::tracestate`)
//!                                          flags bit 5: the headers list is there (HTTP fields
//!                                          passed end to end, only to a peer whose HELLO has
//!                                          bit 5; `crate::headers`)
//! RESPONSE body := status:u16 queue_us:u32 app_us:u32 content_type:str8 [headers] payload
//!                                          flags bit 0: the answer also returns its request's credit
//!                                          flags bit 1: the manager sidecar answered, not the app
//!                                          (its problem+json says why: queue full, app down, deadline)
//!                                          flags bit 5: the headers list is there, as on REQUEST
//! CANCEL   body := (empty)                 the client went away; the manager stops the work
//! CREDIT   body := credits:u32             the manager grants that many more requests
//! PING/PONG body := nonce:u64              heartbeats
//! GOAWAY   body := reason (rest, UTF-8)    the peer drains: no new requests on this connection
//! PUSH     body := event:str8 traceparent:str8 [tracestate:str16] content_type:str8 payload
//!                                          manager -> router: an event for WebSocket subscribers
//!                                          flags bit 6: the tracestate field is there, as on REQUEST
//! HELLO    body := (empty); flags bit 0: the sender takes PUSH frames
//!                                          flags bit 1: the sender counts a flagged RESPONSE as a credit
//!                                          flags bit 2: the sender answers RECLAIM with RELEASE
//!                                          flags bit 3: the sender speaks streams; then body := window:u32
//!                                          (DATA bytes it takes per stream before it returns window)
//!                                          flags bit 5: the sender reads the headers list
//!                                          flags bit 6: the sender reads the tracestate field
//!                                          first frame of the connecting side; the accepting side
//!                                          reads it, then answers with one HELLO of its own (bit 6,
//!                                          and bit 3 with its window if the peer offered streams)
//!                                          before its first CREDIT, only to a peer whose HELLO had
//!                                          bit 3 or 6 (an older one would not expect it)
//! RECLAIM  body := credits:u32             manager -> sender: give back up to that many unused credits
//! RELEASE  body := credits:u32             sender -> manager: that many credits given back (maybe 0),
//!                                          the answer to a RECLAIM
//! DATA, TRAILERS, RESET, WINDOW (kinds 12-15): streamed bodies, see `crate::stream`; REQUEST and
//!                                          RESPONSE flags bit 7 (MORE): the body continues in DATA
//! str8    := len:u8 bytes (UTF-8)
//! str16   := len:u16 bytes (UTF-8)
//! ```
//! Pure: no I/O. [`FrameCodec`] plugs it into `tokio_util::codec::Framed`.

pub use crate::frame_error::FrameError;
use crate::headers::{self, Fields};
use crate::stream::{self, Data, Reset, Trailers};
use crate::tracestate;
pub use crate::tracestate::{FLAG_READS_TRACESTATE, FLAG_TRACESTATE};
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Size of `kind`, `flags` and `id`, the fixed part after the length.
const FIXED: usize = 1 + 1 + 8;
/// Largest payload the mesh carries: request bodies, answers and WebSocket messages are capped at it.
pub const MAX_PAYLOAD: usize = 16 * 1024 * 1024;
/// Default largest frame: [`MAX_PAYLOAD`] plus the largest headers of any frame.
pub const DEFAULT_MAX_FRAME: usize = MAX_PAYLOAD + 2048;

/// Flag on a REQUEST: fire-and-forget; the manager sends no RESPONSE.
pub const FLAG_NO_REPLY: u8 = 0x01;
/// Flag on a REQUEST: answer twice: first a RESPONSE as soon as the event was admitted to the
/// manager's queue (status 202) or refused (503, flagged [`FLAG_FROM_MESH`]), then, for an admitted
/// one, a RESPONSE with the outcome (empty payload with [`FLAG_NO_REPLY`]) that returns the credit.
/// A publisher answers its app 202 only after the first, and knows from the second that the event
/// left the manager's memory: what a killed pod loses is exactly what was acknowledged and not done.
pub const FLAG_ACK: u8 = 0x02;
/// Flag on a HELLO: the sender (a router sidecar) delivers PUSH frames to WebSocket subscribers.
pub const FLAG_TAKES_PUSHES: u8 = 0x01;
/// Flag on a HELLO: the sender counts a RESPONSE carrying [`FLAG_RETURNS_CREDIT`] as one credit, so
/// the manager may skip the CREDIT frame after each answer. A peer that never sent it gets CREDIT
/// frames as before: sidecars of mixed versions keep exact credit accounting.
pub const FLAG_IMPLICIT_CREDIT: u8 = 0x02;
/// Flag on a HELLO: the sender answers a RECLAIM with a RELEASE of the credits it holds unused, so a
/// manager can move credit from idle senders to a new one (credit cannot otherwise be taken back).
/// A manager never sends RECLAIM to a peer whose HELLO lacked it.
pub const FLAG_RELEASES_CREDIT: u8 = 0x04;
/// Flag on a HELLO: the sender speaks streams (DATA, TRAILERS, RESET, WINDOW and MORE on heads); the
/// HELLO's body then says its per-stream window. A peer without it gets whole bodies only.
pub const FLAG_STREAMS: u8 = 0x08;
/// Flag on a RESPONSE: the answer also returns its request's credit (no CREDIT frame follows for it).
/// Only sent to a peer whose HELLO carried [`FLAG_IMPLICIT_CREDIT`].
pub const FLAG_RETURNS_CREDIT: u8 = 0x01;
/// Flag on a RESPONSE: the manager sidecar made this answer (a problem+json saying why the app gave
/// none), so the router reports it as the mesh's refusal rather than as the app's reply. A router of
/// an older version ignores the bit and passes the problem through as before.
pub const FLAG_FROM_MESH: u8 = 0x02;

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// An event to handle.
    Request(Request),
    /// The answer to a request with the same id.
    Response(Response),
    /// Stop working on request `id`.
    Cancel {
        /// Request id.
        id: u64,
    },
    /// Permission to send `credits` more requests (credit-based flow control: nothing is dropped).
    Credit {
        /// Additional requests allowed.
        credits: u32,
    },
    /// The manager asks for up to `credits` unused credits back (only of a peer whose HELLO said it
    /// releases credit).
    Reclaim {
        /// The most the sender should give back.
        credits: u32,
    },
    /// The answer to a RECLAIM: the sender gave up `credits` it held unused (possibly none).
    Release {
        /// Credits given back.
        credits: u32,
    },
    /// Heartbeat.
    Ping {
        /// Echoed in the PONG.
        nonce: u64,
    },
    /// Heartbeat answer.
    Pong {
        /// The PING's nonce.
        nonce: u64,
    },
    /// The sender drains; no new requests on this connection.
    GoAway {
        /// Why.
        reason: String,
    },
    /// An event published by a manager for the router's WebSocket subscribers (manager -> router only;
    /// no reply, no credit: subscribers' queues are bounded and count what they drop).
    Push(Push),
    /// The connecting side's first frame: who it is, so a manager pushes only to routers (a manager's
    /// own outbound connections take no pushes).
    Hello {
        /// Whether the sender delivers PUSH frames.
        takes_pushes: bool,
        /// Whether the sender counts a RESPONSE with [`FLAG_RETURNS_CREDIT`] as one credit.
        implicit_credit: bool,
        /// Whether the sender answers RECLAIM with RELEASE ([`FLAG_RELEASES_CREDIT`]).
        releases_credit: bool,
        /// The per-stream window the sender takes, when it speaks streams ([`FLAG_STREAMS`]).
        streams: Option<u32>,
        /// Whether the sender reads a tracestate ([`FLAG_READS_TRACESTATE`]).
        reads_tracestate: bool,
        /// Whether the sender reads a head's headers list ([`headers::FLAG_READS_HEADERS`]).
        reads_headers: bool,
    },
    /// A chunk of a stream's body.
    Data(Data),
    /// The end of a stream's direction with what was known only at the end.
    Trailers(Trailers),
    /// A stream abandoned by its sender.
    Reset(Reset),
    /// The receiver of stream `id` takes `increment` more DATA bytes on it.
    Window {
        /// The stream.
        id: u64,
        /// Bytes added to the sender's window.
        increment: u32,
    },
}

impl Frame {
    /// Credits this frame returns to the side that sends requests: a CREDIT frame's count, one for
    /// an answer that carries its credit, none otherwise. The one rule both sidecars account by.
    pub fn credits_returned(&self) -> u32 {
        match self {
            Frame::Credit { credits } => *credits,
            Frame::Response(r) if r.returns_credit => 1,
            Frame::Data(d) if d.returns_credit => 1,
            Frame::Trailers(t) if t.returns_credit => 1,
            Frame::Reset(r) if r.returns_credit => 1,
            _ => 0,
        }
    }
}

/// An event for WebSocket subscribers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Push {
    /// Event type the subscribers filter on.
    pub event: String,
    /// W3C traceparent of the publisher, empty when none.
    pub traceparent: String,
    /// W3C tracestate of the publisher, empty when none (`crate::tracestate`).
    pub tracestate: String,
    /// Media type of the payload.
    pub content_type: String,
    /// The event data.
    pub payload: Bytes,
}

/// An event sent for handling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Connection-unique request id.
    pub id: u64,
    /// [`FLAG_NO_REPLY`] and future flags.
    pub flags: u8,
    /// Milliseconds the sender will wait; 0 means no deadline.
    pub deadline_ms: u32,
    /// Event type.
    pub event: String,
    /// CloudEvents id.
    pub ce_id: String,
    /// W3C traceparent, empty when none.
    pub traceparent: String,
    /// W3C tracestate, empty when none (`crate::tracestate`).
    pub tracestate: String,
    /// Media type of the payload.
    pub content_type: String,
    /// The client's HTTP fields passed to the app (`crate::headers`), empty when none.
    pub headers: Fields,
    /// The event data.
    pub payload: Bytes,
}

/// The answer to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Id of the request answered.
    pub id: u64,
    /// HTTP-style status of the handling.
    pub status: u16,
    /// Microseconds the event waited in the manager's queue.
    pub queue_us: u32,
    /// Microseconds the app took.
    pub app_us: u32,
    /// Media type of the payload.
    pub content_type: String,
    /// The app's HTTP fields passed to the client (`crate::headers`), empty when none.
    pub headers: Fields,
    /// The reply data.
    pub payload: Bytes,
    /// The answer also returns its request's credit ([`FLAG_RETURNS_CREDIT`]).
    pub returns_credit: bool,
    /// The manager sidecar made this answer, not the app ([`FLAG_FROM_MESH`]).
    pub from_mesh: bool,
    /// A stream head: the body continues in DATA frames ([`stream::FLAG_MORE`]).
    pub more: bool,
}

impl Request {
    /// Whether this is a stream head: the body continues in DATA frames ([`stream::FLAG_MORE`]).
    pub fn more(&self) -> bool {
        self.flags & stream::FLAG_MORE != 0
    }
}

mod kind {
    pub const REQUEST: u8 = 1;
    pub const RESPONSE: u8 = 2;
    pub const CANCEL: u8 = 3;
    pub const CREDIT: u8 = 4;
    pub const PING: u8 = 5;
    pub const PONG: u8 = 6;
    pub const GOAWAY: u8 = 7;
    pub const PUSH: u8 = 8;
    pub const HELLO: u8 = 9;
    pub const RECLAIM: u8 = 10;
    pub const RELEASE: u8 = 11;
}

fn put_str8(dst: &mut BytesMut, s: &str, field: &'static str) -> Result<(), FrameError> {
    let len = u8::try_from(s.len()).map_err(|_| FrameError::FieldTooLong(field))?;
    dst.put_u8(len);
    dst.put_slice(s.as_bytes());
    Ok(())
}

fn get_str8(src: &mut Bytes, field: &'static str) -> Result<String, FrameError> {
    if src.remaining() < 1 {
        return Err(FrameError::Truncated(field));
    }
    let len = usize::from(src.get_u8());
    if src.remaining() < len {
        return Err(FrameError::Truncated(field));
    }
    let raw = src.split_to(len);
    String::from_utf8(raw.to_vec()).map_err(|_| FrameError::NotUtf8(field))
}

fn need(src: &Bytes, n: usize, field: &'static str) -> Result<(), FrameError> {
    if src.remaining() < n {
        Err(FrameError::Truncated(field))
    } else {
        Ok(())
    }
}

/// Largest payload a REQUEST can carry within a frame of `max` bytes, with its string fields as
/// long as they may be: what an edge may admit without the frame being refused later.
pub fn max_payload(max: usize) -> usize {
    max.saturating_sub(FIXED + 4 + 4 * 256 + 2 + tracestate::MAX_LEN)
}

/// Checks that `frame` encodes, and within `max` bytes (what the peer's decoder accepts), without
/// encoding it: a sender checks each frame before queuing it on a shared connection, so one frame
/// too large (or with a string field over 255 bytes) fails alone instead of tearing the connection
/// down under every other request on it.
pub fn check(frame: &Frame, max: usize) -> Result<(), FrameError> {
    let body = match frame {
        Frame::Request(r) => r.body_len()?,
        Frame::Response(r) => r.body_len()?,
        Frame::Push(p) => {
            str8_len(&p.event, "event")?
                + str8_len(&p.traceparent, "traceparent")?
                + tracestate::wire_len(&p.tracestate)
                + str8_len(&p.content_type, "content_type")?
                + p.payload.len()
        }
        Frame::GoAway { reason } => reason.len(),
        Frame::Hello { streams, .. } => 4 * usize::from(streams.is_some()),
        Frame::Cancel { .. } => 0,
        Frame::Data(d) => d.data.len(),
        Frame::Trailers(t) => t.body_len()?,
        Frame::Credit { .. }
        | Frame::Reclaim { .. }
        | Frame::Release { .. }
        | Frame::Reset(_)
        | Frame::Window { .. } => 4,
        Frame::Ping { .. } | Frame::Pong { .. } => 8,
    };
    within(body, max)
}

fn within(body: usize, max: usize) -> Result<(), FrameError> {
    let len = FIXED + body;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    Ok(())
}

fn str8_len(s: &str, field: &'static str) -> Result<usize, FrameError> {
    if s.len() > 255 {
        Err(FrameError::FieldTooLong(field))
    } else {
        Ok(1 + s.len())
    }
}

impl Request {
    fn body_len(&self) -> Result<usize, FrameError> {
        Ok(4 + str8_len(&self.event, "event")?
            + str8_len(&self.ce_id, "ce_id")?
            + str8_len(&self.traceparent, "traceparent")?
            + tracestate::wire_len(&self.tracestate)
            + str8_len(&self.content_type, "content_type")?
            + headers::wire_len(&self.headers)?
            + self.payload.len())
    }

    /// [`check`] for this request's frame.
    pub fn check(&self, max: usize) -> Result<(), FrameError> {
        within(self.body_len()?, max)
    }
}

impl Response {
    fn body_len(&self) -> Result<usize, FrameError> {
        Ok(2 + 4
            + 4
            + str8_len(&self.content_type, "content_type")?
            + headers::wire_len(&self.headers)?
            + self.payload.len())
    }

    /// [`check`] for this answer's frame.
    pub fn check(&self, max: usize) -> Result<(), FrameError> {
        within(self.body_len()?, max)
    }
}

/// Appends the encoding of `frame` to `dst`; on an error `dst` is left as it was.
pub fn encode(frame: &Frame, dst: &mut BytesMut) -> Result<(), FrameError> {
    let start = dst.len();
    let result = encode_at(frame, dst, start);
    if result.is_err() {
        dst.truncate(start);
    }
    result
}

/// Appends the encoding of `frame` to `dst`, except a DATA frame's bytes: those are handed back, to
/// be written right after `dst` as they are. A vectored write then sends a stream's body without
/// copying it into the write buffer first. On an error `dst` is left as it was.
pub fn encode_head(frame: Frame, dst: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
    let Frame::Data(d) = frame else {
        return encode(&frame, dst).map(|()| None);
    };
    let len = FIXED + d.data.len();
    let len32 = u32::try_from(len).map_err(|_| FrameError::TooLarge {
        len,
        max: u32::MAX as usize,
    })?;
    dst.reserve(4 + FIXED);
    dst.put_u32(len32);
    dst.put_u8(stream::kind::DATA);
    dst.put_u8(d.flags());
    dst.put_u64(d.id);
    Ok(Some(d.data))
}

fn encode_at(frame: &Frame, dst: &mut BytesMut, start: usize) -> Result<(), FrameError> {
    dst.put_u32(0); // patched below
    match frame {
        Frame::Request(r) => {
            dst.reserve(
                FIXED
                    + 4
                    + 4
                    + r.event.len()
                    + r.ce_id.len()
                    + r.traceparent.len()
                    + r.content_type.len()
                    + r.payload.len(),
            );
            headers::wire_len(&r.headers)?;
            dst.put_u8(kind::REQUEST);
            dst.put_u8(
                r.flags & !(FLAG_TRACESTATE | headers::FLAG_HEADERS)
                    | tracestate::flag(&r.tracestate)
                    | headers::flag(&r.headers),
            );
            dst.put_u64(r.id);
            dst.put_u32(r.deadline_ms);
            put_str8(dst, &r.event, "event")?;
            put_str8(dst, &r.ce_id, "ce_id")?;
            put_str8(dst, &r.traceparent, "traceparent")?;
            tracestate::put(dst, &r.tracestate);
            put_str8(dst, &r.content_type, "content_type")?;
            headers::put(dst, &r.headers);
            dst.put_slice(&r.payload);
        }
        Frame::Response(r) => {
            headers::wire_len(&r.headers)?;
            dst.reserve(FIXED + 2 + 8 + 1 + r.content_type.len() + r.payload.len());
            dst.put_u8(kind::RESPONSE);
            let mut flags = 0;
            if r.returns_credit {
                flags |= FLAG_RETURNS_CREDIT;
            }
            if r.from_mesh {
                flags |= FLAG_FROM_MESH;
            }
            if r.more {
                flags |= stream::FLAG_MORE;
            }
            flags |= headers::flag(&r.headers);
            dst.put_u8(flags);
            dst.put_u64(r.id);
            dst.put_u16(r.status);
            dst.put_u32(r.queue_us);
            dst.put_u32(r.app_us);
            put_str8(dst, &r.content_type, "content_type")?;
            headers::put(dst, &r.headers);
            dst.put_slice(&r.payload);
        }
        Frame::Cancel { id } => {
            dst.put_u8(kind::CANCEL);
            dst.put_u8(0);
            dst.put_u64(*id);
        }
        Frame::Credit { credits } | Frame::Reclaim { credits } | Frame::Release { credits } => {
            dst.put_u8(match frame {
                Frame::Credit { .. } => kind::CREDIT,
                Frame::Reclaim { .. } => kind::RECLAIM,
                _ => kind::RELEASE,
            });
            dst.put_u8(0);
            dst.put_u64(0);
            dst.put_u32(*credits);
        }
        Frame::Ping { nonce } | Frame::Pong { nonce } => {
            dst.put_u8(if matches!(frame, Frame::Ping { .. }) {
                kind::PING
            } else {
                kind::PONG
            });
            dst.put_u8(0);
            dst.put_u64(0);
            dst.put_u64(*nonce);
        }
        Frame::GoAway { reason } => {
            dst.put_u8(kind::GOAWAY);
            dst.put_u8(0);
            dst.put_u64(0);
            dst.put_slice(reason.as_bytes());
        }
        Frame::Hello {
            takes_pushes,
            implicit_credit,
            releases_credit,
            streams,
            reads_tracestate,
            reads_headers,
        } => {
            let mut flags = 0;
            if *takes_pushes {
                flags |= FLAG_TAKES_PUSHES;
            }
            if *implicit_credit {
                flags |= FLAG_IMPLICIT_CREDIT;
            }
            if *releases_credit {
                flags |= FLAG_RELEASES_CREDIT;
            }
            if streams.is_some() {
                flags |= FLAG_STREAMS;
            }
            if *reads_tracestate {
                flags |= FLAG_READS_TRACESTATE;
            }
            if *reads_headers {
                flags |= headers::FLAG_READS_HEADERS;
            }
            dst.put_u8(kind::HELLO);
            dst.put_u8(flags);
            dst.put_u64(0);
            if let Some(window) = streams {
                dst.put_u32(*window);
            }
        }
        Frame::Data(d) => {
            dst.reserve(FIXED + d.data.len());
            dst.put_u8(stream::kind::DATA);
            dst.put_u8(d.flags());
            dst.put_u64(d.id);
            dst.put_slice(&d.data);
        }
        Frame::Trailers(t) => {
            dst.put_u8(stream::kind::TRAILERS);
            dst.put_u8(t.flags());
            dst.put_u64(t.id);
            t.encode_body(dst)?;
        }
        Frame::Reset(r) => {
            dst.put_u8(stream::kind::RESET);
            dst.put_u8(r.flags());
            dst.put_u64(r.id);
            dst.put_u32(r.code);
        }
        Frame::Window { id, increment } => {
            dst.put_u8(stream::kind::WINDOW);
            dst.put_u8(0);
            dst.put_u64(*id);
            dst.put_u32(*increment);
        }
        Frame::Push(p) => {
            dst.reserve(
                FIXED
                    + 3
                    + p.event.len()
                    + p.traceparent.len()
                    + p.content_type.len()
                    + p.payload.len(),
            );
            dst.put_u8(kind::PUSH);
            dst.put_u8(tracestate::flag(&p.tracestate));
            dst.put_u64(0);
            put_str8(dst, &p.event, "event")?;
            put_str8(dst, &p.traceparent, "traceparent")?;
            tracestate::put(dst, &p.tracestate);
            put_str8(dst, &p.content_type, "content_type")?;
            dst.put_slice(&p.payload);
        }
    }
    let len = dst.len() - start - 4;
    let len32 = u32::try_from(len).map_err(|_| FrameError::TooLarge {
        len,
        max: u32::MAX as usize,
    })?;
    dst[start..start + 4].copy_from_slice(&len32.to_be_bytes());
    Ok(())
}

/// Decodes one frame from the front of `src`, if a whole one is there. Consumes it on success.
pub fn decode(src: &mut BytesMut, max: usize) -> Result<Option<Frame>, FrameError> {
    if src.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    if len < FIXED {
        return Err(FrameError::Truncated("header"));
    }
    if src.len() < 4 + len {
        src.reserve(4 + len - src.len());
        return Ok(None);
    }
    src.advance(4);
    let mut body = src.split_to(len).freeze();
    let k = body.get_u8();
    let flags = body.get_u8();
    let id = body.get_u64();
    let frame = match k {
        kind::REQUEST => {
            need(&body, 4, "deadline")?;
            let deadline_ms = body.get_u32();
            let event = get_str8(&mut body, "event")?;
            let ce_id = get_str8(&mut body, "ce_id")?;
            let traceparent = get_str8(&mut body, "traceparent")?;
            let tracestate = tracestate::get(&mut body, flags)?;
            let content_type = get_str8(&mut body, "content_type")?;
            let headers = headers::get(&mut body, flags)?;
            Frame::Request(Request {
                id,
                flags: flags & !(FLAG_TRACESTATE | headers::FLAG_HEADERS),
                deadline_ms,
                event,
                ce_id,
                traceparent,
                tracestate,
                content_type,
                headers,
                payload: body,
            })
        }
        kind::RESPONSE => {
            need(&body, 10, "status")?;
            let status = body.get_u16();
            let queue_us = body.get_u32();
            let app_us = body.get_u32();
            let content_type = get_str8(&mut body, "content_type")?;
            let headers = headers::get(&mut body, flags)?;
            Frame::Response(Response {
                id,
                status,
                queue_us,
                app_us,
                content_type,
                headers,
                payload: body,
                returns_credit: flags & FLAG_RETURNS_CREDIT != 0,
                from_mesh: flags & FLAG_FROM_MESH != 0,
                more: flags & stream::FLAG_MORE != 0,
            })
        }
        kind::CANCEL => Frame::Cancel { id },
        kind::CREDIT | kind::RECLAIM | kind::RELEASE => {
            need(&body, 4, "credits")?;
            let credits = body.get_u32();
            match k {
                kind::CREDIT => Frame::Credit { credits },
                kind::RECLAIM => Frame::Reclaim { credits },
                _ => Frame::Release { credits },
            }
        }
        kind::PING | kind::PONG => {
            need(&body, 8, "nonce")?;
            let nonce = body.get_u64();
            if k == kind::PING {
                Frame::Ping { nonce }
            } else {
                Frame::Pong { nonce }
            }
        }
        kind::GOAWAY => Frame::GoAway {
            reason: String::from_utf8(body.to_vec()).map_err(|_| FrameError::NotUtf8("reason"))?,
        },
        kind::PUSH => {
            let event = get_str8(&mut body, "event")?;
            let traceparent = get_str8(&mut body, "traceparent")?;
            let tracestate = tracestate::get(&mut body, flags)?;
            let content_type = get_str8(&mut body, "content_type")?;
            Frame::Push(Push {
                event,
                traceparent,
                tracestate,
                content_type,
                payload: body,
            })
        }
        kind::HELLO => Frame::Hello {
            takes_pushes: flags & FLAG_TAKES_PUSHES != 0,
            implicit_credit: flags & FLAG_IMPLICIT_CREDIT != 0,
            releases_credit: flags & FLAG_RELEASES_CREDIT != 0,
            streams: if flags & FLAG_STREAMS != 0 {
                need(&body, 4, "window")?;
                Some(body.get_u32())
            } else {
                None
            },
            reads_tracestate: flags & FLAG_READS_TRACESTATE != 0,
            reads_headers: flags & headers::FLAG_READS_HEADERS != 0,
        },
        stream::kind::DATA => Frame::Data(Data::decode(id, flags, body)),
        stream::kind::TRAILERS => Frame::Trailers(Trailers::decode(id, flags, body)?),
        stream::kind::RESET => Frame::Reset(Reset::decode(id, flags, body)?),
        stream::kind::WINDOW => {
            need(&body, 4, "increment")?;
            Frame::Window {
                id,
                increment: body.get_u32(),
            }
        }
        other => return Err(FrameError::UnknownKind(other)),
    };
    Ok(Some(frame))
}

/// `tokio_util` codec for [`Frame`]s with a frame-size limit.
#[derive(Clone, Copy, Debug)]
pub struct FrameCodec {
    max: usize,
}

impl FrameCodec {
    /// A codec that rejects frames larger than `max` bytes.
    pub fn new(max: usize) -> Self {
        FrameCodec { max }
    }
}

impl Default for FrameCodec {
    fn default() -> Self {
        FrameCodec::new(DEFAULT_MAX_FRAME)
    }
}

impl tokio_util::codec::Decoder for FrameCodec {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        decode(src, self.max).map_err(Into::into)
    }
}

impl tokio_util::codec::Encoder<Frame> for FrameCodec {
    type Error = std::io::Error;

    /// Frames over the limit are refused here too, so the peer never gets one it must refuse.
    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), std::io::Error> {
        check(&frame, self.max)?;
        encode(&frame, dst).map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_and_its_data_written_in_turn_are_the_whole_frame() {
        let data = Frame::Data(crate::stream::Data {
            id: 9,
            end: true,
            returns_credit: true,
            data: Bytes::from_static(b"a body, not copied"),
        });
        let mut whole = BytesMut::new();
        encode(&data, &mut whole).expect("encodes");
        let mut split = BytesMut::new();
        let rest = encode_head(data, &mut split).expect("encodes");
        split.extend_from_slice(&rest.expect("DATA hands its bytes back"));
        assert_eq!(split, whole);
        // Any other frame is encoded whole.
        let mut other = BytesMut::new();
        let ping = Frame::Ping { nonce: 3 };
        assert_eq!(
            encode_head(ping.clone(), &mut other).expect("encodes"),
            None
        );
        let mut want = BytesMut::new();
        encode(&ping, &mut want).expect("encodes");
        assert_eq!(other, want);
    }

    #[test]
    fn the_crds_cap_events_at_what_a_frame_carries() {
        assert_eq!(
            usize::try_from(switchyard_crds::router::MAX_EVENT_BYTES).ok(),
            Some(MAX_PAYLOAD)
        );
    }

    fn roundtrip(f: Frame) {
        let mut buf = BytesMut::new();
        encode(&f, &mut buf).expect("encodes");
        let len = buf.len();
        // Every strict prefix is "not yet", never an error or a wrong frame.
        for cut in 0..len {
            let mut part = BytesMut::from(&buf[..cut]);
            assert_eq!(
                decode(&mut part, DEFAULT_MAX_FRAME),
                Ok(None),
                "prefix {cut} of {f:?}"
            );
        }
        assert_eq!(decode(&mut buf, DEFAULT_MAX_FRAME), Ok(Some(f)));
        assert!(buf.is_empty());
    }

    fn request(payload: &[u8]) -> Frame {
        Frame::Request(Request {
            headers: Vec::new(),
            id: 7,
            flags: FLAG_NO_REPLY,
            deadline_ms: 30_000,
            event: "orders.create".into(),
            ce_id: "abc".into(),
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
            tracestate: String::new(),
            content_type: "application/json".into(),
            payload: Bytes::copy_from_slice(payload),
        })
    }

    #[test]
    fn heads_with_headers_roundtrip_and_without_them_keep_the_older_bytes() {
        let plain = request(b"{}");
        let Frame::Request(r) = plain.clone() else {
            unreachable!()
        };
        let mut old = BytesMut::new();
        encode(&plain, &mut old).expect("encodes");
        assert_eq!(old[5] & headers::FLAG_HEADERS, 0, "no flag without headers");
        let with = Frame::Request(Request {
            headers: vec![("range".into(), "bytes=0-9".into())],
            ..r
        });
        roundtrip(with.clone());
        let mut new = BytesMut::new();
        encode(&with, &mut new).expect("encodes");
        assert_eq!(new[5] & headers::FLAG_HEADERS, headers::FLAG_HEADERS);
        assert_eq!(new.len(), old.len() + 1 + 1 + 5 + 2 + 9);
        roundtrip(Frame::Response(Response {
            id: 3,
            status: 206,
            queue_us: 1,
            app_us: 2,
            content_type: "application/octet-stream".into(),
            headers: vec![
                ("content-range".into(), "bytes 0-9/100".into()),
                ("content-length".into(), "10".into()),
            ],
            payload: Bytes::from_static(b"0123456789"),
            returns_credit: true,
            from_mesh: false,
            more: true,
        }));
        roundtrip(Frame::Hello {
            takes_pushes: true,
            implicit_credit: true,
            releases_credit: true,
            streams: Some(65_536),
            reads_tracestate: true,
            reads_headers: true,
        });
    }

    #[test]
    fn every_kind_roundtrips() {
        roundtrip(request(b"{\"value\":1}"));
        roundtrip(request(b""));
        roundtrip(Frame::Response(Response {
            headers: Vec::new(),
            id: u64::MAX,
            status: 503,
            queue_us: 12,
            app_us: 345,
            content_type: "text/plain".into(),
            payload: Bytes::from_static(b"busy"),
            returns_credit: false,
            from_mesh: true,
            more: false,
        }));
        roundtrip(Frame::Response(Response {
            headers: Vec::new(),
            id: 1,
            status: 200,
            queue_us: 0,
            app_us: 1,
            content_type: String::new(),
            payload: Bytes::new(),
            returns_credit: true,
            from_mesh: false,
            more: false,
        }));
        roundtrip(Frame::Cancel { id: 3 });
        roundtrip(Frame::Credit { credits: 64 });
        roundtrip(Frame::Reclaim { credits: 12 });
        roundtrip(Frame::Release { credits: 0 });
        roundtrip(Frame::Ping { nonce: 9 });
        roundtrip(Frame::Pong { nonce: 9 });
        roundtrip(Frame::GoAway {
            reason: "draining".into(),
        });
        for bits in 0..32u8 {
            roundtrip(Frame::Hello {
                reads_headers: false,
                takes_pushes: bits & 1 != 0,
                implicit_credit: bits & 2 != 0,
                releases_credit: bits & 4 != 0,
                streams: (bits & 16 != 0).then_some(65_536),
                reads_tracestate: bits & 8 != 0,
            });
        }
        roundtrip(Frame::Push(Push {
            event: "prices.tick".into(),
            traceparent: String::new(),
            tracestate: String::new(),
            content_type: "application/json".into(),
            payload: Bytes::from_static(b"{\"price\":3}"),
        }));
    }

    #[test]
    fn back_to_back_frames_split_cleanly() {
        let mut buf = BytesMut::new();
        encode(&Frame::Ping { nonce: 1 }, &mut buf).expect("a");
        encode(&request(b"x"), &mut buf).expect("b");
        assert_eq!(
            decode(&mut buf, DEFAULT_MAX_FRAME),
            Ok(Some(Frame::Ping { nonce: 1 }))
        );
        assert_eq!(decode(&mut buf, DEFAULT_MAX_FRAME), Ok(Some(request(b"x"))));
        assert_eq!(decode(&mut buf, DEFAULT_MAX_FRAME), Ok(None));
    }

    #[test]
    fn oversize_and_garbage_are_errors_not_panics() {
        let mut big = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            decode(&mut big, 1024),
            Err(FrameError::TooLarge { .. })
        ));
        let mut unknown = BytesMut::from(&[0, 0, 0, 10, 99, 0, 0, 0, 0, 0, 0, 0, 0, 0][..]);
        assert_eq!(decode(&mut unknown, 1024), Err(FrameError::UnknownKind(99)));
        let mut short = BytesMut::from(&[0, 0, 0, 11, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..]);
        assert_eq!(
            decode(&mut short, 1024),
            Err(FrameError::Truncated("deadline"))
        );
        let mut tiny = BytesMut::from(&[0, 0, 0, 2, 1, 0][..]);
        assert_eq!(
            decode(&mut tiny, 1024),
            Err(FrameError::Truncated("header"))
        );
    }

    fn response(returns_credit: bool) -> Frame {
        Frame::Response(Response {
            headers: Vec::new(),
            id: 4,
            status: 200,
            queue_us: 0,
            app_us: 0,
            content_type: String::new(),
            payload: Bytes::new(),
            returns_credit,
            from_mesh: false,
            more: false,
        })
    }

    #[test]
    fn credit_comes_back_by_credit_frames_and_flagged_answers_only() {
        assert_eq!(Frame::Credit { credits: 5 }.credits_returned(), 5);
        assert_eq!(response(true).credits_returned(), 1);
        assert_eq!(response(false).credits_returned(), 0);
        assert_eq!(Frame::Cancel { id: 4 }.credits_returned(), 0);
        assert_eq!(request(b"").credits_returned(), 0);
    }

    #[test]
    fn old_peers_interoperate_on_the_credit_flags() {
        // An old manager writes flags 0 on a RESPONSE: no implicit credit, its CREDIT frame counts.
        let mut buf = BytesMut::new();
        encode(&response(false), &mut buf).expect("encodes");
        assert_eq!(buf[5], 0, "flags byte of an answer without credit");
        // An old router's HELLO (bit 0 only) does not ask for implicit credit.
        let mut hello =
            BytesMut::from(&[0, 0, 0, 10, 9, FLAG_TAKES_PUSHES, 0, 0, 0, 0, 0, 0, 0, 0][..]);
        assert_eq!(
            decode(&mut hello, 1024),
            Ok(Some(Frame::Hello {
                reads_headers: false,
                takes_pushes: true,
                implicit_credit: false,
                releases_credit: false,
                streams: None,
                reads_tracestate: false,
            }))
        );
        // An old router ignores RESPONSE flags, which is why a manager sets the bit only after the
        // router's HELLO asked for it.
        let mut flagged = BytesMut::new();
        encode(&response(true), &mut flagged).expect("encodes");
        assert_eq!(flagged[5], FLAG_RETURNS_CREDIT);
    }

    #[test]
    fn mesh_answers_carry_their_own_bit_beside_the_credit_bit() {
        let mut both = response(true);
        if let Frame::Response(r) = &mut both {
            r.from_mesh = true;
        }
        let mut buf = BytesMut::new();
        encode(&both, &mut buf).expect("encodes");
        assert_eq!(buf[5], FLAG_RETURNS_CREDIT | FLAG_FROM_MESH);
        assert_eq!(decode(&mut buf, 1024), Ok(Some(both)));
        // An answer from an older manager (flags 0) is the app's.
        let mut old = BytesMut::new();
        encode(&response(false), &mut old).expect("encodes");
        match decode(&mut old, 1024) {
            Ok(Some(Frame::Response(r))) => assert!(!r.from_mesh),
            other => panic!("not a response: {other:?}"),
        }
    }

    #[test]
    fn long_header_fields_are_refused_on_encode() {
        let Frame::Request(mut r) = request(b"") else {
            unreachable!()
        };
        r.event = "e".repeat(256);
        assert_eq!(
            encode(&Frame::Request(r), &mut BytesMut::new()),
            Err(FrameError::FieldTooLong("event"))
        );
    }

    #[test]
    fn check_agrees_with_encode_and_a_failed_encode_leaves_nothing() {
        let frames = [
            request(b"{}"),
            Frame::Response(Response {
                headers: Vec::new(),
                id: 3,
                status: 200,
                queue_us: 1,
                app_us: 2,
                content_type: "application/json".into(),
                payload: Bytes::from_static(b"{}"),
                returns_credit: true,
                from_mesh: false,
                more: false,
            }),
            Frame::GoAway {
                reason: "bye".into(),
            },
            Frame::Credit { credits: 5 },
            Frame::Reclaim { credits: 3 },
            Frame::Release { credits: 0 },
            Frame::Ping { nonce: 1 },
            Frame::Cancel { id: 1 },
            Frame::Hello {
                reads_headers: false,
                takes_pushes: true,
                implicit_credit: true,
                releases_credit: true,
                streams: Some(65_536),
                reads_tracestate: true,
            },
        ];
        for f in frames {
            let mut buf = BytesMut::new();
            encode(&f, &mut buf).expect("encodes");
            let len = buf.len() - 4;
            assert_eq!(check(&f, len), Ok(()), "{f:?}");
            assert!(
                matches!(check(&f, len - 1), Err(FrameError::TooLarge { .. })),
                "{f:?} one byte over"
            );
        }
        let Frame::Request(mut r) = request(b"{}") else {
            unreachable!()
        };
        r.content_type = "x".repeat(256);
        let long = Frame::Request(r);
        assert_eq!(
            check(&long, DEFAULT_MAX_FRAME),
            Err(FrameError::FieldTooLong("content_type"))
        );
        let mut buf = BytesMut::from(&b"kept"[..]);
        assert!(encode(&long, &mut buf).is_err());
        assert_eq!(&buf[..], b"kept", "nothing half-written");
        // The largest payload the edge may admit always fits.
        let Frame::Request(mut r) = request(b"") else {
            unreachable!()
        };
        r.payload = Bytes::from(vec![b'x'; max_payload(4096)]);
        r.event = "e".repeat(255);
        r.ce_id = "c".repeat(255);
        r.traceparent = "t".repeat(255);
        r.tracestate = format!("a={},b={}", "x".repeat(254), "y".repeat(253));
        r.content_type = "j".repeat(255);
        assert_eq!(check(&Frame::Request(r), 4096), Ok(()));
    }
}
