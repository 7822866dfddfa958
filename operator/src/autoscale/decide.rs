//! The scaling decision, after Knative's KPA (pure: load, state and time are passed in).
//!
//! Per event type, the wanted pods are ceil(observed / target) with the load averaged over the stable
//! window, or over the short panic window while in panic mode. Panic mode starts when the panic
//! window's load reaches `panicThreshold` × target × current pods, lasts until that has not been
//! true for a whole stable window, and never scales down.
//!
//! The newest sample alone is the fast path up: when it reaches the same threshold, it starts panic
//! mode and asks for its own pods on that tick. Averaged, a step from idle is diluted by the idle
//! seconds still in the panic window (a 4× step over a 6 s window crossed the 2× threshold on the
//! third tick only, 2-3 s after its first report); a sample at twice the pods' capacity is a burst
//! whatever came before it, and one below the threshold still waits for the windows. Across event types the busiest wins.
//! Scaling down waits for the stabilization window: the result is the largest recommendation of
//! that window, so a dip in noisy load does not remove pods that the next peak needs again.
//!
//! A durable event type's backlog in JetStream is part of its in-flight load (the caller merges
//! it into the samples), and as KEDA's activation does, any backlog asks for at least one pod: a
//! Manager at zero wakes for its first stored event, and is not scaled to zero while events wait,
//! whatever its target counts.

use super::window::Sample;
use std::collections::VecDeque;

/// Most recommendations remembered for the stabilization window.
const MAX_RECENT: usize = 3600;

/// What a target counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Metric {
    /// Events in flight per pod.
    InFlight,
    /// Arrivals per second per pod.
    Rate,
}

impl Metric {
    /// The figure of `s` this metric counts.
    pub(crate) fn of(self, s: &Sample) -> f64 {
        match self {
            Metric::InFlight => s.in_flight,
            Metric::Rate => s.rate,
        }
    }

    /// How the figure is named in reasons.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Metric::InFlight => "in flight",
            Metric::Rate => "rate",
        }
    }
}

/// The load each pod should carry for one event type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Target {
    /// What is counted.
    pub metric: Metric,
    /// How much of it one pod should carry (positive).
    pub per_pod: f64,
}

/// Bounds and windows of one Manager (or one event type's Deployment with `perEventType`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Policy {
    /// Fewest pods.
    pub min: u32,
    /// Most pods.
    pub max: u32,
    /// Averaging window of the stable mode, ms.
    pub stable_ms: u64,
    /// Averaging window of the panic mode, ms.
    pub panic_ms: u64,
    /// Load, as a multiple of target × current pods, that enters panic mode.
    pub panic_threshold: f64,
    /// How long scaling down waits, ms.
    pub stabilization_ms: u64,
}

/// The averaged load of one event type.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TypeLoad<'a> {
    /// Event type.
    pub event: &'a str,
    /// Its target.
    pub target: Target,
    /// Mean over the stable window.
    pub stable: Sample,
    /// Mean over the panic window.
    pub panic: Sample,
    /// The newest sample (the fast path up).
    pub latest: Sample,
    /// Events waiting in JetStream as last read (0 for direct delivery, or when not read).
    pub backlog: f64,
}

/// What the autoscaler remembers between decisions of one scaled object.
#[derive(Clone, Debug, Default)]
pub(crate) struct State {
    /// When the panic condition was last true; None when not in panic mode.
    panic_since: Option<u64>,
    /// Recent recommendations (time, pods), oldest first.
    recent: VecDeque<(u64, u32)>,
    /// When the load first asked for more pods than there are, for the reaction time.
    step_since: Option<u64>,
}

/// One decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Pods wanted.
    pub replicas: u32,
    /// Whether panic mode is on.
    pub panic: bool,
    /// Why, for people: e.g. "orders.create in flight 96.0 > 3×32".
    pub reason: String,
    /// With a scale-up: time since the load first asked for more pods, ms.
    pub reaction_ms: Option<u64>,
}

fn pods_for(value: f64, per_pod: f64) -> u32 {
    let per_pod = if per_pod > 0.0 { per_pod } else { 1.0 };
    let n = (value.max(0.0) / per_pod).ceil();
    // Far beyond any max; the clamp below brings it into bounds.
    if n >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        n as u32
    }
}

/// Decides the pods for `loads` (empty: no reports, hold) when `current` pods are asked for now.
pub(crate) fn decide(
    policy: &Policy,
    loads: &[TypeLoad<'_>],
    current: u32,
    state: &mut State,
    now_ms: u64,
) -> Decision {
    let clamp = |n: u32| n.clamp(policy.min, policy.max.max(policy.min));
    if loads.is_empty() {
        // No sidecar reports: no evidence either way, so only the bounds apply.
        state.step_since = None;
        return Decision {
            replicas: clamp(current),
            panic: false,
            reason: "no load reports; holding".into(),
            reaction_ms: None,
        };
    }
    let mut want_stable = 0u32;
    let mut want_panic = 0u32;
    // (load, value, pods, whether the pods are the backlog's one pod rather than value / target)
    let mut busiest: Option<(&TypeLoad, f64, u32, bool)> = None;
    let mut busiest_panic: Option<(&TypeLoad, f64, u32, bool)> = None;
    let mut triggered = false;
    for l in loads {
        let t = l.target;
        let stable = t.metric.of(&l.stable);
        let threshold = policy.panic_threshold * t.per_pod * f64::from(current.max(1));
        // A burst in the newest sample counts at once; below the threshold it is left to the
        // windows, so noise around the target does not move the pods.
        let latest = t.metric.of(&l.latest);
        let panic = if latest >= threshold {
            latest.max(t.metric.of(&l.panic))
        } else {
            t.metric.of(&l.panic)
        };
        let floor = u32::from(l.backlog > 0.0);
        let (ds, dp) = (pods_for(stable, t.per_pod), pods_for(panic, t.per_pod));
        let (ds, ds_floor) = (ds.max(floor), floor > ds);
        let (dp, dp_floor) = (dp.max(floor), floor > dp);
        if busiest.is_none() || ds > want_stable {
            want_stable = ds;
            busiest = Some((l, stable, ds, ds_floor));
        }
        if busiest_panic.is_none() || dp > want_panic {
            want_panic = dp;
            busiest_panic = Some((l, panic, dp, dp_floor));
        }
        if panic >= threshold {
            triggered = true;
        }
    }
    if triggered {
        state.panic_since = Some(now_ms);
    }
    let panic = state
        .panic_since
        .is_some_and(|t| now_ms.saturating_sub(t) < policy.stable_ms);
    if !panic {
        state.panic_since = None;
    }
    let (raw, why) = if panic {
        (want_panic.max(current), busiest_panic)
    } else {
        (want_stable, busiest)
    };
    state.recent.push_back((now_ms, raw));
    let oldest = now_ms.saturating_sub(policy.stabilization_ms);
    while state
        .recent
        .front()
        .is_some_and(|(t, _)| *t < oldest || state.recent.len() > MAX_RECENT)
    {
        state.recent.pop_front();
    }
    let stabilized = state.recent.iter().map(|(_, n)| *n).max().unwrap_or(raw);
    let replicas = clamp(stabilized);

    // Reaction time: from the first decision whose fast (panic-window) load needed more pods.
    if want_panic.max(want_stable) > current && current < policy.max {
        state.step_since.get_or_insert(now_ms);
    }
    let reaction_ms = if replicas > current {
        state.step_since.take().map(|t| now_ms.saturating_sub(t))
    } else {
        if want_panic.max(want_stable) <= current {
            state.step_since = None;
        }
        None
    };

    let mut reason = match why {
        Some((l, _, _, true)) => format!("{} backlog {} waiting", l.event, l.backlog),
        Some((l, value, n, false)) => format!(
            "{} {} {value:.1} > {n}×{}",
            l.event,
            l.target.metric.name(),
            l.target.per_pod
        ),
        None => String::new(),
    };
    if panic {
        reason = format!("panic: {reason}");
    }
    if stabilized > raw {
        reason.push_str(&format!(
            "; holding {stabilized} for the stabilization window"
        ));
    }
    if replicas != stabilized {
        reason.push_str(&format!(
            "; bounded to {}..{}",
            policy.min,
            policy.max.max(policy.min)
        ));
    }
    Decision {
        replicas,
        panic,
        reason,
        reaction_ms,
    }
}

/// Scales up from zero at once for an activation: a router holds `held` requests of `event` and no
/// pod is asked for. None when pods are already asked for (they will take the requests) or the
/// bounds allow none. The recommendation is remembered, so the stabilization window keeps the pod
/// while the held requests reach it and show up in the load reports.
pub(crate) fn activate(
    policy: &Policy,
    current: u32,
    state: &mut State,
    now_ms: u64,
    event: &str,
    held: u32,
) -> Option<Decision> {
    if current > 0 {
        return None;
    }
    let replicas = policy.min.max(1).min(policy.max.max(policy.min));
    if replicas == 0 {
        return None;
    }
    state.recent.push_back((now_ms, replicas));
    if state.recent.len() > MAX_RECENT {
        state.recent.pop_front();
    }
    state.step_since = None;
    Some(Decision {
        replicas,
        panic: false,
        reason: format!("activation: {held} requests held for {event} with no pod"),
        reaction_ms: Some(0),
    })
}

#[cfg(test)]
mod tests {
    use super::super::window::Window;
    use super::*;

    fn policy(min: u32, max: u32) -> Policy {
        Policy {
            min,
            max,
            stable_ms: 60_000,
            panic_ms: 6_000,
            panic_threshold: 2.0,
            stabilization_ms: 60_000,
        }
    }

    fn in_flight(n: f64) -> Target {
        Target {
            metric: Metric::InFlight,
            per_pod: n,
        }
    }

    /// Feeds one in-flight figure per second per event type through windows and decisions, as the
    /// loop does, and returns the replicas after each second.
    fn simulate(
        p: &Policy,
        targets: &[(&str, Target)],
        load: impl Fn(u64, usize) -> f64,
        secs: u64,
    ) -> Vec<u32> {
        let mut windows = vec![Window::default(); targets.len()];
        let mut state = State::default();
        let mut current = p.min.max(1);
        let mut out = Vec::new();
        for s in 1..=secs {
            let now = s * 1000;
            let loads: Vec<TypeLoad> = targets
                .iter()
                .enumerate()
                .map(|(i, (e, t))| {
                    let v = load(s, i);
                    windows[i].push(
                        now,
                        Sample {
                            rate: v,
                            in_flight: v,
                            p99_ms: 1.0,
                            shed: 0.0,
                        },
                        p.stable_ms,
                    );
                    TypeLoad {
                        event: e,
                        target: *t,
                        stable: windows[i].average(now, p.stable_ms).unwrap_or_default(),
                        panic: windows[i].average(now, p.panic_ms).unwrap_or_default(),
                        latest: windows[i].taken_at(now).unwrap_or_default(),
                        backlog: 0.0,
                    }
                })
                .collect();
            current = decide(p, &loads, current, &mut state, now).replicas;
            out.push(current);
        }
        out
    }

    #[test]
    fn table() {
        struct Case {
            name: &'static str,
            policy: Policy,
            load: fn(u64, usize) -> f64,
            secs: u64,
            // (second, replicas expected then)
            expect: &'static [(usize, u32)],
        }
        let cases = [
            Case {
                name: "a step to 3.5x target panics up within seconds",
                policy: policy(1, 10),
                load: |s, _| if s > 10 { 35.0 } else { 0.0 },
                secs: 30,
                expect: &[(10, 1), (16, 4), (30, 4)],
            },
            Case {
                name: "a step from idle to 4x target scales on the tick of its first sample",
                policy: policy(1, 10),
                load: |s, _| if s > 10 { 40.0 } else { 0.0 },
                secs: 20,
                expect: &[(10, 1), (11, 4), (20, 4)],
            },
            Case {
                name: "one sample under the panic threshold moves nothing",
                policy: policy(1, 10),
                load: |s, _| if s == 11 { 19.0 } else { 0.0 },
                secs: 20,
                expect: &[(11, 1), (12, 1), (20, 1)],
            },
            Case {
                name: "a step below the panic threshold scales up on the stable window",
                policy: policy(1, 10),
                load: |s, _| if s > 10 { 15.0 } else { 0.0 },
                secs: 60,
                expect: &[(10, 1), (20, 1), (60, 2)],
            },
            Case {
                name: "scale down waits for the stabilization window, then reaches min",
                policy: policy(1, 10),
                load: |s, _| if s <= 20 { 35.0 } else { 0.0 },
                secs: 200,
                expect: &[(20, 4), (70, 4), (200, 1)],
            },
            Case {
                name: "bounded by max",
                policy: policy(1, 3),
                load: |_, _| 500.0,
                secs: 10,
                expect: &[(10, 3)],
            },
            Case {
                name: "bounded by min without load",
                policy: policy(2, 5),
                load: |_, _| 0.0,
                secs: 10,
                expect: &[(1, 2), (10, 2)],
            },
        ];
        for c in cases {
            let got = simulate(
                &c.policy,
                &[("orders.create", in_flight(10.0))],
                c.load,
                c.secs,
            );
            for (s, want) in c.expect {
                assert_eq!(got[s - 1], *want, "{}: second {s}: {got:?}", c.name);
            }
        }
    }

    #[test]
    fn the_busiest_event_type_wins() {
        let targets = [
            ("orders.create", in_flight(10.0)),
            ("users.get", in_flight(10.0)),
        ];
        let got = simulate(
            &policy(1, 10),
            &targets,
            |s, i| if s > 5 && i == 1 { 55.0 } else { 1.0 },
            30,
        );
        // users.get: its first sample of 55 reaches the panic threshold (2 × 10 × 1 pod) and asks
        // for ceil(55 / 10) = 6 at once, held by panic mode; orders.create alone: 1.
        assert_eq!(got[4], 1, "{got:?}");
        assert_eq!(got[5], 6, "{got:?}");
        assert_eq!(got[29], 6, "{got:?}");
    }

    #[test]
    fn event_types_decided_apart_do_not_affect_each_other() {
        // With `perEventType` each type has its own policy state and decision.
        let hot = simulate(
            &policy(1, 10),
            &[("a", in_flight(10.0))],
            |s, _| if s > 5 { 55.0 } else { 0.0 },
            30,
        );
        let cold = simulate(&policy(1, 10), &[("b", in_flight(10.0))], |_, _| 2.0, 30);
        // The first sample of 55 panics and asks for ceil(55 / 10) = 6 on its tick.
        assert_eq!(hot[29], 6, "{hot:?}");
        assert!(cold.iter().all(|r| *r == 1), "{cold:?}");
    }

    #[test]
    fn noisy_load_does_not_flap() {
        // In flight 25 ± 10 (uniform, seeded) against a target of 10 for five minutes: a decision on
        // each second's figure alone would jump between 2, 3 and 4 pods.
        let mut rng = fastrand::Rng::with_seed(7);
        let noise: Vec<f64> = (0..=300).map(|_| 25.0 + (rng.f64() - 0.5) * 20.0).collect();
        let got = simulate(
            &policy(1, 10),
            &[("a", in_flight(10.0))],
            |s, _| noise[s as usize],
            300,
        );
        let changes = got.windows(2).filter(|w| w[1] != w[0]).count();
        assert!(changes <= 3, "{got:?}");
        // Past the first panic and its stabilization window, the pods stay put.
        assert!(got[130..].iter().all(|r| *r == 3), "{got:?}");
    }

    #[test]
    fn rate_targets_and_reasons() {
        let mut state = State::default();
        let load = TypeLoad {
            event: "orders.create",
            target: Target {
                metric: Metric::Rate,
                per_pod: 100.0,
            },
            stable: Sample {
                rate: 250.0,
                ..Sample::default()
            },
            panic: Sample {
                rate: 250.0,
                ..Sample::default()
            },
            latest: Sample {
                rate: 250.0,
                ..Sample::default()
            },
            backlog: 0.0,
        };
        let d = decide(&policy(1, 10), &[load], 1, &mut state, 1000);
        assert_eq!(d.replicas, 3);
        assert!(d.panic);
        assert_eq!(d.reason, "panic: orders.create rate 250.0 > 3×100");
        assert_eq!(d.reaction_ms, Some(0));
    }

    #[test]
    fn no_reports_hold_within_bounds() {
        let mut state = State::default();
        let d = decide(&policy(2, 4), &[], 7, &mut state, 1000);
        assert_eq!(d.replicas, 4);
        assert!(d.reason.contains("no load reports"));
    }

    #[test]
    fn scale_to_zero_when_idle_and_back_up_on_load() {
        let p = policy(0, 5);
        let t = [("a", in_flight(10.0))];
        // Idle from the start: zero pods at once (nothing to stabilize).
        let idle = simulate(&p, &t, |_, _| 0.0, 10);
        assert!(idle.iter().all(|r| *r == 0), "{idle:?}");
        // One request in flight from second 5 to 19: one pod, then back to zero once it left the
        // stable window (second 79) and the stabilization window after that (second 139).
        let got = simulate(
            &p,
            &t,
            |s, _| if (5..20).contains(&s) { 1.0 } else { 0.0 },
            150,
        );
        assert_eq!(got[3], 0, "{got:?}");
        assert_eq!(got[4], 1, "{got:?}");
        assert_eq!(got[120], 1, "held for the stabilization window: {got:?}");
        assert_eq!(got[149], 0, "{got:?}");
    }

    #[test]
    fn activation_wakes_from_zero_and_holds_the_pod() {
        let p = policy(0, 5);
        let mut state = State::default();
        let d = activate(&p, 0, &mut state, 1_000, "orders.create", 3).expect("from zero");
        assert_eq!(d.replicas, 1);
        assert_eq!(
            d.reason,
            "activation: 3 requests held for orders.create with no pod"
        );
        assert!(activate(&p, 1, &mut state, 1_500, "orders.create", 3).is_none());
        // No load reported yet: the stabilization window keeps the pod the activation asked for.
        let idle = TypeLoad {
            event: "orders.create",
            target: in_flight(10.0),
            stable: Sample::default(),
            panic: Sample::default(),
            latest: Sample::default(),
            backlog: 0.0,
        };
        let d = decide(&p, std::slice::from_ref(&idle), 1, &mut state, 30_000);
        assert_eq!(d.replicas, 1, "{}", d.reason);
        let d = decide(&p, &[idle], 1, &mut state, 62_000);
        assert_eq!(d.replicas, 0, "{}", d.reason);
        // A min above zero is what an activation asks for; a max of zero allows nothing.
        let mut fresh = State::default();
        assert_eq!(
            activate(&policy(2, 5), 0, &mut fresh, 0, "a", 1).map(|d| d.replicas),
            Some(2)
        );
        assert!(activate(&policy(0, 0), 0, &mut fresh, 0, "a", 1).is_none());
    }

    /// A durable type's load as the loop feeds it: its backlog counted as in flight.
    fn durable(backlog: f64, target: Target) -> TypeLoad<'static> {
        let s = Sample {
            in_flight: backlog,
            ..Sample::default()
        };
        TypeLoad {
            event: "orders.created",
            target,
            stable: s,
            panic: s,
            latest: s,
            backlog,
        }
    }

    #[test]
    fn a_backlog_wakes_a_manager_at_zero_and_scales_with_it() {
        let p = policy(0, 5);
        let mut state = State::default();
        // One stored event and no pod: one pod, at once.
        let d = decide(&p, &[durable(1.0, in_flight(10.0))], 0, &mut state, 1_000);
        assert_eq!(d.replicas, 1, "{}", d.reason);
        // 35 waiting against 10 per pod: panic up to 4.
        let d = decide(&p, &[durable(35.0, in_flight(10.0))], 1, &mut state, 2_000);
        assert_eq!(d.replicas, 4, "{}", d.reason);
        assert!(d.panic);
        assert_eq!(d.reason, "panic: orders.created in flight 35.0 > 4×10");
        // Drained: back to zero once the windows have passed.
        let d = decide(&p, &[durable(0.0, in_flight(10.0))], 4, &mut state, 30_000);
        assert_eq!(d.replicas, 4, "held: {}", d.reason);
        let d = decide(&p, &[durable(0.0, in_flight(10.0))], 4, &mut state, 95_000);
        assert_eq!(d.replicas, 0, "{}", d.reason);
    }

    #[test]
    fn a_backlog_keeps_one_pod_whatever_the_target_counts() {
        // A rate target sees no arrivals while events wait in the stream; the backlog still
        // asks for a pod, and says so.
        let rate = Target {
            metric: Metric::Rate,
            per_pod: 100.0,
        };
        let p = policy(0, 5);
        let mut state = State::default();
        let d = decide(&p, &[durable(3.0, rate)], 0, &mut state, 1_000);
        assert_eq!(d.replicas, 1);
        assert_eq!(d.reason, "orders.created backlog 3 waiting");
        // Past every window, still one pod while the backlog is there.
        let d = decide(&p, &[durable(3.0, rate)], 1, &mut state, 500_000);
        assert_eq!(d.replicas, 1, "{}", d.reason);
        // A max of zero allows none, backlog or not.
        let d = decide(&policy(0, 0), &[durable(3.0, rate)], 0, &mut state, 501_000);
        assert_eq!(d.replicas, 0);
    }
}
