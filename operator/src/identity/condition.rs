//! The `MeshTrust` condition on every Router and Manager (the leader writes it): whether the trust
//! anchor and the issuer their sidecars' certificates rest on are valid, expire within 30 days,
//! or have expired ([`super::expiry`]). Platform teams read `kubectl get managers -o yaml` (and
//! Argo CD's health), not only the operator's metrics. Written under its own field manager, only
//! to the objects whose condition differs from the verdict: at steady state a tick writes nothing,
//! and a rotation writes each object once.

use super::MeshIdentity;
use super::expiry::{self, Verdict};
use crate::scope::Stores;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use switchyard_crds::status::{HasConditions, MESH_TRUST};
use switchyard_crds::{Manager, Router};
use switchyard_identity::trust::not_after;

/// Field manager of the condition, apart from the controller's (server-side apply keeps both).
pub(crate) const FIELD_MANAGER: &str = "switchyard-trust";
/// Time between looks (a CA change shows within it; expiries are days away).
const EVERY: Duration = Duration::from_secs(30);
/// Objects written at once after a change.
const WRITERS: usize = 8;

/// Keeps the condition of every Router and Manager current until `shutdown`.
pub(crate) async fn run(
    client: kube::Client,
    identity: Arc<MeshIdentity>,
    routers: Stores<Router>,
    managers: Stores<Manager>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    tokio::select! {
        () = &mut shutdown => return,
        ready = async { routers.wait_until_ready().await.and(managers.wait_until_ready().await) } => {
            if ready.is_err() { return }
        }
    }
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = tick.tick() => {}
        }
        let Some(v) = verdict(&identity) else {
            continue;
        };
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        write_all(&client, routers.state(), &v, &now).await;
        write_all(&client, managers.state(), &v, &now).await;
    }
}

/// The verdict on the CA in use now.
fn verdict(identity: &MeshIdentity) -> Option<Verdict> {
    let authority = &identity.issuing.authority;
    let anchors: Vec<SystemTime> = authority
        .trust()
        .anchors
        .iter()
        .filter_map(|a| not_after(a))
        .collect();
    expiry::verdict(&anchors, not_after(&authority.signer()), SystemTime::now())
}

/// Writes the condition of each of `objects` whose stored one says otherwise.
async fn write_all<K>(client: &kube::Client, objects: Vec<Arc<K>>, v: &Verdict, now: &Time)
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + HasConditions,
{
    use futures::StreamExt;
    futures::stream::iter(objects)
        .filter_map(|o| {
            let stale = current(o.conditions(), v).is_none();
            std::future::ready(stale.then_some(o))
        })
        .for_each_concurrent(WRITERS, |o| async move {
            let (Some(ns), name) = (o.namespace(), o.name_any()) else {
                return;
            };
            let c = condition(o.conditions(), v, o.meta().generation, now);
            if let Err(e) = apply::<K>(client, &ns, &name, c).await {
                tracing::warn!(kind = %K::kind(&()), namespace = %ns, name = %name, error = %e, "could not write the MeshTrust condition");
            }
        })
        .await;
}

/// The stored condition, if it already says `v`.
fn current<'a>(conditions: &'a [Condition], v: &Verdict) -> Option<&'a Condition> {
    conditions.iter().find(|c| {
        c.type_ == MESH_TRUST
            && c.status == v.status
            && c.reason == v.reason
            && c.message == v.message
    })
}

/// The condition for `v`, keeping the stored transition time while the status holds (pure).
pub(crate) fn condition(
    old: &[Condition],
    v: &Verdict,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let since = old
        .iter()
        .find(|c| c.type_ == MESH_TRUST && c.status == v.status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: MESH_TRUST.into(),
        status: v.status.into(),
        reason: v.reason.into(),
        message: v.message.clone(),
        observed_generation: generation,
        last_transition_time: since,
    }
}

async fn apply<K>(
    client: &kube::Client,
    ns: &str,
    name: &str,
    c: Condition,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": { "conditions": [c] },
    });
    Api::<K>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).expect("valid"))
    }

    fn said(status: &'static str, reason: &'static str, message: &str) -> Verdict {
        Verdict {
            status,
            reason,
            message: message.into(),
        }
    }

    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let valid = said("True", "Valid", "valid: issuer until X");
        let first = condition(&[], &valid, Some(3), &t(100));
        assert_eq!(first.last_transition_time, t(100));
        assert!(current(std::slice::from_ref(&first), &valid).is_some());
        // A rotation: still valid, other dates; the condition is stale but keeps its time.
        let rotated = said("True", "Valid", "valid: issuer until Y");
        let stored = [first];
        assert!(
            current(&stored, &rotated).is_none(),
            "a new message is written"
        );
        assert_eq!(
            condition(&stored, &rotated, Some(3), &t(200)).last_transition_time,
            t(100)
        );
        let soon = said("False", "ExpiresSoon", "the mesh issuer expires");
        assert_eq!(
            condition(&stored, &soon, Some(3), &t(300)).last_transition_time,
            t(300)
        );
    }
}
