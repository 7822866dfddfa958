//! PROTOTYPE (issue 14, item 1), deleted once the router -> manager hop is chosen: the hop as the frame
//! protocol extended with streams and as plain HTTP/2, measured the same way.
//!
//! ```text
//! switchyard-hop-proto serve --proto frames|h2 [--port 0]           # manager side; prints `listening ADDR`
//! switchyard-hop-proto drive --proto frames|h2 --addr ADDR --scenario noop|upload|download -c N
//! switchyard-hop-proto compare [--rounds 5] [--duration 5s]         # both, interleaved, medians
//! ```

#![forbid(unsafe_code)]

use anyhow::bail;
use clap::{Args as ClapArgs, Parser, Subcommand};
use std::io::Write;
use std::time::Duration;
use switchyard_benches::hop::compare::{self, Runner};
use switchyard_benches::hop::{Proto, Scenario, Settings, body, drive, frames, full, h2, relay};
use tokio::net::TcpListener;

#[derive(Parser)]
#[command(
    name = "switchyard-hop-proto",
    about = "Prototype router -> manager hops (streamed frames, HTTP/2) and their comparison"
)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(ClapArgs, Clone)]
struct Knobs {
    /// Initial per-stream window, bytes.
    #[arg(long, default_value_t = Settings::default().window)]
    window: u32,
    /// Largest DATA frame, bytes.
    #[arg(long, default_value_t = Settings::default().max_frame)]
    max_frame: u32,
    /// Requests in flight the manager allows per connection.
    #[arg(long, default_value_t = Settings::default().credits)]
    credits: u32,
    /// Chunk size of body producers, bytes.
    #[arg(long, default_value_t = Settings::default().chunk)]
    chunk: usize,
}

impl Knobs {
    fn settings(&self) -> anyhow::Result<Settings> {
        if !(16_384..=16_777_215).contains(&self.max_frame) {
            bail!("--max-frame must be within 16384..=16777215 (the HTTP/2 bounds)");
        }
        if self.window < self.max_frame || self.window > i32::MAX as u32 {
            bail!("--window must be at least --max-frame and below 2^31");
        }
        if self.credits == 0 || !(1..=body::MAX_CHUNK).contains(&self.chunk) {
            bail!(
                "--credits must be at least 1 and --chunk within 1..={}",
                body::MAX_CHUNK
            );
        }
        Ok(Settings {
            window: self.window,
            max_frame: self.max_frame,
            credits: self.credits,
            chunk: self.chunk,
        })
    }

    fn as_args(&self) -> Vec<String> {
        vec![
            "--window".into(),
            self.window.to_string(),
            "--max-frame".into(),
            self.max_frame.to_string(),
            "--credits".into(),
            self.credits.to_string(),
            "--chunk".into(),
            self.chunk.to_string(),
        ]
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// The manager side: answers noop, upload and download on 127.0.0.1.
    Serve {
        #[arg(long, value_enum)]
        proto: Proto,
        /// Port; 0 picks a free one.
        #[arg(long, default_value_t = 0)]
        port: u16,
        #[command(flatten)]
        knobs: Knobs,
    },
    /// The router side: closed-loop workers on one connection; prints a JSON summary.
    Drive {
        #[arg(long, value_enum)]
        proto: Proto,
        /// `host:port` of the manager side.
        #[arg(long)]
        addr: String,
        #[arg(long, value_enum, default_value = "noop")]
        scenario: Scenario,
        /// Body bytes of uploads and downloads.
        #[arg(long, default_value_t = 1 << 20)]
        bytes: usize,
        /// Requests in flight.
        #[arg(short = 'c', long, default_value_t = 1)]
        concurrency: usize,
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        duration: Duration,
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        warmup: Duration,
        #[command(flatten)]
        knobs: Knobs,
    },
    /// The router side of the full path: an HTTP/1.1 front door (`/noop`, `/bytes/N`, `POST /echo`)
    /// forwarding over the hop; prints `listening ADDR`.
    RelayRouter {
        #[arg(long, value_enum)]
        proto: Proto,
        /// `host:port` of the manager-side relay.
        #[arg(long)]
        manager: String,
        #[command(flatten)]
        knobs: Knobs,
    },
    /// The manager side of the full path: the hop's server delivering to the app; prints `listening ADDR`.
    RelayManager {
        #[arg(long, value_enum)]
        proto: Proto,
        /// `host:port` of the example app.
        #[arg(long)]
        app: String,
        #[command(flatten)]
        knobs: Knobs,
    },
    /// The full path with each hop (wrk -t1 -> relay -> hop -> relay -> example app), interleaved rounds.
    CompareFull {
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[arg(long, default_value = "5s")]
        duration: String,
        #[arg(long, default_value = "1s")]
        warmup: String,
        /// Body bytes of the download and echo cases (the app answers at most 4 MiB).
        #[arg(long, default_value_t = 1 << 20)]
        bytes: usize,
        /// The example app; default: `switchyard-example-app` beside this program.
        #[arg(long)]
        app_bin: Option<std::path::PathBuf>,
        /// Where each measurement is appended as a JSON line.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        #[command(flatten)]
        knobs: Knobs,
    },
    /// Prints the table of a run again from its `--out` file (`rows.jsonl`).
    Table {
        /// The JSON lines a `compare` or `compare-full` run wrote.
        rows: std::path::PathBuf,
        /// The rows are from `compare-full`.
        #[arg(long)]
        full: bool,
    },
    /// Both hops, interleaved rounds (frames, h2, frames, h2, ...), medians and ratios.
    Compare {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        #[arg(long, default_value = "5s")]
        duration: String,
        #[arg(long, default_value = "1s")]
        warmup: String,
        /// Body bytes of the upload and download cases.
        #[arg(long, default_value_t = 1 << 20)]
        bytes: usize,
        /// Where each measurement is appended as a JSON line.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        #[command(flatten)]
        knobs: Knobs,
    },
}

/// The sidecars' default: every task on one thread.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    match Args::parse().cmd {
        Cmd::Serve { proto, port, knobs } => {
            let settings = knobs.settings()?;
            runtime()?.block_on(async move {
                let listener = TcpListener::bind(("127.0.0.1", port)).await?;
                println!("listening {}", listener.local_addr()?);
                std::io::stdout().flush()?;
                match proto {
                    Proto::Frames => {
                        frames::server::serve(listener, settings, frames::server::Backend::Local)
                            .await
                    }
                    Proto::H2 => h2::serve(listener, settings).await,
                }
                Ok(())
            })
        }
        Cmd::Drive {
            proto,
            addr,
            scenario,
            bytes,
            concurrency,
            duration,
            warmup,
            knobs,
        } => {
            if concurrency == 0 {
                bail!("--concurrency must be at least 1");
            }
            let plan = drive::Plan {
                proto,
                addr,
                scenario,
                bytes,
                concurrency,
                warmup,
                duration,
                settings: knobs.settings()?,
            };
            let summary = runtime()?.block_on(drive::run(plan))?;
            println!("{}", serde_json::to_string(&summary)?);
            Ok(())
        }
        Cmd::Table {
            rows,
            full: is_full,
        } => {
            let text = std::fs::read_to_string(&rows)?;
            let lines = text.lines().filter(|l| !l.trim().is_empty());
            if is_full {
                let rows: Vec<full::Row> =
                    lines.map(serde_json::from_str).collect::<Result<_, _>>()?;
                let mut cases: Vec<full::Case> = Vec::new();
                for r in &rows {
                    if !cases.iter().any(|c| c.label == r.case) {
                        cases.push(full::Case {
                            label: r.case.clone(),
                            path: String::new(),
                            post_bytes: None,
                            concurrency: 0,
                            moved: 0,
                        });
                    }
                }
                println!("{}", full::table(&rows, &cases));
            } else {
                let rows: Vec<compare::Row> =
                    lines.map(serde_json::from_str).collect::<Result<_, _>>()?;
                let mut cases = Vec::new();
                for r in &rows {
                    if !cases.contains(&r.case) {
                        cases.push(r.case);
                    }
                }
                println!("{}", compare::table(&rows, &cases));
            }
            Ok(())
        }
        Cmd::RelayRouter {
            proto,
            manager,
            knobs,
        } => {
            let settings = knobs.settings()?;
            runtime()?.block_on(async move {
                let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
                let addr = listener.local_addr()?;
                // Connected to the manager before saying it is ready.
                let serve = relay::router(listener, proto, &manager, settings);
                let ready = async {
                    println!("listening {addr}");
                    std::io::stdout().flush()
                };
                let (served, _) = tokio::join!(serve, ready);
                served
            })
        }
        Cmd::RelayManager { proto, app, knobs } => {
            let settings = knobs.settings()?;
            let app = std::sync::Arc::new(relay::App::new(&app)?);
            runtime()?.block_on(async move {
                let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
                println!("listening {}", listener.local_addr()?);
                std::io::stdout().flush()?;
                match proto {
                    Proto::Frames => {
                        frames::server::serve(listener, settings, frames::server::Backend::App(app))
                            .await
                    }
                    Proto::H2 => relay::serve_h2(listener, settings, app).await,
                }
                Ok(())
            })
        }
        Cmd::CompareFull {
            rounds,
            duration,
            warmup,
            bytes,
            app_bin,
            out,
            knobs,
        } => {
            knobs.settings()?;
            let exe = std::env::current_exe()?;
            let app_bin = match app_bin {
                Some(p) => p,
                None => exe.with_file_name("switchyard-example-app"),
            };
            let runner = Runner {
                exe,
                duration,
                warmup,
                settings_args: knobs.as_args(),
            };
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let mut app = std::process::Command::new(&app_bin)
                .args(["--port", &port.to_string()])
                .stdout(std::process::Stdio::null())
                .spawn()
                .map_err(|e| anyhow::anyhow!("starting {}: {e}", app_bin.display()))?;
            let app_addr = format!("127.0.0.1:{port}");
            let result = (|| -> anyhow::Result<()> {
                let t0 = std::time::Instant::now();
                while std::net::TcpStream::connect(&app_addr).is_err() {
                    if t0.elapsed() > Duration::from_secs(10) {
                        bail!("the app did not listen on {app_addr} within 10 s");
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let scratch =
                    std::env::temp_dir().join(format!("hop-proto-{}", std::process::id()));
                std::fs::create_dir_all(&scratch)?;
                let full_runner = full::FullRunner {
                    runner: &runner,
                    app: app_addr.clone(),
                    scratch: scratch.clone(),
                };
                let cases = full::default_cases(bytes);
                let mut log = match &out {
                    Some(p) => Some(std::fs::File::create(p)?),
                    None => None,
                };
                eprintln!("load average at start: {:.2}", compare::load_average());
                let mut rows = Vec::new();
                for round in 1..=rounds {
                    for case in &cases {
                        for proto in [Proto::Frames, Proto::H2] {
                            let row = full_runner.measure(round, proto, case)?;
                            eprintln!(
                                "round {round} {} {}: {:.0} req/s p50 {:.0} µs p99 {:.0} µs {:.1} MiB/s cpu {:.1} µs/req rss {:.1}/{:.1} MiB load {:.2} errors {}",
                                case.label,
                                proto.name(),
                                row.wrk.rps,
                                row.wrk.p50_us,
                                row.wrk.p99_us,
                                row.mb_per_s,
                                row.cpu_us_per_req,
                                row.router_peak_mb,
                                row.manager_peak_mb,
                                row.load,
                                row.wrk.errors
                            );
                            if let Some(f) = log.as_mut() {
                                writeln!(f, "{}", serde_json::to_string(&row)?)?;
                            }
                            rows.push(row);
                        }
                    }
                }
                let loads: Vec<f64> = rows.iter().map(|r| r.load).collect();
                println!("{}", full::table(&rows, &cases));
                println!(
                    "load average (1 min) over the run: median {:.2}, min {:.2}, max {:.2}",
                    compare::median(loads.clone()),
                    loads.iter().copied().fold(f64::INFINITY, f64::min),
                    loads.iter().copied().fold(0.0, f64::max)
                );
                let _ = std::fs::remove_dir_all(&scratch);
                Ok(())
            })();
            // Our own child, by its handle.
            let _ = app.kill();
            let _ = app.wait();
            result
        }
        Cmd::Compare {
            rounds,
            duration,
            warmup,
            bytes,
            out,
            knobs,
        } => {
            knobs.settings()?;
            let runner = Runner {
                exe: std::env::current_exe()?,
                duration,
                warmup,
                settings_args: knobs.as_args(),
            };
            let cases = compare::default_cases(bytes);
            let mut rows = Vec::new();
            let mut log = match &out {
                Some(p) => Some(std::fs::File::create(p)?),
                None => None,
            };
            eprintln!("load average at start: {:.2}", compare::load_average());
            for round in 1..=rounds {
                for case in &cases {
                    for proto in [Proto::Frames, Proto::H2] {
                        let row = runner.measure(round, proto, *case)?;
                        eprintln!(
                            "round {round} {} {}: {:.0} req/s p50 {:.0} µs p99 {:.0} µs {:.1} MiB/s cpu {:.1} µs/req rss {:.1}/{:.1} MiB load {:.2} errors {}",
                            case.label(),
                            proto.name(),
                            row.rps,
                            row.p50_us,
                            row.p99_us,
                            row.mb_per_s,
                            row.cpu_us_per_req,
                            row.client_peak_mb,
                            row.server_peak_mb,
                            row.load,
                            row.errors
                        );
                        if let Some(f) = log.as_mut() {
                            writeln!(f, "{}", serde_json::to_string(&row)?)?;
                        }
                        rows.push(row);
                    }
                }
            }
            let loads: Vec<f64> = rows.iter().map(|r| r.load).collect();
            println!("{}", compare::table(&rows, &cases));
            println!(
                "load average (1 min) over the run: median {:.2}, min {:.2}, max {:.2}",
                compare::median(loads.clone()),
                loads.iter().copied().fold(f64::INFINITY, f64::min),
                loads.iter().copied().fold(0.0, f64::max)
            );
            Ok(())
        }
    }
}
