//! Pure status logic: rollout facts of the children in, Ready/Progressing/Degraded conditions out.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use switchyard_crds::status::{DEGRADED, PROGRESSING, READY};

/// Rollout state of one Deployment, read from its status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rollout {
    /// spec.replicas.
    pub desired: i32,
    /// status.replicas.
    pub replicas: i32,
    /// status.readyReplicas.
    pub ready: i32,
    /// status.availableReplicas.
    pub available: i32,
    /// status.updatedReplicas.
    pub updated: i32,
    /// The Deployment controller has seen the latest spec.
    pub observed: bool,
}

impl Rollout {
    /// Facts of a Deployment as returned by the API server.
    pub(crate) fn of(d: &Deployment) -> Self {
        let status = d.status.clone().unwrap_or_default();
        let generation = d.metadata.generation.unwrap_or(0);
        Rollout {
            desired: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            replicas: status.replicas.unwrap_or(0),
            ready: status.ready_replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
            updated: status.updated_replicas.unwrap_or(0),
            observed: status.observed_generation.unwrap_or(0) >= generation,
        }
    }

    /// Every desired pod runs the latest template and is available, and no old pod is left.
    pub(crate) fn complete(&self) -> bool {
        self.observed
            && self.updated >= self.desired
            && self.available >= self.desired
            && self.replicas == self.desired
    }

    /// Sum of several Deployments' facts; complete only if each is.
    pub(crate) fn total(all: &[Rollout]) -> (Rollout, bool) {
        let sum = all.iter().fold(
            Rollout {
                observed: true,
                ..Rollout::default()
            },
            |a, r| Rollout {
                desired: a.desired + r.desired,
                replicas: a.replicas + r.replicas,
                ready: a.ready + r.ready,
                available: a.available + r.available,
                updated: a.updated + r.updated,
                observed: a.observed && r.observed,
            },
        );
        (sum, all.iter().all(Rollout::complete))
    }
}

/// Why a resource cannot be fully served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    /// CamelCase reason, e.g. `InvalidSpec`, `RouterNotFound`.
    pub reason: &'static str,
    /// What is wrong, naming the field, and what to do.
    pub message: String,
    /// The spec could not be applied at all (no children built from it).
    pub blocks_apply: bool,
}

/// The three conditions for `generation`, keeping lastTransitionTime of any condition whose status
/// did not change, so an unchanged world writes an unchanged status.
pub(crate) fn compute(
    generation: Option<i64>,
    rollout: Option<(Rollout, bool)>,
    problem: Option<&Problem>,
    existing: &[Condition],
    now: &Time,
) -> Vec<Condition> {
    let blocked = problem.is_some_and(|p| p.blocks_apply);
    let (ready, ready_reason, ready_msg) = match (blocked, rollout) {
        (true, _) => (
            false,
            "InvalidSpec",
            "the spec cannot be applied; see the Degraded condition".to_owned(),
        ),
        (false, None) => (false, "Pending", "children not created yet".to_owned()),
        (false, Some((r, complete))) if complete => (
            true,
            "Available",
            format!("{}/{} pods ready", r.ready, r.desired),
        ),
        (false, Some((r, _))) => (
            false,
            "PodsNotReady",
            format!("{}/{} pods available", r.available, r.desired),
        ),
    };
    let (progressing, prog_reason, prog_msg) = match rollout {
        Some((r, false)) if !blocked => (
            true,
            "RollingOut",
            format!(
                "{} of {} pods updated, {} available",
                r.updated, r.desired, r.available
            ),
        ),
        _ => (false, "Complete", "no rollout in progress".to_owned()),
    };
    let (degraded, deg_reason, deg_msg) = match problem {
        Some(p) => (true, p.reason, p.message.clone()),
        None => (false, "AsExpected", "no problems found".to_owned()),
    };
    [
        (READY, ready, ready_reason, ready_msg),
        (PROGRESSING, progressing, prog_reason, prog_msg),
        (DEGRADED, degraded, deg_reason, deg_msg),
    ]
    .into_iter()
    .map(|(type_, status, reason, message)| {
        let status = if status { "True" } else { "False" };
        let last = existing
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now.clone());
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: generation,
            last_transition_time: last,
        }
    })
    .collect()
}

/// What the status of both resources shares.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Summary {
    /// Ready, Progressing, Degraded.
    pub conditions: Vec<Condition>,
    /// Pods across the children.
    pub replicas: i32,
    /// Ready pods across the children.
    pub ready_replicas: i32,
}

/// Conditions and pod counts. Without a rollout (the spec could not be applied) the last known counts
/// stay, since the children from the last good spec still serve.
pub(crate) fn summarize(
    generation: Option<i64>,
    rollout: Option<(Rollout, bool)>,
    problem: Option<&Problem>,
    old_conditions: &[Condition],
    old_counts: (i32, i32),
    now: &Time,
) -> Summary {
    let conditions = compute(generation, rollout, problem, old_conditions, now);
    let (replicas, ready_replicas) = match rollout {
        Some((sum, _)) => (sum.replicas, sum.ready),
        None => old_counts,
    };
    Summary {
        conditions,
        replicas,
        ready_replicas,
    }
}

/// Says on a Degraded=False condition why something that would otherwise degrade does not (a
/// namespace's leave, say): `reason` and `message` replace `AsExpected`. A Degraded=True condition
/// keeps its problem, which is what needs reading first.
pub(crate) fn not_degraded_because(conditions: &mut [Condition], reason: &str, message: String) {
    for c in conditions
        .iter_mut()
        .filter(|c| c.type_ == DEGRADED && c.status == "False")
    {
        c.reason = reason.to_owned();
        c.message.clone_from(&message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).expect("valid"))
    }

    fn done(n: i32) -> Rollout {
        Rollout {
            desired: n,
            replicas: n,
            ready: n,
            available: n,
            updated: n,
            observed: true,
        }
    }

    #[test]
    fn complete_rollout_is_ready_and_not_progressing() {
        let c = compute(Some(3), Some(Rollout::total(&[done(2)])), None, &[], &t(10));
        assert_eq!(
            c.iter()
                .map(|c| (c.type_.as_str(), c.status.as_str()))
                .collect::<Vec<_>>(),
            [
                ("Ready", "True"),
                ("Progressing", "False"),
                ("Degraded", "False")
            ]
        );
        assert!(c.iter().all(|c| c.observed_generation == Some(3)));
        assert_eq!(c[0].message, "2/2 pods ready");
    }

    #[test]
    fn unavailable_pods_progress_and_are_not_ready() {
        let r = Rollout {
            available: 1,
            ..done(3)
        };
        let c = compute(Some(1), Some(Rollout::total(&[r])), None, &[], &t(10));
        assert_eq!(
            (c[0].status.as_str(), c[0].reason.as_str()),
            ("False", "PodsNotReady")
        );
        assert_eq!(c[1].status, "True");
    }

    #[test]
    fn invalid_spec_degrades_and_blocks_ready() {
        let p = Problem {
            reason: "InvalidSpec",
            message: "spec.routes[1].http: dup".into(),
            blocks_apply: true,
        };
        let c = compute(Some(2), None, Some(&p), &[], &t(10));
        assert_eq!(
            (c[0].status.as_str(), c[0].reason.as_str()),
            ("False", "InvalidSpec")
        );
        assert_eq!(
            (c[2].status.as_str(), c[2].message.as_str()),
            ("True", "spec.routes[1].http: dup")
        );
    }

    #[test]
    fn transition_time_only_moves_on_change() {
        let first = compute(Some(1), Some(Rollout::total(&[done(1)])), None, &[], &t(10));
        let same = compute(
            Some(1),
            Some(Rollout::total(&[done(1)])),
            None,
            &first,
            &t(20),
        );
        assert_eq!(first, same, "nothing changed, nothing rewritten");
        let flipped = compute(
            Some(1),
            Some(Rollout::total(&[Rollout {
                ready: 0,
                available: 0,
                ..done(1)
            }])),
            None,
            &first,
            &t(30),
        );
        assert_eq!(flipped[0].last_transition_time, t(30));
        assert_eq!(
            flipped[2].last_transition_time,
            t(10),
            "Degraded stayed False"
        );
    }

    #[test]
    fn summary_keeps_last_counts_when_nothing_was_applied() {
        let p = Problem {
            reason: "InvalidSpec",
            message: "x".into(),
            blocks_apply: true,
        };
        let s = summarize(Some(4), None, Some(&p), &[], (3, 2), &t(10));
        assert_eq!((s.replicas, s.ready_replicas), (3, 2));
        let s = summarize(
            Some(4),
            Some(Rollout::total(&[done(5)])),
            None,
            &[],
            (3, 2),
            &t(10),
        );
        assert_eq!((s.replicas, s.ready_replicas), (5, 5));
    }

    #[test]
    fn a_reason_not_to_degrade_shows_on_degraded_false_only() {
        let mut fine = compute(Some(1), Some(Rollout::total(&[done(1)])), None, &[], &t(10));
        not_degraded_because(&mut fine, "Allowed", "by a label".into());
        assert_eq!(
            (
                fine[2].status.as_str(),
                fine[2].reason.as_str(),
                fine[2].message.as_str()
            ),
            ("False", "Allowed", "by a label")
        );
        assert_eq!(fine[0].reason, "Available", "other conditions untouched");
        let p = Problem {
            reason: "RouterNotFound",
            message: "x".into(),
            blocks_apply: false,
        };
        let mut degraded = compute(Some(1), None, Some(&p), &[], &t(10));
        not_degraded_because(&mut degraded, "Allowed", "by a label".into());
        assert_eq!(degraded[2].reason, "RouterNotFound");
    }

    #[test]
    fn total_needs_every_deployment_complete() {
        let (sum, complete) = Rollout::total(&[
            done(1),
            Rollout {
                observed: false,
                ..done(2)
            },
        ]);
        assert_eq!(sum.desired, 3);
        assert!(!complete);
    }
}

/// The `Durability` condition of a Manager with durable types (`None` without any, or without a
/// JetStream server, which rendering refuses): True when its streams are replicated on a quorum
/// (3 or more) and reached over TLS; False naming each risk otherwise, so a user who pointed
/// `jetstream.url` at one plaintext server sees what a 202 then promises.
pub(crate) fn durability(
    durable_types: usize,
    jetstream: Option<&switchyard_protocol::durable::JetStreamConfig>,
    existing: &[Condition],
    generation: Option<i64>,
    now: &Time,
) -> Option<Condition> {
    let js = jetstream.filter(|_| durable_types > 0)?;
    let plaintext: Vec<&str> = js
        .url
        .split(',')
        .map(str::trim)
        .filter(|u| u.starts_with("nats://"))
        .collect();
    let mut risks = Vec::new();
    if js.replicas < 3 {
        risks.push((
            "FewReplicas",
            format!(
                "streams have {} replica(s): an acknowledged event is kept on fewer than a quorum of 3 servers, and losing a server (or its disk) loses it; run 3 servers (the chart's jetstream.enabled) or set jetstream.streamReplicas to 3",
                js.replicas
            ),
        ));
    }
    if !plaintext.is_empty() {
        risks.push((
            "Plaintext",
            format!(
                "JetStream at {} is reached without TLS: events travel in the clear and any pod that reaches the server can read, publish or delete them (jetstream.insecure)",
                plaintext.join(", ")
            ),
        ));
    }
    let (status, reason, message) = match risks.as_slice() {
        [] => (
            "True",
            "Replicated",
            format!(
                "acknowledged events are kept on {} JetStream servers, reached over mutual TLS",
                js.replicas
            ),
        ),
        [(reason, message)] => ("False", *reason, message.clone()),
        _ => (
            "False",
            "FewReplicasAndPlaintext",
            risks
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        ),
    };
    let last = existing
        .iter()
        .find(|c| c.type_ == switchyard_crds::status::DURABILITY && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    Some(Condition {
        type_: switchyard_crds::status::DURABILITY.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: last,
    })
}

#[cfg(test)]
mod durability_tests {
    use super::*;
    use switchyard_protocol::durable::JetStreamConfig;

    fn js(url: &str, replicas: u8) -> JetStreamConfig {
        JetStreamConfig {
            url: url.into(),
            replicas,
        }
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn a_replicated_tls_store_is_stated_and_each_risk_is_named() {
        let ok = durability(1, Some(&js("tls://a:4222", 3)), &[], Some(2), &now()).expect("some");
        assert_eq!(
            (ok.status.as_str(), ok.reason.as_str()),
            ("True", "Replicated")
        );
        let r1 = durability(1, Some(&js("tls://a:4222", 1)), &[], None, &now()).expect("some");
        assert_eq!(
            (r1.status.as_str(), r1.reason.as_str()),
            ("False", "FewReplicas")
        );
        assert!(r1.message.contains("1 replica"), "{}", r1.message);
        let both = durability(2, Some(&js("nats://a:4222", 1)), &[], None, &now()).expect("some");
        assert_eq!(both.reason, "FewReplicasAndPlaintext");
        assert!(
            both.message.contains("nats://a:4222") && both.message.contains("jetstream.insecure"),
            "{}",
            both.message
        );
    }

    #[test]
    fn only_managers_with_durable_types_carry_it() {
        assert!(durability(0, Some(&js("tls://a:4222", 3)), &[], None, &now()).is_none());
        assert!(durability(1, None, &[], None, &now()).is_none());
    }
}
