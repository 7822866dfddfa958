//! PROTOTYPE: the router side of a measurement: closed-loop workers sharing one connection to the
//! manager (as a router's requests share its pod-pair connection), each sending the scenario's request
//! and reading the whole answer, counted only when it is complete and right.

use super::body::{self, Chunks};
use super::frames::client::{self as fc, Call};
use super::{EMPTY_EVENT, Proto, Scenario, Settings, ce_id, h2, traceparent};
use crate::load::{Tally, Window, run_workers};
use crate::report::{Measured, Summary};
use bytes::Bytes;
use http_body_util::BodyExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// The router's deadline on each request.
const DEADLINE_MS: u32 = 30_000;

/// One measurement's parameters.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Which hop.
    pub proto: Proto,
    /// The manager's address.
    pub addr: String,
    /// What each request does.
    pub scenario: Scenario,
    /// Body size of uploads and downloads.
    pub bytes: usize,
    /// Workers (requests in flight).
    pub concurrency: usize,
    /// Unrecorded start.
    pub warmup: Duration,
    /// Measured time.
    pub duration: Duration,
    /// Windows, frame size, credits, chunk size.
    pub settings: Settings,
}

/// What a request moved, for the check that it was complete.
fn expected(plan: &Plan) -> (usize, usize) {
    match plan.scenario {
        Scenario::Noop => (0, super::NOOP_ANSWER.len()),
        Scenario::Upload => (plan.bytes, 0),
        Scenario::Download => (0, plan.bytes),
    }
}

fn upload_body(plan: &Plan) -> Option<Chunks> {
    match plan.scenario {
        Scenario::Upload => Some(Chunks::new(
            body::chunks(plan.bytes, plan.settings.chunk),
            None,
        )),
        _ => None,
    }
}

fn inline(plan: &Plan) -> Bytes {
    match plan.scenario {
        Scenario::Noop => Bytes::from_static(EMPTY_EVENT),
        Scenario::Upload => Bytes::new(),
        Scenario::Download => Bytes::from(plan.bytes.to_string()),
    }
}

async fn frames_once(conn: &Arc<fc::Conn>, plan: &Plan, n: u64) -> bool {
    let call = Call {
        event: plan.scenario.event().to_owned(),
        ce_id: ce_id(n),
        traceparent: traceparent(n),
        content_type: "application/json".to_owned(),
        deadline_ms: DEADLINE_MS,
        inline: inline(plan),
        stream: upload_body(plan),
    };
    let Ok(reply) = conn.call(call).await else {
        return false;
    };
    if reply.head.status != 200 {
        return false;
    }
    let mut got = Got::default();
    got.add(plan, &reply.head.payload);
    if let Some(mut body) = reply.body {
        while let Some(chunk) = body.chunk().await {
            match chunk {
                Ok(c) => got.add(plan, &c),
                Err(_) => return false,
            }
        }
        if plan.scenario == Scenario::Download && body.trailers().is_empty() {
            return false;
        }
    }
    check(plan, got)
}

/// What an answer's body brought: its length, and the body itself when it is a small one.
#[derive(Default)]
struct Got {
    len: usize,
    small: Vec<u8>,
}

impl Got {
    fn add(&mut self, plan: &Plan, b: &[u8]) {
        self.len += b.len();
        if plan.scenario != Scenario::Download && self.small.len() + b.len() <= 64 {
            self.small.extend_from_slice(b);
        }
    }
}

/// Whether the answer is complete and right: the noop answer, the upload's byte count, or every byte
/// of the download.
fn check(plan: &Plan, got: Got) -> bool {
    match plan.scenario {
        Scenario::Noop => got.small == super::NOOP_ANSWER,
        Scenario::Upload => got.small == format!("{{\"bytes\":{}}}", plan.bytes).as_bytes(),
        Scenario::Download => got.len == plan.bytes,
    }
}

async fn h2_once(sender: &mut h2::Sender, uri: &hyper::Uri, plan: &Plan, n: u64) -> bool {
    let body = upload_body(plan).unwrap_or_else(|| Chunks::full(inline(plan)));
    let Ok(req) = h2::request(uri, &ce_id(n), &traceparent(n), DEADLINE_MS, body) else {
        return false;
    };
    let Ok(resp) = sender.send_request(req).await else {
        return false;
    };
    if resp.status() != 200 {
        return false;
    }
    let _timing = h2::timing(&resp);
    let mut body = resp.into_body();
    let mut got = Got::default();
    let mut trailers = false;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => match f.into_data() {
                Ok(d) => got.add(plan, &d),
                Err(f) => trailers |= f.is_trailers(),
            },
            Err(_) => return false,
        }
    }
    if plan.scenario == Scenario::Download && !trailers {
        return false;
    }
    check(plan, got)
}

/// Runs the plan and summarizes it, with the bytes moved per second in `extra.mb_per_s`.
pub async fn run(plan: Plan) -> anyhow::Result<Summary> {
    let w = Window::new(plan.warmup, plan.duration);
    let plan = Arc::new(plan);
    // Every answer, warm-up included, for the CPU cost per request.
    let total = Arc::new(AtomicU64::new(0));
    let measured: Measured = match plan.proto {
        Proto::Frames => {
            let conn = fc::connect(&plan.addr, plan.settings).await?;
            run_workers(plan.concurrency, w, |i| {
                let (conn, plan, total) = (conn.clone(), plan.clone(), total.clone());
                async move {
                    let mut tally = Tally::new();
                    let mut n = (i as u64) << 40;
                    while Instant::now() < w.end {
                        n += 1;
                        let sent = Instant::now();
                        let ok = frames_once(&conn, &plan, n).await;
                        total.fetch_add(u64::from(ok), Ordering::Relaxed);
                        tally.count(&w, sent, ok);
                    }
                    tally
                }
            })
            .await
        }
        Proto::H2 => {
            let sender = h2::connect(&plan.addr, plan.settings).await?;
            let uri: hyper::Uri = format!("http://manager/{}", plan.scenario.event()).parse()?;
            run_workers(plan.concurrency, w, |i| {
                let (mut sender, plan, uri, total) =
                    (sender.clone(), plan.clone(), uri.clone(), total.clone());
                async move {
                    let mut tally = Tally::new();
                    let mut n = (i as u64) << 40;
                    while Instant::now() < w.end {
                        n += 1;
                        let sent = Instant::now();
                        let ok = h2_once(&mut sender, &uri, &plan, n).await;
                        total.fetch_add(u64::from(ok), Ordering::Relaxed);
                        tally.count(&w, sent, ok);
                    }
                    tally
                }
            })
            .await
        }
    };
    let mut s = Summary::new(
        &format!("hop-{}", plan.proto.name()),
        &plan.addr,
        plan.concurrency,
        None,
        &measured,
    );
    let (up, down) = expected(&plan);
    s.extra
        .insert("mb_per_s".into(), s.rps * (up + down) as f64 / 1_048_576.0);
    s.extra.insert(
        "total_requests".into(),
        total.load(Ordering::Relaxed) as f64,
    );
    if let Some(me) = crate::procs::read(std::process::id()) {
        s.extra.insert("client_cpu_s".into(), me.cpu_s);
        s.extra.insert("client_peak_rss_mb".into(), me.peak_rss_mb);
    }
    Ok(s)
}
