//! `switchyard-example-app --port 8000 [--bind 127.0.0.1]` (or `--socket PATH`): the quickstart's
//! handler container.

use clap::Parser;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use switchyard_example_app::listener::Listener;
use tokio::net::TcpListener;

#[derive(Parser)]
#[command(
    name = "switchyard-example-app",
    version,
    about = "CloudEvents handler answering noop, echo and burn (HTTP binary mode or gRPC)"
)]
struct Args {
    /// TCP port to listen on.
    #[arg(long, env = "PORT", default_value_t = 8000)]
    port: u16,
    /// Address to bind; in a pod only the sidecar next to the app calls it, so loopback is enough.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    bind: IpAddr,
    /// Listen on this Unix socket instead of TCP: set (as `SWITCHYARD_APP_SOCKET`) when the Manager's
    /// `app.transport` is `unix`.
    #[arg(long, value_name = "PATH", env = "SWITCHYARD_APP_SOCKET")]
    socket: Option<PathBuf>,
    /// How the manager sidecar delivers events: `http` (CloudEvents binary mode) or `grpc` (the Handler
    /// service); it must match the Manager's `app.protocol`.
    #[arg(long, env = "APP_PROTOCOL", value_enum, default_value_t = Protocol::Http)]
    protocol: Protocol,
    /// Async runtime threads: 1 runs every task on one thread, n > 1 a pool of n, 0 one per CPU. Burns run on
    /// blocking threads either way.
    #[arg(long, env = "SWITCHYARD_RUNTIME_THREADS", default_value_t = 1)]
    runtime_threads: usize,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Protocol {
    Http,
    Grpc,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut builder = if args.runtime_threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if args.runtime_threads > 1 {
            b.worker_threads(args.runtime_threads);
        }
        b
    };
    match builder.enable_all().build() {
        Ok(rt) => rt.block_on(run(args)),
        Err(e) => {
            eprintln!("switchyard-example-app: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> ExitCode {
    let listener = match &args.socket {
        Some(path) => Listener::bind_unix(path)
            .map_err(|e| format!("cannot listen on unix:{}: {e}", path.display())),
        None => {
            let addr = SocketAddr::new(args.bind, args.port);
            TcpListener::bind(addr)
                .await
                .map(Listener::from)
                .map_err(|e| format!("cannot listen on {addr}: {e}"))
        }
    };
    let listener = match listener {
        Ok(l) => l,
        Err(e) => {
            eprintln!("switchyard-example-app: {e}");
            return ExitCode::FAILURE;
        }
    };
    let tracing = match switchyard_example_app::otel::Tracing::from_env() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("switchyard-example-app: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "switchyard-example-app: listening on {}",
        listener.describe()
    );
    let served = match args.protocol {
        Protocol::Http => {
            switchyard_example_app::server::serve_with(listener, shutdown_signal(), tracing.clone())
                .await
                .map_err(|e| e.to_string())
        }
        Protocol::Grpc => {
            switchyard_example_app::grpc::serve_with(listener, shutdown_signal(), tracing.clone())
                .await
                .map_err(|e| e.to_string())
        }
    };
    if let Some(t) = tracing {
        t.shutdown().await;
    }
    match served {
        Ok(()) => {
            eprintln!("switchyard-example-app: stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("switchyard-example-app: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Completes on SIGTERM (the kubelet, `switchyard up`) or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            // Without a SIGTERM handler Ctrl-C still works, and SIGTERM falls back to the default (exit).
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
