//! The autoscaler: once a second, on the leader only, it turns the sidecars' load reports into a
//! sliding window per (Manager, event type), decides the replicas of each scaled group with the pure
//! KPA-style [`decide::decide`], and writes them: `shared` through the Manager's scale subresource
//! (`spec.replicas`), `perEventType` as `status.events[].desiredReplicas`, which the Manager
//! controller applies to that event type's Deployment. Every change emits an Event with its reason.
//!
//! `observe`, `window`, `plan` and `decide` are pure; this module is the shell that does the I/O.

pub mod decide;
pub mod observe;
pub mod plan;
pub mod window;

use crate::backlog::Backlogs;
use crate::context::Context;
use crate::control_plane::activation::Activation;
use crate::control_plane::load::LoadBook;
use crate::controller::events;
use crate::scope::Stores;
use decide::{Decision, State, TypeLoad};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_crds::Manager;
use switchyard_crds::manager::Split;
use window::{Sample, Window};

/// How often decisions are taken (the sidecars report at the same pace).
pub const TICK: Duration = Duration::from_secs(1);
/// A pod whose latest report is older than this no longer counts: it stopped reporting.
pub const STALE_AFTER: Duration = Duration::from_secs(3);
/// Load figures in status are refreshed this often when nothing else changes.
const STATUS_EVERY: Duration = Duration::from_secs(5);
/// Activations older than this are ignored: a router holding requests repeats its call each second.
const ACTIVATION_FRESH: Duration = Duration::from_secs(3);
/// Status writes in flight at once after a tick.
const STATUS_WRITERS: usize = 16;
/// How long a written replica count is trusted over a cache that has not caught up yet, ms.
const WRITE_SETTLE_MS: u64 = 10_000;

/// Namespace, Manager, and event type (or the comma-joined group).
type Key = (String, String, String);

/// What the loop remembers between ticks.
#[derive(Default)]
struct Scaler {
    windows: HashMap<Key, Window>,
    states: HashMap<Key, State>,
    /// Replicas last written per group, and when (ms).
    asked: HashMap<Key, (u32, u64)>,
    /// The autoscaler's figures last written into each Manager's status, and when: unchanged ones
    /// are not written again.
    last_status: HashMap<(String, String), (Instant, serde_json::Value)>,
}

/// Runs the autoscaler until `shutdown` resolves, reading the Managers from the shared cache and,
/// with JetStream configured, the durable Managers' backlogs from `backlogs`.
pub async fn run(
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
        if woken {
            // Out of cycle: only the activations, so the windows keep one sample per tick.
            let pending = loads.activations.fresh(now, ACTIVATION_FRESH);
            scaler
                .activate(&ctx, &reader, &pending, &backlog, now_ms)
                .await;
            continue;
        }
        let fresh = loads.fresh(now, STALE_AFTER);
        let samples = observe::aggregate(fresh.iter().map(|r| &**r));
        backlog = backlogs.as_ref().map(|b| b.fresh(now)).unwrap_or_default();
        let statuses = scaler
            .tick(&ctx, &reader, &samples, &backlog, now, now_ms)
            .await;
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
        for key in failed {
            scaler.last_status.remove(&key);
        }
        ctx.metrics.autoscale_status_writes(writing.elapsed());
    }
}

impl Scaler {
    /// Decides and writes replicas for every scaled Manager; returns the status patches to send.
    async fn tick(
        &mut self,
        ctx: &Context,
        reader: &Stores<Manager>,
        samples: &HashMap<observe::Key, Sample>,
        backlog: &HashMap<crate::backlog::Key, u64>,
        now: Instant,
        now_ms: u64,
    ) -> Vec<(String, String, serde_json::Value)> {
        let managers = reader.state();
        let alive: HashSet<(String, String)> = managers
            .iter()
            .filter(|m| m.spec.scaling.enabled)
            .map(|m| (m.namespace().unwrap_or_default(), m.name_any()))
            .collect();
        // Deleted Managers, or ones whose scaling was turned off, start afresh if they come back.
        let keep = |k: &Key| alive.contains(&(k.0.clone(), k.1.clone()));
        self.windows.retain(|k, _| keep(k));
        self.states.retain(|k, _| keep(k));
        self.asked.retain(|k, _| keep(k));
        self.last_status.retain(|k, _| alive.contains(k));
        let mut statuses = Vec::new();
        for m in managers.iter().filter(|m| m.spec.scaling.enabled) {
            if let Some(status) = self.scale(ctx, m, samples, backlog, now, now_ms).await {
                statuses.push(status);
            }
        }
        statuses
    }

    /// Decides (and writes) `m`'s replicas; returns its status patch when one is due.
    async fn scale(
        &mut self,
        ctx: &Context,
        m: &Manager,
        samples: &HashMap<observe::Key, Sample>,
        backlog: &HashMap<crate::backlog::Key, u64>,
        now: Instant,
        now_ms: u64,
    ) -> Option<(String, String, serde_json::Value)> {
        let ns = m.namespace()?;
        let name = m.name_any();
        let scaling = &m.spec.scaling;
        let policy = plan::policy(scaling);
        let keep_ms = plan::keep_ms(&policy);
        let waiting = |e: &str| {
            backlog
                .get(&(ns.clone(), name.clone(), e.to_owned()))
                .copied()
        };
        for e in &m.spec.events {
            let event = e.as_str().to_owned();
            let reported = samples.get(&(ns.clone(), event.clone())).copied();
            if let Some(s) = observe::with_backlog(reported, waiting(&event)) {
                self.windows
                    .entry((ns.clone(), name.clone(), event))
                    .or_default()
                    .push(now_ms, s, keep_ms);
            }
        }
        let mut desired: HashMap<String, u32> = HashMap::new();
        let mut changed = false;
        for group in plan::groups(m) {
            let loads: Vec<TypeLoad> = group
                .iter()
                .filter_map(|e| {
                    let target = plan::target(scaling, e)?;
                    let w = self.windows.get(&(ns.clone(), name.clone(), e.clone()))?;
                    Some(TypeLoad {
                        event: e.clone(),
                        target,
                        stable: w.average(now_ms, policy.stable_ms)?,
                        panic: w.average(now_ms, policy.panic_ms).unwrap_or_default(),
                        backlog: waiting(e).map_or(0.0, |n| n as f64),
                    })
                })
                .collect();
            let key = (ns.clone(), name.clone(), group.join(","));
            let current = self.current(m, &key, &group, now_ms);
            let state = self.states.entry(key.clone()).or_default();
            let d = decide::decide(&policy, &loads, current, state, now_ms);
            for e in &group {
                desired.insert(e.clone(), d.replicas);
            }
            if d.replicas != current && self.write(ctx, m, key, &group, current, &d, now_ms).await {
                changed = true;
            }
        }
        let key = (ns.clone(), name.clone());
        let due = self
            .last_status
            .get(&key)
            .is_none_or(|(t, _)| now.saturating_duration_since(*t) >= STATUS_EVERY);
        if !(changed || due) {
            return None;
        }
        let patch = self.status_patch(m, &ns, &name, &policy, &desired, backlog, now_ms);
        // At scale most Managers' figures hold still; rewriting them would be API load for nothing.
        // Only the autoscaler's own figures count (the controller's replica counts move with
        // readiness and are the controller's to write).
        let figures = own_figures(&patch);
        let same = self
            .last_status
            .get(&key)
            .is_some_and(|(_, f)| *f == figures);
        self.last_status.insert(key, (now, figures));
        (changed || !same).then_some((ns, name, patch))
    }

    /// Pods asked for `group` now: the Manager's, unless a count written lately is newer than the
    /// cache.
    fn current(&self, m: &Manager, key: &Key, group: &[String], now_ms: u64) -> u32 {
        let seen = plan::current(m, group);
        match self.asked.get(key) {
            Some((n, at)) if *n != seen && now_ms.saturating_sub(*at) < WRITE_SETTLE_MS => *n,
            _ => seen,
        }
    }

    /// Writes decision `d` for `group` (`shared`: the scale subresource; `perEventType`: the caller
    /// writes status), counts it and emits its Event. False when the write failed.
    #[allow(clippy::too_many_arguments)]
    #[tracing::instrument(
        name = "scale",
        skip_all,
        fields(
            otel.name = "scale manager",
            k8s.namespace.name = %key.0,
            switchyard.manager = %key.1,
            switchyard.event_types = %group.join(","),
            switchyard.scale.from = current,
            switchyard.scale.to = d.replicas,
            switchyard.scale.direction = if d.replicas > current { "up" } else { "down" },
            switchyard.scale.mode = if d.panic { "panic" } else { "stable" },
            otel.status_code = tracing::field::Empty,
        )
    )]
    async fn write(
        &mut self,
        ctx: &Context,
        m: &Manager,
        key: Key,
        group: &[String],
        current: u32,
        d: &Decision,
        now_ms: u64,
    ) -> bool {
        let (ns, name) = (key.0.clone(), key.1.clone());
        let scaling = &m.spec.scaling;
        if scaling.split == Split::Shared {
            let patch = serde_json::json!({ "spec": { "replicas": d.replicas } });
            let api = Api::<Manager>::namespaced(ctx.client.clone(), &ns);
            if let Err(e) = api
                .patch_scale(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(manager = %name, namespace = %ns, error = %e, "could not write replicas through the scale subresource");
                tracing::Span::current().record("otel.status_code", "error");
                return false;
            }
        }
        self.asked.insert(key, (d.replicas, now_ms));
        let up = d.replicas > current;
        ctx.metrics.scale_decision(up, d.panic);
        if let Some(r) = d.reaction_ms {
            ctx.metrics.scale_reaction(Duration::from_millis(r));
        }
        let what = if scaling.split == Split::Shared {
            String::new()
        } else {
            format!(" {}", group.join(","))
        };
        let note = format!(
            "scaled{what} from {current} to {}: {}",
            d.replicas, d.reason
        );
        tracing::info!(manager = %name, namespace = %ns, from = current, to = d.replicas, reaction_ms = ?d.reaction_ms, reason = %d.reason, "scaled");
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

    /// Scales from zero, at once, each group with a pending activation and no pod asked for.
    async fn activate(
        &mut self,
        ctx: &Context,
        reader: &Stores<Manager>,
        pending: &[Activation],
        backlog: &HashMap<crate::backlog::Key, u64>,
        now_ms: u64,
    ) {
        if pending.is_empty() {
            return;
        }
        for m in reader.state().iter().filter(|m| m.spec.scaling.enabled) {
            let Some(ns) = m.namespace() else { continue };
            let name = m.name_any();
            let policy = plan::policy(&m.spec.scaling);
            let mut desired: HashMap<String, u32> = HashMap::new();
            let mut changed = false;
            for group in plan::groups(m) {
                let key = (ns.clone(), name.clone(), group.join(","));
                let current = self.current(m, &key, &group, now_ms);
                let woke = pending
                    .iter()
                    .find(|a| a.namespace == ns && group.contains(&a.event_type));
                let mut replicas = current;
                if let Some(a) = woke {
                    let state = self.states.entry(key.clone()).or_default();
                    if let Some(d) =
                        decide::activate(&policy, current, state, now_ms, &a.event_type, a.held)
                        && self.write(ctx, m, key, &group, current, &d, now_ms).await
                    {
                        replicas = d.replicas;
                        changed = true;
                    }
                }
                for e in &group {
                    desired.insert(e.clone(), replicas);
                }
            }
            if changed {
                let patch = self.status_patch(m, &ns, &name, &policy, &desired, backlog, now_ms);
                let _ = send_status(ctx, &ns, &name, &patch).await;
            }
        }
    }

    /// The status patch for `m` with `desired` replicas, the recent load figures and the backlog.
    #[allow(clippy::too_many_arguments)]
    fn status_patch(
        &self,
        m: &Manager,
        ns: &str,
        name: &str,
        policy: &decide::Policy,
        desired: &HashMap<String, u32>,
        backlog: &HashMap<crate::backlog::Key, u64>,
        now_ms: u64,
    ) -> serde_json::Value {
        let round = |v: f64| (v * 100.0).round() / 100.0;
        // Only the autoscaler's fields, applied under its own field manager: the controller owns the
        // rest of each entry (deployment, replicas) and server-side apply merges the two by event.
        // Entries of the event types the spec still lists and the controller has created: an entry
        // the autoscaler kept writing after its type left the spec would never go away.
        let events: Vec<serde_json::Value> = m
            .status
            .as_ref()
            .map(|s| s.events.as_slice())
            .unwrap_or_default()
            .iter()
            .filter(|s| {
                !s.deployment.is_empty() && m.spec.events.iter().any(|e| e.as_str() == s.event)
            })
            .map(|s| {
                let recent = self
                    .windows
                    .get(&(ns.to_owned(), name.to_owned(), s.event.clone()))
                    .and_then(|w| w.average(now_ms, policy.panic_ms));
                let mut entry = serde_json::json!({ "event": s.event });
                if let Some(n) = desired.get(&s.event) {
                    entry["desiredReplicas"] =
                        serde_json::json!(i32::try_from(*n).unwrap_or(i32::MAX));
                }
                if let Some(r) = recent {
                    entry["rate"] = serde_json::json!(round(r.rate));
                    entry["inFlight"] = serde_json::json!(round(r.in_flight));
                    entry["p99Ms"] = serde_json::json!(round(r.p99_ms));
                }
                let key = (ns.to_owned(), name.to_owned(), s.event.clone());
                if let Some(n) = backlog.get(&key) {
                    entry["backlog"] = serde_json::json!(i64::try_from(*n).unwrap_or(i64::MAX));
                }
                entry
            })
            .collect();
        let total = desired
            .values()
            .copied()
            .max()
            .map(|n| i32::try_from(n).unwrap_or(i32::MAX));
        let mut status = serde_json::json!({});
        if let Some(t) = total {
            status["desiredReplicas"] = serde_json::json!(t);
        }
        // The controller creates the per-type entries; until it has, only the total is written.
        if !events.is_empty() {
            status["events"] = serde_json::Value::Array(events);
        }
        // A server-side apply configuration: the autoscaler's figures under its own field manager.
        serde_json::json!({
            "apiVersion": <Manager as kube::Resource>::api_version(&()),
            "kind": <Manager as kube::Resource>::kind(&()),
            "status": status,
        })
    }
}

/// The autoscaler-owned figures of a status patch: desired replicas, and per event type desired
/// replicas, rate, in flight and p99.
fn own_figures(patch: &serde_json::Value) -> serde_json::Value {
    let status = &patch["status"];
    let events: Vec<serde_json::Value> = status["events"]
        .as_array()
        .map(|es| {
            es.iter()
                .map(|e| {
                    serde_json::json!([
                        e["event"],
                        e["desiredReplicas"],
                        e["rate"],
                        e["inFlight"],
                        e["p99Ms"],
                        e["backlog"]
                    ])
                })
                .collect()
        })
        .unwrap_or_default();
    serde_json::json!([status["desiredReplicas"], events])
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
