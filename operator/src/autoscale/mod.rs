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

use crate::context::Context;
use crate::control_plane::activation::Activation;
use crate::control_plane::load::LoadBook;
use crate::controller::events;
use decide::{Decision, State, TypeLoad};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
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
    last_status: HashMap<(String, String), Instant>,
}

/// Runs the autoscaler until `shutdown` resolves.
pub async fn run(ctx: Arc<Context>, loads: Arc<LoadBook>, shutdown: impl Future<Output = ()>) {
    let (reader, writer) = reflector::store::<Manager>();
    let feed = reflector::reflector(
        writer,
        watcher(
            Api::<Manager>::all(ctx.client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .applied_objects()
    .for_each(|_| futures::future::ready(()));
    let feed = tokio::spawn(feed);
    tokio::pin!(shutdown);
    let started = Instant::now();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut scaler = Scaler::default();
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
            scaler.activate(&ctx, &reader, &pending, now_ms).await;
            continue;
        }
        let samples = observe::aggregate(&loads.fresh(now, STALE_AFTER));
        scaler.tick(&ctx, &reader, &samples, now, now_ms).await;
    }
    feed.abort();
}

impl Scaler {
    async fn tick(
        &mut self,
        ctx: &Context,
        reader: &Store<Manager>,
        samples: &HashMap<observe::Key, Sample>,
        now: Instant,
        now_ms: u64,
    ) {
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
        for m in managers.iter().filter(|m| m.spec.scaling.enabled) {
            self.scale(ctx, m, samples, now, now_ms).await;
        }
    }

    async fn scale(
        &mut self,
        ctx: &Context,
        m: &Manager,
        samples: &HashMap<observe::Key, Sample>,
        now: Instant,
        now_ms: u64,
    ) {
        let Some(ns) = m.namespace() else { return };
        let name = m.name_any();
        let scaling = &m.spec.scaling;
        let policy = plan::policy(scaling);
        let keep_ms = plan::keep_ms(&policy);
        for e in &m.spec.events {
            let event = e.as_str().to_owned();
            if let Some(s) = samples.get(&(ns.clone(), event.clone())) {
                self.windows
                    .entry((ns.clone(), name.clone(), event))
                    .or_default()
                    .push(now_ms, *s, keep_ms);
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
            .is_none_or(|t| now.saturating_duration_since(*t) >= STATUS_EVERY);
        if changed || due {
            self.write_status(ctx, m, &ns, &name, &policy, &desired, now_ms)
                .await;
            self.last_status.insert(key, now);
        }
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
        reader: &Store<Manager>,
        pending: &[Activation],
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
                self.write_status(ctx, m, &ns, &name, &policy, &desired, now_ms)
                    .await;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn write_status(
        &self,
        ctx: &Context,
        m: &Manager,
        ns: &str,
        name: &str,
        policy: &decide::Policy,
        desired: &HashMap<String, u32>,
        now_ms: u64,
    ) {
        let round = |v: f64| (v * 100.0).round() / 100.0;
        let mut events = m
            .status
            .as_ref()
            .map(|s| s.events.clone())
            .unwrap_or_default();
        for s in &mut events {
            s.desired_replicas = desired
                .get(&s.event)
                .map(|n| i32::try_from(*n).unwrap_or(i32::MAX));
            let recent = self
                .windows
                .get(&(ns.to_owned(), name.to_owned(), s.event.clone()))
                .and_then(|w| w.average(now_ms, policy.panic_ms));
            s.rate = recent.map(|r| round(r.rate));
            s.in_flight = recent.map(|r| round(r.in_flight));
            s.p99_ms = recent.map(|r| round(r.p99_ms));
        }
        let total = desired
            .values()
            .copied()
            .max()
            .map(|n| i32::try_from(n).unwrap_or(i32::MAX));
        let mut status = serde_json::json!({ "desiredReplicas": total });
        // The controller creates the per-type entries; until it has, only the total is written.
        if !events.is_empty() {
            status["events"] = serde_json::to_value(&events).unwrap_or_default();
        }
        let api = Api::<Manager>::namespaced(ctx.client.clone(), ns);
        let patch = serde_json::json!({ "status": status });
        if let Err(e) = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(manager = %name, namespace = %ns, error = %e, "could not write scaling status");
        }
    }
}
