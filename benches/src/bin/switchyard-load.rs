//! The load generator: closed-loop or open-loop HTTP/1.1 (optionally a new connection per request),
//! HTTP/1.1 through wrk, WebSocket round trips, gRPC unary calls and `Connect` streams, inter-sidecar
//! frames, and the core routing loop in process; prints one JSON summary (req/s, p50, p90, p99, max,
//! errors).

#![forbid(unsafe_code)]

use anyhow::bail;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use switchyard_benches::load::{
    Window, frames, grpc, grpc_stream, http, jetstream, run_workers, wrk, ws,
};
use switchyard_benches::report::{self, Measured, Summary};
use switchyard_benches::routing::{Loop, quickstart_table};

#[derive(Parser)]
#[command(
    name = "switchyard-load",
    about = "Load generator for Switchyard's benchmarks"
)]
struct Args {
    #[command(subcommand)]
    mode: Mode,
    /// Connections, one per worker.
    #[arg(short = 'c', long, default_value_t = 32, global = true)]
    concurrency: usize,
    /// Measured time, e.g. `10s`.
    #[arg(short = 'd', long, default_value = "10s", value_parser = humantime::parse_duration, global = true)]
    duration: Duration,
    /// Time before measuring, e.g. `1s`.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration, global = true)]
    warmup: Duration,
    /// Runtime threads of the generator (1 keeps it on one core, like `wrk -t1`).
    #[arg(long, default_value_t = 1, global = true)]
    threads: usize,
    /// Labels copied into the JSON, so the report knows what the run was: section, system, variant.
    #[arg(long, global = true)]
    section: Option<String>,
    #[arg(long, global = true)]
    system: Option<String>,
    #[arg(long, global = true)]
    variant: Option<String>,
    /// The round of an interleaved run, copied into the JSON (the report takes the median of the rounds).
    #[arg(long, global = true)]
    round: Option<u32>,
}

#[derive(Subcommand)]
enum Mode {
    /// HTTP/1.1 GETs on kept-alive connections; closed loop, or open loop with `--rate`.
    Http {
        /// `http://host:port/path`.
        url: String,
        /// Requests per second in total (open loop); without it, closed loop.
        #[arg(long)]
        rate: Option<f64>,
        /// A new connection for every request (closed loop only): connection churn.
        #[arg(long)]
        churn: bool,
        /// Request method.
        #[arg(long, default_value = "GET")]
        method: String,
        /// An extra request header, `Name: value` (repeatable).
        #[arg(short = 'H', long = "header")]
        headers: Vec<String>,
        /// Request body, sent with every request.
        #[arg(long)]
        body: Option<String>,
    },
    /// HTTP/1.1 load from wrk (`wrk -t THREADS -c CONCURRENCY`, kept-alive connections, closed loop): a
    /// warm-up run, then the measured one, summarized like the other modes.
    Wrk {
        /// `http://host:port/path`.
        url: String,
        /// Request method.
        #[arg(long, default_value = "GET")]
        method: String,
        /// An extra request header, `Name: value` (repeatable).
        #[arg(short = 'H', long = "header")]
        headers: Vec<String>,
        /// Request body, sent with every request.
        #[arg(long)]
        body: Option<String>,
        /// The wrk program.
        #[arg(long, default_value = "wrk")]
        wrk: PathBuf,
        /// A request slower than this counts as an error.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// WebSocket round trips with the router's `{"command": ..., "id": N}` protocol.
    Ws {
        /// `ws://host:port/ws`.
        url: String,
        /// The command to send.
        #[arg(long, default_value = "noop")]
        command: String,
    },
    /// gRPC unary calls to `switchyard.v1.Gateway/Call`.
    Grpc {
        /// `http://host:port`.
        addr: String,
        /// The gRPC route's method.
        #[arg(long, default_value = "noop")]
        method: String,
    },
    /// gRPC streaming: one `switchyard.v1.Gateway/Connect` stream per worker, one request in flight on each.
    GrpcStream {
        /// `http://host:port`.
        addr: String,
        /// The gRPC route's method.
        #[arg(long, default_value = "noop")]
        method: String,
    },
    /// Fire-and-forget frames to `switchyard-bare --mode frames` as fast as the socket takes them; reports
    /// delivered frames/s and the loss count (one connection; `-c` is ignored).
    FramesFire {
        /// `host:port` of the receiver.
        addr: String,
        /// Payload bytes per frame.
        #[arg(long, default_value_t = 64)]
        payload: usize,
    },
    /// REQUEST/RESPONSE frame round trips to `switchyard-bare --mode frames`, one in flight per connection.
    FramesRtt {
        /// `host:port` of the receiver.
        addr: String,
        /// Payload bytes per frame.
        #[arg(long, default_value_t = 64)]
        payload: usize,
    },
    /// JetStream publishes with nothing in between: `-c` in flight on one connection, each awaiting its
    /// PubAck, into a stream set up as the sidecars set theirs up (emptied first, deleted after; or a
    /// Manager's, waited on after until its consumer took everything); reports publishes/s.
    Jetstream {
        /// `nats://host:port`.
        url: String,
        /// Payload of every publish.
        #[arg(long, default_value = "{}")]
        payload: String,
        /// Event type (names the subject).
        #[arg(long, default_value = "echo")]
        event: String,
        /// `NAMESPACE/MANAGER`: publish into that Manager's existing stream (its consumers running)
        /// instead of the bench's own.
        #[arg(long)]
        into: Option<String>,
    },
    /// The core routing loop in this process (route lookup, admission, REQUEST frame to a manager task over an
    /// in-memory pipe, RESPONSE back), `-c` events in flight; reports events/s. Ignores `--threads` (one thread).
    Core,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.concurrency == 0 || args.threads == 0 {
        bail!("--concurrency and --threads must be at least 1");
    }
    let mut summary = match &args.mode {
        Mode::Wrk {
            url,
            method,
            headers,
            body,
            wrk: program,
            timeout,
        } => {
            // Refuse what wrk would misread before starting it.
            http::Target::parse(url)?.with(method, headers)?;
            wrk::run(&wrk::Options {
                program: program.clone(),
                url: url.clone(),
                concurrency: args.concurrency,
                threads: args.threads,
                duration: args.duration,
                warmup: args.warmup,
                method: method.clone(),
                headers: headers.clone(),
                body: body.clone().unwrap_or_default(),
                timeout: *timeout,
            })?
        }
        _ => {
            let mut s = in_process(&args)?;
            s.generator = Some(format!("switchyard-load -t{}", args.threads));
            s
        }
    };
    summary.section = args.section.clone();
    summary.system = args.system.clone();
    summary.variant = args.variant.clone();
    summary.round = args.round;
    println!("{}", serde_json::to_string_pretty(&summary)?);
    Ok(())
}

/// The modes this process drives itself, on a runtime of `--threads` threads.
fn in_process(args: &Args) -> anyhow::Result<Summary> {
    let rt = match args.mode {
        Mode::Core => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        _ => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?,
    };
    rt.block_on(run(args))
}

async fn run(args: &Args) -> anyhow::Result<Summary> {
    let n = args.concurrency;
    let w = Window::new(args.warmup, args.duration);
    Ok(match &args.mode {
        Mode::Http {
            url,
            rate: None,
            churn,
            method,
            headers,
            body,
        } => {
            let t = http::Target::parse(url)?
                .with(method, headers)?
                .with_body(body.as_deref());
            let m = run_workers(n, w, |_| http::closed_worker(t.clone(), w, *churn)).await;
            Summary::new(if *churn { "http-churn" } else { "http" }, url, n, None, &m)
        }
        Mode::Http {
            url,
            rate: Some(rate),
            churn,
            method,
            headers,
            body,
        } => {
            if *churn {
                bail!("--churn is for the closed loop; drop --rate");
            }
            if !(rate.is_finite() && *rate > 0.0) {
                bail!("--rate must be a positive number of requests per second");
            }
            let t = http::Target::parse(url)?
                .with(method, headers)?
                .with_body(body.as_deref());
            let m = run_workers(n, w, |i| http::open_worker(t.clone(), w, *rate, i, n)).await;
            Summary::new("http-open", url, n, Some(*rate), &m)
        }
        Mode::Ws { url, command } => {
            let m = run_workers(n, w, |_| ws::worker(url.clone(), command.clone(), w)).await;
            Summary::new("ws", url, n, None, &m)
        }
        Mode::Grpc { addr, method } => {
            let m = run_workers(n, w, |_| grpc::worker(addr.clone(), method.clone(), w)).await;
            Summary::new("grpc", addr, n, None, &m)
        }
        Mode::GrpcStream { addr, method } => {
            let m = run_workers(n, w, |_| {
                grpc_stream::worker(addr.clone(), method.clone(), w)
            })
            .await;
            Summary::new("grpc-stream", addr, n, None, &m)
        }
        Mode::FramesFire { addr, payload } => {
            let f = frames::fire(addr, w, *payload).await?;
            let m = Measured {
                hist: report::histogram(),
                errors: f.lost(),
                elapsed: Duration::from_secs_f64(f.secs),
            };
            let mut s = Summary::new("frames-fire", addr, 1, None, &m);
            s.requests = f.received;
            s.rps = f.rate();
            s.extra.insert("sent".to_owned(), f.sent as f64);
            s.extra.insert("lost".to_owned(), f.lost() as f64);
            s
        }
        Mode::FramesRtt { addr, payload } => {
            let m = run_workers(n, w, |_| frames::rtt_worker(addr.clone(), w, *payload)).await;
            Summary::new("frames-rtt", addr, n, None, &m)
        }
        Mode::Jetstream {
            url,
            payload,
            event,
            into,
        } => {
            let into = match into.as_deref().map(|s| s.split_once('/')) {
                None => None,
                Some(Some((ns, m))) if !ns.is_empty() && !m.is_empty() => Some((ns, m)),
                Some(_) => bail!("--into takes NAMESPACE/MANAGER"),
            };
            // Connected and set up before the window: only publishes are timed.
            let p =
                jetstream::Publisher::start(url, event, payload.clone().into_bytes().into(), into)
                    .await?;
            let w = Window::new(args.warmup, args.duration);
            let m = run_workers(n, w, |i| jetstream::worker(p.clone(), w, i)).await;
            let drained = p.finish().await?;
            let mut s = Summary::new("jetstream", url, n, None, &m);
            s.extra.insert("cleanup_s".to_owned(), drained);
            s
        }
        Mode::Core => core(n, w).await?,
        Mode::Wrk { .. } => bail!("wrk runs as its own process, not on this runtime"),
    })
}

/// Batches of the core loop until the window ends; only batches finishing in the measured window count.
async fn core(window: usize, w: Window) -> anyhow::Result<Summary> {
    const BATCH: usize = 4096;
    let mut lp = Loop::start(quickstart_table()?, window.max(1));
    let mut events = 0u64;
    let mut errors = 0u64;
    let mut began = None;
    loop {
        let now = tokio::time::Instant::now();
        if now >= w.end {
            break;
        }
        let ok = lp.run("/noop", BATCH, window).await?;
        if now >= w.start {
            began.get_or_insert(now);
            events += ok as u64;
            errors += (BATCH - ok) as u64;
        }
    }
    let elapsed = began.map(|b| b.elapsed()).unwrap_or_default();
    let m = Measured {
        hist: report::histogram(),
        errors,
        elapsed,
    };
    let mut s = Summary::new("core", "in-process", window, None, &m);
    s.requests = events;
    s.rps = if elapsed.as_secs_f64() > 0.0 {
        events as f64 / elapsed.as_secs_f64()
    } else {
        0.0
    };
    Ok(s)
}
