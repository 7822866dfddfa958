//! The load generator: closed-loop or open-loop HTTP/1.1, WebSocket round trips and gRPC unary calls
//! at a given concurrency for a given time; prints one JSON summary (req/s, p50, p90, p99, max, errors).

#![forbid(unsafe_code)]

use anyhow::bail;
use clap::{Parser, Subcommand};
use std::time::Duration;
use switchyard_benches::load::{Window, grpc, http, run_workers, ws};
use switchyard_benches::report::Summary;

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
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.concurrency == 0 || args.threads == 0 {
        bail!("--concurrency and --threads must be at least 1");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()?;
    let summary = rt.block_on(run(&args))?;
    println!("{}", serde_json::to_string_pretty(&summary)?);
    Ok(())
}

async fn run(args: &Args) -> anyhow::Result<Summary> {
    let n = args.concurrency;
    let w = Window::new(args.warmup, args.duration);
    Ok(match &args.mode {
        Mode::Http { url, rate: None } => {
            let t = http::Target::parse(url)?;
            let m = run_workers(n, w, |_| http::closed_worker(t.clone(), w)).await;
            Summary::new("http", url, n, None, &m)
        }
        Mode::Http {
            url,
            rate: Some(rate),
        } => {
            if !(rate.is_finite() && *rate > 0.0) {
                bail!("--rate must be a positive number of requests per second");
            }
            let t = http::Target::parse(url)?;
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
    })
}
