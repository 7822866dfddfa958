//! Manager controller: Manager → Deployment(s) with the native sidecar, Service and rendered config.

use super::applied::{self, Applied};
use super::events;
use super::owned::Owned;
use crate::apply::{apply, delete, prune};
use crate::conditions::{self, Problem, Rollout};
use crate::context::Context;
use crate::render::{self, meta};
use crate::scope::Target;
use crate::validate;
use crate::validate::template::{self, TemplatePolicy};
use crate::{Error, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use switchyard_crds::status::{EventTypeStatus, ManagerStatus};
use switchyard_crds::{Manager, Router};

const NAME: &str = "manager";

/// What a Manager reconcile reads besides the Manager: the caches of its children and Routers, and
/// what this replica applied last.
struct Shared {
    ctx: Arc<Context>,
    owned: Owned,
    applied: Mutex<Applied>,
}

/// Runs the Manager controller of `target` until `shutdown` resolves.
pub(crate) async fn run(
    ctx: Arc<Context>,
    target: &Target,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    let client = ctx.client.clone();
    let controller = Controller::new(
        target.api::<Manager>(client.clone()),
        watcher::Config::default(),
    )
    .with_config(super::reconciles());
    let managers = controller.store();
    let (owned, triggers) = Owned::start(&client, target, super::owned_children());
    let stream = controller
        .owns_stream(triggers.deployments)
        .owns_stream(triggers.services)
        .owns_stream(triggers.config_maps)
        // A Router appearing or going away changes the RouterNotFound condition of its Managers.
        .watches_stream(triggers.routers, move |r: Router| {
            let ns = r.namespace();
            let name = r.name_any();
            managers
                .state()
                .into_iter()
                .filter(|m| m.namespace() == ns && m.spec.router_ref.name == name)
                .map(|m| ObjectRef::from_obj(&*m))
                .collect::<Vec<_>>()
        })
        .reconcile_all_on(super::trust_changes(&ctx))
        .graceful_shutdown_on(shutdown.clone())
        .run(
            reconcile,
            error_policy,
            Arc::new(Shared {
                ctx,
                owned,
                applied: Mutex::default(),
            }),
        );
    super::drain(stream, NAME, shutdown).await;
}

/// One reconcile, a span of its own (exported when the operator's tracing is on).
#[tracing::instrument(
    skip_all,
    fields(
        manager = %manager.name_any(),
        namespace = manager.namespace().unwrap_or_default(),
        otel.name = "reconcile manager",
        otel.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
)]
async fn reconcile(manager: Arc<Manager>, shared: Arc<Shared>) -> Result<Action> {
    super::timed(&shared.ctx, NAME, reconcile_inner(&manager, &shared)).await
}

async fn reconcile_inner(manager: &Manager, shared: &Shared) -> Result<Action> {
    let ctx = &*shared.ctx;
    let ns = manager
        .namespace()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let name = manager.name_any();
    let uid = manager.uid().ok_or(Error::MissingMetadata("uid"))?;

    // observe
    let router_name = &manager.spec.router_ref.name;
    let router = shared
        .owned
        .router(&ns, router_name)
        .await
        .map_err(|()| Error::CacheClosed("routers"))?;

    // validate, with what the namespace allows the template: read only when the template asks
    // for more than a workload needs, so most reconciles make no request for it
    let escalations = template::escalations(&name, &manager.spec.template);
    let (policy, unread) = template_policy(ctx, &ns, !escalations.is_empty()).await;
    let errors = validate::manager::validate(&name, &manager.spec, policy);
    let problem = if !errors.is_empty() {
        ctx.metrics.invalid_spec(NAME);
        let mut message = validate::summary(&errors);
        if let Some(e) = unread {
            message.push_str(&format!(
                " (the labels of namespace {ns} could not be read, so none was taken to allow anything: {e})"
            ));
        }
        Some(Problem {
            reason: "InvalidSpec",
            message,
            blocks_apply: true,
        })
    } else if router.is_none() {
        Some(Problem {
            reason: "RouterNotFound",
            message: format!(
                "spec.routerRef.name: Router {router_name:?} does not exist in namespace {ns}; no traffic reaches this Manager until it does"
            ),
            blocks_apply: false,
        })
    } else {
        None
    };

    // build + apply + prune (an invalid spec leaves the last good children serving)
    let mut rollout = None;
    let mut waits = false;
    let mut per_type = Vec::new();
    let mut applied = String::new();
    if !problem.as_ref().is_some_and(|p| p.blocks_apply) {
        let mut children = render::manager::build(manager, router.as_ref(), &ctx.render)?;
        let owned = &shared.owned;
        // Before the Deployments: a pod naming a ServiceAccount that does not exist is refused.
        // Not watched: judged by content and age alone.
        shared
            .apply_child(&children.service_account, None, Watched::No)
            .await?;
        let cm_name = render::names::manager_config_map(&name);
        let cm_live = owned.config_map_version(&ns, &cm_name);
        shared
            .apply_child(&children.config_map, cm_live.as_deref(), Watched::ByVersion)
            .await?;
        let svc_name = render::names::manager_service(&name);
        let svc_live = owned.service_version(&ns, &svc_name);
        shared
            .apply_child(&children.service, svc_live.as_deref(), Watched::ByVersion)
            .await?;
        let selector = meta::selector_string(&meta::selector(meta::MANAGER, &name));
        match &children.network_policy {
            Some(np) => {
                // Not watched: judged by content and age alone.
                shared.apply_child(np, None, Watched::No).await?;
            }
            // Turned off on the Router: the one made before goes.
            None => {
                prune::<NetworkPolicy>(&ctx.client, &ns, &selector, &uid, &[]).await?;
            }
        }
        let mut rollouts = Vec::new();
        let mut names = Vec::new();
        let rendered = &ctx.render.sidecar_image;
        for d in &mut children.deployments {
            let dep_name = d.name_any();
            let cached = owned
                .deployment(&ns, &dep_name)
                .await
                .map_err(|()| Error::CacheClosed("deployments"))?;
            let live = cached
                .as_ref()
                .and_then(|c| c.metadata.generation)
                .map(|g| g.to_string());
            let key = (ns.clone(), meta::MANAGER, dep_name.clone());
            let running = cached.as_deref().and_then(render::sidecar::running_image);
            waits |= ctx.rollouts.pace(&key, running.as_deref(), d, rendered);
            let stored = match shared
                .apply_child(d, live.as_deref(), Watched::ByGeneration)
                .await?
            {
                Some(stored) => Arc::new(stored),
                // Skipped only when the cache holds it.
                None => cached.ok_or(Error::CacheClosed("deployments"))?,
            };
            ctx.rollouts.applied(&key, &stored, rendered);
            let r = Rollout::of(&stored);
            // Which event types this Deployment serves: all with `shared`, its own with `perEventType`.
            let served = served_event_types(manager, &stored);
            for e in served {
                per_type.push(EventTypeStatus {
                    event: e,
                    deployment: dep_name.clone(),
                    replicas: r.replicas,
                    ready_replicas: r.ready,
                    ..EventTypeStatus::default()
                });
            }
            rollouts.push(r);
            names.push(dep_name);
        }
        let pruned = shared.prune_deployments(&ns, &uid, &names).await?;
        if !pruned.is_empty() {
            let note = format!(
                "deleted Deployments no longer wanted: {}",
                pruned.join(", ")
            );
            events::publish(
                ctx,
                &manager.object_ref(&()),
                EventType::Normal,
                "Pruned",
                "Prune",
                note,
            )
            .await;
        }
        rollout = Some(Rollout::total(&rollouts));
        applied = format!(
            "Deployments {}, Service {}, ConfigMap {}",
            names.join(", "),
            render::names::manager_service(&name),
            render::names::manager_config_map(&name)
        );
    }

    // status
    let old = manager.status.clone().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let generation = manager.meta().generation;
    let mut summary = conditions::summarize(
        generation,
        rollout,
        problem.as_ref(),
        &old.conditions,
        (old.replicas, old.ready_replicas),
        &now,
    );
    if policy == TemplatePolicy::Privileged
        && let Some(note) = template::allowed_by_label(&escalations)
    {
        conditions::not_degraded_because(&mut summary.conditions, template::ALLOWED_REASON, note);
    }
    // Only the controller's own fields: the autoscaler writes the desired replicas and load figures
    // under its own field manager, and server-side apply keeps them.
    let mut conditions = summary.conditions;
    conditions.extend(conditions::durability(
        manager.spec.durable_events().len() + manager.spec.durable_subscriptions().count(),
        ctx.render.jetstream.as_ref(),
        &old.conditions,
        generation,
        &now,
    ));
    let status = ManagerStatus {
        observed_generation: generation,
        conditions,
        replicas: summary.replicas,
        ready_replicas: summary.ready_replicas,
        desired_replicas: None,
        selector: Some(meta::selector_string(&meta::selector(meta::MANAGER, &name))),
        event_types: Some(
            manager
                .spec
                .events
                .iter()
                .map(|e| e.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ),
        events: if rollout.is_some() {
            per_type
        } else {
            old.events.iter().map(controller_fields).collect()
        },
        // The autoscaler's to write (under its own field manager).
        subscriptions: Vec::new(),
    };
    if status != controller_view(&old) {
        super::apply_status(ctx, manager, &status).await?;
        events::on_status_change(
            ctx,
            &manager.object_ref(&()),
            old.observed_generation,
            status.observed_generation,
            &old.conditions,
            &status.conditions,
            &applied,
        )
        .await;
    }
    Ok(if waits {
        Action::requeue(super::sidecar_rollout::RETRY_AFTER)
    } else {
        super::resync()
    })
}

/// What the Manager's namespace allows its pod template, from the namespace's labels when `needed`
/// (the template escalates). A namespace that cannot be read allows nothing: the error comes back to
/// be shown with the refusal, since a label set but unread would otherwise look ignored.
async fn template_policy(
    ctx: &Context,
    ns: &str,
    needed: bool,
) -> (TemplatePolicy, Option<String>) {
    if !needed {
        return (TemplatePolicy::Restricted, None);
    }
    match Api::<Namespace>::all(ctx.client.clone())
        .get_metadata(ns)
        .await
    {
        Ok(n) => (TemplatePolicy::of_labels(n.metadata.labels.as_ref()), None),
        Err(e) => {
            tracing::warn!(error = %e, namespace = ns, "could not read the namespace's labels");
            (TemplatePolicy::Restricted, Some(e.to_string()))
        }
    }
}

/// How a child's live version is read from its watch, to tell whether it changed since our apply.
#[derive(Clone, Copy)]
enum Watched {
    /// By `resourceVersion` (ConfigMaps, Services: nothing else writes them).
    ByVersion,
    /// By `generation` (Deployments, whose status moves their `resourceVersion` all the time).
    ByGeneration,
    /// Not watched: judged by content and age alone.
    No,
}

impl Shared {
    fn applied(&self) -> std::sync::MutexGuard<'_, Applied> {
        self.applied.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Server-side applies `obj` unless this replica applied the same object to the same live
    /// version lately (see [`applied`]); `live` is the child's version as its watch sees it.
    /// Returns the stored object, or `None` when nothing was sent.
    async fn apply_child<K>(&self, obj: &K, live: Option<&str>, how: Watched) -> Result<Option<K>>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let bytes = serde_json::to_vec(obj).map_err(|e| Error::Render {
            what: format!("{} {}", K::kind(&()), obj.name_any()),
            message: e.to_string(),
        })?;
        let hash = applied::fingerprint(&bytes);
        let key = (
            K::kind(&()).into_owned(),
            obj.namespace().unwrap_or_default(),
            obj.name_any(),
        );
        let watched = !matches!(how, Watched::No);
        if !self
            .applied()
            .needs_apply(&key, hash, live, watched, Instant::now())
        {
            self.ctx.metrics.apply_skipped(NAME);
            return Ok(None);
        }
        match apply(&self.ctx.client, obj).await {
            Ok(stored) => {
                let version = match how {
                    Watched::ByVersion => stored.meta().resource_version.clone(),
                    Watched::ByGeneration => stored.meta().generation.map(|g| g.to_string()),
                    Watched::No => None,
                };
                self.applied().record(key, hash, version, Instant::now());
                Ok(Some(stored))
            }
            Err(e) => {
                self.applied().forget(&key);
                Err(e)
            }
        }
    }

    /// Deletes the Deployments of the Manager with `uid` that are not named in `keep`, as the
    /// cache sees them: one the cache has not seen yet triggers a reconcile once it does.
    async fn prune_deployments(&self, ns: &str, uid: &str, keep: &[String]) -> Result<Vec<String>> {
        let mut deleted = Vec::new();
        for d in self.owned.deployments_of(uid) {
            let name = d.name_any();
            if d.namespace().as_deref() == Some(ns) && !keep.contains(&name) {
                delete::<Deployment>(&self.ctx.client, ns, &name).await?;
                deleted.push(name);
            }
        }
        Ok(deleted)
    }
}

/// Event types a stored Deployment of `manager` serves.
fn served_event_types(manager: &Manager, deployment: &Deployment) -> Vec<String> {
    let label = deployment.labels().get(meta::EVENT_TYPE);
    manager
        .spec
        .events
        .iter()
        .filter(|e| label.is_none_or(|l| *l == e.dns_fragment()))
        .map(|e| e.as_str().to_owned())
        .collect()
}

/// An event type's entry as the controller writes it: without the autoscaler's figures.
fn controller_fields(e: &EventTypeStatus) -> EventTypeStatus {
    EventTypeStatus {
        event: e.event.clone(),
        deployment: e.deployment.clone(),
        replicas: e.replicas,
        ready_replicas: e.ready_replicas,
        ..EventTypeStatus::default()
    }
}

/// The part of a stored status the controller owns, to compare with what it would write: not the
/// autoscaler's figures, nor the conditions other writers own.
fn controller_view(s: &ManagerStatus) -> ManagerStatus {
    ManagerStatus {
        desired_replicas: None,
        events: s.events.iter().map(controller_fields).collect(),
        subscriptions: Vec::new(),
        conditions: s
            .conditions
            .iter()
            .filter(|c| super::controller_owns(c))
            .cloned()
            .collect(),
        ..s.clone()
    }
}

fn error_policy(manager: Arc<Manager>, err: &Error, shared: Arc<Shared>) -> Action {
    super::error_policy(NAME, &*manager, err, shared.ctx.clone())
}
