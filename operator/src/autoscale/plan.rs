//! What to scale for one Manager, read from its spec and status (pure): the policy, the target of
//! each event type, and the groups of event types that scale together.

use super::decide::{Metric, Policy, Target};
use crate::control_plane::activation::Activation;
use switchyard_crds::Manager;
use switchyard_crds::manager::{Scaling, Split};
use switchyard_crds::subscription::pattern_matches;

fn ms(d: &switchyard_crds::common::Duration) -> u64 {
    let d: std::time::Duration = (*d).into();
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The policy of `scaling` (negative bounds count as 0).
pub(crate) fn policy(scaling: &Scaling) -> Policy {
    Policy {
        min: u32::try_from(scaling.min_replicas).unwrap_or(0),
        max: u32::try_from(scaling.max_replicas).unwrap_or(0),
        stable_ms: ms(&scaling.scale_up.stable_window),
        panic_ms: ms(&scaling.scale_up.panic_window),
        panic_threshold: scaling.scale_up.panic_threshold,
        stabilization_ms: ms(&scaling.scale_down.stabilization_window),
    }
}

/// The longest a Manager's windows look back, ms: how long its samples are kept.
pub(crate) fn keep_ms(p: &Policy) -> u64 {
    p.stable_ms.max(p.panic_ms).max(p.stabilization_ms)
}

/// The target of `event`, None when the spec has none (the CRD's rules require one when enabled).
pub(crate) fn target(scaling: &Scaling, event: &str) -> Option<Target> {
    let t = scaling.targets.get(event)?;
    match (t.target_in_flight, t.target_rate) {
        (Some(n), _) if n > 0 => Some(Target {
            metric: Metric::InFlight,
            per_pod: f64::from(n),
        }),
        (_, Some(r)) if r > 0.0 && r.is_finite() => Some(Target {
            metric: Metric::Rate,
            per_pod: r,
        }),
        _ => None,
    }
}

/// Event types scaled together: all of them with `shared` (one Deployment), each alone with
/// `perEventType` (one Deployment each). The tests state the split with it; the loop reads it from
/// the reports.
#[cfg(test)]
fn groups(manager: &Manager) -> Vec<Vec<String>> {
    let events = manager.spec.events.iter().map(|e| e.as_str().to_owned());
    match manager.spec.scaling.split {
        Split::Shared => vec![events.collect()],
        Split::PerEventType => events.map(|e| vec![e]).collect(),
    }
}

/// Pods currently asked for the group whose first event type is `first`: the Manager's replicas
/// with `shared`; with `perEventType` the replicas the autoscaler last recorded for that event
/// type, else the Manager's replicas.
pub(crate) fn current(manager: &Manager, first: Option<&str>) -> u32 {
    let spec = u32::try_from(manager.spec.replicas).unwrap_or(0);
    if manager.spec.scaling.split == Split::Shared {
        return spec;
    }
    first
        .and_then(|e| crate::render::manager::recorded_replicas(manager, e))
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(spec)
}

/// The event types of each group of [`groups`], borrowed (the tick's form: nothing allocated).
pub(crate) fn each_group(manager: &Manager) -> impl Iterator<Item = &[switchyard_crds::EventType]> {
    let events = manager.spec.events.as_slice();
    let shared = manager.spec.scaling.split == Split::Shared;
    let (whole, each) = if shared {
        (Some(events), &[][..])
    } else {
        (None, events)
    };
    whole
        .into_iter()
        .chain(each.chunks(1))
        .filter(|g| !g.is_empty())
}

/// The events of `manager`'s subscriptions (as written: a pattern stays a pattern) that are not
/// also types it handles (its pods report those once, under the type). They scale with the first
/// group: with `shared` the Manager's one Deployment; with `perEventType` the Deployment of its
/// first event type (a subscriber's route reaches every pod of the Manager, so that Deployment is
/// sized to carry the subscriptions alone, and the other Deployments' pods add to it).
pub(crate) fn subscriptions(manager: &Manager) -> impl Iterator<Item = &str> {
    let handled = manager.spec.events.as_slice();
    manager
        .spec
        .subscriptions
        .iter()
        .map(|s| s.event.as_str())
        .filter(move |e| !handled.iter().any(|h| h.as_str() == *e))
}

/// Whether `key` (a group's event types joined by ',', as the autoscaler names a group) names
/// the group `events`.
pub(crate) fn is_group(key: &str, events: &[switchyard_crds::EventType]) -> bool {
    key.split(',').eq(events.iter().map(|e| e.as_str()))
}

/// Whether the activation `a` wakes the group `events` of `manager` (`first`: it is the Manager's
/// first group). A handler's activation (no Manager named) wakes the group that handles the type;
/// a subscriber's wakes the named Manager's group that handles it, else its first group, which
/// carries the subscriptions (see [`subscriptions`]). The namespace is the caller's to match.
pub(crate) fn wakes(
    manager: &Manager,
    events: &[switchyard_crds::EventType],
    first: bool,
    a: &Activation,
) -> bool {
    let handles = events.iter().any(|e| e.as_str() == a.event_type);
    let Some(name) = a.manager.as_deref() else {
        return handles;
    };
    if manager.metadata.name.as_deref() != Some(name) {
        return false;
    }
    let handled_elsewhere = manager
        .spec
        .events
        .iter()
        .any(|e| e.as_str() == a.event_type);
    handles
        || (first
            && !handled_elsewhere
            && manager
                .spec
                .subscriptions
                .iter()
                .any(|s| pattern_matches(&s.event, &a.event_type)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(yaml: &str) -> Manager {
        serde_saphyr::from_str(yaml).expect("manager yaml")
    }

    const SHOP: &str = r#"
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: orders, namespace: shop}
spec:
  routerRef: {name: shop}
  events: [orders.create, orders.get]
  subscriptions:
    - {event: users.*}
    - {event: orders.get}
  app: {port: 8080}
  template:
    spec:
      containers: [{name: app, image: app}]
  replicas: 2
  scaling:
    enabled: true
    minReplicas: 1
    maxReplicas: 8
    split: perEventType
    targets:
      orders.create: {targetInFlight: 32}
      orders.get: {targetRate: 150.5}
      users.*: {targetInFlight: 4}
    scaleUp: {stableWindow: 20s, panicWindow: 2s}
    scaleDown: {stabilizationWindow: 10s}
status:
  events:
    - {event: orders.create, deployment: orders-orders-create, desiredReplicas: 5}
"#;

    #[test]
    fn reads_policy_targets_and_groups() {
        let m = manager(SHOP);
        let p = policy(&m.spec.scaling);
        assert_eq!(
            (p.min, p.max, p.stable_ms, p.panic_ms),
            (1, 8, 20_000, 2_000)
        );
        assert_eq!((p.stabilization_ms, keep_ms(&p)), (10_000, 20_000));
        let t = target(&m.spec.scaling, "orders.create").expect("target");
        assert_eq!((t.metric, t.per_pod), (Metric::InFlight, 32.0));
        let t = target(&m.spec.scaling, "orders.get").expect("target");
        assert_eq!((t.metric, t.per_pod), (Metric::Rate, 150.5));
        assert!(target(&m.spec.scaling, "nope").is_none());
        let t = target(&m.spec.scaling, "users.*").expect("a subscription's target");
        assert_eq!((t.metric, t.per_pod), (Metric::InFlight, 4.0));
        let subs: Vec<&str> = subscriptions(&m).collect();
        assert_eq!(
            subs,
            ["users.*"],
            "a subscription to a handled type is counted under it"
        );
        assert_eq!(groups(&m).len(), 2);
        assert_eq!(current(&m, Some("orders.create")), 5);
        assert_eq!(current(&m, Some("orders.get")), 2);
        let each: Vec<Vec<&str>> = each_group(&m)
            .map(|g| g.iter().map(|e| e.as_str()).collect())
            .collect();
        assert_eq!(each, [["orders.create"], ["orders.get"]]);
        assert!(is_group("orders.get", &m.spec.events[1..]));
        assert!(!is_group("orders.get", &m.spec.events));
    }

    #[test]
    fn an_activation_wakes_the_handling_group_or_the_named_subscribers_first() {
        let m = manager(SHOP);
        let each: Vec<_> = each_group(&m).collect();
        let a = |event: &str, manager: Option<&str>| Activation {
            namespace: "shop".into(),
            event_type: event.into(),
            manager: manager.map(str::to_owned),
            held: 1,
        };
        let woken = |a: &Activation| -> Vec<bool> {
            each.iter()
                .enumerate()
                .map(|(i, g)| wakes(&m, g, i == 0, a))
                .collect()
        };
        assert_eq!(woken(&a("orders.get", None)), [false, true]);
        assert_eq!(woken(&a("users.created", None)), [false, false]);
        assert_eq!(woken(&a("users.created", Some("orders"))), [true, false]);
        assert_eq!(
            woken(&a("orders.get", Some("orders"))),
            [false, true],
            "a subscription to a handled type scales with that type's group"
        );
        assert_eq!(woken(&a("users.created", Some("billing"))), [false, false]);
        assert_eq!(woken(&a("payments.done", Some("orders"))), [false, false]);
    }

    #[test]
    fn shared_scales_all_types_together_on_spec_replicas() {
        let m = manager(&SHOP.replace("split: perEventType", "split: shared"));
        assert_eq!(
            groups(&m),
            vec![vec!["orders.create".to_owned(), "orders.get".to_owned()]]
        );
        assert_eq!(current(&m, Some("orders.create")), 2);
        assert_eq!(each_group(&m).count(), 1);
        assert!(is_group("orders.create,orders.get", &m.spec.events));
    }
}
