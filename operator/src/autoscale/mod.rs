//! The autoscaler: once a second, on the leader only, it turns the sidecars' load reports into a
//! sliding window per (Manager, event type), decides the replicas of each scaled group with the pure
//! KPA-style [`decide::decide`], and writes them: `shared` through the Manager's scale subresource
//! (`spec.replicas`), `perEventType` as `status.events[].desiredReplicas`, which the Manager
//! controller applies to that event type's Deployment. Every change emits an Event with its reason.
//!
//! `observe`, `window`, `plan`, `decide` and `scaler` (the state between ticks) are pure; this
//! module is the shell that does the I/O.

pub(crate) mod decide;
pub(crate) mod observe;
pub(crate) mod plan;
pub(crate) mod scaler;
pub(crate) mod window;

use crate::backlog::Backlogs;
use crate::context::Context;
use crate::control_plane::activation::Activation;
use crate::control_plane::load::LoadBook;
use crate::controller::events;
use crate::scope::Stores;
use futures::StreamExt;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use scaler::{Change, Scaler};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_crds::Manager;
use switchyard_crds::manager::Split;

/// How often decisions are taken (the sidecars report at the same pace).
pub(crate) const TICK: Duration = Duration::from_secs(1);
/// A pod whose latest report is older than this no longer counts: it stopped reporting.
pub const STALE_AFTER: Duration = Duration::from_secs(3);
/// Activations older than this are ignored: a router holding requests repeats its call each second.
const ACTIVATION_FRESH: Duration = Duration::from_secs(3);
/// Status writes in flight at once after a tick.
const STATUS_WRITERS: usize = 16;

/// Runs the autoscaler until `shutdown` resolves, reading the Managers from the shared cache and,
/// with JetStream configured, the durable Managers' backlogs from `backlogs`.
pub(crate) async fn run(
    ctx: Arc<Context>,
    loads: Arc<LoadBook>,
    backlogs: Option<Arc<Backlogs>>,
    reader: Stores<Manager>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    tokio::select! {
        () = &mut shutdown => return,
        ready = reader.wait_until_ready() => if ready.is_err() {
            tracing::error!("the Manager cache closed before it was ready; autoscaler not running");
            return;
        },
    }
    let started = Instant::now();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut scaler = Scaler::default();
    // The backlog figures of the latest tick, also for the status an activation writes.
    let mut backlog = HashMap::new();
    tracing::info!("autoscaler running");
    loop {
        let woken = tokio::select! {
            () = &mut shutdown => break,
            _ = tick.tick() => false,
            () = loads.activations.woken() => true,
        };
        let now = Instant::now();
        let now_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let managers = reader.state();
        if woken {
            // Out of cycle: only the activations, so the windows keep one sample per tick.
            let pending = loads.activations.fresh(now, ACTIVATION_FRESH);
            activate(&ctx, &mut scaler, &managers, &pending, &backlog, now_ms).await;
            continue;
        }
        // The decisions are taken on the reports as they are now, outside the book's lock.
        let fresh = loads.fresh(now, STALE_AFTER);
        let samples = observe::aggregate(fresh.iter().map(|r| &**r));
        backlog = backlogs.as_ref().map(|b| b.fresh(now)).unwrap_or_default();
        let changes = scaler.decide(&managers, &samples, &backlog, now_ms);
        drop(samples);
        drop(fresh);
        let mut changed = Vec::new();
        for c in changes {
            if write(&ctx, &c, now).await {
                let name = c.manager.metadata.name.clone().unwrap_or_default();
                scaler.written(&c.namespace, &name, &c.group, c.decision.replicas, now_ms);
                changed.push((c.namespace, name));
            }
        }
        let statuses = scaler.statuses(&managers, &changed, &backlog, now, now_ms);
        ctx.metrics.autoscale_tick(now.elapsed());
        // Status figures are informational: written after the decisions, several at a time, so a
        // slow API server delays them and not the next tick's decisions.
        let writing = Instant::now();
        let failed: Vec<(String, String)> = futures::stream::iter(statuses)
            .map(|(ns, name, patch)| {
                let ctx = &ctx;
                async move {
                    let ok = send_status(ctx, &ns, &name, &patch).await;
                    (!ok).then_some((ns, name))
                }
            })
            .buffer_unordered(STATUS_WRITERS)
            .filter_map(std::future::ready)
            .collect()
            .await;
        // Not written: forget what was meant, so the next due tick writes it again.
        for (ns, name) in failed {
            scaler.unwritten(&ns, &name);
        }
        ctx.metrics.autoscale_status_writes(writing.elapsed());
    }
}

/// Scales from zero, at once, each group with a pending activation and no pod asked for, and
/// writes the status of each Manager scaled.
async fn activate(
    ctx: &Context,
    scaler: &mut Scaler,
    managers: &[Arc<Manager>],
    pending: &[Activation],
    backlog: &scaler::Backlog,
    now_ms: u64,
) {
    if pending.is_empty() {
        return;
    }
    for m in managers.iter().filter(|m| m.spec.scaling.enabled) {
        let Some(ns) = m.metadata.namespace.as_deref() else {
            continue;
        };
        let woke = |events: &[switchyard_crds::EventType], first: bool| {
            pending
                .iter()
                .find(|a| a.namespace == ns && plan::wakes(m, events, first, a))
                .map(|a| (a.event_type.clone(), a.held))
        };
        let mut changed = false;
        for c in scaler.activate(m, woke, now_ms) {
            if write(ctx, &c, Instant::now()).await {
                let name = c.manager.metadata.name.as_deref().unwrap_or_default();
                scaler.written(&c.namespace, name, &c.group, c.decision.replicas, now_ms);
                changed = true;
            }
        }
        if changed && let Some(patch) = scaler.status_now(m, backlog, now_ms) {
            let name = m.metadata.name.as_deref().unwrap_or_default();
            let _ = send_status(ctx, ns, name, &patch).await;
        }
    }
}

/// Writes change `c` (`shared`: the scale subresource; `perEventType`: the caller writes status),
/// counts it and emits its Event. False when the write failed. `decided` is when its tick began:
/// the log line carries the time since then and the write's own, for the reaction's stages.
#[tracing::instrument(
    name = "scale",
    skip_all,
    fields(
        otel.name = "scale manager",
        k8s.namespace.name = %c.namespace,
        switchyard.manager = c.manager.metadata.name.as_deref().unwrap_or_default(),
        switchyard.event_types = %c.group,
        switchyard.scale.from = c.current,
        switchyard.scale.to = c.decision.replicas,
        switchyard.scale.direction = if c.decision.replicas > c.current { "up" } else { "down" },
        switchyard.scale.mode = if c.decision.panic { "panic" } else { "stable" },
        otel.status_code = tracing::field::Empty,
    )
)]
async fn write(ctx: &Context, c: &Change, decided: Instant) -> bool {
    let (m, d, current) = (&*c.manager, &c.decision, c.current);
    let writing = Instant::now();
    let ns = &c.namespace;
    let name = m.metadata.name.as_deref().unwrap_or_default();
    let scaling = &m.spec.scaling;
    if scaling.split == Split::Shared {
        let patch = serde_json::json!({ "spec": { "replicas": d.replicas } });
        let api = Api::<Manager>::namespaced(ctx.client.clone(), ns);
        if let Err(e) = api
            .patch_scale(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(manager = %name, namespace = %ns, error = %e, "could not write replicas through the scale subresource");
            tracing::Span::current().record("otel.status_code", "error");
            return false;
        }
    }
    let up = d.replicas > current;
    ctx.metrics.scale_decision(up, d.panic);
    if let Some(r) = d.reaction_ms {
        ctx.metrics.scale_reaction(Duration::from_millis(r));
    }
    let what = if scaling.split == Split::Shared {
        String::new()
    } else {
        format!(" {}", c.group)
    };
    let note = format!(
        "scaled{what} from {current} to {}: {}",
        d.replicas, d.reason
    );
    let (write_ms, since_tick_ms) = (writing.elapsed().as_millis(), decided.elapsed().as_millis());
    tracing::info!(manager = %name, namespace = %ns, from = current, to = d.replicas, reaction_ms = ?d.reaction_ms, write_ms, since_tick_ms, reason = %d.reason, "scaled");
    let reason = if up { "ScaledUp" } else { "ScaledDown" };
    events::publish(
        ctx,
        &m.object_ref(&()),
        EventType::Normal,
        reason,
        "Scale",
        note,
    )
    .await;
    true
}

/// Writes a status patch of Manager `ns/name`; false when it failed.
async fn send_status(ctx: &Context, ns: &str, name: &str, patch: &serde_json::Value) -> bool {
    let api = Api::<Manager>::namespaced(ctx.client.clone(), ns);
    let params = PatchParams::apply(crate::controller::AUTOSCALER_FIELD_MANAGER).force();
    match api.patch_status(name, &params, &Patch::Apply(patch)).await {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(manager = %name, namespace = %ns, error = %e, "could not write scaling status");
            false
        }
    }
}
