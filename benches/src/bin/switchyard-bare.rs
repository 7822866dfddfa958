//! The baselines Switchyard is measured against, each the least a server of that protocol can do:
//! `http` (bare hyper: `{"ok":true}`, or `n` bytes on `/bytes?n=N`), `ws` (a raw tokio-tungstenite echo)
//! and `grpc` (raw tonic serving `switchyard.v1.Gateway` with a fixed reply, so the same client drives
//! it and the router), and `frames` (the receiving end of the inter-sidecar frame bench).

#![forbid(unsafe_code)]

use clap::{Parser, ValueEnum};
use switchyard_benches::bare;
use tokio::net::TcpListener;

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    Http,
    Ws,
    Grpc,
    Frames,
}

#[derive(Parser)]
#[command(
    name = "switchyard-bare",
    about = "Baseline servers for the benchmarks: bare hyper, raw WebSocket echo, raw tonic Gateway"
)]
struct Args {
    /// Port on 127.0.0.1.
    #[arg(long, default_value_t = 18080)]
    port: u16,
    /// Which server.
    #[arg(long, value_enum, default_value_t = Mode::Http)]
    mode: Mode,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = TcpListener::bind(("127.0.0.1", args.port)).await?;
    match args.mode {
        Mode::Http => bare::http::serve(listener).await,
        Mode::Ws => bare::ws::serve(listener).await,
        Mode::Grpc => bare::grpc::serve(listener).await?,
        Mode::Frames => switchyard_benches::load::frames::serve(listener).await,
    }
    Ok(())
}
