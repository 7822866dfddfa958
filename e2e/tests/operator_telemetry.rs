//! What a real operator tells about its work, after reconciles, an invalid spec, a failed apply and
//! an autoscaler decision from load reports:
//! - its `/metrics` has every `switchyard_operator_*` series the chart's Grafana dashboard queries
//!   (`helm template` renders the opt-in ConfigMap), with the labels the queries use (the sidecars'
//!   half of the dashboard: `cli/tests/dashboard.rs`), and a real Prometheus scraping it (built by
//!   `e2e/cluster/build-prometheus`) returns data for every one of those queries;
//! - with `OTEL_EXPORTER_OTLP_ENDPOINT` set, it exports a span per reconcile (`reconcile router`,
//!   `reconcile manager`; failures marked) and per autoscaler decision (`scale manager`) to an OTLP
//!   receiver in this process, with a resource per the semantic conventions, each span one the
//!   operator's span catalog (`switchyard_operator::spans`, docs/reference/spans.md) describes.

use anyhow::{Context, Result, bail, ensure};
use futures::SinkExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use switchyard_e2e::dashboard::{self, Exported, Exporter};
use switchyard_e2e::operator::{OperatorLock, free_port};
use switchyard_e2e::otlp::{Receiver, Span};
use switchyard_e2e::prometheus::Prometheus;
use switchyard_e2e::{
    Operator, OperatorOpts, TestNamespace, cluster, eventually, fixtures, timeout,
};
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use switchyard_protocol::control::v1::{EventLoad, LoadReport};

/// A Manager the autoscaler scales up at once under the load below.
const SCALING: &str = "  replicas: 1
  scaling:
    enabled: true
    minReplicas: 1
    maxReplicas: 3
    targets:
      noop: {targetInFlight: 10}
    scaleUp: {stableWindow: 4s, panicWindow: 2s}
    scaleDown: {stabilizationWindow: 60s}
";

/// Load reports for `noop` (40 in flight against a target of 10), every 500 ms until aborted.
fn push_load(cp: String, ns: String) -> tokio::task::JoinHandle<Result<()>> {
    tokio::spawn(async move {
        let mut client = ControlPlaneClient::connect(cp).await?;
        let (mut tx, rx) = futures::channel::mpsc::channel::<LoadReport>(4);
        let call = tokio::spawn(async move { client.report_load(rx).await });
        loop {
            let report = LoadReport {
                pod: "edge-router-dashboard".into(),
                namespace: ns.clone(),
                role: "router".into(),
                owner: "edge".into(),
                timestamp_ms: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                window_ms: 500,
                events: vec![EventLoad {
                    event_type: "noop".into(),
                    in_flight: 40,
                    arrivals_per_second: 400.0,
                    latency_p50_ms: 5.0,
                    latency_p99_ms: 20.0,
                    ..EventLoad::default()
                }],
            };
            if tx.send(report).await.is_err() {
                let answer = call.await?;
                bail!("the report stream ended: {answer:?}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_metrics_match_the_dashboard_and_its_spans_reach_the_collector() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    // First: it builds the tools (helm among them) on a fresh machine.
    let c = cluster().await?;
    let exprs = dashboard::queries(&dashboard::rendered_dashboard().await?);
    ensure!(
        exprs.len() >= 20,
        "only {} queries in the dashboard",
        exprs.len()
    );
    let ns = TestNamespace::create(c, "telemetry").await?;
    let cp_port = free_port()?;
    let rx = Receiver::start().await?;
    let op = Operator::start(
        c,
        OperatorOpts {
            control_plane_port: Some(cp_port),
            env: vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), rx.endpoint()),
                // Batches every 200 ms, so the spans arrive while the test looks.
                ("OTEL_BSP_SCHEDULE_DELAY".into(), "200".into()),
            ],
            ..OperatorOpts::new("e2e-telemetry")
        },
    )
    .await?;
    // A real Prometheus scrapes it from before the work starts, so every counter's rise and every
    // histogram's observation falls between two of its scrapes.
    let prometheus = Prometheus::start(&[("operator", op.port)]).await?;
    eventually("Prometheus scraping the operator", timeout(), || async {
        let up = prometheus.query(r#"up{job="operator"}"#).await?;
        ensure!(up.iter().any(|(_, v)| *v == 1.0), "up: {up:?}");
        Ok(())
    })
    .await?;
    // Reconciles; an invalid spec (two routes on one method and path: valid to the API server,
    // not to the operator); a failed apply (a container name the API server refuses in the
    // Deployment); an autoscaler decision.
    let dup = fixtures::router("dup").replace(
        "      http: {method: GET, path: /noop}\n",
        "      http: {method: GET, path: /noop}\n    - event: echo\n      http: {method: GET, path: /noop}\n",
    );
    let broken = fixtures::manager("broken", "edge", "[echo]", "")
        .replace("- name: app", "- name: Not_A_DNS_Label");
    ensure!(
        broken.contains("Not_A_DNS_Label"),
        "the Manager fixture changed shape"
    );
    let manifests = [
        fixtures::router("edge"),
        fixtures::manager("hot", "edge", "[noop]", SCALING),
        dup,
        broken,
    ]
    .join("---\n");
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    let pusher = push_load(format!("http://127.0.0.1:{cp_port}"), ns.name.clone());
    let wanted = [
        "switchyard_operator_reconciles_total",
        "switchyard_operator_reconcile_duration_seconds_bucket",
        "switchyard_operator_invalid_specs_total",
        "switchyard_operator_reconcile_failures_total",
        "switchyard_operator_scale_decisions_total",
    ];
    let seen = eventually("the operator to count its work", timeout(), || async {
        let m = op.metrics().await?;
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|w| m.samples(w).is_empty())
            .collect();
        ensure!(missing.is_empty(), "no samples yet of {missing:?}");
        Ok(m)
    })
    .await;
    let metrics = seen?;
    let mut exported = Exported::default();
    exported.add(&metrics.0);
    let problems = dashboard::problems(&exprs, &exported, Exporter::Operator);
    if !problems.is_empty() {
        pusher.abort();
        bail!(
            "{} problem(s):\n{}\nexported: {:#?}",
            problems.len(),
            problems.join("\n"),
            exported.0
        );
    }
    // Every operator query of the dashboard returns data from Prometheus, its rate window covering
    // the whole test (a NaN, a quantile of nothing observed, is no data).
    let mut missing = Vec::new();
    for q in exprs.iter().filter(|e| e.contains("switchyard_operator_")) {
        let promql = q
            .replace("$__rate_interval", "5m")
            .replace("$namespace", ".*");
        let got = eventually(q, Duration::from_secs(60), || async {
            let series = prometheus.query(&promql).await?;
            ensure!(series.iter().any(|(_, v)| v.is_finite()), "{series:?}");
            Ok(())
        })
        .await;
        if let Err(e) = got {
            missing.push(format!("{e:#}"));
        }
    }
    pusher.abort();
    drop(prometheus);
    ensure!(
        missing.is_empty(),
        "{} operator queries returned no data from Prometheus:\n{}",
        missing.len(),
        missing.join("\n")
    );

    // The spans: one per reconcile, one per decision. This operator watches every namespace, and
    // other tests' Routers are named `edge` too: a reconcile span counts only in this namespace.
    let find = |spans: &[Span], name: &str, key: &str, value: &str| {
        spans
            .iter()
            .find(|s| {
                s.name == name
                    && s.attr(key) == value
                    && (!name.starts_with("reconcile ") || s.attr("namespace") == ns.name)
            })
            .cloned()
    };
    let spans = eventually(
        "the operator's spans at the receiver",
        timeout(),
        || async {
            let spans = rx.spans();
            ensure!(
                find(&spans, "reconcile router", "router", "edge").is_some()
                    && find(&spans, "reconcile manager", "manager", "hot").is_some()
                    && find(&spans, "reconcile manager", "manager", "broken")
                        .is_some_and(|s| s.status == 2)
                    && find(&spans, "scale manager", "switchyard.manager", "hot").is_some(),
                "spans so far: {:?}",
                spans
                    .iter()
                    .map(|s| (&s.name, &s.attrs))
                    .collect::<Vec<_>>()
            );
            Ok(spans)
        },
    )
    .await?;
    let router = find(&spans, "reconcile router", "router", "edge").context("edge")?;
    ensure!(
        router.parent.is_empty(),
        "a reconcile is a root span: {router:?}"
    );
    for (k, v) in [
        ("service.name", "switchyard-operator"),
        ("service.instance.id", "e2e-telemetry"),
        ("k8s.pod.name", "e2e-telemetry"),
        ("k8s.namespace.name", switchyard_e2e::SYSTEM_NAMESPACE),
    ] {
        ensure!(
            router.resource.get(k).map(String::as_str) == Some(v),
            "{k}: {router:?}"
        );
    }
    let broken = find(&spans, "reconcile manager", "manager", "broken").context("broken")?;
    ensure!(broken.attr("error.type") == "apply", "{broken:?}");
    let scale = find(&spans, "scale manager", "switchyard.manager", "hot").context("scale")?;
    for (k, v) in [
        ("k8s.namespace.name", ns.name.as_str()),
        ("switchyard.event_types", "noop"),
        ("switchyard.scale.direction", "up"),
        ("switchyard.scale.from", "1"),
    ] {
        ensure!(scale.attr(k) == v, "{k}: {scale:?}");
    }
    ensure!(
        scale
            .attr("switchyard.scale.to")
            .parse::<u32>()
            .is_ok_and(|n| n > 1),
        "{scale:?}"
    );
    // Every reconcile counted so far has its span (export may lag the counter, never the reverse).
    let counted = op
        .metrics()
        .await?
        .sum("switchyard_operator_reconciles_total");
    op.stop().await?;
    let spans = rx.spans();
    let reconciles = spans
        .iter()
        .filter(|s| s.name.starts_with("reconcile "))
        .count();
    ensure!(
        reconciles as f64 >= counted,
        "{reconciles} reconcile spans for {counted} reconciles"
    );
    // Every span is one the span catalog (and so docs/reference/spans.md) describes, of its kind,
    // with only the attributes and events it lists.
    let wrong: Vec<String> = spans
        .iter()
        .filter_map(|s| {
            let attrs: Vec<&str> = s.attrs.keys().map(String::as_str).collect();
            let events: Vec<(&str, Vec<&str>)> = s
                .events
                .iter()
                .map(|(e, keys)| (e.as_str(), keys.iter().map(String::as_str).collect()))
                .collect();
            switchyard_protocol::spans::check(
                switchyard_operator::spans::SPANS,
                &s.name,
                s.kind,
                &attrs,
                &events,
            )
            .err()
            .map(|e| e.to_string())
        })
        .collect();
    ensure!(
        wrong.is_empty(),
        "{} of {} spans differ from the operator's span catalog:\n{}",
        wrong.len(),
        spans.len(),
        wrong.join("\n")
    );
    Ok(())
}
