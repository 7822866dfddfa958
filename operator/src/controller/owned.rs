//! The Manager controller's caches of what it owns and reads: the watches that trigger its
//! reconciles also fill stores, so a reconcile reads the Router, the Deployments' rollout and the
//! children's versions from memory instead of a GET, a LIST and four applies per reconcile.
//!
//! Each store keeps only what a reconcile reads: Deployments without their pod template (the
//! bulk of each object), Services and ConfigMaps by metadata only, nothing with managed fields.

use crate::scope::Target;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use switchyard_crds::Router;
use tokio::sync::watch;

/// What [`Owned::start`] hands the controller: one trigger stream per watched kind.
pub(super) type Trigger<K> =
    std::pin::Pin<Box<dyn Stream<Item = Result<K, watcher::Error>> + Send>>;

/// The stores (one target's).
#[derive(Clone)]
pub(super) struct Owned {
    deployments: Store<Deployment>,
    services: Store<PartialObjectMeta<Service>>,
    config_maps: Store<PartialObjectMeta<ConfigMap>>,
    routers: Store<Router>,
    /// True once the Routers were listed: before that, "no such Router" would be a guess.
    routers_listed: watch::Receiver<bool>,
    /// True once the Deployments were listed: before that, "no Deployment yet" would be a guess, and
    /// the sidecar-image pace would let a workload roll without a slot.
    deployments_listed: watch::Receiver<bool>,
}

/// The trigger streams that fill [`Owned`]; the controller polls them.
pub(super) struct Triggers {
    pub deployments: Trigger<Deployment>,
    pub services: Trigger<PartialObjectMeta<Service>>,
    pub config_maps: Trigger<PartialObjectMeta<ConfigMap>>,
    pub routers: Trigger<Router>,
}

/// A Deployment as the cache keeps it: status, replicas, labels, owners and the sidecar image its
/// template runs (the pacing of sidecar upgrades reads it); not the pod template.
fn strip_deployment(d: &mut Deployment) {
    d.metadata.managed_fields = None;
    let image = crate::render::sidecar::running_image(d);
    d.metadata.annotations = image.map(|i| {
        std::collections::BTreeMap::from([(crate::render::sidecar::IMAGE_ANNOTATION.to_owned(), i)])
    });
    if let Some(spec) = d.spec.as_mut() {
        spec.template = Default::default();
    }
}

fn strip_meta<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
    meta.labels = None;
}

impl Owned {
    /// The stores of `target` and the streams that fill them; `children` selects the owned objects.
    pub(super) fn start(
        client: &Client,
        target: &Target,
        children: watcher::Config,
    ) -> (Owned, Triggers) {
        let (deployments, dw) = reflector::store();
        let (services, sw) = reflector::store();
        let (config_maps, cw) = reflector::store();
        let (routers, rw) = reflector::store();
        let (listed_tx, routers_listed) = watch::channel(false);
        let (deployments_listed_tx, deployments_listed) = watch::channel(false);
        let triggers = Triggers {
            deployments: watcher(target.api::<Deployment>(client.clone()), children.clone())
                .default_backoff()
                .modify(strip_deployment)
                .reflect(dw)
                .inspect(move |ev| {
                    if matches!(ev, Ok(watcher::Event::InitDone)) {
                        deployments_listed_tx.send_replace(true);
                    }
                })
                .touched_objects()
                .boxed(),
            services: watcher(
                target.api::<PartialObjectMeta<Service>>(client.clone()),
                children.clone(),
            )
            .default_backoff()
            .modify(strip_meta)
            .reflect(sw)
            .touched_objects()
            .boxed(),
            config_maps: watcher(
                target.api::<PartialObjectMeta<ConfigMap>>(client.clone()),
                children,
            )
            .default_backoff()
            .modify(strip_meta)
            .reflect(cw)
            .touched_objects()
            .boxed(),
            routers: watcher(
                target.api::<Router>(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .modify(crate::control_plane::observe::strip)
            .reflect(rw)
            .inspect(move |ev| {
                if matches!(ev, Ok(watcher::Event::InitDone)) {
                    listed_tx.send_replace(true);
                }
            })
            .touched_objects()
            .boxed(),
        };
        let owned = Owned {
            deployments,
            services,
            config_maps,
            routers,
            routers_listed,
            deployments_listed,
        };
        (owned, triggers)
    }

    /// Router `name` in `ns` once the Routers were listed; `None` when there is none, `Err` once
    /// the cache is gone (the operator stops).
    pub(super) async fn router(&self, ns: &str, name: &str) -> Result<Option<Router>, ()> {
        let mut listed = self.routers_listed.clone();
        listed.wait_for(|l| *l).await.map_err(|_| ())?;
        Ok(self
            .routers
            .get(&ObjectRef::new(name).within(ns))
            .map(|r| (*r).clone()))
    }

    /// The cached Deployment `ns/name` (without its pod template) once the Deployments were listed;
    /// `None` when there is none, `Err` once the cache is gone (the operator stops).
    pub(super) async fn deployment(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<std::sync::Arc<Deployment>>, ()> {
        let mut listed = self.deployments_listed.clone();
        listed.wait_for(|l| *l).await.map_err(|_| ())?;
        Ok(self.deployments.get(&ObjectRef::new(name).within(ns)))
    }

    /// The cached Deployments controlled by the object of `owner_uid`.
    pub(super) fn deployments_of(&self, owner_uid: &str) -> Vec<std::sync::Arc<Deployment>> {
        self.deployments
            .state_filter(|d| controlled_by(&d.metadata, owner_uid))
    }

    /// The live version of the Service `ns/name` as watched (`None`: not seen).
    pub(super) fn service_version(&self, ns: &str, name: &str) -> Option<String> {
        self.services
            .get(&ObjectRef::new(name).within(ns))
            .and_then(|s| s.metadata.resource_version.clone())
    }

    /// The live version of the ConfigMap `ns/name` as watched (`None`: not seen).
    pub(super) fn config_map_version(&self, ns: &str, name: &str) -> Option<String> {
        self.config_maps
            .get(&ObjectRef::new(name).within(ns))
            .and_then(|c| c.metadata.resource_version.clone())
    }
}

/// Whether `meta` names `owner_uid` as its controller.
fn controlled_by(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    owner_uid: &str,
) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|r| r.uid == owner_uid && r.controller == Some(true))
}
