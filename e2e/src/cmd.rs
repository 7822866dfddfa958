//! Running helm, kubectl and scripts as child processes, with a timeout and readable failures.

use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// A command to run: program, arguments, environment, optional standard input and a timeout.
#[derive(Clone, Debug)]
pub struct Cmd {
    program: OsString,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    removed: Vec<OsString>,
    cwd: Option<PathBuf>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
}

/// What a finished command left behind.
#[derive(Clone, Debug)]
pub struct Output {
    /// The command line, for messages.
    pub command: String,
    /// Exit code; None when killed by a signal.
    pub code: Option<i32>,
    /// Captured standard output.
    pub stdout: String,
    /// Captured standard error.
    pub stderr: String,
}

impl Output {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Standard output and error together, for messages and "contains" checks.
    pub fn combined(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// The command, its exit and the tails of its output, for messages.
    pub fn describe(&self) -> String {
        format!(
            "`{}` exited with {}\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
            self.command,
            self.code
                .map_or_else(|| "a signal".to_string(), |c| format!("code {c}")),
            crate::tail(&self.stdout, 40),
            crate::tail(&self.stderr, 60)
        )
    }
}

impl Cmd {
    /// A command running `program`, with a 2-minute timeout.
    pub fn new(program: impl Into<OsString>) -> Self {
        Cmd {
            program: program.into(),
            args: Vec::new(),
            envs: Vec::new(),
            removed: Vec::new(),
            cwd: None,
            stdin: None,
            timeout: Duration::from_secs(120),
        }
    }

    /// `$CARGO` (or `cargo`), for building the binaries the tests run. Without the variables cargo
    /// sets for a test process (`CARGO_PKG_*`, `CARGO_MANIFEST_DIR`, ...): build scripts such as
    /// ring's watch them (`rerun-if-env-changed`), so inherited they would differ from the outer
    /// `cargo test`'s and rebuild ring and everything above it twice per run.
    pub fn cargo() -> Self {
        let mut cmd = Cmd::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        for (key, _) in std::env::vars_os() {
            let name = key.to_string_lossy();
            let set_by_cargo = name.starts_with("CARGO_PKG_")
                || name.starts_with("CARGO_BIN_EXE_")
                || matches!(
                    &*name,
                    "CARGO_MANIFEST_DIR"
                        | "CARGO_MANIFEST_PATH"
                        | "CARGO_MANIFEST_LINKS"
                        | "CARGO_CRATE_NAME"
                        | "CARGO_PRIMARY_PACKAGE"
                        | "CARGO_TARGET_TMPDIR"
                        | "OUT_DIR"
                );
            if set_by_cargo {
                cmd.removed.push(key);
            }
        }
        cmd
    }

    /// kubectl with the given kubeconfig (never the ambient one).
    pub fn kubectl(kubeconfig: &Path) -> Self {
        Cmd::new(crate::kubectl_bin())
            .env("KUBECONFIG", kubeconfig)
            .arg("--request-timeout=30s")
    }

    /// helm from the tool folder with the given kubeconfig, keeping its cache and config in the
    /// tests' scratch folder.
    pub fn helm(kubeconfig: &Path) -> Self {
        let home = crate::work_dir().join("helm");
        Cmd::new(crate::helm_bin())
            .env("KUBECONFIG", kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .cwd(crate::repo_root())
    }

    /// helm for commands that never contact a cluster (`template`, `lint`).
    pub fn helm_offline() -> Self {
        Cmd::helm(Path::new("/nonexistent/kubeconfig"))
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable of the child.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Working directory of the child (default: the repository root).
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Feeds `input` to the child's standard input.
    pub fn stdin(mut self, input: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(input.into());
        self
    }

    /// Kills the child and fails after `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The command line as text.
    pub fn display(&self) -> String {
        let mut parts = vec![self.program.to_string_lossy().into_owned()];
        parts.extend(self.args.iter().map(|a| a.to_string_lossy().into_owned()));
        parts.join(" ")
    }

    /// Runs to completion whatever the exit code; fails only when it cannot start or times out.
    pub async fn output(self) -> Result<Output> {
        let command = self.display();
        let mut cmd = tokio::process::Command::new(&self.program);
        for key in &self.removed {
            cmd.env_remove(key);
        }
        cmd.args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .current_dir(self.cwd.clone().unwrap_or_else(crate::repo_root))
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start `{command}`"))?;
        if let Some(input) = self.stdin {
            let mut pipe = child.stdin.take().context("child stdin")?;
            pipe.write_all(&input)
                .await
                .with_context(|| format!("writing stdin of `{command}`"))?;
            drop(pipe);
        }
        let out = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(out) => out.with_context(|| format!("waiting for `{command}`"))?,
            // The child is killed when the future holding it is dropped (kill_on_drop).
            Err(_) => bail!("`{command}` did not finish within {:?}", self.timeout),
        };
        Ok(Output {
            command,
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Runs and requires exit code 0.
    pub async fn ok(self) -> Result<Output> {
        let out = self.output().await?;
        if !out.success() {
            bail!("{}", out.describe());
        }
        Ok(out)
    }

    /// Runs and requires a non-zero exit code (an expected rejection).
    pub async fn fails(self) -> Result<Output> {
        let out = self.output().await?;
        if out.success() {
            bail!(
                "expected `{}` to fail, but it succeeded:\n{}",
                out.command,
                out.combined()
            );
        }
        Ok(out)
    }
}
