//! `switchyard top`: a live view, like `linkerd viz top`, of the sidecars' traffic per event type
//! (rate, success, p50/p99) and of each sidecar's in-flight, queued and held requests, read from
//! their admin servers' `/metrics`: locally (a running `switchyard up -f FILE`, or `--addr`), or
//! across a cluster's Router and Manager pods through the API server's pod proxy (`--kubeconfig`).
//! `--once` prints one JSON view (two scrapes an interval apart) for scripts.

mod prom;
mod render;
mod source;
mod stats;

use anyhow::{Context as _, bail};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use source::{Local, Source};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Flags of `switchyard top`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The YAML a running `switchyard up -f FILE` was started with: its sidecars are read.
    #[arg(short = 'f', long = "file", conflicts_with_all = ["addrs", "kubeconfig"])]
    file: Option<PathBuf>,
    /// A sidecar's admin address (repeatable), e.g. 127.0.0.1:9901.
    #[arg(long = "addr", value_name = "HOST:PORT", conflicts_with = "kubeconfig")]
    addrs: Vec<SocketAddr>,
    /// Read every Router and Manager pod of the cluster this kubeconfig points at.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// With --kubeconfig: only this namespace (default: every namespace).
    #[arg(short = 'n', long, requires = "kubeconfig")]
    namespace: Option<String>,
    /// With --kubeconfig: only pods matching this label selector too, e.g. switchyard.dev/manager=handlers.
    #[arg(short = 'l', long, requires = "kubeconfig")]
    selector: Option<String>,
    /// Print one view as JSON (two scrapes --interval apart) and exit.
    #[arg(long)]
    once: bool,
    /// Time between refreshes (and between the two scrapes of --once).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    interval: Duration,
}

/// Runs until `q` (or Ctrl-C), or prints one view with `--once`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.interval < Duration::from_millis(100) {
        bail!("--interval {:?}: at least 100ms", args.interval);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (source, label) = runtime.block_on(source_of(&args))?;
    if args.once {
        let before = runtime.block_on(source.scrape())?;
        let started = Instant::now();
        std::thread::sleep(args.interval);
        let now = runtime.block_on(source.scrape())?;
        let view = stats::view(&before, &now, started.elapsed().as_secs_f64());
        println!("{}", serde_json::to_string_pretty(&view)?);
        return Ok(());
    }
    live(&runtime, &source, &label, args.interval)
}

/// The sidecars the flags name, and a title for them.
async fn source_of(args: &Args) -> anyhow::Result<(Source, String)> {
    if let Some(path) = &args.kubeconfig {
        let (client, _) = crate::kubeconfig::client(Some(path), None).await?;
        let title = match &args.namespace {
            Some(ns) => format!("namespace {ns}"),
            None => "every namespace".to_owned(),
        };
        return Ok((
            Source::Cluster {
                client,
                namespace: args.namespace.clone(),
                selector: args.selector.clone(),
            },
            title,
        ));
    }
    if let Some(file) = &args.file {
        let list = crate::up::registry::running(file)?
            .into_iter()
            .map(|s| Local {
                role: s.role.to_owned(),
                name: s.name,
                admin: s.admin,
            })
            .collect();
        return Ok((Source::Local(list), file.display().to_string()));
    }
    if args.addrs.is_empty() {
        bail!(
            "say which sidecars to read: -f FILE (a running `switchyard up`), --addr HOST:PORT, or --kubeconfig PATH"
        );
    }
    let list = args
        .addrs
        .iter()
        .map(|a| Local {
            role: "sidecar".into(),
            name: a.to_string(),
            admin: *a,
        })
        .collect();
    let title = args
        .addrs
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    Ok((Source::Local(list), title))
}

/// The refreshing screen; the terminal is restored however this ends.
fn live(
    runtime: &tokio::runtime::Runtime,
    source: &Source,
    label: &str,
    interval: Duration,
) -> anyhow::Result<()> {
    let mut terminal = ratatui::init();
    let result = (|| -> anyhow::Result<()> {
        let mut before = runtime.block_on(source.scrape())?;
        let mut at = Instant::now();
        let mut view = stats::view(&[], &before, 0.0);
        let mut status = "waiting for the first interval".to_owned();
        loop {
            terminal.draw(|f| render::draw(f, &view, label, &status))?;
            // Keys until the next refresh.
            let next = at + interval;
            while let Some(left) = next.checked_duration_since(Instant::now()) {
                if event::poll(left)?
                    && let Event::Key(k) = event::read()?
                    && k.kind == KeyEventKind::Press
                {
                    let ctrl_c =
                        k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                        return Ok(());
                    }
                }
            }
            match runtime.block_on(source.scrape()) {
                Ok(now) => {
                    let secs = at.elapsed().as_secs_f64();
                    at = Instant::now();
                    view = stats::view(&before, &now, secs);
                    status = format!("every {interval:?}");
                    before = now;
                }
                Err(e) => status = format!("{e:#}"),
            }
        }
    })();
    ratatui::restore();
    result
}
