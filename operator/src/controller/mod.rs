//! The controllers: one per custom resource, run together while this replica leads. What both share
//! (owned-object watch config, timing, error policy, status writes) lives here.

mod applied;
pub(crate) mod events;
pub(crate) mod manager;
mod manager_cache;
mod owned;
pub(crate) mod router;
pub(crate) mod sidecar_rollout;
mod spec_changes;

use crate::context::Context;
use crate::scope::Target;
use crate::{Error, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs both controllers until `shutdown` resolves. The Router controller reads Managers from a
/// reflector cache instead of listing them on every reconcile.
///
/// With `--watch-namespaces`, each controller runs once per namespace, joined: a `Controller` reads
/// its objects from one reflector store, and one store can be fed by one watcher only (see
/// [`crate::scope`]), so a single controller cannot watch a list of namespaces. Each namespace's
/// controllers then have their own queue; a reconcile only ever touches its own namespace.
pub(crate) async fn run(
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    use futures::StreamExt;
    let (managers, fill) = manager_cache::ManagerCache::start(ctx.client.clone(), &ctx.scope);
    let fill = fill.take_until(shutdown.clone()).for_each(|()| async {});
    let targets = ctx.scope.targets();
    let routers = targets
        .iter()
        .map(|t| router::run(ctx.clone(), t, managers.clone(), shutdown.clone()));
    let managers = targets
        .iter()
        .map(|t| manager::run(ctx.clone(), t, shutdown.clone()));
    futures::join!(
        fill,
        futures::future::join_all(routers),
        futures::future::join_all(managers)
    );
}

/// A reconcile of every object each time the mesh's trust changes: each sidecar ConfigMap carries
/// the trust bundle (`ca.crt`) a new pod starts with, and the periodic resync would bring it only
/// minutes later, while a pod bootstrapped with the old bundle cannot verify an operator whose
/// certificate a new issuer signed. Without mesh TLS, a stream that ends at once.
fn trust_changes(ctx: &Context) -> impl futures::Stream<Item = ()> + Send + Sync + 'static {
    use futures::StreamExt;
    let changes = ctx
        .trust_changes
        .clone()
        .unwrap_or_else(|| tokio::sync::watch::channel(0).1);
    tokio_stream::wrappers::WatchStream::from_changes(changes).map(|_| ())
}

/// Field manager of the autoscaler's status fields (desired replicas, load figures): apart from the
/// controllers' so server-side apply merges the two writers' fields instead of one erasing the other.
pub(crate) const AUTOSCALER_FIELD_MANAGER: &str = "switchyard-autoscaler";

/// Reconciles one controller runs at once. kube's default is no limit, and at start-up every object
/// is due: 1,000 Managers reconciled together held their rendered children, requests and answers at
/// the same moment, the peak of the operator's memory (docs/performance-log.md, "The control plane at
/// scale"). Each takes a few API round trips, so 16 still clear a thousand in seconds.
pub(crate) const RECONCILES_AT_ONCE: u16 = 16;

/// The controllers' settings.
fn reconciles() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().concurrency(RECONCILES_AT_ONCE)
}

/// `controller` reconciles its object when one of the Deployments, Services or ConfigMaps it owns
/// changes. They are watched by metadata only (`PartialObjectMeta`): a reconcile needs to know that
/// a child changed, not what it holds, and a full watch would deserialize every rendered ConfigMap
/// and pod template of a thousand Managers on each change and at each relist, twice (both
/// controllers own them).
fn owns_children<K>(
    controller: Controller<K>,
    target: &Target,
    client: &kube::Client,
) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    controller
        .owns(
            target.api::<PartialObjectMeta<Deployment>>(client.clone()),
            owned_children(),
        )
        .owns(
            target.api::<PartialObjectMeta<Service>>(client.clone()),
            owned_children(),
        )
        .owns(
            target.api::<PartialObjectMeta<ConfigMap>>(client.clone()),
            owned_children(),
        )
}

/// Watch only the children we manage, so the caches hold our objects and not the whole cluster's.
fn owned_children() -> watcher::Config {
    watcher::Config::default().labels(&format!(
        "{}={}",
        crate::render::meta::MANAGED_BY,
        crate::FIELD_MANAGER
    ))
}

/// Counts and times one reconcile of `controller`.
async fn timed(
    ctx: &Context,
    controller: &'static str,
    work: impl Future<Output = Result<Action>>,
) -> Result<Action> {
    ctx.metrics.reconcile(controller);
    let started = Instant::now();
    let res = work.await;
    ctx.metrics.observe_duration(controller, started.elapsed());
    if let Err(e) = &res {
        // On the reconcile span (`#[instrument]` of each controller's `reconcile`).
        let span = tracing::Span::current();
        span.record("otel.status_code", "error");
        span.record("error.type", e.metric_label());
    }
    res
}

/// Counts the failure, reports it as a Warning Event on the object, and retries soon.
fn error_policy<K>(controller: &'static str, obj: &K, err: &Error, ctx: Arc<Context>) -> Action
where
    K: Resource<DynamicType = ()>,
{
    ctx.metrics.failure(controller, err);
    tracing::warn!(controller, name = %obj.name_any(), error = %err, "reconcile failed");
    let reference = obj.object_ref(&());
    let note = err.to_string();
    // error_policy is synchronous; the Event is published in the background.
    tokio::spawn(async move {
        events::publish(
            &ctx,
            &reference,
            EventType::Warning,
            "ReconcileFailed",
            "Reconcile",
            note,
        )
        .await;
    });
    Action::requeue(Duration::from_secs(5))
}

/// Whether the controller writes condition `c` (Ready, Progressing, Degraded, Durability): the
/// others have writers of their own (the backlog reader's `BacklogRead`, the trust writer's
/// `MeshTrust`), and comparing them with what the controller would write would rewrite a status
/// that did not change.
fn controller_owns(c: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition) -> bool {
    use switchyard_crds::status::{BACKLOG_READ, MESH_TRUST};
    c.type_ != BACKLOG_READ && c.type_ != MESH_TRUST
}

/// Owned-object watches trigger reconciles on every change; this periodic one repairs drift that a
/// missed watch event would otherwise leave.
fn resync() -> Action {
    Action::requeue(Duration::from_secs(600))
}

/// Writes the fields of `status` this controller owns, by server-side apply under the operator's
/// field manager: fields it stops sending are removed, fields other writers own are kept.
async fn apply_status<K, S>(ctx: &Context, obj: &K, status: &S) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
    S: Serialize,
{
    let ns = obj.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    let name = obj.name_any();
    Api::<K>::namespaced(ctx.client.clone(), &ns)
        .patch_status(
            &name,
            &PatchParams::apply(crate::FIELD_MANAGER).force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": K::api_version(&()),
                "kind": K::kind(&()),
                "status": status,
            })),
        )
        .await
        .map_err(|source| Error::Status {
            what: format!("{} {ns}/{name}", K::kind(&())),
            source,
        })?;
    Ok(())
}

/// How long a controller may take to stop once shutdown is asked for.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Logs what the controller stream yields besides successful reconciles (already counted), until
/// it ends or [`SHUTDOWN_GRACE`] after `shutdown`.
///
/// The bound is needed: kube-runtime holds a controller's runner until its store has listed once,
/// also through a graceful shutdown, so a watch that never lists (RBAC refuses it, e.g. a namespace
/// in `--watch-namespaces` without the chart's Role) would keep the operator from ever exiting.
async fn drain<T, E: std::fmt::Display>(
    stream: impl futures::Stream<Item = std::result::Result<T, E>>,
    controller: &str,
    shutdown: impl Future<Output = ()>,
) {
    use futures::StreamExt;
    let run = stream.for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(controller, error = %e, "controller event");
        }
    });
    tokio::pin!(run);
    tokio::select! {
        () = &mut run => return,
        () = shutdown => {}
    }
    if tokio::time::timeout(SHUTDOWN_GRACE, run).await.is_err() {
        tracing::warn!(
            controller,
            grace = ?SHUTDOWN_GRACE,
            "controller did not stop in time (a watch never listed?); dropped"
        );
    }
}
