//! Leader election with a `coordination.k8s.io/v1` Lease, so several operator replicas are safe:
//! only the holder runs controllers and the autoscaler. The leader also writes its control-plane
//! URL into the Lease (annotation [`URL_ANNOTATION`]), so standbys can forward what only the leader
//! uses (load reports, activations) to it.
//!
//! `decide` is pure (expiry by local observation, the renewal budget); this module runs the loops
//! against a [`store::LeaseStore`], with every call bounded in time, so a hung API call can neither
//! keep a stale leader leading nor stall a candidate.

pub(crate) mod decide;
pub(crate) mod store;
pub(crate) mod view;

use crate::metrics::Metrics;
use decide::{Decision, Observer, Timing};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;
use std::time::Duration;
use store::LeaseStore;
use tokio::time::{Instant, timeout};
use view::{Leader, LeaderView};

/// Annotation on the Lease holding the leader's control-plane URL.
pub(crate) const URL_ANNOTATION: &str = "switchyard.dev/control-plane-url";
/// Longest wait for giving the Lease up at shutdown.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Lease settings.
#[derive(Clone, Debug)]
pub(crate) struct LeaseConfig {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// Our identity.
    pub identity: String,
    /// Durations of the claim and its renewal.
    pub timing: Timing,
    /// Our control-plane URL, written into the Lease while we lead.
    pub url: Option<String>,
}

impl LeaseConfig {
    /// client-go's default timing (15 s lease, 10 s renew deadline, 2 s retry), no URL.
    pub(crate) fn new(name: String, namespace: String, identity: String) -> Self {
        LeaseConfig {
            name,
            namespace,
            identity,
            timing: Timing::default(),
            url: None,
        }
    }
}

/// What one read-decide-write round found.
enum Round {
    /// We hold the Lease after it.
    Held,
    /// Another replica holds a live claim.
    Other(Leader),
    /// Another writer got in between our read and our write.
    Raced,
}

async fn round<S: LeaseStore>(
    store: &S,
    cfg: &LeaseConfig,
    observer: &mut Observer,
) -> Result<Round, kube::Error> {
    let current = store.get().await?;
    let seen = Instant::now();
    let spec = current.as_ref().and_then(|l| l.spec.as_ref());
    observer.observe(spec, seen);
    match observer.decide(&cfg.identity, seen) {
        Decision::Wait { holder } => {
            let url = current
                .as_ref()
                .and_then(|l| l.metadata.annotations.as_ref())
                .and_then(|a| a.get(URL_ANNOTATION))
                .cloned();
            Ok(Round::Other(Leader::Other {
                identity: holder,
                url,
            }))
        }
        Decision::Acquire | Decision::Renew => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    annotations: cfg
                        .url
                        .as_ref()
                        .map(|u| BTreeMap::from([(URL_ANNOTATION.to_owned(), u.clone())])),
                    // The resourceVersion makes the write conditional: if another replica wrote in
                    // between, the API server answers 409 and we lost this round.
                    resource_version: current
                        .as_ref()
                        .and_then(|l| l.metadata.resource_version.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(decide::claimed(
                    spec,
                    &cfg.identity,
                    &cfg.timing,
                    Timestamp::now(),
                )),
            };
            if store.write(lease, current.is_none()).await? {
                Ok(Round::Held)
            } else {
                Ok(Round::Raced)
            }
        }
    }
}

/// Waits until we hold the Lease, keeping `view` on whoever leads meanwhile. Returns when the
/// winning write was sent: the start of our claim.
pub(crate) async fn acquire<S: LeaseStore>(
    store: &S,
    cfg: &LeaseConfig,
    metrics: &Metrics,
    view: &LeaderView,
) -> Instant {
    let mut observer = Observer::default();
    let mut announced = false;
    loop {
        let sent = Instant::now();
        // A hung call must not stall the candidate; the claim's own length bounds it.
        match timeout(cfg.timing.duration, round(store, cfg, &mut observer)).await {
            Ok(Ok(Round::Held)) => {
                view.set(Leader::Me);
                metrics.set_leader(true);
                tracing::info!(lease = %cfg.name, identity = %cfg.identity, "became leader");
                return sent;
            }
            Ok(Ok(Round::Other(leader))) => {
                if !announced {
                    tracing::info!(lease = %cfg.name, leader = ?leader, "another replica leads; standing by");
                    announced = true;
                }
                view.set(leader);
            }
            Ok(Ok(Round::Raced)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "leader election: cannot read or write the Lease")
            }
            Err(_) => {
                tracing::warn!(timeout = ?cfg.timing.duration, "leader election: the Lease call did not answer")
            }
        }
        tokio::time::sleep(cfg.timing.retry).await;
    }
}

/// Renews the Lease claimed at `since` until it cannot: returns when leadership is lost. Each
/// renewal may only take what is left of the renew deadline, so a hung call ends the leadership
/// before any other replica may judge the claim expired.
pub(crate) async fn hold<S: LeaseStore>(
    store: &S,
    cfg: &LeaseConfig,
    metrics: &Metrics,
    view: &LeaderView,
    since: Instant,
) {
    let mut observer = Observer::default();
    let mut last_ok = since;
    // Never sleep past the deadline: a failed renewal near its end must stop the leader then.
    while let Some(left) = decide::renew_budget(last_ok, &cfg.timing, Instant::now()) {
        tokio::time::sleep(cfg.timing.retry.min(left)).await;
        let sent = Instant::now();
        let Some(budget) = decide::renew_budget(last_ok, &cfg.timing, sent) else {
            break;
        };
        match timeout(budget, round(store, cfg, &mut observer)).await {
            Ok(Ok(Round::Held)) => last_ok = sent,
            Ok(Ok(Round::Other(leader))) => {
                tracing::error!(leader = ?leader, "another replica took the Lease");
                break;
            }
            Ok(Ok(Round::Raced)) => tracing::warn!("leader election: renewal lost a write race"),
            Ok(Err(e)) => tracing::warn!(error = %e, "leader election: renewal failed"),
            Err(_) => {
                tracing::warn!(budget = ?budget, "leader election: renewal did not answer in time")
            }
        }
    }
    metrics.set_leader(false);
    view.set(Leader::Unknown);
    tracing::error!(lease = %cfg.name, "lost leadership");
}

/// Gives the Lease up on shutdown, so a standby takes over at once instead of after expiry.
pub(crate) async fn release<S: LeaseStore>(store: &S, cfg: &LeaseConfig) {
    let give_up = async {
        let Some(mut lease) = store.get().await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        store.write(lease, false).await.map(|_| ())
    };
    match timeout(RELEASE_TIMEOUT, give_up).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "could not release the Lease; a standby takes over when it expires");
        }
        Err(_) => {
            tracing::warn!("releasing the Lease timed out; a standby takes over when it expires")
        }
    }
}

#[cfg(test)]
mod tests;
