//! One child process: spawned in its own process group, its output prefixed with its label (or sent to a log
//! file), its exit reported on a channel, and signals sent to its group.

use super::plan::ProcSpec;
use anyhow::Context;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;

/// Where children's stdout and stderr go.
#[derive(Clone, Debug)]
pub enum Output {
    /// Our stdout/stderr, each line prefixed with the label padded to `width` (like foreman).
    Prefixed {
        /// Width of the label column.
        width: usize,
    },
    /// `DIR/<label>.log`, stdout and stderr together.
    Logs(PathBuf),
}

/// A child's exit, reported by its watcher task: its index and how it ended.
pub type Exit = (usize, std::io::Result<ExitStatus>);

/// Starts `spec` as child `index`; its exit is sent on `exits`. Returns its pid.
///
/// The child gets its own process group so a Ctrl-C at the terminal reaches only `switchyard up`, which then stops
/// the children in order (routers first). The watcher task owns the child with `kill_on_drop`, so if `switchyard
/// up` unwinds without a clean shutdown the children are killed with it.
pub fn spawn(
    index: usize,
    spec: &ProcSpec,
    output: &Output,
    exits: mpsc::UnboundedSender<Exit>,
) -> anyhow::Result<u32> {
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    #[cfg(unix)]
    cmd.process_group(0);
    // Colour codes only help a terminal; in log files or a piped `switchyard up` they are noise.
    if matches!(output, Output::Logs(_)) || !std::io::stdout().is_terminal() {
        cmd.env("NO_COLOR", "1");
    }
    match output {
        Output::Prefixed { .. } => {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        Output::Logs(dir) => {
            let path = log_path(dir, &spec.label);
            let file = std::fs::File::create(&path).with_context(|| path.display().to_string())?;
            let err = file
                .try_clone()
                .with_context(|| path.display().to_string())?;
            cmd.stdout(file).stderr(err);
        }
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("{}: starting {}", spec.label, spec.program.display()))?;
    let pid = child
        .id()
        .with_context(|| format!("{}: exited before it could be watched", spec.label))?;
    if let Output::Prefixed { width } = output {
        let prefix = format!("{:>width$} | ", spec.label, width = *width);
        if let Some(out) = child.stdout.take() {
            tokio::spawn(relay(out, prefix.clone(), false));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(relay(err, prefix, true));
        }
    }
    tokio::spawn(async move {
        let status = child.wait().await;
        // The receiver is gone only when `switchyard up` is finishing; nobody is left to tell.
        let _ = exits.send((index, status));
    });
    Ok(pid)
}

/// The log file of a child: its label with spaces as dashes.
pub fn log_path(dir: &Path, label: &str) -> PathBuf {
    dir.join(format!("{}.log", label.replace(' ', "-")))
}

/// Copies lines from a child's pipe to ours with a prefix. Non-UTF-8 bytes are shown replaced rather than
/// dropping the line.
async fn relay(pipe: impl AsyncRead + Unpin, prefix: String, to_stderr: bool) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\n', '\r']);
                if to_stderr {
                    eprintln!("{prefix}{text}");
                } else {
                    println!("{prefix}{text}");
                }
            }
        }
    }
}

/// Which signal to send.
#[derive(Clone, Copy, Debug)]
pub enum Sig {
    /// Ask to stop (drain and exit).
    Term,
    /// Stop now.
    Kill,
}

/// Sends `sig` to the child's process group (so a wrapper script's children get it too), falling back to the
/// process alone. A child already gone is not an error.
#[cfg(unix)]
pub fn signal(pid: u32, sig: Sig) {
    use rustix::process::{Pid, Signal, kill_process, kill_process_group};
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    let sig = match sig {
        Sig::Term => Signal::TERM,
        Sig::Kill => Signal::KILL,
    };
    if kill_process_group(pid, sig).is_err() {
        let _ = kill_process(pid, sig);
    }
}

/// Without Unix signals there is no polite stop; `kill_on_drop` ends children when their watcher is dropped.
#[cfg(not(unix))]
pub fn signal(_pid: u32, _sig: Sig) {}
