//! Runs a plan: starts processes tier by tier, waits for each to be ready, watches them, and stops them all in
//! reverse order on a signal or when one dies.

use super::child::{self, Exit, Output, Sig};
use super::edge::Edge;
use super::plan::{ProcSpec, Tier};
use super::probe;
use anyhow::Context;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long a process may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a tier gets to exit after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for the exit report after SIGKILL.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between readiness checks.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// Signals this soon after the first are echoes of it, not a second request: some tools (e.g. timeout(1)) signal
/// the process and then its whole group.
const SIGNAL_ECHO: Duration = Duration::from_secs(1);

/// Why the run ends.
#[derive(Debug)]
pub enum Stop {
    /// SIGINT or SIGTERM: a clean stop, exit 0.
    Signal(&'static str),
    /// Something failed (a child died, did not start or did not get ready): exit 1.
    Failed(String),
}

struct Running {
    label: String,
    tier: Tier,
    pid: u32,
    exited: Option<String>,
}

/// The children of one run.
pub struct Supervisor {
    procs: Vec<Running>,
    output: Output,
    exits_tx: mpsc::UnboundedSender<Exit>,
    exits: mpsc::UnboundedReceiver<Exit>,
    signals: Signals,
}

impl Supervisor {
    /// A supervisor with no children yet; installs the signal handlers.
    pub fn new(output: Output) -> anyhow::Result<Self> {
        let (exits_tx, exits) = mpsc::unbounded_channel();
        Ok(Supervisor {
            procs: Vec::new(),
            output,
            exits_tx,
            exits,
            signals: Signals::new()?,
        })
    }

    /// Starts `spec` and waits until it is ready, printing a line when it is. For a Router's sidecar, returns
    /// its listeners on the ports it bound.
    pub async fn start(&mut self, spec: &ProcSpec) -> Result<Option<Edge>, Stop> {
        let index = self.procs.len();
        let pid = child::spawn(index, spec, &self.output, self.exits_tx.clone())
            .map_err(|e| Stop::Failed(format!("{e:#}")))?;
        self.procs.push(Running {
            label: spec.label.clone(),
            tier: spec.tier,
            pid,
            exited: None,
        });
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if probe::ready(&spec.probe).await {
                let edge = spec
                    .edge
                    .as_ref()
                    .map(bound)
                    .transpose()
                    .map_err(|e| Stop::Failed(format!("{} (pid {pid}): {e:#}", spec.label)))?;
                let listening = edge
                    .as_ref()
                    .map_or_else(|| spec.listening.clone(), Edge::listening);
                println!("✓ {} (pid {pid}) {listening}", spec.label);
                return Ok(edge);
            }
            if Instant::now() >= deadline {
                return Err(Stop::Failed(format!(
                    "{} (pid {pid}) was not ready after {}s ({:?})",
                    spec.label,
                    READY_TIMEOUT.as_secs(),
                    spec.probe
                )));
            }
            tokio::select! {
                name = self.signals.recv() => return Err(Stop::Signal(name)),
                Some(exit) = self.exits.recv() => return Err(self.unexpected(exit)),
                () = tokio::time::sleep(PROBE_INTERVAL) => {}
            }
        }
    }

    /// Waits until a signal arrives or a child exits.
    pub async fn watch(&mut self) -> Stop {
        tokio::select! {
            name = self.signals.recv() => Stop::Signal(name),
            exit = self.exits.recv() => match exit {
                Some(exit) => self.unexpected(exit),
                // Unreachable while we hold a sender; treat it as a failure rather than spin.
                None => Stop::Failed("lost track of the child processes".into()),
            },
        }
    }

    /// Stops every child still running: routers, then manager sidecars, then apps, then the event store; SIGTERM, up to
    /// [`STOP_TIMEOUT`] per tier, then SIGKILL. A second signal skips straight to SIGKILL.
    pub async fn shutdown(&mut self) {
        let started = Instant::now();
        let mut hurry = false;
        for tier in [Tier::Router, Tier::Manager, Tier::App, Tier::Store] {
            let members: Vec<usize> = (0..self.procs.len())
                .filter(|&i| self.procs[i].tier == tier && self.procs[i].exited.is_none())
                .collect();
            if members.is_empty() {
                continue;
            }
            if !hurry {
                for &i in &members {
                    child::signal(self.procs[i].pid, Sig::Term);
                }
                hurry = self.wait_exits(&members, STOP_TIMEOUT, Some(started)).await;
            }
            let stragglers: Vec<usize> = members
                .into_iter()
                .filter(|&i| self.procs[i].exited.is_none())
                .collect();
            for &i in &stragglers {
                let p = &self.procs[i];
                println!(
                    "■ {} (pid {}) did not stop in time; killing it",
                    p.label, p.pid
                );
                child::signal(p.pid, Sig::Kill);
            }
            self.wait_exits(&stragglers, KILL_TIMEOUT, None).await;
        }
    }

    /// Waits until every child in `members` has exited or `timeout` passes. With `since` (when shutdown started),
    /// returns true early when a later signal asks to hurry.
    async fn wait_exits(
        &mut self,
        members: &[usize],
        timeout: Duration,
        since: Option<Instant>,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        while members.iter().any(|&i| self.procs[i].exited.is_none()) {
            tokio::select! {
                exit = self.exits.recv() => match exit {
                    Some((i, status)) => {
                        let how = self.record(i, &status);
                        if let Some(p) = self.procs.get(i) {
                            println!("■ {} stopped ({how})", p.label);
                        }
                    }
                    None => return false,
                },
                _ = self.signals.recv(), if since.is_some() => {
                    if since.is_some_and(|t| t.elapsed() >= SIGNAL_ECHO) {
                        println!("■ second signal: killing the rest now");
                        return true;
                    }
                }
                () = tokio::time::sleep_until(deadline) => return false,
            }
        }
        false
    }

    fn record(&mut self, index: usize, status: &std::io::Result<ExitStatus>) -> String {
        let how = match status {
            Ok(s) => s.to_string(),
            Err(e) => format!("wait failed: {e}"),
        };
        if let Some(p) = self.procs.get_mut(index) {
            p.exited = Some(how.clone());
        }
        how
    }

    fn unexpected(&mut self, (index, status): Exit) -> Stop {
        let how = self.record(index, &status);
        let (label, pid) = self
            .procs
            .get(index)
            .map_or(("a child process", 0), |p| (p.label.as_str(), p.pid));
        Stop::Failed(format!("{label} (pid {pid}) exited unexpectedly ({how})"))
    }
}

/// SIGINT and SIGTERM, as one stream.
struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                int: signal(SignalKind::interrupt())?,
                term: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Signals {})
        }
    }

    /// The name of the next signal received.
    async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.int.recv() => "SIGINT",
                _ = self.term.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

/// `edge` on the ports its router wrote to its ready file, which exists once the router answers ready.
fn bound(edge: &Edge) -> anyhow::Result<Edge> {
    let path = &edge.ready_file;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the ports it bound from {}", path.display()))?;
    edge.bound(&text)
        .with_context(|| format!("the ports it bound, in {}", path.display()))
}
