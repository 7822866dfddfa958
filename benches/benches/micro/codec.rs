//! The frame codec: encode and decode of a REQUEST for empty, 1 KB, 100 KB and 1 MB payloads.

use bytes::{Bytes, BytesMut};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use std::hint::black_box;
use switchyard_protocol::frame::{DEFAULT_MAX_FRAME, Frame, Request, decode, encode};

fn request(size: usize) -> Frame {
    Frame::Request(Request {
        headers: Vec::new(),
        id: 42,
        flags: 0,
        deadline_ms: 30_000,
        event: "orders.created".to_owned(),
        ce_id: "7f2c9a4e-1b3d-4c5e-8f6a-0b1c2d3e4f50".to_owned(),
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned(),
        tracestate: String::new(),
        content_type: "application/json".to_owned(),
        payload: Bytes::from(vec![b'x'; size]),
    })
}

const SIZES: [(&str, usize); 4] = [
    ("empty", 0),
    ("1KB", 1024),
    ("100KB", 100 * 1024),
    ("1MB", 1024 * 1024),
];

fn codec(c: &mut Criterion) {
    let mut g = c.benchmark_group("frame");
    for (name, size) in SIZES {
        let frame = request(size);
        g.throughput(Throughput::Bytes(size.max(1) as u64));
        let mut buf = BytesMut::with_capacity(size + 256);
        g.bench_with_input(BenchmarkId::new("encode", name), &frame, |b, f| {
            b.iter(|| {
                buf.clear();
                encode(black_box(f), &mut buf).expect("encodes");
                black_box(buf.len())
            })
        });
        let mut wire = BytesMut::new();
        encode(&frame, &mut wire).expect("encodes");
        let wire = wire.freeze();
        g.bench_with_input(BenchmarkId::new("decode", name), &wire, |b, w| {
            b.iter(|| {
                // Decoding splits the frame off the buffer, as the connection's read buffer does.
                let mut src = BytesMut::from(&w[..]);
                black_box(decode(&mut src, DEFAULT_MAX_FRAME).expect("decodes"))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, codec);
