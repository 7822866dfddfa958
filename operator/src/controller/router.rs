//! Router controller: Router → router Deployment, Service and rendered-config ConfigMap.

use super::events;
use super::manager_cache::ManagerCache;
use super::sidecar_rollout;
use super::spec_changes::SpecChanges;
use crate::apply::{apply, prune};
use crate::conditions::{self, Problem, Rollout};
use crate::context::Context;
use crate::render::{self, meta};
use crate::scope::Target;
use crate::validate;
use crate::{Error, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use switchyard_crds::status::{RouterStatus, TypeSubscribers};
use switchyard_crds::{Manager, Router};

const NAME: &str = "router";

/// What a Router reconcile reads besides the Router: the Manager cache.
struct Shared {
    ctx: Arc<Context>,
    managers: ManagerCache,
}

/// Runs the Router controller of `target` until `shutdown` resolves, reading Managers from
/// `managers` (the watch below only triggers reconciles).
pub(super) async fn run(
    ctx: Arc<Context>,
    target: &Target,
    managers: ManagerCache,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    let client = ctx.client.clone();
    let stream = super::owns_children(
        Controller::new(
            target.api::<Router>(client.clone()),
            watcher::Config::default(),
        )
        .with_config(super::reconciles()),
        target,
        &client,
    )
    // A Manager's event types are part of its Router's rendered config; its status is not.
    .watches_stream(manager_spec_changes(target, client), |m: Manager| {
        m.namespace()
            .map(|ns| ObjectRef::<Router>::new(&m.spec.router_ref.name).within(&ns))
    })
    .reconcile_all_on(super::trust_changes(&ctx))
    .graceful_shutdown_on(shutdown.clone())
    .run(reconcile, error_policy, Arc::new(Shared { ctx, managers }));
    super::drain(stream, NAME, shutdown).await;
}

/// The Managers of `target` whose spec changed, appeared or went (see [`SpecChanges`]).
fn manager_spec_changes(
    target: &Target,
    client: kube::Client,
) -> impl futures::Stream<Item = Result<Manager, watcher::Error>> + Send + 'static {
    use futures::StreamExt;
    let mut changes = SpecChanges::default();
    watcher(target.api::<Manager>(client), watcher::Config::default())
        .default_backoff()
        .flat_map(move |ev| {
            let out: Vec<Result<Manager, watcher::Error>> = match ev {
                Ok(e) => changes.admit(e).into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(out)
        })
}

/// One reconcile, a span of its own (exported when the operator's tracing is on).
#[tracing::instrument(
    skip_all,
    fields(
        router = %router.name_any(),
        namespace = router.namespace().unwrap_or_default(),
        otel.name = "reconcile router",
        otel.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
)]
async fn reconcile(router: Arc<Router>, shared: Arc<Shared>) -> Result<Action> {
    let ctx = &shared.ctx;
    super::timed(ctx, NAME, reconcile_inner(&router, ctx, &shared.managers)).await
}

async fn reconcile_inner(router: &Router, ctx: &Context, cache: &ManagerCache) -> Result<Action> {
    let ns = router
        .namespace()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let name = router.name_any();

    // observe
    let managers = cache
        .of_router(&ns, &name)
        .await
        .ok_or(Error::CacheClosed("managers"))?;

    // validate
    let errors = validate::router::validate(&name, &router.spec);
    let problem = if !errors.is_empty() {
        ctx.metrics.invalid_spec(NAME);
        Some(Problem {
            reason: "InvalidSpec",
            message: validate::summary(&errors),
            blocks_apply: true,
        })
    } else {
        event_type_conflicts(&managers).map(|message| Problem {
            reason: "EventTypeConflict",
            message,
            blocks_apply: false,
        })
    };

    // build + apply (an invalid spec leaves the last good children serving)
    let mut rollout = None;
    let mut applied = String::new();
    let mut waits = false;
    if !problem.as_ref().is_some_and(|p| p.blocks_apply) {
        let mut children = render::router::build(router, &managers, &ctx.render)?;
        // Before the Deployment: a pod naming a ServiceAccount that does not exist is refused.
        apply(&ctx.client, &children.service_account).await?;
        apply(&ctx.client, &children.config_map).await?;
        apply(&ctx.client, &children.service).await?;
        match &children.network_policy {
            Some(np) => {
                apply(&ctx.client, np).await?;
            }
            // Turned off: the one made before goes.
            None => {
                let uid = router.uid().ok_or(Error::MissingMetadata("uid"))?;
                let selector = meta::selector_string(&meta::selector(meta::ROUTER, &name));
                prune::<NetworkPolicy>(&ctx.client, &ns, &selector, &uid, &[]).await?;
            }
        }
        let key = (
            ns.clone(),
            meta::ROUTER,
            render::names::router_workload(&name),
        );
        let running = running_sidecar_image(ctx, &ns, &key.2).await?;
        let rendered = &ctx.render.sidecar_image;
        waits = ctx
            .rollouts
            .pace(&key, running.as_deref(), &mut children.deployment, rendered);
        let deployment = apply(&ctx.client, &children.deployment).await?;
        ctx.rollouts.applied(&key, &deployment, rendered);
        rollout = Some(Rollout::total(&[Rollout::of(&deployment)]));
        applied = format!(
            "Deployment {0}, Service {0}, ConfigMap {1}",
            render::names::router_workload(&name),
            render::names::router_config_map(&name)
        );
    }

    // status
    let old = router.status.clone().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let generation = router.meta().generation;
    let summary = conditions::summarize(
        generation,
        rollout,
        problem.as_ref(),
        &old.conditions,
        (old.replicas, old.ready_replicas),
        &now,
    );
    let status = RouterStatus {
        observed_generation: generation,
        conditions: summary.conditions,
        replicas: summary.replicas,
        ready_replicas: summary.ready_replicas,
        selector: Some(meta::selector_string(&meta::selector(meta::ROUTER, &name))),
        routes: i32::try_from(router.spec.routes.len()).unwrap_or(i32::MAX),
        subscribers: fan_out(&managers),
    };
    let mine = RouterStatus {
        conditions: old
            .conditions
            .iter()
            .filter(|c| super::controller_owns(c))
            .cloned()
            .collect(),
        ..old.clone()
    };
    if status != mine {
        super::apply_status(ctx, router, &status).await?;
        let obj = router.object_ref(&());
        events::on_status_change(
            ctx,
            &obj,
            old.observed_generation,
            status.observed_generation,
            &old.conditions,
            &status.conditions,
            &applied,
        )
        .await;
    }
    Ok(if waits {
        Action::requeue(sidecar_rollout::RETRY_AFTER)
    } else {
        super::resync()
    })
}

/// The sidecar image the live Deployment `ns/name` runs (`None`: there is none yet).
async fn running_sidecar_image(ctx: &Context, ns: &str, name: &str) -> Result<Option<String>> {
    let live = Api::<Deployment>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|source| Error::Observe {
            what: format!("Deployment {ns}/{name}"),
            source,
        })?;
    Ok(live.as_ref().and_then(render::sidecar::running_image))
}

/// Event types claimed by more than one Manager of this Router, as a message.
fn event_type_conflicts(managers: &[Manager]) -> Option<String> {
    let mut owners: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for m in managers {
        for e in &m.spec.events {
            owners.entry(e.as_str()).or_default().push(m.name_any());
        }
    }
    let conflicts: Vec<String> = owners
        .into_iter()
        .filter(|(_, ms)| ms.len() > 1)
        .map(|(e, mut ms)| {
            ms.sort();
            format!(
                "event type {e} is claimed by Managers {}; {} receives it",
                ms.join(", "),
                ms[0]
            )
        })
        .collect();
    (!conflicts.is_empty()).then(|| conflicts.join("; "))
}

/// Most entries of the Router's `status.subscribers` (its schema's bound).
const MAX_FAN_OUT_ENTRIES: usize = 1024;

/// Per subscribed event type (or pattern): its handler and its subscribers, for the status, a
/// durable subscription marked as such.
fn fan_out(managers: &[Manager]) -> Vec<TypeSubscribers> {
    let mut by_event: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for m in managers {
        for s in &m.spec.subscriptions {
            let observe: Vec<&str> = s.observe.iter().map(|o| o.as_str()).collect();
            let mut what = observe.join(", ");
            if s.delivery == switchyard_crds::manager::DeliveryMode::Durable {
                what.push_str("; durable");
            }
            by_event
                .entry(s.event.as_str())
                .or_default()
                .push(format!("{} ({what})", m.name_any()));
        }
    }
    let handlers = render::router::destinations(managers.iter());
    by_event
        .into_iter()
        .take(MAX_FAN_OUT_ENTRIES)
        .map(|(event, mut subs)| {
            subs.sort();
            subs.truncate(256);
            TypeSubscribers {
                event: event.to_owned(),
                handler: switchyard_crds::EventType::check(event)
                    .ok()
                    .and_then(|_| handlers.get(&switchyard_crds::EventType(event.to_owned())))
                    .map(|d| d.manager.clone()),
                subscribers: subs,
            }
        })
        .collect()
}

fn error_policy(router: Arc<Router>, err: &Error, shared: Arc<Shared>) -> Action {
    super::error_policy(NAME, &*router, err, shared.ctx.clone())
}
