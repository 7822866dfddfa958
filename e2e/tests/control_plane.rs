//! The control plane end to end: the real operator serves routing tables from the cluster, and a
//! real router sidecar (`--control-plane`) follows them: Manager pods' IPs on the frame port, the
//! table changing with a scale, the last table kept while the operator is away, and the stream
//! resumed when it is back.

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::Value;
use switchyard_e2e::k8s::wait_rolled_out;
use switchyard_e2e::operator::{OperatorLock, free_port};
use switchyard_e2e::sidecar::RouterSidecar;
use switchyard_e2e::{
    Operator, OperatorOpts, TestNamespace, cluster, eventually, fixtures, timeout,
};

/// Frame port of manager sidecars (`switchyard_protocol::ports::MANAGER_INBOUND`).
const FRAME_PORT: u16 = 7070;

/// `ip:7070` of the Manager's Ready pods that are not being deleted, sorted.
async fn ready_endpoints(client: &kube::Client, ns: &str, manager: &str) -> Result<Vec<String>> {
    ready_endpoints_of(client, ns, &format!("switchyard.dev/manager={manager}")).await
}

/// `ip:7070` of the Ready, not terminating pods matching the label `selector`, sorted.
async fn ready_endpoints_of(
    client: &kube::Client,
    ns: &str,
    selector: &str,
) -> Result<Vec<String>> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await?;
    let mut out: Vec<String> = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| {
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            Some(format!("{ip}:{FRAME_PORT}"))
        })
        .collect();
    out.sort();
    Ok(out)
}

fn route_endpoints(table: &Value, event: &str) -> Result<Vec<String>> {
    let route = table["routes"]
        .as_array()
        .context("no routes array")?
        .iter()
        .find(|r| r["eventType"] == event)
        .with_context(|| format!("no route for {event}: {table}"))?;
    let mut eps: Vec<String> = route["endpoints"]
        .as_array()
        .context("no endpoints array")?
        .iter()
        .filter_map(|e| e["address"].as_str().map(str::to_owned))
        .collect();
    eps.sort();
    Ok(eps)
}

/// Waits until the sidecar's table comes from the control plane and lists exactly the `replicas`
/// Ready pods of the Manager; returns the table.
async fn wait_table(
    client: &kube::Client,
    ns: &str,
    sidecar: &RouterSidecar,
    replicas: usize,
) -> Result<Value> {
    eventually(
        &format!("the sidecar's table to list {replicas} ready handlers pods"),
        timeout(),
        || async {
            let want = ready_endpoints(client, ns, "handlers").await?;
            ensure!(
                want.len() == replicas,
                "{} ready pods: {want:?}",
                want.len()
            );
            let table = sidecar.routes().await?;
            ensure!(table["source"] == "control-plane", "table: {table}");
            let got = route_endpoints(&table, "noop")?;
            ensure!(got == want, "table lists {got:?}, pods are {want:?}");
            ensure!(
                table["routes"][0]["manager"] == "handlers",
                "table: {table}"
            );
            Ok(table)
        },
    )
    .await
}

fn version(table: &Value) -> u64 {
    table["version"].as_u64().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_follows_the_operators_routing_table() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "cp").await?;
    let cp_port = free_port()?;
    let opts = |id: &str| OperatorOpts {
        control_plane_port: Some(cp_port),
        ..OperatorOpts::new(id)
    };
    let op = Operator::start(c, opts("e2e-cp-1")).await?;
    let manifests = format!(
        "{}---\n{}",
        fixtures::router("edge"),
        fixtures::manager("handlers", "edge", "[noop]", "  replicas: 2\n")
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    wait_rolled_out(&client, &ns.name, "handlers-manager", 2).await?;

    let sidecar =
        RouterSidecar::start(&ns.name, "edge", &format!("http://127.0.0.1:{cp_port}")).await?;
    let result = async {
        let first = wait_table(&client, &ns.name, &sidecar, 2).await?;
        ensure!(first["controlPlane"]["connected"] == true, "{first}");
        let m = op.metrics().await?;
        ensure!(
            m.value("switchyard_operator_control_plane_subscribers") == Some(1.0),
            "subscribers: {:?}",
            m.samples("switchyard_operator_control_plane_subscribers")
        );
        ensure!(m.sum("switchyard_operator_control_plane_tables_sent_total") >= 1.0);

        // Scaling the Manager adds a pod; the table follows with a new version.
        c.kubectl()
            .args([
                "scale",
                "-n",
                &ns.name,
                "managers.switchyard.dev/handlers",
                "--replicas=3",
            ])
            .ok()
            .await?;
        let scaled = wait_table(&client, &ns.name, &sidecar, 3).await?;
        ensure!(
            version(&scaled) > version(&first),
            "version {} after the scale, {} before",
            version(&scaled),
            version(&first)
        );
        anyhow::Ok(scaled)
    }
    .await;
    let scaled = match result {
        Ok(t) => t,
        Err(e) => bail!(
            "{e:#}\n--- sidecar log ---\n{}\n--- operator log ---\n{}",
            sidecar.log_tail(30),
            op.log_tail(30)
        ),
    };

    // The operator goes away: the sidecar says so and keeps serving its last table.
    let code = op.stop().await?;
    ensure!(code == Some(0), "operator exit code {code:?}");
    let kept = eventually(
        "the sidecar to notice the operator is gone",
        timeout(),
        || async {
            let t = sidecar.routes().await?;
            ensure!(t["controlPlane"]["connected"] == false, "{t}");
            Ok(t)
        },
    )
    .await?;
    ensure!(kept["source"] == "control-plane", "{kept}");
    ensure!(version(&kept) == version(&scaled), "{kept}");
    ensure!(
        route_endpoints(&kept, "noop")? == route_endpoints(&scaled, "noop")?,
        "the last table changed while the operator was away: {kept}"
    );

    // Meanwhile a pod is replaced (new IP); the restarted operator's table has it.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns.name);
    let victim = pods
        .list(&ListParams::default().labels("switchyard.dev/manager=handlers"))
        .await?
        .items
        .into_iter()
        .next()
        .context("no handlers pod")?;
    pods.delete(&victim.name_any(), &DeleteParams::default())
        .await?;
    let op = Operator::start(c, opts("e2e-cp-2")).await?;
    let resumed = async {
        let t = eventually("the sidecar to reconnect", timeout(), || async {
            let t = sidecar.routes().await?;
            ensure!(t["controlPlane"]["connected"] == true, "{t}");
            ensure!(
                t["controlPlane"]["tablesReceived"].as_u64()
                    > kept["controlPlane"]["tablesReceived"].as_u64(),
                "{t}"
            );
            Ok(t)
        })
        .await?;
        // kwok may hand the replacement the freed IP, so the pod set is compared by name: the
        // victim is gone, and the table equals the current pods' endpoints.
        eventually("the deleted pod to be gone", timeout(), || async {
            let names: Vec<String> = pods
                .list(&ListParams::default().labels("switchyard.dev/manager=handlers"))
                .await?
                .items
                .iter()
                .map(ResourceExt::name_any)
                .collect();
            ensure!(
                !names.contains(&victim.name_any()),
                "{} still exists: {names:?}",
                victim.name_any()
            );
            Ok(())
        })
        .await?;
        wait_table(&client, &ns.name, &sidecar, 3).await?;
        anyhow::Ok(t)
    }
    .await;
    if let Err(e) = resumed {
        bail!(
            "{e:#}\n--- sidecar log ---\n{}\n--- operator log ---\n{}",
            sidecar.log_tail(30),
            op.log_tail(30)
        );
    }
    op.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_event_type_routes_list_only_their_own_pods() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "cp-split").await?;
    let cp_port = free_port()?;
    let op = Operator::start(
        c,
        OperatorOpts {
            control_plane_port: Some(cp_port),
            ..OperatorOpts::new("e2e-cp-split")
        },
    )
    .await?;
    let manifests = format!(
        "{}---\n{}",
        fixtures::router("edge"),
        fixtures::manager(
            "handlers",
            "edge",
            "[noop, echo]",
            "  replicas: 1\n  scaling:\n    split: perEventType\n"
        )
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    wait_rolled_out(&client, &ns.name, "handlers-noop", 1).await?;
    wait_rolled_out(&client, &ns.name, "handlers-echo", 1).await?;
    let sidecar =
        RouterSidecar::start(&ns.name, "edge", &format!("http://127.0.0.1:{cp_port}")).await?;
    let checked = eventually("one pool per event type", timeout(), || async {
        let table = sidecar.routes().await?;
        ensure!(table["source"] == "control-plane", "table: {table}");
        for event in ["noop", "echo"] {
            let want = ready_endpoints_of(
                &client,
                &ns.name,
                &format!("switchyard.dev/manager=handlers,switchyard.dev/event-type={event}"),
            )
            .await?;
            ensure!(want.len() == 1, "{event}: ready pods {want:?}");
            let got = route_endpoints(&table, event)?;
            ensure!(
                got == want,
                "{event}: table lists {got:?}, its pods are {want:?}"
            );
            let pool = table["routes"]
                .as_array()
                .and_then(|rs| rs.iter().find(|r| r["eventType"] == event))
                .map(|r| r["pool"].clone());
            ensure!(
                pool == Some(Value::from(format!("handlers-{event}"))),
                "{event}: pool {pool:?}"
            );
        }
        Ok(())
    })
    .await;
    if let Err(e) = checked {
        bail!(
            "{e:#}\n--- sidecar log ---\n{}\n--- operator log ---\n{}",
            sidecar.log_tail(30),
            op.log_tail(30)
        );
    }
    op.stop().await?;
    Ok(())
}

/// The next message of `stream`, within the poll timeout.
async fn next_table(
    stream: &mut tonic::Streaming<switchyard_protocol::control::v1::RoutingTable>,
) -> Result<switchyard_protocol::control::v1::RoutingTable> {
    tokio::time::timeout(timeout(), stream.message())
        .await
        .context("no routing-table message in time")??
        .context("the stream ended")
}

/// Opens a `WatchRoutes` stream asking for deltas.
async fn watch(
    cp: &str,
    ns: &str,
) -> Result<tonic::Streaming<switchyard_protocol::control::v1::RoutingTable>> {
    use switchyard_protocol::control::v1::WatchRoutesRequest;
    use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
    let mut client = ControlPlaneClient::connect(cp.to_owned()).await?;
    Ok(client
        .watch_routes(WatchRoutesRequest {
            router: "edge".into(),
            namespace: ns.to_owned(),
            pod: "e2e-deltas".into(),
            deltas: true,
            parts: false,
        })
        .await?
        .into_inner())
}

async fn scale(c: &switchyard_e2e::Cluster, ns: &str, replicas: u32) -> Result<()> {
    c.kubectl()
        .args([
            "scale",
            "-n",
            ns,
            "managers.switchyard.dev/handlers",
            &format!("--replicas={replicas}"),
        ])
        .ok()
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_gets_deltas_and_a_whole_table_after_a_gap_or_a_reconnect() -> Result<()> {
    use prost::Message;
    use switchyard_e2e::scale::mirror::Mirror;
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "cp-deltas").await?;
    let cp_port = free_port()?;
    let opts = |id: &str| OperatorOpts {
        control_plane_port: Some(cp_port),
        ..OperatorOpts::new(id)
    };
    let op = Operator::start(c, opts("e2e-cp-deltas-1")).await?;
    let manifests = format!(
        "{}---\n{}---\n{}",
        fixtures::router("edge"),
        fixtures::manager("handlers", "edge", "[noop]", "  replicas: 2\n"),
        fixtures::manager("other", "edge", "[echo]", "  replicas: 1\n")
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    wait_rolled_out(&client, &ns.name, "handlers-manager", 2).await?;
    wait_rolled_out(&client, &ns.name, "other-manager", 1).await?;
    let cp = format!("http://127.0.0.1:{cp_port}");
    let checked = async {
        // Whole table first (it may predate the last pod's readiness: follow until it lists both).
        let mut stream = watch(&cp, &ns.name).await?;
        let first = next_table(&mut stream).await?;
        ensure!(
            first.base == 0,
            "the first message is a whole table: {first:?}"
        );
        let whole_bytes = first.encoded_len();
        let mut mirror = Mirror::default();
        let mut version = first.version;
        mirror.apply(first)?;
        while mirror.count("noop") < 2 || mirror.count("echo") < 1 {
            let m = next_table(&mut stream).await?;
            version = m.version;
            mirror.apply(m)?;
        }

        // A scale of one Manager: deltas following each other, carrying only its route.
        scale(c, &ns.name, 3).await?;
        while mirror.count("noop") < 3 {
            let d = next_table(&mut stream).await?;
            ensure!(
                d.base == version,
                "delta base {} after version {version}",
                d.base
            );
            let events: Vec<&str> = d.routes.iter().map(|r| r.event_type.as_str()).collect();
            ensure!(events == ["noop"], "the delta carries {events:?}");
            ensure!(
                d.encoded_len() < whole_bytes,
                "a delta of {} bytes, the whole table {whole_bytes}",
                d.encoded_len()
            );
            version = d.version;
            mirror.apply(d)?;
        }

        // A lost message: the next delta does not apply, and a new stream starts whole and current.
        scale(c, &ns.name, 2).await?;
        let _lost = next_table(&mut stream).await?;
        scale(c, &ns.name, 3).await?;
        let after = next_table(&mut stream).await?;
        ensure!(
            mirror.apply(after).is_err(),
            "a delta over a missed one must not apply"
        );
        drop(stream);
        let mut stream = watch(&cp, &ns.name).await?;
        let resync = next_table(&mut stream).await?;
        ensure!(resync.base == 0, "a new stream starts whole: {resync:?}");
        let mut mirror = Mirror::default();
        mirror.apply(resync)?;
        eventually("the resynced table to list 3 pods", timeout(), || async {
            let want = ready_endpoints(&client, &ns.name, "handlers").await?;
            ensure!(want.len() == 3, "ready pods {want:?}");
            Ok(())
        })
        .await?;
        while mirror.count("noop") != 3 {
            mirror.apply(next_table(&mut stream).await?)?;
        }
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = checked {
        bail!("{e:#}\n--- operator log ---\n{}", op.log_tail(40));
    }

    // The operator restarts: the reconnected stream starts whole again.
    op.stop().await?;
    let op = Operator::start(c, opts("e2e-cp-deltas-2")).await?;
    let reconnected = async {
        let mut stream = eventually("a stream from the restarted operator", timeout(), || {
            let (cp, ns) = (cp.clone(), ns.name.clone());
            async move { watch(&cp, &ns).await }
        })
        .await?;
        let first = next_table(&mut stream).await?;
        ensure!(
            first.base == 0,
            "after a restart the stream starts whole: {first:?}"
        );
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = reconnected {
        bail!("{e:#}\n--- operator log ---\n{}", op.log_tail(40));
    }
    op.stop().await?;
    Ok(())
}

/// Idle connections each test opens to the control plane and to the operator's admin port.
const IDLE: usize = 5_000;
/// The operator's open-file limit in that test: below what the idle connections would take
/// without caps, as a container's limit is for a large enough flood.
const IDLE_TEST_FILES: u64 = 4_096;

/// Opens `n` TCP connections to 127.0.0.1:`port` from 127.0.0.2 (another peer than the test's
/// own clients), sending nothing; those the server closed stay open here, as a flood's would.
async fn idle_connections(port: u16, n: usize) -> Result<Vec<tokio::net::TcpStream>> {
    let mut held = Vec::with_capacity(n);
    for batch in (0..n).collect::<Vec<_>>().chunks(250) {
        let opened = futures::future::join_all(batch.iter().map(|_| async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind("127.0.0.2:0".parse()?)?;
            anyhow::Ok(socket.connect(([127, 0, 0, 1], port).into()).await?)
        }))
        .await;
        for s in opened {
            held.push(s.context("an idle connection")?);
        }
    }
    Ok(held)
}

/// Connections `listener` refused by `reason`.
fn refused_connections(m: &switchyard_e2e::Metrics, listener: &str, reason: &str) -> f64 {
    m.samples("switchyard_operator_connections_refused_total")
        .iter()
        .filter(|(l, _)| {
            l.get("listener").map(String::as_str) == Some(listener)
                && l.get("reason").map(String::as_str) == Some(reason)
        })
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_by_the_thousand_leave_the_probes_green_and_the_tables_streaming()
-> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "cp-idle").await?;
    let op = Operator::start(
        c,
        OperatorOpts {
            max_open_files: Some(IDLE_TEST_FILES),
            ..OperatorOpts::new("e2e-cp-idle")
        },
    )
    .await?;
    let manifests = format!(
        "{}---\n{}",
        fixtures::router("edge"),
        fixtures::manager("handlers", "edge", "[noop]", "  replicas: 1\n")
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    wait_rolled_out(&client, &ns.name, "handlers-manager", 1).await?;
    let started = std::time::Instant::now();
    let cp_idle = idle_connections(op.control_plane_port, IDLE).await?;
    let admin_idle = idle_connections(op.port, IDLE).await?;
    eprintln!(
        "[e2e] {} idle connections to the control plane and {} to the admin port in {:?}",
        cp_idle.len(),
        admin_idle.len(),
        started.elapsed()
    );
    let checked = async {
        // The probes answer at once, on their own port.
        for path in ["/healthz", "/readyz"] {
            let (code, body) = switchyard_e2e::operator::http_get_within(
                op.probe_port,
                path,
                std::time::Duration::from_secs(2),
            )
            .await
            .with_context(|| format!("probe {path} under the idle flood"))?;
            ensure!(code == 200, "probe {path}: HTTP {code}: {body}");
        }
        // A table streams, and follows a scale.
        let mut stream = watch(&op.control_plane_url(), &ns.name).await?;
        let first = next_table(&mut stream).await?;
        eprintln!("[e2e] table version {} under the idle flood", first.version);
        scale(c, &ns.name, 2).await?;
        let want = eventually("two pods ready", timeout(), || async {
            let want = ready_endpoints(&client, &ns.name, "handlers").await?;
            ensure!(want.len() == 2, "ready pods {want:?}");
            Ok(want)
        })
        .await?;
        let grown = tokio::time::timeout(timeout(), async {
            loop {
                let t = next_table(&mut stream).await?;
                let endpoints: usize = t
                    .routes
                    .iter()
                    .filter(|r| r.event_type == "noop")
                    .map(|r| r.endpoints.len())
                    .sum();
                if endpoints == want.len() {
                    return anyhow::Ok(t.version);
                }
            }
        })
        .await
        .context("the stream never listed both pods")??;
        eprintln!("[e2e] table version {grown} lists both pods under the idle flood");
        let m = op.metrics().await?;
        let (cp, admin) = (
            refused_connections(&m, "control_plane", "peer_connections"),
            refused_connections(&m, "admin", "peer_connections"),
        );
        eprintln!("[e2e] refused over the peer's share: control plane {cp}, admin {admin}");
        ensure!(cp > 0.0 && admin > 0.0, "no connection refused: {m:?}");
        anyhow::Ok(())
    }
    .await;
    drop((cp_idle, admin_idle));
    let tail = op.log_tail(30);
    op.stop().await?;
    checked.with_context(|| format!("--- operator log ---\n{tail}"))
}
