//! `switchyard tap`: a live, sampled stream of the events through a Router's or a Manager's
//! sidecars, like `linkerd viz tap`: each event's type, ce-id, source, status, latency,
//! Server-Timing and trace id, and with `--payload N` its first bytes; filtered by type, status or
//! path in the sidecar, so what is filtered out never leaves it. Locally (a running `switchyard up
//! -f FILE`, or `--addr`), or in a cluster through the API server's `pods/portforward`
//! (`--kubeconfig`). `Authorization`, cookies, API-key headers and the `--hide-header` names are
//! never sent by the sidecar. A slow reader loses events, never slows traffic: the sidecar counts
//! what it dropped and the count is shown.

mod query;
mod render;
mod stream;
mod target;

use anyhow::{Context as _, bail};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use stream::Msg;
use target::Sidecar;
use tokio::sync::mpsc;

/// How lines are printed.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// One line per event.
    Text,
    /// The sidecars' JSON lines, each with a `sidecar` field naming where it came from.
    Json,
}

/// Flags of `switchyard tap`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The YAML a running `switchyard up -f FILE` was started with: its sidecars are tapped.
    #[arg(short = 'f', long = "file", conflicts_with_all = ["addrs", "kubeconfig"])]
    file: Option<PathBuf>,
    /// A sidecar's admin address (repeatable), e.g. 127.0.0.1:9901.
    #[arg(long = "addr", value_name = "HOST:PORT", conflicts_with = "kubeconfig")]
    addrs: Vec<SocketAddr>,
    /// Tap the pods of a cluster this kubeconfig points at (through pods/portforward).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// With --kubeconfig: the namespace (default: the kubeconfig's).
    #[arg(short = 'n', long, requires = "kubeconfig")]
    namespace: Option<String>,
    /// Tap this Router's sidecars.
    #[arg(long, value_name = "NAME", conflicts_with = "manager")]
    router: Option<String>,
    /// Tap this Manager's sidecars.
    #[arg(long, value_name = "NAME")]
    manager: Option<String>,
    /// Only events of this type (repeatable).
    #[arg(long = "type", value_name = "TYPE")]
    types: Vec<String>,
    /// Only events answered with this status: a code (503) or a class (5xx) (repeatable).
    #[arg(long = "status", value_name = "STATUS", value_parser = status)]
    statuses: Vec<String>,
    /// Only requests whose path starts with this (Router sidecars; Manager events have no path).
    #[arg(long, value_name = "PREFIX", value_parser = path_prefix)]
    path: Option<String>,
    /// Show the first BYTES of each event's payload (at most 4096).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(0..=4096))]
    payload: Option<u64>,
    /// Events per second each sidecar sends at most (default 100, at most 10000); more are skipped
    /// and counted.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    max_rps: Option<u64>,
    /// A header whose value the sidecar must not send (repeatable); Authorization, Proxy-Authorization,
    /// Cookie, Set-Cookie and the Router's API-key headers never are.
    #[arg(long = "hide-header", value_name = "NAME")]
    hide: Vec<String>,
    /// With text output: each event's headers on a line of their own (hidden ones read "(hidden)").
    #[arg(long)]
    headers: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Output,
    /// Stop after this many events.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
}

/// Runs until Ctrl-C, `--count` events, or every tap has ended.
pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(tap(args))
}

async fn tap(args: Args) -> anyhow::Result<()> {
    let sidecars = sidecars(&args).await?;
    let ask = query::Ask {
        types: args.types.clone(),
        statuses: args.statuses.clone(),
        path: args.path.clone(),
        payload: args.payload,
        max_rps: args.max_rps,
        hide: args.hide.clone(),
    };
    let path_and_query = ask.path_and_query();
    // The sidecars' queues absorb a slow terminal; this one only evens out their bursts.
    let (tx, mut rx) = mpsc::channel(1024);
    let tapped = sidecars.len();
    let mut open = tapped;
    for s in sidecars {
        tokio::spawn(s.tap(path_and_query.clone(), tx.clone()));
    }
    drop(tx);
    let mut events = 0;
    let mut failures = 0;
    let mut out = std::io::stdout();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    while open > 0 {
        let msg = tokio::select! {
            m = rx.recv() => m,
            _ = &mut ctrl_c => return Ok(()),
        };
        match msg {
            None => break,
            Some(Msg::Ended(from, Ok(()))) => {
                open -= 1;
                eprintln!("switchyard tap: {from} closed its tap");
            }
            Some(Msg::Ended(from, Err(e))) => {
                open -= 1;
                eprintln!("switchyard tap: {from}: {e:#}");
                failures += 1;
            }
            Some(Msg::Line(from, v)) => {
                let event = v["kind"] == "event";
                let shown = match shown(&from, v, &args) {
                    Some(text) => writeln!(out, "{text}"),
                    None => Ok(()),
                };
                // A closed pipe (`switchyard tap | head`) is the reader done, not a failure.
                if let Err(e) = shown {
                    return match e.kind() {
                        std::io::ErrorKind::BrokenPipe => Ok(()),
                        _ => Err(e).context("writing to stdout"),
                    };
                }
                if event {
                    events += 1;
                    if args.count.is_some_and(|n| events >= n) {
                        return Ok(());
                    }
                }
            }
        }
    }
    // Each failure was said above as it came; the error only counts them.
    match (failures, tapped) {
        (0, _) => Ok(()),
        (_, 1) => bail!("the tap failed (why is said above)"),
        (n, _) => bail!("{n} of the {tapped} taps failed (why is said above)"),
    }
}

/// How a line of sidecar `from` is shown, if at all: as text, or as JSON naming the sidecar.
fn shown(from: &str, mut v: serde_json::Value, args: &Args) -> Option<String> {
    match args.output {
        Output::Json => {
            if let Some(o) = v.as_object_mut() {
                o.insert("sidecar".to_owned(), from.into());
            }
            Some(v.to_string())
        }
        Output::Text => render::text(from, &v, args.headers),
    }
}

/// The sidecars the flags name.
async fn sidecars(args: &Args) -> anyhow::Result<Vec<Sidecar>> {
    if let Some(path) = &args.kubeconfig {
        let (client, _) = crate::kubeconfig::client(Some(path), None).await?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        return target::pods(
            &client,
            &namespace,
            args.router.as_deref(),
            args.manager.as_deref(),
        )
        .await;
    }
    let local: Vec<Sidecar> = if let Some(file) = &args.file {
        crate::up::registry::running(file)?
            .into_iter()
            .filter(|s| named(s.role, &s.name, args))
            .map(|s| Sidecar::Local {
                name: format!("{} {}", s.role, s.name),
                admin: s.admin,
            })
            .collect()
    } else {
        args.addrs
            .iter()
            .map(|a| Sidecar::Local {
                name: a.to_string(),
                admin: *a,
            })
            .collect()
    };
    if local.is_empty() {
        match (&args.file, &args.router, &args.manager) {
            (None, ..) => bail!(
                "say which sidecars to tap: -f FILE (a running `switchyard up`), --addr HOST:PORT, or --kubeconfig PATH with --router or --manager"
            ),
            (Some(f), Some(r), _) => bail!("{}: no Router {r} in this run", f.display()),
            (Some(f), _, Some(m)) => bail!("{}: no Manager {m} in this run", f.display()),
            (Some(f), None, None) => bail!("{}: no sidecars in this run", f.display()),
        }
    }
    Ok(local)
}

/// Whether a local sidecar is one `--router`/`--manager` names (all when neither is given); a
/// Manager's replicas are named `NAME[i]`.
fn named(role: &str, name: &str, args: &Args) -> bool {
    let replica_of =
        |m: &str| name == m || name.strip_prefix(m).is_some_and(|r| r.starts_with('['));
    match (&args.router, &args.manager) {
        (Some(r), _) => role == "router" && name == r,
        (None, Some(m)) => role == "manager" && replica_of(m),
        (None, None) => true,
    }
}

/// `--status`: a code (`503`) or a class (`5xx`), as the sidecar takes them.
fn status(v: &str) -> Result<String, String> {
    let b = v.as_bytes();
    let class = b.len() == 3 && b[1..].eq_ignore_ascii_case(b"xx");
    let code = v.parse::<u16>().is_ok_and(|c| (100..=599).contains(&c));
    match (b.first(), class || code) {
        (Some(b'1'..=b'5'), true) => Ok(v.to_ascii_lowercase()),
        _ => Err("a status code from 100 to 599 (503) or a class from 1xx to 5xx".to_owned()),
    }
}

/// `--path`: a request path prefix.
fn path_prefix(v: &str) -> Result<String, String> {
    match v.starts_with('/') {
        true => Ok(v.to_owned()),
        false => Err("a request path prefix, starting with /".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(flags: &[&str]) -> Result<Args, String> {
        Cli::try_parse_from(std::iter::once("tap").chain(flags.iter().copied()))
            .map(|c| c.args)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn filters_and_bounds_are_parsed() {
        let a = parse(&[
            "--addr",
            "127.0.0.1:9901",
            "--type",
            "echo",
            "--type",
            "noop",
            "--status",
            "5XX",
            "--status",
            "404",
            "--path",
            "/orders",
            "--payload",
            "64",
            "--max-rps",
            "7",
            "--hide-header",
            "X-Token",
        ])
        .expect("parse");
        assert_eq!(a.types, ["echo", "noop"]);
        assert_eq!(a.statuses, ["5xx", "404"]);
        assert_eq!(
            (a.path.as_deref(), a.payload, a.max_rps),
            (Some("/orders"), Some(64), Some(7))
        );
        assert_eq!(a.hide, ["X-Token"]);
        assert_eq!(a.output, Output::Text);
    }

    #[test]
    fn bad_filters_are_refused_naming_the_flag() {
        for (flags, names) in [
            (&["--status", "6xx"][..], "--status"),
            (&["--status", "20"], "--status"),
            (&["--status", "600"], "--status"),
            (&["--path", "orders"], "--path"),
            (&["--payload", "4097"], "--payload"),
            (&["--max-rps", "0"], "--max-rps"),
            (&["-f", "x.yaml", "--addr", "127.0.0.1:1"], "--addr"),
            (&["-n", "shop"], "--kubeconfig"),
            (&["--router", "a", "--manager", "b"], "--manager"),
        ] {
            let e = parse(flags).expect_err(&format!("{flags:?}"));
            assert!(e.contains(names), "{flags:?}: {e}");
        }
    }

    #[test]
    fn json_lines_name_their_sidecar_and_odd_lines_do_not_panic() {
        let a = parse(&["--addr", "127.0.0.1:9901", "-o", "json"]).expect("parse");
        let line = shown("router edge", serde_json::json!({"kind": "event"}), &a);
        assert_eq!(
            line.as_deref(),
            Some(r#"{"kind":"event","sidecar":"router edge"}"#)
        );
        assert_eq!(shown("r", serde_json::json!(5), &a).as_deref(), Some("5"));
        let a = parse(&["--addr", "127.0.0.1:9901"]).expect("parse");
        assert_eq!(
            shown("r", serde_json::json!([1]), &a).as_deref(),
            Some("[r] [1]")
        );
    }

    #[test]
    fn router_and_manager_pick_local_sidecars_by_name() {
        let a = parse(&["-f", "x.yaml", "--manager", "handlers"]).expect("parse");
        assert!(named("manager", "handlers", &a));
        assert!(named("manager", "handlers[2]", &a));
        assert!(!named("manager", "handlersx", &a));
        assert!(!named("router", "handlers", &a));
        let a = parse(&["-f", "x.yaml", "--router", "edge"]).expect("parse");
        assert!(named("router", "edge", &a) && !named("manager", "edge", &a));
        let a = parse(&["-f", "x.yaml"]).expect("parse");
        assert!(named("router", "edge", &a) && named("manager", "handlers", &a));
    }
}
