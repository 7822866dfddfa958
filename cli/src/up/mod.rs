//! `switchyard up -f FILE.yaml`: the Routers and Managers of a manifest as local processes on 127.0.0.1, no
//! cluster.
//!
//! Per Manager replica (`spec.replicas`, see `plan::local_replicas`): its app (the first container's `command` +
//! `args`) and a manager-role sidecar; per Router: a router-role sidecar whose config sends each Manager's events
//! straight to that Manager's local sidecars (`staticEndpoints`) instead of Service endpoints. Apps get `PORT` and, when several Managers declare the same
//! `app.port`, distinct ports from 8000 upward (a `--port N` argument is rewritten to match).
//!
//! Start order is apps, manager sidecars, routers, each waited on until ready; stop order is the reverse.

mod child;
pub(crate) mod config;
mod edge;
mod identity;
mod locate;
mod nats;
mod plan;
mod ports;
mod probe;
pub mod registry;
mod secrets;
mod supervisor;

use anyhow::Context;
use child::Output;
use std::path::PathBuf;
use std::process::ExitCode;
use supervisor::{Stop, Supervisor};

/// Flags of `switchyard up`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// YAML file with Router and Manager documents (the same you would `kubectl apply`).
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// Don't start the apps; run them yourself on the printed ports.
    #[arg(long)]
    no_app: bool,
    /// The switchyard-sidecar binary (default: next to switchyard, then on PATH, then $SWITCHYARD_SIDECAR).
    #[arg(long, value_name = "PATH")]
    sidecar: Option<PathBuf>,
    /// Write each process's output to DIR/<name>.log instead of prefixing it on this terminal.
    #[arg(long, value_name = "DIR")]
    logs: Option<PathBuf>,
    /// Run the mesh's internal hops on plain TCP. By default they are mTLS, certified by an
    /// ephemeral CA made for this run, as the operator's CA certifies sidecars in a cluster.
    #[arg(long)]
    plaintext: bool,
    /// How often the local NATS server flushes its JetStream store to disk: `always` (the default:
    /// every durable event is on disk before its 202) or an interval such as `10s` (faster; a power
    /// failure loses the acknowledged events of the last interval).
    #[arg(long, value_name = "always|INTERVAL", default_value = nats::SYNC_ALWAYS)]
    jetstream_sync: String,
}

/// Writes a Secret file readable by this user only, creating its folders (0700) as needed.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    #[cfg(unix)]
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    if let Some(dir) = path.parent() {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        b.mode(0o700);
        b.create(dir)?;
    }
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    o.mode(0o600);
    o.open(path)?.write_all(bytes)
}

/// Runs until Ctrl-C / SIGTERM (exit 0) or until a process fails (exit 1).
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (objs, text) = crate::read(&args.file, crate::Use::Local)
        .map_err(|e| anyhow::anyhow!("{e:#}\nnothing started"))?;
    let problems = crate::check::placed(&objs, &text);
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("{}: {p}", args.file.display());
        }
        anyhow::bail!("{} problem(s) found; nothing started", problems.len());
    }
    let sidecar = locate::sidecar(args.sidecar.as_deref())?;
    let nats_sync = nats::sync_interval(&args.jetstream_sync)?;
    let nats_server = plan::needs_jetstream(&objs)
        .then(locate::nats_server)
        .transpose()?;
    let state = tempfile::Builder::new()
        .prefix("switchyard-up-")
        .tempdir()
        .context("creating a state directory")?;
    let mut plan = plan::plan(
        &objs,
        &plan::Options {
            state_dir: state.path(),
            sidecar: &sidecar,
            apps: !args.no_app,
            nats_server: nats_server.as_deref(),
            nats_sync: &nats_sync,
            mesh_tls: !args.plaintext,
            nats_runtime: plan::nats_runtime(
                std::thread::available_parallelism().map_or(1, usize::from),
                |name| std::env::var_os(name).is_some(),
            ),
            otlp_from_env: std::env::var_os(plan::OTLP_ENDPOINT_ENV).is_some_and(|v| !v.is_empty()),
        },
        &mut ports::LocalPorts::default(),
    )?;
    for (path, text) in &plan.files {
        std::fs::write(path, text).with_context(|| path.display().to_string())?;
    }
    for (path, bytes) in &plan.secret_files {
        write_private(path, bytes).with_context(|| path.display().to_string())?;
    }
    let local_identity = if args.plaintext {
        None
    } else {
        Some(identity::prepare(
            &mut plan.procs,
            &plan::identity_dir(state.path()),
        )?)
    };
    // For `switchyard top -f FILE`; removed when the run ends.
    let registration = registry::Registration::write(&args.file, &plan)
        .context("writing the run's state for `switchyard top`")?;
    let output = match &args.logs {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
            Output::Logs(dir.clone())
        }
        None => Output::Prefixed {
            width: plan.procs.iter().map(|p| p.label.len()).max().unwrap_or(0),
        },
    };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let code = runtime.block_on(async {
        let identity_service = match local_identity {
            Some(local) => {
                let running = identity::serve(local, &mut plan.procs).await?;
                println!(
                    "mesh mTLS on: ephemeral CA, identity service {} (--plaintext turns it off)",
                    running.url
                );
                Some(running)
            }
            None => {
                println!("mesh mTLS off (--plaintext): internal hops are plain TCP");
                None
            }
        };
        println!("configs in {}", state.path().display());
        if let Some(dir) = &args.logs {
            println!("logs in {}", dir.display());
        }
        for note in &plan.notes {
            println!("{note}");
        }
        let mut sup = Supervisor::new(output)?;
        let mut stop = None;
        // The first Router's first plain HTTP route, on the port it bound.
        let mut try_command = None;
        for spec in &plan.procs {
            match sup.start(spec).await {
                Ok(edge) => {
                    if try_command.is_none() {
                        try_command = edge.and_then(|e| e.try_command());
                    }
                }
                Err(s) => {
                    stop = Some(s);
                    break;
                }
            }
        }
        let stop = match stop {
            Some(s) => s,
            None => {
                match &try_command {
                    Some(cmd) => println!("ready: try {cmd}"),
                    None => println!("ready"),
                }
                sup.watch().await
            }
        };
        let code = match &stop {
            Stop::Signal(name) => {
                println!("{name}: stopping");
                ExitCode::SUCCESS
            }
            Stop::Failed(why) => {
                eprintln!("✗ {why}; stopping the rest");
                ExitCode::FAILURE
            }
        };
        sup.shutdown().await;
        if let Some(s) = identity_service {
            s.task.abort();
        }
        anyhow::Ok(code)
    })?;
    // Dropping the runtime drops the watcher tasks, whose kill_on_drop ends anything that somehow survived.
    drop(runtime);
    drop(registration);
    drop(state);
    Ok(code)
}
