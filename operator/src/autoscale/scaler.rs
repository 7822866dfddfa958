//! What the autoscaler remembers between ticks and what one tick decides (pure: the Managers, the
//! samples and the time are passed in; the shell in `mod.rs` writes what this returns).
//!
//! A tick visits every scaled Manager (1,000 at the scale benchmark's size, with 10,000 reports a
//! second behind the samples), so it is kept allocation-light: the state is nested by namespace,
//! Manager and group and looked up by `&str` (no key is built per visit), the samples are keyed by
//! slices of the reports, a group's loads go into one reused buffer, and a status patch is only
//! built when the figures it carries moved.

use super::decide::{self, Decision, Policy, State, TypeLoad};
use super::observe;
use super::plan;
use super::window::{Sample, Window};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_crds::{EventType, Manager};

/// Load figures in status are refreshed this often when nothing else changes.
pub(crate) const STATUS_EVERY: Duration = Duration::from_secs(5);
/// How long a written replica count is trusted over a cache that has not caught up yet, ms.
const WRITE_SETTLE_MS: u64 = 10_000;

/// The state's maps, looked up by `&str` several times per Manager each tick: with the fast hash of
/// the samples (SipHash of the names was a third of the tick's decisions at 1,000 Managers).
type Map<V> = HashMap<String, V, observe::Hash>;

/// Backlogs read from JetStream, by (namespace, Manager, event type).
pub type Backlog = HashMap<crate::backlog::Key, u64>;

/// One group (event types scaled together) of one Manager.
#[derive(Default)]
struct Group {
    /// The group's event types joined by ',' (its name in Events and spans).
    key: String,
    state: State,
    /// Replicas last written, and when (ms).
    asked: Option<(u32, u64)>,
    /// Replicas the latest decision wanted.
    desired: u32,
    /// The tick that last visited the group: groups the spec no longer has are dropped.
    seen: u64,
}

/// One scaled Manager.
#[derive(Default)]
struct Tracked {
    /// The tick that last visited it: Managers deleted or no longer scaled are dropped (and start
    /// afresh if they come back).
    seen: u64,
    /// Per event type.
    windows: Map<Window>,
    groups: Vec<Group>,
    /// The autoscaler's figures last written into the Manager's status, and when: unchanged ones
    /// are not written again.
    last_status: Option<(Instant, Figures)>,
}

/// The autoscaler-owned figures of one status patch: desired replicas, per event type desired
/// replicas, load and backlog, and per subscription its load and backlog.
#[derive(Clone, Debug, Default, PartialEq)]
struct Figures {
    total: Option<u32>,
    events: Vec<EventFigures>,
    subscriptions: Vec<SubscriptionFigures>,
}

/// Recent load, rounded: rate, in flight, p99 and sheds per second.
type Recent = [f64; 4];

/// One event type's figures: its name, desired replicas, recent load and backlog.
type EventFigures = (String, Option<u32>, Option<Recent>, Option<u64>);

/// One subscription's figures: its `event`, recent load and backlog.
type SubscriptionFigures = (String, Option<Recent>, Option<u64>);

/// A replica change one tick decided, for the shell to write.
pub struct Change {
    /// The Manager.
    pub manager: Arc<Manager>,
    /// Its namespace.
    pub namespace: String,
    /// The group's event types, joined by ','.
    pub group: String,
    /// Pods asked for now.
    pub current: u32,
    /// What is wanted.
    pub decision: Decision,
}

/// Everything remembered between ticks.
#[derive(Default)]
pub struct Scaler {
    /// By namespace, then Manager name.
    managers: Map<Map<Tracked>>,
    /// Ticks so far (the `seen` marks).
    tick: u64,
}

impl Scaler {
    /// One tick's decisions over `managers` (the scaled ones among them): every group's window
    /// gets this tick's sample and a decision; returns the groups whose replicas change, for the
    /// shell to write ([`Scaler::written`] then records each write that went through).
    pub fn decide<'m>(
        &mut self,
        managers: &'m [Arc<Manager>],
        samples: &observe::Samples<'_>,
        backlog: &Backlog,
        now_ms: u64,
    ) -> Vec<Change> {
        self.tick += 1;
        let tick = self.tick;
        let mut changes = Vec::new();
        // One buffer for every group's loads (they borrow the event names from `managers`).
        let mut loads: Vec<TypeLoad<'m>> = Vec::new();
        for m in managers.iter().filter(|m| m.spec.scaling.enabled) {
            let (Some(ns), Some(name)) =
                (m.metadata.namespace.as_deref(), m.metadata.name.as_deref())
            else {
                continue;
            };
            let t = tracked(&mut self.managers, ns, name);
            t.seen = tick;
            let scaling = &m.spec.scaling;
            let policy = plan::policy(scaling);
            let keep_ms = plan::keep_ms(&policy);
            for e in &m.spec.events {
                let e = e.as_str();
                let reported = samples.get(ns, name, e);
                let sample = observe::with_backlog(reported, waiting(backlog, ns, name, e));
                push(&mut t.windows, e, sample, now_ms, keep_ms);
            }
            for e in plan::subscriptions(m) {
                let sample = samples.subscription(ns, name, e);
                push(&mut t.windows, e, sample, now_ms, keep_ms);
            }
            for (i, events) in plan::each_group(m).enumerate() {
                loads.clear();
                // The subscriptions' load scales the first group (see `plan::subscriptions`).
                let subscribed = plan::subscriptions(m).filter(|_| i == 0);
                for e in events.iter().map(EventType::as_str).chain(subscribed) {
                    let Some(target) = plan::target(scaling, e) else {
                        continue;
                    };
                    let Some(w) = t.windows.get(e) else { continue };
                    let Some(stable) = w.average(now_ms, policy.stable_ms) else {
                        continue;
                    };
                    loads.push(TypeLoad {
                        event: e,
                        target,
                        stable,
                        panic: w.average(now_ms, policy.panic_ms).unwrap_or_default(),
                        latest: w.taken_at(now_ms).unwrap_or_default(),
                        backlog: waiting(backlog, ns, name, e).map_or(0.0, |n| n as f64),
                    });
                }
                let first = events.first().map(EventType::as_str);
                let g = group(&mut t.groups, events);
                g.seen = tick;
                let current = current(m, g, first, now_ms);
                let d = decide::decide(&policy, &loads, current, &mut g.state, now_ms);
                g.desired = d.replicas;
                if d.replicas != current {
                    changes.push(Change {
                        manager: m.clone(),
                        namespace: ns.to_owned(),
                        group: g.key.clone(),
                        current,
                        decision: d,
                    });
                }
            }
            t.groups.retain(|g| g.seen == tick);
        }
        for by_name in self.managers.values_mut() {
            by_name.retain(|_, t| t.seen == tick);
        }
        self.managers.retain(|_, by_name| !by_name.is_empty());
        changes
    }

    /// Records that `replicas` were written for `group` of `ns/name` at `now_ms`.
    pub fn written(&mut self, ns: &str, name: &str, group: &str, replicas: u32, now_ms: u64) {
        if let Some(g) = self
            .managers
            .get_mut(ns)
            .and_then(|by| by.get_mut(name))
            .and_then(|t| t.groups.iter_mut().find(|g| g.key == group))
        {
            g.asked = Some((replicas, now_ms));
            g.desired = replicas;
        }
    }

    /// The status patches due after a tick: of each scaled Manager in `changed` (its replicas were
    /// just written), or whose figures were last written [`STATUS_EVERY`] ago and moved since.
    pub fn statuses(
        &mut self,
        managers: &[Arc<Manager>],
        changed: &[(String, String)],
        backlog: &Backlog,
        now: Instant,
        now_ms: u64,
    ) -> Vec<(String, String, serde_json::Value)> {
        let mut out = Vec::new();
        for m in managers.iter().filter(|m| m.spec.scaling.enabled) {
            let (Some(ns), Some(name)) =
                (m.metadata.namespace.as_deref(), m.metadata.name.as_deref())
            else {
                continue;
            };
            let Some(t) = self.managers.get_mut(ns).and_then(|by| by.get_mut(name)) else {
                continue;
            };
            let was_changed = changed.iter().any(|(n, m)| n == ns && m == name);
            let due = t
                .last_status
                .as_ref()
                .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= STATUS_EVERY);
            if !(was_changed || due) {
                continue;
            }
            let policy = plan::policy(&m.spec.scaling);
            let figures = figures(m, t, &policy, backlog, now_ms);
            // At scale most Managers' figures hold still; rewriting them would be API load for
            // nothing. Only the autoscaler's own figures count (the controller's replica counts
            // move with readiness and are the controller's to write).
            let same = t.last_status.as_ref().is_some_and(|(_, f)| *f == figures);
            let patch = (was_changed || !same).then(|| patch(&figures));
            t.last_status = Some((now, figures));
            if let Some(p) = patch {
                out.push((ns.to_owned(), name.to_owned(), p));
            }
        }
        out
    }

    /// Forgets the status last written for `ns/name`, so the next due tick writes it again (the
    /// write failed).
    pub fn unwritten(&mut self, ns: &str, name: &str) {
        if let Some(t) = self.managers.get_mut(ns).and_then(|by| by.get_mut(name)) {
            t.last_status = None;
        }
    }

    /// An activation for `m`: each group with `woke(group's event types, whether it is the first
    /// group)` and no pod asked for is decided by [`decide::activate`]; returns the changes to write.
    pub fn activate(
        &mut self,
        m: &Arc<Manager>,
        woke: impl Fn(&[EventType], bool) -> Option<(String, u32)>,
        now_ms: u64,
    ) -> Vec<Change> {
        let (Some(ns), Some(name)) = (m.metadata.namespace.as_deref(), m.metadata.name.as_deref())
        else {
            return Vec::new();
        };
        let policy = plan::policy(&m.spec.scaling);
        let tick = self.tick;
        let t = tracked(&mut self.managers, ns, name);
        t.seen = tick;
        let mut changes = Vec::new();
        for (i, events) in plan::each_group(m).enumerate() {
            let first = events.first().map(EventType::as_str);
            let g = group(&mut t.groups, events);
            g.seen = tick;
            let current = current(m, g, first, now_ms);
            let Some((event, held)) = woke(events, i == 0) else {
                continue;
            };
            if let Some(d) = decide::activate(&policy, current, &mut g.state, now_ms, &event, held)
            {
                changes.push(Change {
                    manager: m.clone(),
                    namespace: ns.to_owned(),
                    group: g.key.clone(),
                    current,
                    decision: d,
                });
            }
        }
        changes
    }

    /// The status patch of `m` now (after an activation).
    pub fn status_now(
        &self,
        m: &Manager,
        backlog: &Backlog,
        now_ms: u64,
    ) -> Option<serde_json::Value> {
        let ns = m.metadata.namespace.as_deref()?;
        let name = m.metadata.name.as_deref()?;
        let t = self.managers.get(ns)?.get(name)?;
        let policy = plan::policy(&m.spec.scaling);
        Some(patch(&figures(m, t, &policy, backlog, now_ms)))
    }
}

/// Adds this tick's `sample` of `event` (if any) to its window, created on first sight.
fn push(windows: &mut Map<Window>, event: &str, sample: Option<Sample>, now_ms: u64, keep_ms: u64) {
    let Some(s) = sample else { return };
    match windows.get_mut(event) {
        Some(w) => w.push(now_ms, s, keep_ms),
        None => {
            let mut w = Window::default();
            w.push(now_ms, s, keep_ms);
            windows.insert(event.to_owned(), w);
        }
    }
}

/// The state of `ns/name`, created on first sight (the only allocation of a visit).
fn tracked<'a>(managers: &'a mut Map<Map<Tracked>>, ns: &str, name: &str) -> &'a mut Tracked {
    if !managers.contains_key(ns) {
        managers.insert(ns.to_owned(), Map::default());
    }
    let by_name = managers.get_mut(ns).expect("inserted above");
    if !by_name.contains_key(name) {
        by_name.insert(name.to_owned(), Tracked::default());
    }
    by_name.get_mut(name).expect("inserted above")
}

/// The group of `events`, created on first sight.
fn group<'a>(groups: &'a mut Vec<Group>, events: &[EventType]) -> &'a mut Group {
    let at = match groups.iter().position(|g| plan::is_group(&g.key, events)) {
        Some(i) => i,
        None => {
            let key = events
                .iter()
                .map(EventType::as_str)
                .collect::<Vec<_>>()
                .join(",");
            groups.push(Group {
                key,
                ..Group::default()
            });
            groups.len() - 1
        }
    };
    &mut groups[at]
}

/// Pods asked for `g` now: the Manager's, unless a count written lately is newer than the cache.
fn current(m: &Manager, g: &Group, first: Option<&str>, now_ms: u64) -> u32 {
    let seen = plan::current(m, first);
    match g.asked {
        Some((n, at)) if n != seen && now_ms.saturating_sub(at) < WRITE_SETTLE_MS => n,
        _ => seen,
    }
}

/// The backlog of one event type of `ns/name`, if read (no key is built when nothing was read:
/// without JetStream, or before its first read).
fn waiting(backlog: &Backlog, ns: &str, name: &str, event: &str) -> Option<u64> {
    if backlog.is_empty() {
        return None;
    }
    backlog
        .get(&(ns.to_owned(), name.to_owned(), event.to_owned()))
        .copied()
}

/// The autoscaler's figures for `m`'s status: per event type the spec lists and the controller
/// has an entry for, its group's desired replicas and the recent load.
fn figures(m: &Manager, t: &Tracked, policy: &Policy, backlog: &Backlog, now_ms: u64) -> Figures {
    let round = |v: f64| (v * 100.0).round() / 100.0;
    let ns = m.metadata.namespace.as_deref().unwrap_or_default();
    let name = m.metadata.name.as_deref().unwrap_or_default();
    let desired_of = |event: &str| {
        t.groups
            .iter()
            .find(|g| g.key.split(',').any(|e| e == event))
            .map(|g| g.desired)
    };
    let recent = |event: &str| {
        t.windows
            .get(event)
            .and_then(|w| w.average(now_ms, policy.panic_ms))
            .map(|r| [r.rate, r.in_flight, r.p99_ms, r.shed].map(round))
    };
    let events = m
        .status
        .as_ref()
        .map(|s| s.events.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|s| !s.deployment.is_empty() && m.spec.events.iter().any(|e| e.as_str() == s.event))
        .map(|s| {
            (
                s.event.clone(),
                desired_of(&s.event),
                recent(&s.event),
                waiting(backlog, ns, name, &s.event),
            )
        })
        .collect();
    // Every subscription of the spec, with what its pods reported under its `event` (the
    // handled type's window when it names a handled type: the pods count the two as one).
    let subscriptions = m
        .spec
        .subscriptions
        .iter()
        .map(|s| {
            let e = s.event.as_str();
            (e.to_owned(), recent(e), waiting(backlog, ns, name, e))
        })
        .collect();
    // The groups are the spec's (the tick drops the others).
    let total = t.groups.iter().map(|g| g.desired).max();
    Figures {
        total,
        events,
        subscriptions,
    }
}

/// The status patch carrying `f`: only the autoscaler's fields, applied under its own field manager
/// (the controller owns the rest of each entry, deployment and replicas, and server-side apply
/// merges the two by event). Entries only for the event types the spec still lists and the
/// controller has created: an entry the autoscaler kept writing after its type left the spec would
/// never go away.
fn patch(f: &Figures) -> serde_json::Value {
    let clamp = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let events: Vec<serde_json::Value> = f
        .events
        .iter()
        .map(|(event, desired, recent, backlog)| {
            let mut entry = figures_entry(event, recent.as_ref(), *backlog);
            if let Some(n) = desired {
                entry["desiredReplicas"] = serde_json::json!(clamp(*n));
            }
            entry
        })
        .collect();
    let subscriptions: Vec<serde_json::Value> = f
        .subscriptions
        .iter()
        .map(|(event, recent, backlog)| figures_entry(event, recent.as_ref(), *backlog))
        .collect();
    let mut status = serde_json::json!({});
    if let Some(t) = f.total {
        status["desiredReplicas"] = serde_json::json!(clamp(t));
    }
    // The controller creates the per-type entries; until it has, only the total is written.
    if !events.is_empty() {
        status["events"] = serde_json::Value::Array(events);
    }
    // The subscriptions' entries are this field manager's alone: one the spec dropped (or the
    // whole list) is left out of the next patch, and server-side apply removes it.
    if !subscriptions.is_empty() {
        status["subscriptions"] = serde_json::Value::Array(subscriptions);
    }
    serde_json::json!({
        "apiVersion": <Manager as kube::Resource>::api_version(&()),
        "kind": <Manager as kube::Resource>::kind(&()),
        "status": status,
    })
}

/// One status entry: `event` with its recent load and backlog, each when known.
fn figures_entry(event: &str, recent: Option<&Recent>, backlog: Option<u64>) -> serde_json::Value {
    let mut entry = serde_json::json!({ "event": event });
    if let Some([rate, in_flight, p99, shed]) = recent {
        entry["rate"] = serde_json::json!(rate);
        entry["inFlight"] = serde_json::json!(in_flight);
        entry["p99Ms"] = serde_json::json!(p99);
        entry["shedRate"] = serde_json::json!(shed);
    }
    if let Some(n) = backlog {
        entry["backlog"] = serde_json::json!(i64::try_from(n).unwrap_or(i64::MAX));
    }
    entry
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_protocol::control::v1::{EventLoad, LoadReport};

    fn manager(ns: &str) -> Arc<Manager> {
        let yaml = format!(
            r#"
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {{name: orders, namespace: {ns}}}
spec:
  routerRef: {{name: shop}}
  events: [orders.create]
  app: {{port: 8080}}
  template:
    spec:
      containers: [{{name: app, image: app}}]
  replicas: 1
  scaling:
    enabled: true
    minReplicas: 1
    maxReplicas: 10
    targets:
      orders.create: {{targetInFlight: 10}}
status:
  events:
    - {{event: orders.create, deployment: orders-orders-create}}
"#
        );
        Arc::new(serde_saphyr::from_str(&yaml).expect("manager yaml"))
    }

    fn report(ns: &str, in_flight: u32) -> LoadReport {
        owned(ns, "orders", "orders.create", in_flight)
    }

    fn owned(ns: &str, owner: &str, event: &str, in_flight: u32) -> LoadReport {
        LoadReport {
            pod: format!("{owner}-p"),
            namespace: ns.into(),
            role: "manager".into(),
            owner: owner.into(),
            events: vec![EventLoad {
                event_type: event.into(),
                in_flight,
                ..EventLoad::default()
            }],
            ..LoadReport::default()
        }
    }

    /// A Manager `billing` handling `billing.charge` and subscribing to `orders.*` and to
    /// `orders.create` (the handler `orders`' type), split as `split`.
    fn subscriber(split: &str) -> Arc<Manager> {
        let yaml = format!(
            r#"
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {{name: billing, namespace: shop}}
spec:
  routerRef: {{name: shop}}
  events: [billing.charge, billing.refund]
  subscriptions:
    - {{event: orders.*}}
    - {{event: orders.create}}
  app: {{port: 8080}}
  template:
    spec:
      containers: [{{name: app, image: app}}]
  replicas: 1
  scaling:
    enabled: true
    split: {split}
    minReplicas: 1
    maxReplicas: 20
    targets:
      billing.charge: {{targetInFlight: 10}}
      billing.refund: {{targetInFlight: 10}}
      orders.*: {{targetRate: 100}}
      orders.create: {{targetInFlight: 5}}
"#
        );
        Arc::new(serde_saphyr::from_str(&yaml).expect("manager yaml"))
    }

    fn rate(ns: &str, owner: &str, event: &str, rate: f64) -> LoadReport {
        let mut r = owned(ns, owner, event, 0);
        r.events[0].arrivals_per_second = rate;
        r
    }

    #[test]
    fn a_subscriber_scales_on_its_own_subscriptions_load() {
        let managers = [subscriber("shared"), manager("shop")];
        // The handler is busy on orders.create; billing's own pods carry 30 in flight of its
        // subscription to orders.create and 250/s under orders.*: 6 pods for the first, 3 for the
        // second; its handled type is idle.
        let reports = [
            owned("shop", "orders", "orders.create", 75),
            owned("shop", "billing", "orders.create", 30),
            rate("shop", "billing", "orders.*", 250.0),
            owned("shop", "billing", "billing.charge", 1),
        ];
        let samples = observe::aggregate(&reports);
        let mut scaler = Scaler::default();
        let changes = scaler.decide(&managers, &samples, &Backlog::new(), 1_000);
        let of = |name: &str| {
            changes
                .iter()
                .find(|c| c.manager.metadata.name.as_deref() == Some(name))
                .map(|c| (c.decision.replicas, c.decision.reason.clone()))
        };
        let (n, why) = of("billing").expect("billing scaled");
        assert_eq!(n, 6, "{why}");
        assert!(why.contains("orders.create in flight 30.0"), "{why}");
        let (n, why) = of("orders").expect("orders scaled");
        assert_eq!(n, 8, "the handler on its own pods, not billing's: {why}");
    }

    #[test]
    fn the_status_carries_each_subscriptions_own_figures_and_backlog() {
        let managers = [subscriber("shared")];
        let mut sheds = rate("shop", "billing", "orders.*", 250.0);
        sheds.window_ms = 1_000;
        sheds.events[0].shed = 12;
        let reports = [
            sheds,
            owned("shop", "orders", "orders.create", 75),
            owned("shop", "billing", "orders.create", 30),
        ];
        let samples = observe::aggregate(&reports);
        let key = |e: &str| ("shop".to_owned(), "billing".to_owned(), e.to_owned());
        let backlog = Backlog::from([(key("orders.*"), 40)]);
        let mut scaler = Scaler::default();
        scaler.decide(&managers, &samples, &backlog, 1_000);
        let out = scaler.statuses(&managers, &[], &backlog, Instant::now(), 1_000);
        let [(_, name, patch)] = out.as_slice() else {
            panic!("one patch: {out:?}");
        };
        assert_eq!(name, "billing");
        assert_eq!(
            patch["status"]["subscriptions"],
            serde_json::json!([
                {"event": "orders.*", "rate": 250.0, "inFlight": 0.0, "p99Ms": 0.0,
                 "shedRate": 12.0, "backlog": 40},
                {"event": "orders.create", "rate": 0.0, "inFlight": 30.0, "p99Ms": 0.0,
                 "shedRate": 0.0},
            ]),
            "billing's own pods under each subscription, not the handler's 75"
        );
    }

    #[test]
    fn a_pattern_subscription_scales_the_first_deployment_of_a_split_manager() {
        let managers = [subscriber("perEventType")];
        let reports = [rate("shop", "billing", "orders.*", 250.0)];
        let samples = observe::aggregate(&reports);
        let mut scaler = Scaler::default();
        let changes = scaler.decide(&managers, &samples, &Backlog::new(), 1_000);
        let got: Vec<(&str, u32)> = changes
            .iter()
            .map(|c| (c.group.as_str(), c.decision.replicas))
            .collect();
        assert_eq!(
            got,
            [("billing.charge", 3)],
            "{:?}",
            changes.first().map(|c| &c.decision.reason)
        );
        assert!(changes[0].decision.reason.contains("orders.* rate 250.0"));
    }

    #[test]
    fn each_manager_is_decided_on_its_own_namespace_samples_and_forgotten_when_gone() {
        // Same name and event type in two namespaces: the samples and the state are apart.
        let managers = [manager("shop"), manager("other")];
        let reports = [report("shop", 35), report("other", 5)];
        let samples = observe::aggregate(&reports);
        let mut scaler = Scaler::default();
        let changes = scaler.decide(&managers, &samples, &Backlog::new(), 1_000);
        assert_eq!(changes.len(), 1);
        let c = &changes[0];
        assert_eq!(
            (c.namespace.as_str(), c.group.as_str()),
            ("shop", "orders.create")
        );
        assert_eq!(
            (c.current, c.decision.replicas),
            (1, 4),
            "{}",
            c.decision.reason
        );
        scaler.written("shop", "orders", "orders.create", 4, 1_000);

        // The first statuses carry each Manager's own figures.
        let now = Instant::now();
        let statuses = scaler.statuses(&managers, &[], &Backlog::new(), now, 1_000);
        let desired = |ns: &str| {
            statuses
                .iter()
                .find(|(n, _, _)| n == ns)
                .map(|(_, _, p)| p["status"]["desiredReplicas"].clone())
        };
        assert_eq!(desired("shop"), Some(serde_json::json!(4)));
        assert_eq!(desired("other"), Some(serde_json::json!(1)));

        // The written count holds while the cache has not caught up: no second change.
        let changes = scaler.decide(&managers, &samples, &Backlog::new(), 2_000);
        assert!(changes.is_empty());

        // A Manager no longer listed is forgotten: no status, and it starts afresh.
        let changes = scaler.decide(&managers[1..], &samples, &Backlog::new(), 3_000);
        assert!(changes.is_empty());
        let later = now + STATUS_EVERY;
        let statuses = scaler.statuses(&managers, &[], &Backlog::new(), later, 3_000);
        assert!(statuses.iter().all(|(ns, _, _)| ns != "shop"));
    }
}
