//! The autoscaler end to end: the real operator receives load reports on its control plane (pushed
//! here by a `ReportLoad` client standing in for a router sidecar), and a load step on one event
//! type scales the Manager that handles it through its scale subresource, while the other Manager
//! stays put; when the load stops, replicas return to min after the (short) windows.
//!
//! Every test runs the chart's default of two operator replicas and sends its reports to the
//! standby, which forwards them to the leader's autoscaler; one kills the leader during a load step.

use anyhow::{Context, Result, bail, ensure};
use futures::SinkExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use switchyard_crds::Manager;
use switchyard_e2e::k8s::wait_rolled_out;
use switchyard_e2e::operator::{OperatorLock, http_get};
use switchyard_e2e::replicas::leader_gauge;
use switchyard_e2e::sidecar::RouterSidecar;
use switchyard_e2e::{Replicas, TestNamespace, cluster, eventually, fixtures, timeout};
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use switchyard_protocol::control::v1::{EventLoad, LoadReport};
use tokio::sync::watch;

/// The loose correctness bound of a reaction on a noisy shared machine; the 3 s goal is measured
/// by the benchmarks, not here.
const REACTION_BOUND: Duration = Duration::from_secs(15);

/// Short windows, so the test sees a full cycle in well under a minute.
const SCALING: &str = "  replicas: 1
  scaling:
    enabled: true
    minReplicas: 1
    maxReplicas: 5
    targets:
      EVENT: {targetInFlight: 10}
    scaleUp: {stableWindow: 6s, panicWindow: 2s}
    scaleDown: {stabilizationWindow: 6s}
";

/// Pushes one report every 500 ms with the in-flight figure of each event type currently in `load`,
/// as a router sidecar of `ns` would, until the task is aborted. The period is the pace of the
/// stand-in router, not a wait for anything.
fn push_reports(
    cp: String,
    ns: String,
    load: watch::Receiver<Vec<(String, u32)>>,
) -> tokio::task::JoinHandle<Result<()>> {
    push_reports_as(cp, ns, ("router", "edge", "edge-router-e2e"), load)
}

/// [`push_reports`] as a sidecar of `role` of Router or Manager `owner`, pod `pod`.
fn push_reports_as(
    cp: String,
    ns: String,
    (role, owner, pod): (&'static str, &'static str, &'static str),
    load: watch::Receiver<Vec<(String, u32)>>,
) -> tokio::task::JoinHandle<Result<()>> {
    tokio::spawn(async move {
        let mut client = ControlPlaneClient::connect(cp).await?;
        let (mut tx, rx) = futures::channel::mpsc::channel::<LoadReport>(4);
        let call = tokio::spawn(async move { client.report_load(rx).await });
        let mut every = tokio::time::interval(Duration::from_millis(500));
        loop {
            every.tick().await;
            let events = load
                .borrow()
                .iter()
                .map(|(e, n)| EventLoad {
                    event_type: e.clone(),
                    in_flight: *n,
                    arrivals_per_second: f64::from(*n) * 10.0,
                    latency_p50_ms: 5.0,
                    latency_p99_ms: 20.0,
                    // A quarter of the in-flight figure refused per 500 ms window.
                    shed: u64::from(*n) / 4,
                    ..EventLoad::default()
                })
                .collect();
            let report = LoadReport {
                pod: pod.into(),
                namespace: ns.clone(),
                role: role.into(),
                owner: owner.into(),
                timestamp_ms: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                window_ms: 500,
                events,
            };
            if tx.send(report).await.is_err() {
                let answer = call.await?;
                bail!("the report stream ended: {answer:?}");
            }
        }
    })
}

async fn spec_replicas(api: &Api<Manager>, name: &str) -> Result<i32> {
    Ok(api.get(name).await?.spec.replicas)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_step_scales_only_the_busy_manager_and_it_returns_to_min() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "scale").await?;
    let ops = Replicas::start(c, "e2e-scale").await?;
    let manifests = format!(
        "{}---\n{}---\n{}",
        fixtures::router_routing("edge", &["noop", "echo"]),
        fixtures::manager("hot", "edge", "[noop]", &SCALING.replace("EVENT", "noop")),
        fixtures::manager("cold", "edge", "[echo]", &SCALING.replace("EVENT", "echo")),
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    wait_rolled_out(&client, &ns.name, "hot-manager", 1).await?;
    wait_rolled_out(&client, &ns.name, "cold-manager", 1).await?;

    let (load_tx, load_rx) = watch::channel(vec![("noop".to_owned(), 0), ("echo".to_owned(), 3)]);
    let pusher = push_reports(ops.standby_url(), ns.name.clone(), load_rx);
    let managers = Api::<Manager>::namespaced(client.clone(), &ns.name);
    let result = async {
        // Quiet load first: both stay at min, and the load shows in status.
        eventually(
            "load figures in the cold Manager's status",
            timeout(),
            || async {
                let m = managers.get("cold").await?;
                let s = m.status.context("no status")?;
                let e = s
                    .events
                    .iter()
                    .find(|e| e.event == "echo")
                    .context("no echo entry")?;
                ensure!(e.in_flight == Some(3.0), "status events: {:?}", s.events);
                Ok(())
            },
        )
        .await?;
        ensure!(spec_replicas(&managers, "hot").await? == 1);

        // The step: 40 in flight against a target of 10 per pod.
        let step = Instant::now();
        load_tx.send_replace(vec![("noop".to_owned(), 40), ("echo".to_owned(), 3)]);
        eventually("the hot Manager to scale to 4", REACTION_BOUND, || async {
            let n = spec_replicas(&managers, "hot").await?;
            ensure!(n == 4, "hot has {n} replicas");
            Ok(())
        })
        .await?;
        let reaction = step.elapsed();
        println!("reaction time of the load step: {reaction:?}");
        wait_rolled_out(&client, &ns.name, "hot-manager", 4).await?;
        ensure!(spec_replicas(&managers, "cold").await? == 1, "cold moved");

        let events = Api::<Event>::namespaced(client.clone(), &ns.name);
        eventually(
            "a ScaledUp Event naming the busy type",
            timeout(),
            || async {
                let list = events.list(&ListParams::default()).await?;
                let notes: Vec<String> = list
                    .items
                    .iter()
                    .filter(|e| e.reason.as_deref() == Some("ScaledUp"))
                    .filter_map(|e| e.note.clone())
                    .collect();
                // The recorder folds repeats of a reason into one Event series (the first note stays).
                ensure!(
                    notes
                        .iter()
                        .any(|n| n.contains("scaled from 1 to") && n.contains("noop in flight")),
                    "ScaledUp notes: {notes:?}"
                );
                Ok(())
            },
        )
        .await?;
        let m = ops.leader.metrics().await?;
        ensure!(m.sum("switchyard_operator_scale_decisions_total") >= 1.0);
        ensure!(m.sum("switchyard_operator_scale_reaction_seconds_count") >= 1.0);

        // The load stops: back to min after the windows; cold never moved.
        load_tx.send_replace(vec![("noop".to_owned(), 0), ("echo".to_owned(), 3)]);
        eventually("the hot Manager to return to 1", timeout(), || async {
            let n = spec_replicas(&managers, "hot").await?;
            ensure!(n == 1, "hot has {n} replicas");
            Ok(())
        })
        .await?;
        ensure!(spec_replicas(&managers, "cold").await? == 1, "cold moved");
        let d = Api::<Deployment>::namespaced(client.clone(), &ns.name)
            .get("cold-manager")
            .await?;
        ensure!(
            d.spec.and_then(|s| s.replicas) == Some(1),
            "cold Deployment moved"
        );
        anyhow::Ok(())
    }
    .await;
    let pushed = if pusher.is_finished() {
        format!("{:?}", pusher.await)
    } else {
        pusher.abort();
        "running".to_owned()
    };
    if let Err(e) = result {
        bail!("{e:#}\n--- report pusher: {pushed}\n{}", ops.log_tails(40));
    }
    ops.stop().await?;
    Ok(())
}

/// A subscriber scales on its own load (issue 36): `billing` handles `billing.charge` and
/// subscribes to `orders.*`; its pods' load under `orders.*` scales it, while `orders`, the handler
/// of `orders.created`, stays put, and billing's load under a type it neither handles nor names in
/// a subscription is dropped by the control plane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribers_own_load_scales_it_and_not_the_handler() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "subscale").await?;
    let ops = Replicas::start(c, "e2e-subscale").await?;
    let billing = SCALING.replace("EVENT", "billing.charge").replace(
        "    scaleUp:",
        "      orders.*: {targetInFlight: 10}\n    scaleUp:",
    );
    let manifests = format!(
        "{}---\n{}  subscriptions:\n    - event: orders.*\n---\n{}",
        fixtures::router_routing("edge", &["orders.created"]),
        fixtures::manager("billing", "edge", "[billing.charge]", &billing),
        fixtures::manager(
            "orders",
            "edge",
            "[orders.created]",
            &SCALING.replace("EVENT", "orders.created")
        ),
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    wait_rolled_out(&client, &ns.name, "billing-manager", 1).await?;
    wait_rolled_out(&client, &ns.name, "orders-manager", 1).await?;

    // billing's pods: 40 in flight under its subscription (4 pods' worth), and as many under
    // orders.created, which is the handler's type and no subscription of billing's.
    let load = vec![
        ("orders.*".to_owned(), 40),
        ("orders.created".to_owned(), 40),
    ];
    let (_load_tx, load_rx) = watch::channel(load);
    let who = ("manager", "billing", "billing-manager-e2e");
    let pusher = push_reports_as(ops.standby_url(), ns.name.clone(), who, load_rx);
    let managers = Api::<Manager>::namespaced(client.clone(), &ns.name);
    let result = async {
        eventually(
            "billing to scale to 4 on orders.*",
            REACTION_BOUND,
            || async {
                let n = spec_replicas(&managers, "billing").await?;
                ensure!(n == 4, "billing has {n} replicas");
                Ok(())
            },
        )
        .await?;
        let events = Api::<Event>::namespaced(client.clone(), &ns.name);
        eventually(
            "a ScaledUp Event naming the subscription",
            timeout(),
            || async {
                let list = events.list(&ListParams::default()).await?;
                let notes: Vec<String> = list
                    .items
                    .iter()
                    .filter(|e| e.reason.as_deref() == Some("ScaledUp"))
                    .filter_map(|e| e.note.clone())
                    .collect();
                ensure!(
                    notes.iter().any(|n| n.contains("orders.* in flight 40.0")),
                    "ScaledUp notes: {notes:?}"
                );
                Ok(())
            },
        )
        .await?;
        // The status shows the subscription's own figures: its pods' 40 in flight, 400/s and
        // 10 shed per 500 ms.
        eventually(
            "billing's status to carry its subscription's figures",
            timeout(),
            || async {
                let m = managers.get("billing").await?;
                let subs = m.status.map(|s| s.subscriptions).unwrap_or_default();
                let sub = subs.iter().find(|s| s.event == "orders.*");
                ensure!(
                    sub.is_some_and(|s| s.in_flight == Some(40.0)
                        && s.rate == Some(400.0)
                        && s.shed_rate == Some(20.0)),
                    "status subscriptions: {subs:?}"
                );
                Ok(())
            },
        )
        .await?;
        // Several ticks later the handler has not moved: billing's figures are not its own.
        let m = ops.leader.metrics().await?;
        let ticks = m.sum("switchyard_operator_autoscale_tick_seconds_count");
        eventually("five more autoscaler ticks", timeout(), || async {
            let now = ops
                .leader
                .metrics()
                .await?
                .sum("switchyard_operator_autoscale_tick_seconds_count");
            ensure!(now >= ticks + 5.0, "{now} ticks");
            Ok(())
        })
        .await?;
        ensure!(
            spec_replicas(&managers, "orders").await? == 1,
            "orders moved"
        );
        anyhow::Ok(())
    }
    .await;
    pusher.abort();
    if let Err(e) = result {
        bail!("{e:#}\n{}", ops.log_tails(40));
    }
    ops.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_sidecar_under_load_reports_arrivals_that_scale_its_manager() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "scale-sidecar").await?;
    let ops = Replicas::start(c, "e2e-scale-sidecar").await?;
    // A rate target of 2 arrivals/s per pod: the ~20 requests/s below ask for several pods.
    let scaling = SCALING.replace("EVENT: {targetInFlight: 10}", "noop: {targetRate: 2}");
    let manifests = format!(
        "{}---\n{}",
        fixtures::router("edge"),
        fixtures::manager("hot", "edge", "[noop]", &scaling),
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    wait_rolled_out(&client, &ns.name, "hot-manager", 1).await?;
    let sidecar = RouterSidecar::start(&ns.name, "edge", &ops.standby_url()).await?;
    let port = sidecar.http_port;
    // The Manager's pods run on kwok and never answer: each request still arrives (and is counted)
    // at the router before it fails or times out, which is all the load report needs. The period
    // is the load, about 20 arrivals a second, not a wait for anything.
    let load = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(50));
        loop {
            every.tick().await;
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(2), http_get(port, "/noop")).await;
            });
        }
    });
    let managers = Api::<Manager>::namespaced(client.clone(), &ns.name);
    let result = eventually(
        "the sidecar's arrivals to scale the Manager up",
        timeout(),
        || async {
            let m = managers.get("hot").await?;
            let rate = m
                .status
                .as_ref()
                .and_then(|s| s.events.iter().find(|e| e.event == "noop"))
                .and_then(|e| e.rate);
            ensure!(
                m.spec.replicas >= 2,
                "hot has {} replicas; reported rate {rate:?}",
                m.spec.replicas
            );
            Ok(rate)
        },
    )
    .await;
    load.abort();
    match result {
        Ok(rate) => println!("reported arrival rate when scaled: {rate:?}"),
        Err(e) => bail!(
            "{e:#}\n--- sidecar log ---\n{}\n{}",
            sidecar.log_tail(30),
            ops.log_tails(40)
        ),
    }
    ops.stop().await?;
    Ok(())
}

async fn deployment_replicas(client: &kube::Client, ns: &str, name: &str) -> Result<i32> {
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    d.spec
        .and_then(|s| s.replicas)
        .with_context(|| format!("Deployment {name} without spec.replicas"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_event_type_load_scales_only_that_types_deployment() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "scale-split").await?;
    let ops = Replicas::start(c, "e2e-scale-split").await?;
    let scaling = SCALING
        .replace(
            "EVENT: {targetInFlight: 10}",
            "noop: {targetInFlight: 10}\n      echo: {targetInFlight: 10}",
        )
        .replace("    targets:", "    split: perEventType\n    targets:");
    let manifests = format!(
        "{}---\n{}",
        fixtures::router_routing("edge", &["noop", "echo"]),
        fixtures::manager("split", "edge", "[noop, echo]", &scaling),
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    wait_rolled_out(&client, &ns.name, "split-noop", 1).await?;
    wait_rolled_out(&client, &ns.name, "split-echo", 1).await?;

    let (load_tx, load_rx) = watch::channel(vec![("noop".to_owned(), 2), ("echo".to_owned(), 3)]);
    let pusher = push_reports(ops.standby_url(), ns.name.clone(), load_rx);
    let managers = Api::<Manager>::namespaced(client.clone(), &ns.name);
    let result = async {
        eventually(
            "load figures of both types in status",
            timeout(),
            || async {
                let s = managers.get("split").await?.status.context("no status")?;
                for (event, n) in [("noop", 2.0), ("echo", 3.0)] {
                    let e = s
                        .events
                        .iter()
                        .find(|e| e.event == event)
                        .with_context(|| format!("no {event} entry"))?;
                    ensure!(e.in_flight == Some(n), "status events: {:?}", s.events);
                }
                Ok(())
            },
        )
        .await?;

        // The step on noop only: 40 in flight against 10 per pod.
        let step = Instant::now();
        load_tx.send_replace(vec![("noop".to_owned(), 40), ("echo".to_owned(), 3)]);
        eventually(
            "noop's Deployment to scale to 4",
            REACTION_BOUND,
            || async {
                let n = deployment_replicas(&client, &ns.name, "split-noop").await?;
                ensure!(n == 4, "split-noop has {n} replicas");
                Ok(())
            },
        )
        .await?;
        println!("per-event-type reaction time: {:?}", step.elapsed());
        wait_rolled_out(&client, &ns.name, "split-noop", 4).await?;
        let s = managers.get("split").await?;
        let desired = |event: &str| {
            s.status
                .as_ref()
                .and_then(|st| st.events.iter().find(|e| e.event == event))
                .and_then(|e| e.desired_replicas)
        };
        ensure!(desired("noop") == Some(4), "status: {:?}", s.status);
        ensure!(desired("echo") == Some(1), "status: {:?}", s.status);
        ensure!(
            deployment_replicas(&client, &ns.name, "split-echo").await? == 1,
            "echo's Deployment moved"
        );
        ensure!(
            s.spec.replicas == 1,
            "perEventType leaves spec.replicas alone"
        );

        // The load stops: noop's Deployment returns to min; echo's never moved.
        load_tx.send_replace(vec![("noop".to_owned(), 0), ("echo".to_owned(), 3)]);
        eventually("noop's Deployment back to 1", timeout(), || async {
            let n = deployment_replicas(&client, &ns.name, "split-noop").await?;
            ensure!(n == 1, "split-noop has {n} replicas");
            Ok(())
        })
        .await?;
        ensure!(deployment_replicas(&client, &ns.name, "split-echo").await? == 1);
        anyhow::Ok(())
    }
    .await;
    pusher.abort();
    if let Err(e) = result {
        bail!("{e:#}\n{}", ops.log_tails(40));
    }
    ops.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_scaling_off_kubectl_scale_and_an_hpa_set_the_replicas() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "scale-manual").await?;
    let ops = Replicas::start(c, "e2e-scale-manual").await?;
    let scaling = SCALING
        .replace("EVENT", "noop")
        .replace("enabled: true", "enabled: false");
    let manifests = format!(
        "{}---\n{}",
        fixtures::router("edge"),
        fixtures::manager("manual", "edge", "[noop]", &scaling),
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    wait_rolled_out(&client, &ns.name, "manual-manager", 1).await?;
    // Load that would scale the Manager down to... nothing: scaling is off, so it must not count.
    let (_load_tx, load_rx) = watch::channel(vec![("noop".to_owned(), 0)]);
    let pusher = push_reports(ops.standby_url(), ns.name.clone(), load_rx);
    let managers = Api::<Manager>::namespaced(client.clone(), &ns.name);
    let result = async {
        c.kubectl()
            .args(["scale", "-n", &ns.name, "manager/manual", "--replicas", "3"])
            .ok()
            .await?;
        wait_rolled_out(&client, &ns.name, "manual-manager", 3).await?;
        // Several autoscaler ticks later, nobody has undone it: wait until the leader, whose
        // autoscaler decides, has taken in 3 s worth of the reports (forwarded by the standby)
        // that would scale a scaling Manager down (each tick sees them, as they are fresh for
        // 3 s), then look.
        let reports = "switchyard_operator_control_plane_load_reports_total";
        let before = ops.leader.metrics().await?.sum(reports);
        eventually("6 more load reports at the leader", timeout(), || async {
            let n = ops.leader.metrics().await?.sum(reports);
            ensure!(n >= before + 6.0, "{} since the scale", n - before);
            Ok(())
        })
        .await?;
        ensure!(spec_replicas(&managers, "manual").await? == 3);
        ensure!(deployment_replicas(&client, &ns.name, "manual-manager").await? == 3);

        // An HPA on the scale subresource raises replicas below its minReplicas before it looks at
        // any metric, so no metrics server is needed for this.
        let hpa = "apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: manual
spec:
  scaleTargetRef: {apiVersion: switchyard.dev/v1alpha1, kind: Manager, name: manual}
  minReplicas: 5
  maxReplicas: 6
  metrics:
    - type: Resource
      resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}
";
        c.kubectl()
            .args(["apply", "-n", &ns.name, "-f", "-"])
            .stdin(hpa)
            .ok()
            .await?;
        let applied = Instant::now();
        eventually("the HPA to raise the Manager to 5", timeout(), || async {
            let n = spec_replicas(&managers, "manual").await?;
            ensure!(n == 5, "manual has {n} replicas");
            Ok(())
        })
        .await?;
        println!("the HPA scaled the Manager after {:?}", applied.elapsed());
        wait_rolled_out(&client, &ns.name, "manual-manager", 5).await?;
        anyhow::Ok(())
    }
    .await;
    pusher.abort();
    if let Err(e) = result {
        bail!("{e:#}\n{}", ops.log_tails(40));
    }
    ops.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_still_scales_when_the_leader_is_killed_during_a_load_step() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "scale-failover").await?;
    let mut ops = Replicas::start(c, "e2e-scale-failover").await?;
    let manifests = format!(
        "{}---\n{}",
        fixtures::router("edge"),
        fixtures::manager("hot", "edge", "[noop]", &SCALING.replace("EVENT", "noop")),
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    wait_rolled_out(&client, &ns.name, "hot-manager", 1).await?;
    let (load_tx, load_rx) = watch::channel(vec![("noop".to_owned(), 3)]);
    let pusher = push_reports(ops.standby_url(), ns.name.clone(), load_rx);
    let managers = Api::<Manager>::namespaced(client.clone(), &ns.name);
    let result = async {
        // The standby's reports reach the leader's autoscaler: its figures show in status.
        eventually("the forwarded load in status", timeout(), || async {
            let s = managers.get("hot").await?.status.context("no status")?;
            let e = s.events.iter().find(|e| e.event == "noop");
            ensure!(
                e.and_then(|e| e.in_flight) == Some(3.0),
                "status events: {:?}",
                s.events
            );
            Ok(())
        })
        .await?;
        let forwarded = ops.standby.metrics().await?.sum_where(
            "switchyard_operator_control_plane_forwarded_total",
            "kind",
            "report",
        );
        ensure!(
            forwarded >= 1.0,
            "the standby forwarded {forwarded} reports"
        );

        // The step, and the leader crashes at the same moment: the standby must take the Lease over
        // (after it expires) and scale on the reports it now keeps itself.
        let step = Instant::now();
        load_tx.send_replace(vec![("noop".to_owned(), 40)]);
        ops.leader.kill().await?;
        let lease = Duration::from_secs(15);
        eventually(
            "the hot Manager to scale to 4 after the failover",
            lease + REACTION_BOUND,
            || async {
                let n = spec_replicas(&managers, "hot").await?;
                ensure!(n == 4, "hot has {n} replicas");
                Ok(())
            },
        )
        .await?;
        println!(
            "scaled {:?} after the step and the leader's crash",
            step.elapsed()
        );
        ensure!(
            leader_gauge(&ops.standby).await? == 1.0,
            "the standby does not report itself leader"
        );
        wait_rolled_out(&client, &ns.name, "hot-manager", 4).await?;
        anyhow::Ok(())
    }
    .await;
    pusher.abort();
    if let Err(e) = result {
        bail!("{e:#}\n{}", ops.log_tails(40));
    }
    let code = ops.standby.stop().await?;
    ensure!(code == Some(0), "the new leader exited with {code:?}");
    Ok(())
}
