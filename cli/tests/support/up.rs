//! `switchyard up -f FILE` as a child process: its output lines collected, SIGTERM on drop.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `switchyard up`; stopped (SIGTERM, then SIGKILL) when dropped, so a failing test
/// leaves nothing behind (`switchyard up` takes its children down on SIGTERM).
pub struct Up {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Every line seen so far.
    pub seen: Vec<String>,
}

impl Up {
    /// Starts `switchyard up -f manifest` with `env` added.
    pub fn start(manifest: &Path, env: &[(&str, &str)]) -> Up {
        let mut cmd = Command::new(super::SWITCHYARD);
        // From the repository root, as the README runs it: the language examples' commands are
        // paths relative to it.
        cmd.current_dir(super::repo_file("."))
            .args(["up", "-f", &manifest.display().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn switchyard up");
        let lines = super::output_lines(&mut child);
        Up {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line containing `needle` within `timeout`.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> Option<String> {
        self.wait_line(|l| l.contains(needle), timeout)
    }

    /// The first line for which `pred` holds within `timeout`.
    pub fn wait_line(&mut self, pred: impl Fn(&str) -> bool, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return Some(line);
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// Waits for `ready`, failing with everything printed so far.
    pub fn ready(&mut self, timeout: Duration) -> Result<(), String> {
        match self.wait_line(|l| l.starts_with("ready"), timeout) {
            Some(_) => Ok(()),
            None => Err(format!(
                "switchyard up never got ready:\n{}",
                self.seen.join("\n")
            )),
        }
    }

    /// The HTTP and gRPC ports on the `✓ router edge (pid N) http://127.0.0.1:PORT ... grpc
    /// 127.0.0.1:PORT (admin :PORT)` line, which `switchyard up` prints with the ports the router
    /// bound: manifests give the Router port 0 and tests read what it got.
    pub fn router_ports(&mut self) -> Result<(u16, Option<u16>), String> {
        self.output();
        let line = self
            .seen
            .iter()
            .find(|l| l.starts_with("✓ router edge"))
            .ok_or_else(|| format!("no router line:\n{}", self.seen.join("\n")))?;
        let port_after = |marker: &str| {
            let rest = line.split(marker).nth(1)?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u16>().ok().filter(|p| *p != 0)
        };
        let http =
            port_after("http://127.0.0.1:").ok_or_else(|| format!("no HTTP port in {line:?}"))?;
        Ok((http, port_after("grpc 127.0.0.1:")))
    }

    /// The HTTP port the router bound (see [`Up::router_ports`]).
    pub fn http_port(&mut self) -> Result<u16, String> {
        Ok(self.router_ports()?.0)
    }

    /// Every line printed so far, including those not read yet.
    pub fn output(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }

    /// Sends SIGTERM.
    pub fn term(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// Waits for the exit within `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// SIGTERM and a clean exit, or an error with the output.
    pub fn stop(mut self) -> Result<(), String> {
        self.term();
        match self.wait_exit(Duration::from_secs(40)) {
            Some(s) if s.success() => Ok(()),
            other => Err(format!(
                "switchyard up did not stop cleanly ({other:?}):\n{}",
                self.output()
            )),
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.term();
            if self.wait_exit(Duration::from_secs(30)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// `examples/<name>` with `port: 8080` / `port: 50051` replaced by `http` / `grpc`, written to `dir`.
pub fn example_on_ports(
    dir: &Path,
    name: &str,
    http: u16,
    grpc: u16,
    edit: impl FnOnce(String) -> String,
) -> std::path::PathBuf {
    let text = std::fs::read_to_string(super::repo_file(&format!("examples/{name}")))
        .unwrap_or_else(|e| panic!("examples/{name}: {e}"));
    let text = text
        .replace("port: 8080", &format!("port: {http}"))
        .replace("port: 50051", &format!("port: {grpc}"));
    let path = dir.join(name);
    std::fs::write(&path, edit(text)).expect("write manifest");
    path
}
