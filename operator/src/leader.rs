//! Leader election with a `coordination.k8s.io/v1` Lease, so two operator replicas are safe: only the
//! holder runs controllers. The decision is a pure function; the loop around it does the I/O.

use crate::metrics::Metrics;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};
use std::time::Duration;

/// Lease settings.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// Our identity.
    pub identity: String,
    /// How long a holder's claim lasts without renewal.
    pub duration: Duration,
    /// How often the holder renews (and a candidate retries).
    pub retry: Duration,
}

impl LeaseConfig {
    /// Defaults of client-go's leader election: 15 s lease, 2 s retry.
    pub fn new(name: String, namespace: String, identity: String) -> Self {
        LeaseConfig {
            name,
            namespace,
            identity,
            duration: Duration::from_secs(15),
            retry: Duration::from_secs(2),
        }
    }
}

/// What to do with the Lease as it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nobody holds it, or the holder's claim expired: take it.
    Acquire,
    /// We hold it: renew.
    Renew,
    /// Someone else holds a live claim.
    Wait {
        /// The holder.
        holder: String,
    },
}

/// Decides from the Lease spec (None when the Lease does not exist) at time `now`.
pub fn decide(spec: Option<&LeaseSpec>, me: &str, now: Timestamp) -> Decision {
    let Some(spec) = spec else {
        return Decision::Acquire;
    };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder.is_empty() {
        return Decision::Acquire;
    }
    if holder == me {
        return Decision::Renew;
    }
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0);
    match renewed {
        Some(t) if t.checked_add(duration).is_ok_and(|expiry| expiry > now) => {
            Decision::Wait { holder }
        }
        _ => Decision::Acquire,
    }
}

/// The Lease spec after we acquire or renew it.
pub fn claimed(old: Option<&LeaseSpec>, cfg: &LeaseConfig, now: Timestamp) -> LeaseSpec {
    let renewing = old.and_then(|s| s.holder_identity.as_deref()) == Some(cfg.identity.as_str());
    let transitions = old.and_then(|s| s.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(i32::try_from(cfg.duration.as_secs()).unwrap_or(15)),
        acquire_time: if renewing {
            old.and_then(|s| s.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if renewing {
            transitions
        } else {
            transitions + 1
        }),
        ..LeaseSpec::default()
    }
}

/// One attempt to acquire or renew. Ok(true) when we hold the Lease afterwards.
async fn try_once(api: &Api<Lease>, cfg: &LeaseConfig) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    let current = api.get_opt(&cfg.name).await?;
    let spec = current.as_ref().and_then(|l| l.spec.as_ref());
    match decide(spec, &cfg.identity, now) {
        Decision::Wait { .. } => Ok(false),
        Decision::Acquire | Decision::Renew => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    // The resourceVersion makes the write conditional: if another replica wrote in
                    // between, the API server answers 409 and we lost this round.
                    resource_version: current
                        .as_ref()
                        .and_then(|l| l.metadata.resource_version.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(claimed(spec, cfg, now)),
            };
            let res = match current {
                Some(_) => api
                    .replace(&cfg.name, &PostParams::default(), &lease)
                    .await
                    .map(|_| ()),
                None => api.create(&PostParams::default(), &lease).await.map(|_| ()),
            };
            match res {
                Ok(()) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// Waits until we hold the Lease.
pub async fn acquire(client: &Client, cfg: &LeaseConfig, metrics: &Metrics) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    let mut announced = false;
    loop {
        match try_once(&api, cfg).await {
            Ok(true) => {
                metrics.set_leader(true);
                tracing::info!(lease = %cfg.name, identity = %cfg.identity, "became leader");
                return;
            }
            Ok(false) if !announced => {
                tracing::info!(lease = %cfg.name, "another replica leads; standing by");
                announced = true;
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "leader election: cannot read or write the Lease"),
        }
        tokio::time::sleep(cfg.retry).await;
    }
}

/// Renews the Lease until renewal fails for longer than the lease lasts; returns when leadership is lost.
pub async fn hold(client: &Client, cfg: &LeaseConfig, metrics: &Metrics) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    let mut last_ok = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(cfg.retry).await;
        match try_once(&api, cfg).await {
            Ok(true) => last_ok = tokio::time::Instant::now(),
            Ok(false) => break,
            Err(e) => tracing::warn!(error = %e, "leader election: renewal failed"),
        }
        // Stop before others may legally take over, so two leaders never overlap.
        if last_ok.elapsed() + cfg.retry >= cfg.duration {
            break;
        }
    }
    metrics.set_leader(false);
    tracing::error!(lease = %cfg.name, "lost leadership");
}

/// Gives the Lease up on shutdown, so a standby takes over at once instead of after expiry.
pub async fn release(client: &Client, cfg: &LeaseConfig) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
    let Ok(Some(mut lease)) = api.get_opt(&cfg.name).await else {
        return;
    };
    let Some(spec) = lease.spec.as_mut() else {
        return;
    };
    if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
        return;
    }
    spec.holder_identity = None;
    if let Err(e) = api.replace(&cfg.name, &PostParams::default(), &lease).await {
        tracing::warn!(error = %e, "could not release the Lease; a standby takes over when it expires");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("valid")
    }

    fn held_by(who: &str, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(who.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(at(renewed))),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn missing_or_empty_lease_is_acquired() {
        assert_eq!(decide(None, "a", at(100)), Decision::Acquire);
        assert_eq!(
            decide(Some(&LeaseSpec::default()), "a", at(100)),
            Decision::Acquire
        );
    }

    #[test]
    fn own_lease_is_renewed() {
        assert_eq!(
            decide(Some(&held_by("a", 99)), "a", at(100)),
            Decision::Renew
        );
    }

    #[test]
    fn live_foreign_lease_is_respected_until_expiry() {
        assert_eq!(
            decide(Some(&held_by("b", 90)), "a", at(104)),
            Decision::Wait { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&held_by("b", 90)), "a", at(105)),
            Decision::Acquire
        );
    }

    #[test]
    fn taking_over_counts_a_transition_and_renewing_does_not() {
        let cfg = LeaseConfig::new("l".into(), "ns".into(), "a".into());
        let taken = claimed(Some(&held_by("b", 1)), &cfg, at(50));
        assert_eq!(taken.lease_transitions, Some(1));
        assert_eq!(taken.acquire_time, Some(MicroTime(at(50))));
        let renewed = claimed(Some(&taken), &cfg, at(52));
        assert_eq!(renewed.lease_transitions, Some(1));
        assert_eq!(renewed.acquire_time, Some(MicroTime(at(50))));
        assert_eq!(renewed.renew_time, Some(MicroTime(at(52))));
    }
}
