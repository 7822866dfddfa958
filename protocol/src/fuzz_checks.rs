//! Properties of the frame codec on arbitrary bytes, shared by the cargo-fuzz target
//! (`fuzz/fuzz_targets/frame_decode.rs`) and the randomized unit test below, so `cargo test` exercises the
//! same checks on every run.

use crate::frame::{Frame, decode, encode};
use bytes::BytesMut;

/// Frame limit used while fuzzing: small, so the too-large path is reached too.
const MAX: usize = 64 * 1024;

/// Decodes every frame in `data`. Must never panic; every decoded frame must re-encode to bytes that
/// decode to the same frame; an error must consume nothing it did not report. Credit accounting: only
/// a CREDIT frame or an answer (or a stream's last frame) flagged as returning its credit gives
/// credit back, an answer at most one, and the count survives re-encoding (a flag bit cannot appear
/// or vanish on the way).
pub fn frame_decode(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    loop {
        let before = buf.len();
        match decode(&mut buf, MAX) {
            Ok(None) => {
                assert_eq!(buf.len(), before, "an incomplete frame consumes nothing");
                return;
            }
            Err(_) => return,
            Ok(Some(frame)) => {
                assert!(buf.len() < before, "a decoded frame consumes bytes");
                credit_rule(&frame);
                roundtrip(&frame);
            }
        }
    }
}

fn credit_rule(frame: &Frame) {
    match frame {
        Frame::Credit { credits } => assert_eq!(frame.credits_returned(), *credits),
        Frame::Response(r) => assert_eq!(frame.credits_returned(), u32::from(r.returns_credit)),
        Frame::Data(d) => {
            // Only a stream's last frame carries its credit.
            assert!(d.end || !d.returns_credit, "{d:?}");
            assert_eq!(frame.credits_returned(), u32::from(d.returns_credit));
        }
        Frame::Trailers(t) => assert_eq!(frame.credits_returned(), u32::from(t.returns_credit)),
        Frame::Reset(r) => assert_eq!(frame.credits_returned(), u32::from(r.returns_credit)),
        other => assert_eq!(other.credits_returned(), 0, "{other:?} returns no credit"),
    }
}

fn roundtrip(frame: &Frame) {
    let mut out = BytesMut::new();
    // A decoded frame can always be encoded: its strings came from str8 fields.
    if let Err(e) = encode(frame, &mut out) {
        panic!("decoded frame does not re-encode: {e}: {frame:?}");
    }
    match decode(&mut out, usize::MAX) {
        Ok(Some(again)) => {
            assert_eq!(again.credits_returned(), frame.credits_returned());
            assert_eq!(&again, frame);
        }
        other => panic!("re-encoded frame does not decode: {other:?}"),
    }
    assert!(out.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{Push, Request, Response};
    use crate::stream::{Data, Reset, Trailers};
    use bytes::Bytes;

    fn seeds() -> Vec<Vec<u8>> {
        let frames = [
            Frame::Request(Request {
                headers: Vec::new(),
                id: 1,
                flags: 1,
                deadline_ms: 5,
                event: "e".into(),
                ce_id: "c".into(),
                traceparent: "t".into(),
                tracestate: "a=1,b@c=d".into(),
                content_type: "application/json".into(),
                payload: Bytes::from_static(b"{}"),
            }),
            Frame::Response(Response {
                headers: Vec::new(),
                id: 2,
                status: 200,
                queue_us: 1,
                app_us: 2,
                content_type: "x".into(),
                payload: Bytes::from_static(b"ok"),
                returns_credit: true,
                from_mesh: true,
                more: false,
            }),
            Frame::Cancel { id: 3 },
            Frame::Credit { credits: 4 },
            Frame::Ping { nonce: 5 },
            Frame::Pong { nonce: 6 },
            Frame::GoAway { reason: "r".into() },
            Frame::Reclaim { credits: 7 },
            Frame::Release { credits: 2 },
            Frame::Hello {
                reads_headers: false,
                takes_pushes: true,
                implicit_credit: true,
                releases_credit: true,
                streams: None,
                reads_tracestate: true,
            },
            Frame::Push(Push {
                event: "p".into(),
                traceparent: String::new(),
                tracestate: String::new(),
                content_type: "application/json".into(),
                payload: Bytes::from_static(b"[1]"),
            }),
            Frame::Hello {
                reads_headers: false,
                takes_pushes: false,
                implicit_credit: true,
                releases_credit: false,
                streams: Some(65536),
                reads_tracestate: true,
            },
            Frame::Data(Data {
                id: 8,
                end: true,
                returns_credit: true,
                data: Bytes::from_static(b"data: 1\n\n"),
            }),
            Frame::Trailers(Trailers {
                id: 9,
                queue_us: 1,
                app_us: 2,
                fields: vec![("k".into(), "v".into())],
                returns_credit: true,
            }),
            Frame::Reset(Reset {
                id: 10,
                code: 3,
                returns_credit: false,
            }),
            Frame::Window {
                id: 11,
                increment: 4096,
            },
        ];
        frames
            .iter()
            .map(|f| {
                let mut b = BytesMut::new();
                encode(f, &mut b).expect("seed encodes");
                b.to_vec()
            })
            .collect()
    }

    /// Mutations of valid frames (bit flips, truncation, splicing) reach far more of the decoder than
    /// uniform noise; the seed is fixed so a failure reproduces.
    #[test]
    fn mutated_frames_never_break_the_codec() {
        let seeds = seeds();
        let mut rng = fastrand::Rng::with_seed(0x5717c4);
        for seed in &seeds {
            frame_decode(seed);
        }
        for _ in 0..20_000 {
            let mut data = seeds[rng.usize(..seeds.len())].clone();
            if rng.bool() {
                data.extend_from_slice(&seeds[rng.usize(..seeds.len())]);
            }
            for _ in 0..rng.usize(1..4) {
                match rng.u8(..4) {
                    0 if !data.is_empty() => {
                        let i = rng.usize(..data.len());
                        data[i] ^= 1 << rng.u8(..8);
                    }
                    1 if !data.is_empty() => {
                        let i = rng.usize(..data.len());
                        data[i] = rng.u8(..);
                    }
                    2 => data.truncate(rng.usize(..=data.len())),
                    _ => data.push(rng.u8(..)),
                }
            }
            frame_decode(&data);
        }
        for _ in 0..2_000 {
            let len = rng.usize(..64);
            let noise: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            frame_decode(&noise);
        }
    }
}
