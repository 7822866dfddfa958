//! The operator as a local process: built with cargo, run with the chart ServiceAccount's token,
//! probed over its metrics port, stopped with SIGTERM (or killed) at the end.

use crate::cluster::Cluster;
use crate::cmd::Cmd;
use crate::lock::FileLock;
use crate::{RELEASE, SYSTEM_NAMESPACE};
use anyhow::{Context, Result, anyhow, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OnceCell;

/// Package and binary name of the operator.
pub const OPERATOR_PACKAGE: &str = "switchyard-operator";

static BINARY: OnceCell<Result<PathBuf, String>> = OnceCell::const_new();

/// Builds the operator once per process (`$CARGO build -p switchyard-operator`) and returns the
/// path of `<target dir>/debug/switchyard-operator`. `SWITCHYARD_OPERATOR_BIN` names a binary to
/// run instead (the scale benchmark runs a release build).
pub async fn operator_binary() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("SWITCHYARD_OPERATOR_BIN").filter(|b| !b.is_empty()) {
        let bin = PathBuf::from(bin);
        if !bin.is_file() {
            bail!("SWITCHYARD_OPERATOR_BIN={} is not a file", bin.display());
        }
        return Ok(bin);
    }
    let result = BINARY
        .get_or_init(|| async { build_operator().await.map_err(|e| format!("{e:#}")) })
        .await;
    result
        .clone()
        .map_err(|e| anyhow!("cannot build the operator: {e}"))
}

async fn build_operator() -> Result<PathBuf> {
    Cmd::cargo()
        .args(["build", "-p", OPERATOR_PACKAGE, "--bin", OPERATOR_PACKAGE])
        .timeout(Duration::from_secs(60 * 60))
        .ok()
        .await?;
    let bin = crate::target_dir().join("debug").join(OPERATOR_PACKAGE);
    if !bin.is_file() {
        bail!(
            "`cargo build` succeeded but {} does not exist",
            bin.display()
        );
    }
    Ok(bin)
}

/// How to run one operator process.
#[derive(Clone, Debug)]
pub struct OperatorOpts {
    /// `--identity` and POD_NAME; also names the log file.
    pub identity: String,
    /// `--leader-election=true|false`.
    pub leader_election: bool,
    /// `--lease-name` (in switchyard-system, where the chart's Role grants Leases).
    pub lease_name: String,
    /// Port of the control-plane gRPC server on 127.0.0.1 (`--control-plane-addr`); a free one
    /// when `None`. Fixed when a test restarts an operator that sidecars follow.
    pub control_plane_port: Option<u16>,
    /// `--mesh-tls`. Off by default here: these operators run outside the cluster and the tests'
    /// sidecars are local processes with no projected token to be certified with, so they dial the
    /// control plane over h2c. `tests/control_plane_mtls.rs` turns it on, under a release whose
    /// ServiceAccount may certify (see [`crate::mesh_release`]).
    pub mesh_tls: bool,
    /// Whose ServiceAccount it runs as, and in which namespace.
    pub run_as: RunAs,
    /// `--sidecar-image` (never pulled: the tests' mesh pods run on kwok).
    pub sidecar_image: String,
    /// Further arguments.
    pub extra_args: Vec<String>,
    /// Further environment (e.g. `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub env: Vec<(String, String)>,
    /// The process's limit of open files (`ulimit -n`), as a container runtime sets one; the
    /// test runner's when `None`.
    pub max_open_files: Option<u64>,
}

impl OperatorOpts {
    /// An operator without leader election.
    pub fn new(identity: impl Into<String>) -> Self {
        OperatorOpts {
            identity: identity.into(),
            leader_election: false,
            lease_name: "switchyard-operator".into(),
            control_plane_port: None,
            mesh_tls: false,
            run_as: RunAs::default(),
            sidecar_image: crate::SIDECAR_IMAGE.into(),
            extra_args: Vec::new(),
            env: Vec::new(),
            max_open_files: None,
        }
    }

    /// Turns leader election on with the given Lease.
    pub fn leader_election(mut self, lease_name: impl Into<String>) -> Self {
        self.leader_election = true;
        self.lease_name = lease_name.into();
        self
    }
}

/// The chart release an operator runs under: the namespace it runs in (POD_NAMESPACE, where it keeps
/// its Lease and, with mesh TLS, the CA Secret) and the ServiceAccount whose token it holds, so its
/// permissions are exactly what that release's chart values grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// The release namespace.
    pub namespace: String,
    /// The release's ServiceAccount (in `namespace`).
    pub service_account: String,
}

impl Default for RunAs {
    /// The shared release `switchyard` in switchyard-system.
    fn default() -> Self {
        RunAs {
            namespace: SYSTEM_NAMESPACE.into(),
            service_account: RELEASE.into(),
        }
    }
}

/// Exclusive right to run operator processes (see [`crate::lock`]). Taking it also kills operator
/// processes that an earlier, aborted test run left behind (recorded in `<work>/operators/`).
#[derive(Debug)]
pub struct OperatorLock {
    _lock: FileLock,
}

impl OperatorLock {
    /// Waits for the lock, then clears leftovers.
    pub async fn acquire() -> Result<OperatorLock> {
        let lock = FileLock::acquire("operator").await?;
        kill_orphans().await;
        Ok(OperatorLock { _lock: lock })
    }
}

fn pid_dir() -> PathBuf {
    let dir = crate::work_dir().join("operators");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// Kills processes recorded in `<work>/operators/PID` that still run the operator binary. Only
/// called with the operator lock held, when no live test owns an operator.
async fn kill_orphans() {
    let Ok(entries) = std::fs::read_dir(pid_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(pid) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let argv0 = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let argv0 = argv0.split(|b| *b == 0).next().unwrap_or_default();
        let runs_operator = Path::new(&*String::from_utf8_lossy(argv0))
            .file_name()
            .is_some_and(|n| n == OPERATOR_PACKAGE);
        if runs_operator {
            eprintln!("[e2e] killing operator pid {pid} left over from an earlier run");
            let _ = Cmd::new("kill")
                .args(["-KILL", &pid.to_string()])
                .output()
                .await;
        }
        let _ = std::fs::remove_file(&path);
    }
}

/// A running operator process. Killed (SIGKILL) when dropped; [`Operator::stop`] ends it with
/// SIGTERM instead and reports the exit code.
#[derive(Debug)]
pub struct Operator {
    child: tokio::process::Child,
    pid: u32,
    /// Port of /metrics, /healthz and /readyz on 127.0.0.1.
    pub port: u16,
    /// Port of the probe server (/healthz, /readyz only) on 127.0.0.1.
    pub probe_port: u16,
    /// Port of the control-plane gRPC server on 127.0.0.1.
    pub control_plane_port: u16,
    /// Port of the Identity service (Certify; mesh TLS only) on 127.0.0.1.
    pub identity_port: u16,
    /// Whether it runs with `--mesh-tls` (its control plane is then TLS only).
    pub mesh_tls: bool,
    /// `--identity`.
    pub identity: String,
    /// File receiving its stdout and stderr.
    pub log: PathBuf,
    pid_file: PathBuf,
}

impl Operator {
    /// Builds (once) and starts the operator with the chart ServiceAccount's kubeconfig, and waits
    /// until /healthz answers 200. Fails with the log tail if it exits or never gets healthy.
    pub async fn start(cluster: &Cluster, opts: OperatorOpts) -> Result<Operator> {
        // A port picked here is free when picked, not when the operator binds it: anything on the
        // machine may take it in between (the operator then exits naming it). Started again, it
        // gets fresh ports; a port given in `opts` is kept.
        let mut attempt = 1;
        loop {
            match Operator::start_once(cluster, &opts).await {
                Err(e)
                    if attempt < PORT_RACE_ATTEMPTS && format!("{e:#}").contains(ADDR_IN_USE) =>
                {
                    eprintln!(
                        "operator {}: a port was taken before it bound it; starting it again",
                        opts.identity
                    );
                    attempt += 1;
                }
                started => return started,
            }
        }
    }

    async fn start_once(cluster: &Cluster, opts: &OperatorOpts) -> Result<Operator> {
        refuse_foreign_operator(cluster).await?;
        let bin = operator_binary().await?;
        let kubeconfig = if opts.run_as == RunAs::default() {
            cluster.operator_kubeconfig().await?.to_path_buf()
        } else {
            cluster
                .service_account_kubeconfig(&opts.run_as.namespace, &opts.run_as.service_account)
                .await?
        };
        // Picked while both are held: a port let go is the kernel's next answer as often as not,
        // and two picks in a row once gave the metrics and control-plane listeners the same one.
        // A control-plane port from `opts` was picked (and let go) by the caller: the metrics port
        // is never it.
        let picked = free_ports::<4>()?;
        let mut others = picked
            .into_iter()
            .filter(|p| Some(*p) != opts.control_plane_port);
        let mut next = || others.next().context("no free port left");
        let port = next()?;
        let probe_port = next()?;
        let identity_port = next()?;
        let control_plane_port = match opts.control_plane_port {
            Some(cp) => cp,
            None => next()?,
        };
        let logs = crate::work_dir().join("logs");
        std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        let log = logs.join(format!(
            "operator-{}-{}.log",
            opts.identity,
            crate::unique_suffix()
        ));
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = match opts.max_open_files {
            None => tokio::process::Command::new(&bin),
            Some(n) => {
                // exec: the shell becomes the operator, so the pid is the operator's.
                let mut sh = tokio::process::Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(&bin);
                sh
            }
        };
        cmd.arg("--metrics-addr")
            .arg(format!("127.0.0.1:{port}"))
            // Never the default 0.0.0.0:7443: two replicas in one test would collide on it.
            .arg(format!(
                "--control-plane-addr=127.0.0.1:{control_plane_port}"
            ))
            .arg(format!("--probe-addr=127.0.0.1:{probe_port}"))
            .arg(format!("--identity-addr=127.0.0.1:{identity_port}"))
            .args(["--sidecar-image", &opts.sidecar_image])
            .args(["--log-format", "text", "--log-level", "info"])
            .arg(format!("--leader-election={}", opts.leader_election))
            .args(["--lease-name", &opts.lease_name])
            .args(["--lease-namespace", &opts.run_as.namespace])
            .args(["--identity", &opts.identity])
            .arg(format!("--mesh-tls={}", opts.mesh_tls))
            .args(&opts.extra_args)
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAMESPACE", &opts.run_as.namespace)
            .env("POD_NAME", &opts.identity)
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .current_dir(crate::work_dir())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("the operator has no pid")?;
        let pid_file = pid_dir().join(pid.to_string());
        let _ = std::fs::write(&pid_file, format!("{}\n", log.display()));
        let mut op = Operator {
            child,
            pid,
            port,
            probe_port,
            control_plane_port,
            identity_port,
            mesh_tls: opts.mesh_tls,
            identity: opts.identity.clone(),
            log,
            pid_file,
        };
        op.wait_healthy(crate::timeout()).await?;
        Ok(op)
    }

    async fn wait_healthy(&mut self, within: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "operator {} exited with {status} before /healthz answered; log {}:\n{}",
                    self.identity,
                    self.log.display(),
                    self.log_tail(60)
                );
            }
            let last = match self.get("/healthz").await {
                Ok((200, _)) => return Ok(()),
                Ok((code, body)) => format!("HTTP {code}: {body}"),
                Err(e) => format!("{e:#}"),
            };
            if start.elapsed() > within {
                bail!(
                    "operator {} not healthy after {within:?} (last: {last}); log {}:\n{}",
                    self.identity,
                    self.log.display(),
                    self.log_tail(60)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The URL of its control plane: `https://` with mesh TLS, `http://` (h2c) without.
    pub fn control_plane_url(&self) -> String {
        let scheme = if self.mesh_tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.control_plane_port)
    }

    /// The URL of its Identity service (mesh TLS only).
    pub fn identity_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.identity_port)
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        crate::tail_file(&self.log, n)
    }

    /// Still running?
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// GET `path` on the metrics port: (status code, body).
    pub async fn get(&self, path: &str) -> Result<(u16, String)> {
        http_get(self.port, path).await
    }

    /// GET /metrics, which must answer 200.
    pub async fn metrics(&self) -> Result<Metrics> {
        match self.get("/metrics").await? {
            (200, body) => Ok(Metrics(body)),
            (code, body) => bail!("GET /metrics answered {code}: {body}"),
        }
    }

    /// SIGTERM, then waits up to 20 s for the exit; returns the exit code (None: killed by a
    /// signal). Kills it and fails if it does not exit in time.
    pub async fn stop(mut self) -> Result<Option<i32>> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "operator {} had already exited with {status}; log:\n{}",
                self.identity,
                self.log_tail(40)
            );
        }
        Cmd::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .ok()
            .await?;
        match tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await {
            Ok(status) => Ok(status?.code()),
            Err(_) => {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                bail!(
                    "operator {} did not exit within 20 s of SIGTERM; log:\n{}",
                    self.identity,
                    self.log_tail(40)
                )
            }
        }
    }

    /// SIGKILL (a crash, as far as the cluster can tell) and reaps it.
    pub async fn kill(&mut self) -> Result<()> {
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        // kill_on_drop sends SIGKILL once the Child goes; do it now so it is dead before the pid
        // file, the record that lets a later run clean up, is removed.
        let _ = self.child.start_kill();
        let _ = std::fs::remove_file(&self.pid_file);
    }
}

/// Lease of an operator started with the chart's defaults (the tests' own operators either run
/// without leader election or with a Lease of a unique name).
pub const DEFAULT_LEASE: &str = "switchyard-operator";

/// Namespace (and release) of the operator `e2e/cluster/demo` installs.
pub const DEMO_NAMESPACE: &str = "switchyard-demo";

/// Fails when another operator, one these tests did not start (say `e2e/cluster/demo`'s), is
/// running against the cluster: it would reconcile the tests' objects too, so a test could pass
/// on its work or fail on its fights. Detected by a recently renewed default Lease.
pub async fn refuse_foreign_operator(cluster: &Cluster) -> Result<()> {
    // The chart's release in switchyard-system, `e2e/cluster/demo`'s operator pod, and the pod
    // operator of `tests/pods.rs` and the upgrade test's (left behind only by a run that died; each
    // test removes its own before it starts).
    for namespace in [
        SYSTEM_NAMESPACE,
        DEMO_NAMESPACE,
        crate::NODE_NAMESPACE,
        crate::UPGRADE_NAMESPACE,
    ] {
        refuse_lease_holder(cluster, namespace).await?;
    }
    Ok(())
}

async fn refuse_lease_holder(cluster: &Cluster, namespace: &str) -> Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: kube::Api<Lease> = kube::Api::namespaced(cluster.client().await?, namespace);
    let Some(lease) = leases.get_opt(DEFAULT_LEASE).await? else {
        return Ok(());
    };
    let spec = lease.spec.unwrap_or_default();
    let (Some(holder), Some(renewed)) = (spec.holder_identity, spec.renew_time) else {
        return Ok(());
    };
    let age = k8s_openapi::jiff::Timestamp::now().as_second() - renewed.0.as_second();
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    if !holder.is_empty() && age <= 2 * duration {
        bail!(
            "another switchyard operator is running against this cluster: Lease \
             {namespace}/{DEFAULT_LEASE} is held by {holder:?}, renewed {age}s ago. It would \
             reconcile the tests' objects as well; stop it first (e.g. `e2e/cluster/demo --down`, \
             or `helm uninstall` its release)"
        );
    }
    Ok(())
}

/// A TCP port on 127.0.0.1 free at the time of the call.
pub fn free_port() -> Result<u16> {
    let [port] = free_ports()?;
    Ok(port)
}

/// `N` distinct free ports on 127.0.0.1, all held until all are picked.
pub fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let held = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0"))
        .collect::<Result<Vec<_>>>()?;
    let mut ports = [0; N];
    for (p, l) in ports.iter_mut().zip(&held) {
        *p = l.local_addr()?.port();
    }
    Ok(ports)
}

/// Starts of one operator when the ports picked for it were taken before it bound them.
const PORT_RACE_ATTEMPTS: u32 = 3;
/// What the operator's log says when a port it was given is taken (EADDRINUSE).
const ADDR_IN_USE: &str = "Address already in use";

/// Minimal HTTP/1.0 GET to 127.0.0.1:`port` (no client dependency needed): (status, body).
pub async fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    http_get_within(port, path, Duration::from_secs(10)).await
}

/// [`http_get`] waiting up to `limit` for the whole answer.
pub async fn http_get_within(port: u16, path: &str, limit: Duration) -> Result<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        anyhow::Ok(raw)
    };
    let raw = tokio::time::timeout(limit, exchange)
        .await
        .map_err(|_| anyhow!("GET 127.0.0.1:{port}{path} timed out"))?
        .with_context(|| format!("GET 127.0.0.1:{port}{path}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("malformed HTTP response from :{port}{path}: {text:?}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| anyhow!("no status code in {head:?}"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((code, body))
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
        else {
            break;
        };
        if size == 0 || after.len() < size {
            out.push_str(after.get(..size.min(after.len())).unwrap_or(""));
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

/// One Prometheus / OpenMetrics text exposition.
#[derive(Clone, Debug)]
pub struct Metrics(pub String);

/// Labels of one sample.
pub type Labels = BTreeMap<String, String>;

impl Metrics {
    /// Every sample of exactly the metric `name` (e.g. `switchyard_operator_leader`, or a
    /// histogram's `..._bucket`), with its labels.
    pub fn samples(&self, name: &str) -> Vec<(Labels, f64)> {
        let mut out = Vec::new();
        for line in self.0.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            if &line[..end] != name {
                continue;
            }
            let (labels, rest) = if line[end..].starts_with('{') {
                match line[end..].find('}') {
                    Some(close) => (
                        parse_labels(&line[end + 1..end + close]),
                        &line[end + close + 1..],
                    ),
                    None => continue,
                }
            } else {
                (Labels::new(), &line[end..])
            };
            if let Some(value) = rest.split_whitespace().next().and_then(parse_value) {
                out.push((labels, value));
            }
        }
        out
    }

    /// Sum over all samples of `name` (0 when absent).
    pub fn sum(&self, name: &str) -> f64 {
        self.samples(name).iter().map(|(_, v)| v).sum()
    }

    /// Sum over the samples of `name` whose `label` value contains `needle`, case-insensitively.
    pub fn sum_where(&self, name: &str, label: &str, needle: &str) -> f64 {
        let needle = needle.to_ascii_lowercase();
        self.samples(name)
            .iter()
            .filter(|(l, _)| {
                l.get(label)
                    .is_some_and(|v| v.to_ascii_lowercase().contains(&needle))
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// The value of a metric that has one sample, if present.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.samples(name).first().map(|(_, v)| *v)
    }

    /// Whether any line (sample or `# TYPE`/`# HELP`) names the metric family `name`.
    pub fn mentions(&self, name: &str) -> bool {
        self.0.lines().any(|l| {
            let l = l
                .trim_start_matches("# TYPE ")
                .trim_start_matches("# HELP ");
            l.starts_with(name)
        })
    }
}

fn parse_value(v: &str) -> Option<f64> {
    match v {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => v.parse().ok(),
    }
}

fn parse_labels(s: &str) -> Labels {
    let mut labels = Labels::new();
    let mut rest = s;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, e)) = chars.next() {
                        value.push(if e == 'n' { '\n' } else { e });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(key.trim().trim_start_matches(',').trim().to_string(), value);
        rest = after[end..].trim_start_matches(',');
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prometheus_and_openmetrics_samples() {
        let m = Metrics(
            "# HELP switchyard_operator_leader Leader.\n\
             # TYPE switchyard_operator_leader gauge\n\
             switchyard_operator_leader 1\n\
             switchyard_operator_reconciles_total{controller=\"router\"} 3\n\
             switchyard_operator_reconciles_total{controller=\"manager\",x=\"a\\\"b\"} 2 1700000000\n\
             switchyard_operator_reconcile_duration_seconds_bucket{controller=\"router\",le=\"+Inf\"} 3\n\
             # EOF\n"
                .into(),
        );
        assert_eq!(m.value("switchyard_operator_leader"), Some(1.0));
        assert_eq!(m.sum("switchyard_operator_reconciles_total"), 5.0);
        assert_eq!(
            m.sum_where(
                "switchyard_operator_reconciles_total",
                "controller",
                "Router"
            ),
            3.0
        );
        let s = m.samples("switchyard_operator_reconciles_total");
        assert_eq!(s[1].0.get("x").map(String::as_str), Some("a\"b"));
        assert!(m.mentions("switchyard_operator_reconcile_duration_seconds"));
        assert_eq!(
            m.samples("switchyard_operator_reconcile_duration_seconds_bucket")
                .len(),
            1
        );
    }

    #[test]
    fn dechunks() {
        assert_eq!(
            dechunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            "hello world"
        );
    }
}
