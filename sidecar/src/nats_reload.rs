//! `switchyard-sidecar nats-reload`: beside the chart's nats-server, in a pod that shares its
//! process namespace. The operator rewrites the servers' access Secret when Managers come and go
//! (their NATS users) and when the servers' certificate is renewed; the kubelet updates the mounted
//! files some seconds later, and nats-server reads its configuration only when told. This watches
//! the mounted folder and sends nats-server SIGHUP (its configuration reload, as
//! `nats-server --signal reload` does) once for every new content, so a new Manager's sidecars get
//! their user without a server restart.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// What the reloader watches and whom it signals.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The mounted Secret's folder.
    pub watch: PathBuf,
    /// nats-server's `pid_file`.
    pub pid_file: PathBuf,
    /// Time between looks at the folder.
    pub every: Duration,
}

/// Why a reload could not be sent this time (tried again on the next look).
#[derive(Debug, thiserror::Error)]
enum ReloadError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} holds no process id: {text:?}", path.display())]
    Pid { path: PathBuf, text: String },
    #[error("signalling nats-server (pid {pid}): {source}")]
    Signal { pid: i32, source: std::io::Error },
}

/// Watches until SIGTERM; exit 0 then.
pub(crate) async fn run(settings: &Settings) -> ExitCode {
    tracing::info!(watch = %settings.watch.display(), pid_file = %settings.pid_file.display(), "reloading nats-server when its mounted files change");
    let mut done: Option<[u8; 32]> = None;
    let mut tick = tokio::time::interval(settings.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = crate::shutdown::signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return ExitCode::SUCCESS,
            _ = tick.tick() => {}
        }
        let now = match fingerprint(&settings.watch) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the watched files");
                continue;
            }
        };
        // The first look signals too: the files may have changed between the server's start and
        // this one's, and a reload of unchanged files costs nothing.
        if done == Some(now) {
            continue;
        }
        match reload(&settings.pid_file) {
            Ok(pid) => {
                tracing::info!(pid, "nats-server told to reload its configuration");
                done = Some(now);
            }
            Err(e) => tracing::warn!(error = %e, "nats-server not reloaded yet; trying again"),
        }
    }
}

/// A digest of every regular file directly in `dir` (names and contents, by name): the kubelet
/// swaps a mounted Secret's files all at once, so one look sees the old set or the new one.
fn fingerprint(dir: &Path) -> Result<[u8; 32], ReloadError> {
    let read = |path: &Path, source| ReloadError::Read {
        path: path.to_owned(),
        source,
    };
    let mut names: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| read(dir, e))?
        .filter_map(Result::ok)
        // The kubelet's own `..data` links and timestamped folders are not the files.
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(_, p)| p.is_file())
        .collect();
    names.sort();
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    for (name, path) in names {
        let body = std::fs::read(&path).map_err(|e| read(&path, e))?;
        digest.update(&(name.len() as u64).to_be_bytes());
        digest.update(name.as_bytes());
        digest.update(&(body.len() as u64).to_be_bytes());
        digest.update(&body);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.finish().as_ref());
    Ok(out)
}

/// Sends SIGHUP to the process named by `pid_file`.
fn reload(pid_file: &Path) -> Result<i32, ReloadError> {
    let text = std::fs::read_to_string(pid_file).map_err(|source| ReloadError::Read {
        path: pid_file.to_owned(),
        source,
    })?;
    let bad = || ReloadError::Pid {
        path: pid_file.to_owned(),
        text: text.trim().chars().take(32).collect(),
    };
    let raw: i32 = text.trim().parse().map_err(|_| bad())?;
    let pid = rustix::process::Pid::from_raw(raw).ok_or_else(bad)?;
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).map_err(|e| {
        ReloadError::Signal {
            pid: raw,
            source: e.into(),
        }
    })?;
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_changes_with_any_file_and_ignores_the_kubelets_links() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("access.conf"), "a").expect("write");
        std::fs::write(dir.path().join("tls.crt"), "c").expect("write");
        let first = fingerprint(dir.path()).expect("read");
        std::fs::write(dir.path().join("..data"), "x").expect("write");
        assert_eq!(fingerprint(dir.path()).expect("read"), first);
        std::fs::write(dir.path().join("access.conf"), "b").expect("write");
        assert_ne!(fingerprint(dir.path()).expect("read"), first);
    }

    #[test]
    fn a_pid_file_without_a_process_id_is_named() {
        let dir = tempfile::tempdir().expect("dir");
        let pid = dir.path().join("nats.pid");
        std::fs::write(&pid, "not a pid").expect("write");
        let e = reload(&pid).expect_err("refused").to_string();
        assert!(e.contains("nats.pid") && e.contains("not a pid"), "{e}");
        assert!(reload(&dir.path().join("missing")).is_err());
    }

    #[tokio::test]
    async fn a_changed_file_sends_the_watched_process_sighup() {
        // The watched process is this test's own: a listener for SIGHUP shows the signal arrived.
        // (A child process would inherit an ignored SIGHUP from a run under `nohup`, and never
        // show it.)
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = signal(SignalKind::hangup()).expect("listen for SIGHUP");
        let dir = tempfile::tempdir().expect("dir");
        let watch = dir.path().join("access");
        std::fs::create_dir(&watch).expect("dir");
        std::fs::write(watch.join("access.conf"), "a").expect("write");
        let pid_file = dir.path().join("nats.pid");
        std::fs::write(&pid_file, std::process::id().to_string()).expect("write");
        let settings = Settings {
            watch: watch.clone(),
            pid_file,
            every: Duration::from_millis(20),
        };
        let watcher = tokio::spawn(async move { run(&settings).await });
        // The first look signals (the files may have changed before it started) ...
        tokio::time::timeout(Duration::from_secs(10), hup.recv())
            .await
            .expect("signalled in time")
            .expect("SIGHUP");
        // ... and a change signals again.
        std::fs::write(watch.join("access.conf"), "b").expect("write");
        tokio::time::timeout(Duration::from_secs(10), hup.recv())
            .await
            .expect("signalled again in time")
            .expect("SIGHUP");
        watcher.abort();
    }
}
