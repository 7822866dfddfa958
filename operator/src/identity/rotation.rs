//! The watch of the CA Secret: every replica follows its content (a new anchor bundle, a
//! re-issued issuer) without a restart, so replicas converge on what the Secret holds instead of
//! each keeping what it read at start. A Secret that becomes unusable leaves the current CA in
//! place (logged); a deleted `switchyard-ca` is written back with the CA in use; a deleted Secret
//! the user gave is waited for. Once a second it lets an announced issuer sign when due, and
//! refreshes the expiry metrics.

use super::{MeshIdentity, ca_secret};
use crate::metrics::Metrics;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use switchyard_identity::authority::Change;
use switchyard_identity::trust::{epoch_seconds, not_after};

/// How often a pending issuer and the metrics are looked at.
const TICK: Duration = Duration::from_secs(1);

/// Follows the CA Secret until `shutdown`.
pub(crate) async fn run(
    client: kube::Client,
    identity: Arc<MeshIdentity>,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    let (name, given) = identity.settings.ca_secret.clone();
    let namespace = identity.settings.namespace.clone();
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let events = watcher::watcher(api, config).default_backoff();
    tokio::pin!(events, shutdown);
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The Secret's data as last seen: what a deleted `switchyard-ca` is written back with.
    let mut last: Option<BTreeMap<String, ByteString>> = None;
    let mut seen_in_list = false;
    tracing::info!(secret = %format!("{namespace}/{name}"), "following the mesh CA Secret");
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = tick.tick() => {
                match identity.issuing.tick(SystemTime::now()) {
                    Ok(true) => {
                        metrics.ca_rotation("switched");
                        identity.trust_changed();
                        tracing::info!("the new mesh issuer signs from now on; sidecars renew early as they see it");
                    }
                    Ok(false) => {}
                    Err(e) => tracing::error!(error = %e, "the new mesh issuer could not take over; trying again"),
                }
                refresh_metrics(&identity, &metrics);
            }
            event = events.next() => match event {
                None => return,
                Some(Err(e)) => tracing::warn!(error = %e, "watching the mesh CA Secret failed; retrying"),
                Some(Ok(Event::Apply(s) | Event::InitApply(s))) => {
                    seen_in_list = true;
                    last = s.data.clone();
                    take(&identity, &metrics, &s, &namespace, &name);
                }
                Some(Ok(Event::Init)) => seen_in_list = false,
                Some(Ok(Event::InitDone)) if seen_in_list => {}
                Some(Ok(Event::Delete(_) | Event::InitDone)) => {
                    if given {
                        tracing::error!(secret = %format!("{namespace}/{name}"), "the mesh CA Secret is gone; signing with the CA in use until it is back");
                    } else if let Some(data) = last.clone()
                        && let Err(e) = ca_secret::restore(&client, &namespace, &name, data).await
                    {
                        tracing::error!(error = %e, "the mesh CA Secret could not be written back");
                    }
                }
            },
        }
    }
}

/// Takes the Secret's content, or keeps the current CA when it is unusable.
fn take(identity: &MeshIdentity, metrics: &Metrics, secret: &Secret, namespace: &str, name: &str) {
    let ca = match ca_secret::ca_of(secret, namespace, name) {
        Ok(ca) => ca,
        Err(e) => {
            tracing::error!(error = %e, "the mesh CA Secret is unusable; signing with the CA in use");
            return;
        }
    };
    let change = identity.issuing.offer(ca, SystemTime::now());
    if matches!(
        change,
        Ok(Change::Anchors | Change::Staged | Change::Switched)
    ) {
        identity.trust_changed();
    }
    match change {
        Ok(Change::Same) => {}
        Ok(Change::Anchors) => {
            metrics.ca_rotation("anchors");
            tracing::info!(
                anchors = identity.issuing.authority.trust().anchors.len(),
                "the mesh trust anchors changed; sidecars take them within seconds"
            );
        }
        Ok(Change::Staged) => {
            metrics.ca_rotation("staged");
            tracing::info!(
                delay_s = identity.settings.activation_delay.as_secs(),
                "a new mesh issuer is announced; it signs after the activation delay"
            );
        }
        Ok(Change::Switched) => {
            metrics.ca_rotation("switched");
            tracing::warn!(
                "a new mesh issuer signs at once (the previous one expired or its root left the bundle)"
            );
        }
        Err(e) => tracing::error!(error = %e, "the mesh CA Secret's content could not be applied"),
    }
    refresh_metrics(identity, metrics);
}

fn refresh_metrics(identity: &MeshIdentity, metrics: &Metrics) {
    let trust = identity.issuing.authority.trust();
    let signer = identity.issuing.authority.signer();
    let anchor = trust
        .anchors
        .iter()
        .filter_map(|a| not_after(a))
        .min()
        .map_or(0, epoch_seconds);
    let issuer = not_after(&signer).map_or(0, epoch_seconds);
    metrics.set_trust_expiry(anchor, issuer);
    let leaves = identity.leaves.summary(&signer, SystemTime::now());
    metrics.set_leaves(
        leaves.oldest_expiry.map_or(0, epoch_seconds),
        leaves.current,
        leaves.previous,
    );
}
