//! `switchyard tap --kubeconfig` against real pods: the CLI binary finds a Router's and a Manager's
//! pods by their labels and reads each sidecar's `/tap` through the API server's `pods/portforward`
//! (the kubelet serves the forward, so the pods run on the real node, as in `tests/pods.rs`: a
//! release made by `deploy/release`, the operator a pod from it, the quickstart in a namespace
//! enforcing Pod Security `restricted` whose pods go to the node). Requests carrying a credential, a
//! header the tapper hides and a known trace go through the Router pod; both taps show the same
//! event (type, ce-id, status, trace, latency; the Router's as JSON lines, parsed), filtered in the
//! sidecar, and no credential. A ServiceAccount that may list pods but do nothing on
//! `pods/portforward`, then only `create` it, is refused with the API server's reason naming the
//! verb missing and what a tap needs; granted `get` too, the same kubeconfig taps. Last, with the
//! Manager at two pods, one tap of it forwards to both and shows the events each pod handled.

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use switchyard_e2e::client::RouterClient;
use switchyard_e2e::node::Node;
use switchyard_e2e::pod_operator::PodOperator;
use switchyard_e2e::pods::{check_running_on, live_pods, routed_ip};
use switchyard_e2e::release::release;
use switchyard_e2e::sidecar::cli_binary;
use switchyard_e2e::{Cluster, Cmd, TestNamespace, cluster, eventually, fixtures, timeout};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;

const ROUTER_PODS: &str = "switchyard.dev/router=edge";
const MANAGER_PODS: &str = "switchyard.dev/manager=handlers";
/// What the requests carry that no tap may show.
const CREDENTIAL: &str = "Bearer s3cr3t-credential-e2e-9f8e";
const CUSTOM_SECRET: &str = "custom-s3cr3t-e2e-7d6c";
/// The trace the requests travel in.
const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
/// The echo body (15 bytes).
const ECHO: &str = r#"{"value":54321}"#;
/// The ServiceAccount of the negative case: it may read pods, not forward to them.
const VIEWER: &str = "tap-viewer";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tap_reads_real_pods_through_the_api_servers_portforward() -> Result<()> {
    let c = cluster().await?;
    let node = Node::load()?;
    let release = release(&node).await?;
    let op = PodOperator::install(c, &node, release).await?;
    let result = tap_the_quickstart(c, &node).await;
    // The operator release goes whatever happened, so the tests after this one find none.
    let removed = op.uninstall(c).await;
    result?;
    removed
}

async fn tap_the_quickstart(c: &'static Cluster, node: &Node) -> Result<()> {
    let ns = node_namespace(c, node).await?;
    c.kubectl()
        .args(["-n", &ns.name, "apply", "-f"])
        .arg(fixtures::quickstart())
        .ok()
        .await?;
    let client = c.client().await?;
    let router = ready_pod(&client, node, &ns.name, ROUTER_PODS).await?;
    let manager = ready_pod(&client, node, &ns.name, MANAGER_PODS).await?;
    let http = RouterClient::new(SocketAddr::new(
        routed_ip(node, &router).await?.into(),
        8080,
    ));
    eventually(
        "GET /noop answered 200 through the pods",
        timeout(),
        || async {
            let a = http.get("/noop").await?;
            ensure!(a.status == 200, "GET /noop: {} {}", a.status, a.body);
            Ok(())
        },
    )
    .await?;
    let pods = Pods {
        ns: ns.name.clone(),
        router: router.name_any(),
        manager: manager.name_any(),
    };
    let cli = cli_binary().await?;
    both_taps_show_the_same_event_without_credentials(&cli, &c.kubeconfig, &pods, &http).await?;
    without_portforward_rbac_the_tap_is_refused_naming_it(c, &cli, &pods).await?;
    a_tap_of_a_scaled_manager_reads_every_pod(c, node, &cli, &pods.ns, &http).await
}

/// The Manager at two pods (`kubectl scale manager handlers --replicas 2`): one tap of
/// `--manager handlers` opens a port-forward to each and shows the events each pod handled, named
/// by pod.
async fn a_tap_of_a_scaled_manager_reads_every_pod(
    c: &Cluster,
    node: &Node,
    cli: &Path,
    ns: &str,
    http: &RouterClient,
) -> Result<()> {
    c.kubectl()
        .args(["-n", ns, "scale", "manager", "handlers", "--replicas", "2"])
        .ok()
        .await?;
    let client = c.client().await?;
    let names = eventually("two Ready manager pods on the node", timeout(), || async {
        let pods = live_pods(&client, ns, MANAGER_PODS).await?;
        ensure!(pods.len() == 2, "{} pods {MANAGER_PODS}", pods.len());
        for p in &pods {
            check_running_on(p, &node.name)?;
        }
        Ok(pods
            .iter()
            .map(|p| format!("manager {ns}/{}", p.name_any()))
            .collect::<Vec<_>>())
    })
    .await?;
    let mut tap = Tap::start(
        cli,
        [
            "--kubeconfig".to_owned(),
            c.kubeconfig.display().to_string(),
            "-n".to_owned(),
            ns.to_owned(),
            "--manager".to_owned(),
            "handlers".to_owned(),
        ],
    )?;
    let checked: Result<()> = async {
        for name in &names {
            tap.seen_or_wait(&format!("{name}'s tap open"), |l| {
                l == format!("[{name}] tapping the manager (at most 100 events/s)")
            })
            .await?;
        }
        // The router spreads requests over the pods once both are in its table: send until each
        // pod's tap has shown one.
        let deadline = tokio::time::Instant::now() + timeout();
        loop {
            let noop = send(http, "GET", "/noop", None).await?;
            ensure!(noop == 200, "GET /noop answered {noop}");
            let out = tap.output();
            let quiet: Vec<&String> = names
                .iter()
                .filter(|n| !out.contains(&format!("[{n}] 200 type=noop ")))
                .collect();
            if quiet.is_empty() {
                return Ok(());
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "no noop tapped at {quiet:?} within {:?}:\n{out}",
                timeout()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    .await;
    tap.stop().await?;
    checked?;
    eprintln!("[e2e] one tap read both manager pods: {names:?}");
    Ok(())
}

/// The namespace and pod names of the applied quickstart.
struct Pods {
    ns: String,
    router: String,
    manager: String,
}

/// A Manager tap in text with headers, a Router tap in JSON filtered to `echo` stopping after one
/// event: a `noop` then an `echo` sent with a credential.
async fn both_taps_show_the_same_event_without_credentials(
    cli: &Path,
    kubeconfig: &Path,
    pods: &Pods,
    http: &RouterClient,
) -> Result<()> {
    let cluster_flags = |role: &str, name: &str| {
        vec![
            "--kubeconfig".to_owned(),
            kubeconfig.display().to_string(),
            "-n".to_owned(),
            pods.ns.clone(),
            format!("--{role}"),
            name.to_owned(),
        ]
    };
    let manager_name = format!("manager {}/{}", pods.ns, pods.manager);
    let router_name = format!("router {}/{}", pods.ns, pods.router);
    let mut manager_tap = Tap::start(
        cli,
        cluster_flags("manager", "handlers")
            .into_iter()
            .chain(["--headers", "--payload", "5"].map(String::from)),
    )?;
    let mut router_tap = Tap::start(
        cli,
        cluster_flags("router", "edge").into_iter().chain(
            [
                "--type",
                "echo",
                "--payload",
                "4",
                "--hide-header",
                "X-Custom",
                "-o",
                "json",
                "--count",
                "1",
            ]
            .map(String::from),
        ),
    )?;
    let checked: Result<()> = async {
        manager_tap
            .wait_line("the manager's tap open", |l| {
                l == format!("[{manager_name}] tapping the manager (at most 100 events/s)")
            })
            .await?;
        router_tap
            .wait_line("the router's tap open", |l| {
                l.contains(r#""kind":"tapping""#) && l.contains(r#""role":"router""#)
            })
            .await?;
        let noop = send(http, "GET", "/noop", None).await?;
        ensure!(noop == 200, "GET /noop answered {noop}");
        let echo = send(http, "POST", "/echo", Some(ECHO)).await?;
        ensure!(echo == 200, "POST /echo answered {echo}");

        let ce_id = router_sees_only_the_echo(&mut router_tap, &router_name).await?;
        // `--count 1`: the tap stops by itself after that event, closing its port-forward.
        let exit = router_tap.exit().await?;
        ensure!(
            exit.success(),
            "the router's tap exited with {exit} after its one event:\n{}",
            router_tap.output()
        );
        manager_sees_both(&mut manager_tap, &manager_name, &ce_id).await?;
        for tap in [&mut manager_tap, &mut router_tap] {
            let out = tap.output();
            for secret in [CREDENTIAL, "s3cr3t-credential"] {
                ensure!(!out.contains(secret), "{secret} shown:\n{out}");
            }
        }
        ensure!(
            !router_tap.output().contains(CUSTOM_SECRET),
            "the header the router's tap hid was shown:\n{}",
            router_tap.output()
        );
        Ok(())
    }
    .await;
    manager_tap.stop().await?;
    router_tap.stop().await?;
    checked
}

/// The Router tap's one event, parsed: the `echo` (the `noop` sent first was filtered out in the
/// sidecar), its fields, its credential hidden. Returns its ce-id.
async fn router_sees_only_the_echo(tap: &mut Tap, router_name: &str) -> Result<String> {
    let line = tap
        .wait_line("the router's event", |l| l.contains(r#""kind":"event""#))
        .await?;
    let v: serde_json::Value =
        serde_json::from_str(&line).with_context(|| format!("not JSON: {line}"))?;
    ensure!(
        v["type"] == "echo",
        "the noop came through --type echo: {v}"
    );
    ensure!(v["sidecar"] == router_name, "{v}");
    ensure!(v["status"] == 200, "{v}");
    ensure!(v["method"] == "POST" && v["path"] == "/echo", "{v}");
    ensure!(v["trace_id"] == TRACE_ID, "{v}");
    ensure!(
        v["latency_ms"].as_f64().is_some_and(|l| l > 0.0),
        "no latency: {v}"
    );
    ensure!(
        v["server_timing"]
            .as_str()
            .is_some_and(|t| t.contains("total;dur=")),
        "{v}"
    );
    ensure!(v["payload"] == "{\"va" && v["payload_bytes"] == 15, "{v}");
    ensure!(v["payload_cut"] == true, "{v}");
    ensure!(v["headers"]["authorization"] == "(hidden)", "{v}");
    ensure!(v["headers"]["x-custom"] == "(hidden)", "{v}");
    ensure!(v["headers"]["content-type"] == "application/json", "{v}");
    let id = v["ce_id"].as_str().unwrap_or_default();
    ensure!(!id.is_empty(), "no ce_id: {v}");
    Ok(id.to_owned())
}

/// The Manager tap's text: the `noop`, then the `echo` with the Router's ce-id and the trace, its
/// payload cut at 5 bytes.
async fn manager_sees_both(tap: &mut Tap, manager_name: &str, ce_id: &str) -> Result<()> {
    tap.seen_or_wait("the manager's noop", |l| {
        l.starts_with(&format!("[{manager_name}] 200 type=noop "))
    })
    .await?;
    let line = tap
        .seen_or_wait("the manager's echo", |l| {
            l.starts_with(&format!("[{manager_name}] 200 type=echo "))
        })
        .await?;
    ensure!(
        field(&line, "id") == Some(ce_id),
        "not the router's {ce_id}: {line}"
    );
    ensure!(field(&line, "trace") == Some(TRACE_ID), "{line}");
    ensure!(
        field(&line, "source").is_some_and(|s| !s.is_empty()),
        "{line}"
    );
    ensure!(
        field(&line, "latency").is_some_and(|l| l.ends_with("ms")),
        "{line}"
    );
    // The event's own lines follow it, headers (if it carried any) then the payload.
    let mut next = tap.next_line().await?;
    if next.starts_with("    headers: ") {
        next = tap.next_line().await?;
    }
    ensure!(
        next == "    payload: {\"val ... (15 bytes in all)",
        "the echo's payload line: {next:?}"
    );
    Ok(())
}

/// The value of `key=` in a text line (up to the next space).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// A ServiceAccount that may get and list pods, nothing on `pods/portforward`: the tap finds the
/// pod, then the API server refuses the forward and the CLI says so in its words (the user, the
/// verb), with what a tap needs. `create` alone, which `kubectl port-forward` over SPDY needed, is
/// still refused: a WebSocket forward is a GET, authorized as `get` (and from Kubernetes 1.35 as
/// `create` too). With both granted, the same kubeconfig taps.
async fn without_portforward_rbac_the_tap_is_refused_naming_it(
    c: &Cluster,
    cli: &Path,
    pods: &Pods,
) -> Result<()> {
    let ns = &pods.ns;
    c.kubectl()
        .args(["-n", ns, "create", "serviceaccount", VIEWER])
        .ok()
        .await?;
    grant(c, ns, "pod-reader", &["get", "list", "watch"], "pods").await?;
    let kubeconfig = KubeconfigFile(c.service_account_kubeconfig(ns, VIEWER).await?);
    let who = format!("system:serviceaccount:{ns}:{VIEWER}");
    let may = |verb: &'static str, resource: &'static str| {
        let who = who.clone();
        async move { can_i(c, &who, ns, verb, resource).await }
    };
    eventually("the pod-reader Role bound", timeout(), || async {
        ensure!(
            may("list", "pods").await?
                && !may("get", "pods/portforward").await?
                && !may("create", "pods/portforward").await?,
            "{who} should list pods and nothing on pods/portforward"
        );
        Ok(())
    })
    .await?;
    let tap = || {
        Cmd::new(cli)
            .arg("tap")
            .arg("--kubeconfig")
            .arg(&kubeconfig.0)
            .args(["-n", ns, "--manager", "handlers", "--count", "1"])
            .timeout(timeout())
    };
    let refused = |stderr: &str| -> Result<()> {
        for said in [
            format!(
                "switchyard tap: manager {ns}/{m}: port-forward to manager {ns}/{m}:9901 refused: ",
                m = pods.manager
            ),
            format!(r#"User "{who}" cannot get resource "pods/portforward""#),
            "; a tap needs get and create on pods/portforward in the pod's namespace".to_owned(),
        ] {
            ensure!(
                stderr.contains(&said),
                "the refusal does not say {said:?}:\n{stderr}"
            );
        }
        ensure!(
            stderr.lines().last() == Some("switchyard: the tap failed (why is said above)"),
            "the last line is not the command's error:\n{stderr}"
        );
        Ok(())
    };
    let first = tap().fails().await?.stderr;
    refused(&first)?;
    eprintln!("[e2e] tap without pods/portforward:\n{}", first.trim_end());

    grant(c, ns, "pod-forward-create", &["create"], "pods/portforward").await?;
    eventually("create on pods/portforward granted", timeout(), || async {
        ensure!(may("create", "pods/portforward").await?, "not yet");
        Ok(())
    })
    .await?;
    refused(&tap().fails().await?.stderr).context("with create alone")?;

    grant(c, ns, "pod-forward-get", &["get"], "pods/portforward").await?;
    eventually(
        "the granted ServiceAccount's tap to open",
        timeout(),
        || async {
            let mut granted = Tap::start(
                cli,
                [
                    "--kubeconfig".to_owned(),
                    kubeconfig.0.display().to_string(),
                    "-n".to_owned(),
                    ns.clone(),
                    "--manager".to_owned(),
                    "handlers".to_owned(),
                ],
            )?;
            let opened = granted
                .wait_line("the tap open", |l| l.contains("tapping the manager"))
                .await;
            granted.stop().await?;
            opened.map(drop)
        },
    )
    .await
}

/// A Role `name` allowing `verbs` on `resource` (`pods` or `pods/portforward`), bound to
/// [`VIEWER`].
async fn grant(c: &Cluster, ns: &str, name: &str, verbs: &[&str], resource: &str) -> Result<()> {
    c.kubectl()
        .args(["-n", ns, "create", "role", name, "--resource", resource])
        .arg(format!("--verb={}", verbs.join(",")))
        .ok()
        .await?;
    c.kubectl()
        .args(["-n", ns, "create", "rolebinding", name, "--role", name])
        .arg(format!("--serviceaccount={ns}:{VIEWER}"))
        .ok()
        .await?;
    Ok(())
}

/// `kubectl auth can-i VERB RESOURCE[/SUBRESOURCE] --as WHO -n NS`.
async fn can_i(c: &Cluster, who: &str, ns: &str, verb: &str, resource: &str) -> Result<bool> {
    // `pods/portforward` as one word would ask about a pod named portforward.
    let cmd = match resource.split_once('/') {
        Some((resource, sub)) => {
            c.kubectl()
                .args(["auth", "can-i", verb, resource, "--subresource", sub])
        }
        None => c.kubectl().args(["auth", "can-i", verb, resource]),
    };
    let out = cmd.args(["--as", who, "-n", ns]).output().await?;
    // Exit code 1 with "no" is an answer, not a failure.
    match out.stdout.trim() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => bail!("{}", out.describe()),
    }
}

/// A token kubeconfig of the test, removed when dropped.
struct KubeconfigFile(PathBuf);

impl Drop for KubeconfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A namespace enforcing Pod Security `restricted` whose pods all go to the real node.
async fn node_namespace(c: &Cluster, node: &Node) -> Result<TestNamespace> {
    let labels = BTreeMap::from([
        (
            "pod-security.kubernetes.io/enforce".to_string(),
            "restricted".to_string(),
        ),
        (
            "pod-security.kubernetes.io/enforce-version".to_string(),
            "latest".to_string(),
        ),
    ]);
    TestNamespace::create_with(c, "tap", labels, node.namespace_annotations()).await
}

/// The one pod of `ns` matching `selector`, once it is Ready on the real node.
async fn ready_pod(client: &kube::Client, node: &Node, ns: &str, selector: &str) -> Result<Pod> {
    eventually(
        &format!("a Ready pod {selector} on the node"),
        timeout(),
        || async {
            let pods = live_pods(client, ns, selector).await?;
            ensure!(pods.len() == 1, "{} pods {selector}", pods.len());
            check_running_on(&pods[0], &node.name)?;
            Ok(pods[0].clone())
        },
    )
    .await
}

/// `METHOD path` to the Router pod with the credential, the header the router's tap hides and the
/// trace: the answer's status.
async fn send(http: &RouterClient, method: &str, path: &str, body: Option<&str>) -> Result<u16> {
    let traceparent = format!("00-{TRACE_ID}-00f067aa0ba902b7-01");
    let headers = [
        ("authorization", CREDENTIAL),
        ("x-custom", CUSTOM_SECRET),
        ("traceparent", traceparent.as_str()),
    ];
    let a = http
        .send_with(method, path, &headers, body, Duration::from_secs(10))
        .await?;
    Ok(a.status)
}

/// A running `switchyard tap`: its stdout lines, and its stderr lines marked `stderr: `, collected
/// as they come; stopped by [`Tap::stop`] (and killed if dropped).
struct Tap {
    child: tokio::process::Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Tap {
    fn start(cli: &Path, args: impl IntoIterator<Item = String>) -> Result<Tap> {
        let mut child = tokio::process::Command::new(cli)
            .arg("tap")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} tap", cli.display()))?;
        let (tx, lines) = mpsc::unbounded_channel();
        let stdout = child.stdout.take().context("the tap's stdout")?;
        let stderr = child.stderr.take().context("the tap's stderr")?;
        tokio::spawn(forward_lines(stdout, "", tx.clone()));
        tokio::spawn(forward_lines(stderr, "stderr: ", tx));
        Ok(Tap {
            child,
            lines,
            seen: Vec::new(),
        })
    }

    /// The first line from now on for which `pred` holds, within [`timeout`]; the error shows
    /// every line so far (and says when the tap ended first).
    async fn wait_line(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> Result<String> {
        let deadline = tokio::time::Instant::now() + timeout();
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return Ok(line);
                    }
                }
                Ok(None) => bail!(
                    "{what}: the tap ended first; it printed:\n{}",
                    self.seen.join("\n")
                ),
                Err(_) => bail!(
                    "{what}: not within {:?}; the tap printed:\n{}",
                    timeout(),
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// A line already read for which `pred` holds, or the next such line: for events whose order
    /// with the other lines is not fixed.
    async fn seen_or_wait(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> Result<String> {
        match self.seen.iter().find(|l| pred(l)) {
            Some(l) => Ok(l.clone()),
            None => self.wait_line(what, pred).await,
        }
    }

    /// The next stdout line.
    async fn next_line(&mut self) -> Result<String> {
        self.wait_line("the next line", |l| !l.starts_with("stderr: "))
            .await
    }

    /// Every line printed so far, those not read yet included.
    fn output(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }

    /// Waits for the tap to exit by itself, within [`timeout`].
    async fn exit(&mut self) -> Result<std::process::ExitStatus> {
        tokio::time::timeout(timeout(), self.child.wait())
            .await
            .with_context(|| format!("the tap did not exit within {:?}", timeout()))?
            .context("waiting for the tap")
    }

    /// Kills the tap (if still running) and reaps it.
    async fn stop(&mut self) -> Result<()> {
        if self.child.try_wait()?.is_none() {
            self.child.kill().await.context("stopping the tap")?;
        }
        Ok(())
    }
}

/// Sends each line of `pipe` to `tx`, with `mark` in front, until it closes.
async fn forward_lines(
    pipe: impl AsyncRead + Unpin,
    mark: &'static str,
    tx: mpsc::UnboundedSender<String>,
) {
    let mut lines = BufReader::new(pipe).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if tx.send(format!("{mark}{line}")).is_err() {
            return;
        }
    }
}
