//! Scale on backlog end to end: a durable Manager at zero replicas, a real `nats-server`, and two
//! operator replicas (the chart's default) with `--jetstream-url`. Events published straight into
//! the Manager's stream, with no consumer running (the Manager never ran, so its consumers do not
//! exist yet), raise its replicas from 0 by the backlog the leader reads; draining the backlog
//! through the Manager's own durable consumer (created here with the sidecars' plan, each event
//! acknowledged) takes it back to zero after the short windows. A JetStream server that goes away
//! turns the `BacklogRead` condition False and is counted as a failed read; a Manager that stops
//! being durable loses the condition.

use anyhow::{Context, Result, bail, ensure};
use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use std::time::{Duration, Instant};
use switchyard_crds::Manager;
use switchyard_e2e::k8s::wait_rolled_out;
use switchyard_e2e::nats::NatsServer;
use switchyard_e2e::operator::OperatorLock;
use switchyard_e2e::{
    OperatorOpts, Replicas, TestNamespace, cluster, eventually, fixtures, timeout,
};
use switchyard_protocol::durable::{self as plan, Lane};

/// The loose bound of the scale-up on a noisy shared machine.
const BOUND: Duration = Duration::from_secs(15);
/// Events published: 25 against a target of 10 in flight per pod asks for 3 pods.
const EVENTS: usize = 25;

const SPEC: &str = "  replicas: 0
  delivery: durable
  scaling:
    enabled: true
    minReplicas: 0
    maxReplicas: 3
    targets:
      noop: {targetInFlight: 10}
    scaleUp: {stableWindow: 6s, panicWindow: 2s}
    scaleDown: {stabilizationWindow: 6s}
";

/// The Manager's `noop` status entry and its `BacklogRead` condition, as (backlog, condition status, reason).
async fn observed(api: &Api<Manager>) -> Result<(Option<i64>, String, String)> {
    let s = api.get("queue").await?.status.context("no status")?;
    let backlog = s
        .events
        .iter()
        .find(|e| e.event == "noop")
        .and_then(|e| e.backlog);
    let c = s
        .conditions
        .iter()
        .find(|c| c.type_ == "BacklogRead")
        .context("no BacklogRead condition")?;
    Ok((
        backlog,
        c.status.clone(),
        format!("{}: {}", c.reason, c.message),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_scales_a_durable_manager_from_zero_and_draining_it_back() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    let mut nats = NatsServer::start("backlog").await?;
    let ns = TestNamespace::create(c, "backlog").await?;
    let opts = OperatorOpts {
        extra_args: vec![
            format!("--jetstream-url={}", nats.url()),
            "--backlog-interval=500ms".into(),
        ],
        ..OperatorOpts::new("e2e-backlog")
    };
    let ops = Replicas::start_with(c, "e2e-backlog", opts).await?;
    let manifests = format!(
        "{}---\n{}",
        fixtures::router("edge"),
        fixtures::manager("queue", "edge", "[noop]", SPEC)
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    let managers = Api::<Manager>::namespaced(client.clone(), &ns.name);

    let result = async {
        wait_rolled_out(&client, &ns.name, "queue-manager", 0).await?;
        // Nothing published yet: no stream, an empty backlog, read.
        eventually("the backlog read at 0", timeout(), || async {
            let (backlog, status, why) = observed(&managers).await?;
            ensure!(
                backlog == Some(0) && status == "True",
                "{backlog:?} {status} {why}"
            );
            Ok(())
        })
        .await?;

        // A publisher as the sidecars are one: the stream as they create it, Nats-Msg-Id = ce-id.
        let js = jetstream::new(async_nats::connect(nats.url()).await?);
        js.create_stream(stream::Config {
            name: plan::stream_name(&ns.name, "queue"),
            subjects: vec![plan::stream_subjects(&ns.name, "queue")],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            duplicate_window: plan::DUPLICATE_WINDOW,
            ..Default::default()
        })
        .await?;
        let subject = plan::subject(&ns.name, "queue", "noop", Lane::Unordered);
        let published = Instant::now();
        for i in 0..EVENTS {
            let msg = jetstream::message::PublishMessage::build()
                .payload(format!("{{\"n\":{i}}}").into())
                .message_id(format!("e2e-backlog-{i}"));
            js.send_publish(subject.clone(), msg).await?.await?;
        }
        ensure!(managers.get("queue").await?.spec.replicas == 0);

        eventually(
            "the Manager scaled from zero on its backlog",
            BOUND,
            || async {
                let n = managers.get("queue").await?.spec.replicas;
                ensure!(n >= 1, "queue has {n} replicas");
                Ok(())
            },
        )
        .await?;
        let woke = published.elapsed();
        eventually("3 replicas for 25 events waiting", BOUND, || async {
            let n = managers.get("queue").await?.spec.replicas;
            ensure!(n == 3, "queue has {n} replicas");
            let (backlog, _, _) = observed(&managers).await?;
            ensure!(backlog == Some(EVENTS as i64), "backlog {backlog:?}");
            Ok(())
        })
        .await?;
        println!(
            "scale on backlog: from zero after {woke:?}, at 3 after {:?}",
            published.elapsed()
        );
        wait_rolled_out(&client, &ns.name, "queue-manager", 3).await?;
        let events = Api::<Event>::namespaced(client.clone(), &ns.name);
        let notes: Vec<String> = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("ScaledUp"))
            .filter_map(|e| e.note)
            .collect();
        ensure!(
            notes
                .iter()
                .any(|n| n.contains("from 0 to") && n.contains("noop")),
            "ScaledUp notes: {notes:?}"
        );

        // Drain through the Manager's own consumer, as its sidecars would, acking each event.
        let c = plan::consumers(
            &ns.name,
            "queue",
            &["noop".to_owned()],
            Duration::from_secs(5),
            3,
            false,
        )
        .remove(0);
        let consumer = js
            .get_stream(plan::stream_name(&ns.name, "queue"))
            .await?
            .create_consumer(consumer::pull::Config {
                durable_name: Some(c.name.clone()),
                filter_subject: c.filter_subject.clone(),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: c.ack_wait,
                max_deliver: c.max_deliver,
                max_ack_pending: c.max_ack_pending,
                ..Default::default()
            })
            .await?;
        let mut messages = consumer.fetch().max_messages(EVENTS).messages().await?;
        let mut drained = 0;
        while let Some(m) = messages.next().await {
            m.map_err(|e| anyhow::anyhow!("{e}"))?
                .double_ack()
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            drained += 1;
        }
        ensure!(drained == EVENTS, "drained {drained} of {EVENTS}");
        let idle = Instant::now();
        eventually("the Manager back at zero", timeout(), || async {
            let n = managers.get("queue").await?.spec.replicas;
            ensure!(n == 0, "queue has {n} replicas");
            let (backlog, _, _) = observed(&managers).await?;
            ensure!(backlog == Some(0), "backlog {backlog:?}");
            Ok(())
        })
        .await?;
        println!("back to zero {:?} after the drain", idle.elapsed());
        let m = ops.leader.metrics().await?;
        let ok = m.sum_where("switchyard_operator_backlog_reads_total", "result", "ok");
        ensure!(ok >= 1.0, "backlog reads ok: {ok}");

        // The server goes away: the reads fail, and say so.
        nats.kill().await?;
        eventually("BacklogRead False", timeout(), || async {
            let (_, status, why) = observed(&managers).await?;
            ensure!(
                status == "False" && why.starts_with("ReadFailed"),
                "{status} {why}"
            );
            Ok(())
        })
        .await?;
        let m = ops.leader.metrics().await?;
        let failed = m.sum_where("switchyard_operator_backlog_reads_total", "result", "error")
            + m.sum_where(
                "switchyard_operator_backlog_reads_total",
                "result",
                "timeout",
            );
        ensure!(failed >= 1.0, "failed backlog reads: {failed}");

        // No longer durable: its backlog is not read, and the condition goes with it.
        managers
            .patch(
                "queue",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"delivery": "direct"}})),
            )
            .await?;
        eventually("the BacklogRead condition removed", timeout(), || async {
            let s = managers.get("queue").await?.status.unwrap_or_default();
            let left: Vec<_> = s
                .conditions
                .iter()
                .filter(|c| c.type_ == "BacklogRead")
                .collect();
            ensure!(left.is_empty(), "still there: {left:?}");
            Ok(())
        })
        .await?;
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = result {
        bail!(
            "{e:#}\n--- nats-server log ---\n{}\n{}",
            nats.log_tail(20),
            ops.log_tails(40)
        );
    }
    ops.stop().await?;
    Ok(())
}
