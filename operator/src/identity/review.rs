//! The cluster's [`Authenticator`]: a TokenReview of the sidecar's projected token (audience
//! `switchyard-identity`), then the pod it is bound to and its controller chain, read from the API
//! server (not a cache: a certificate must not be issued on a stale view of who owns a pod).
//! What the review proved is kept by token hash until the token expires (`throttle`), so only the
//! pod and its owners are read again on a repeat; the pod must run as its Router's or Manager's
//! ServiceAccount (`owner::service_account`); callers are rate-limited per source IP before
//! the review and per ServiceAccount after it.

use super::owner::{self, BoundPod};
use super::service_refusal;
use super::throttle::{self, RateLimiter, ReviewCache};
use crate::metrics::Metrics;
use crate::render::service_account;
use crate::scope::Scope;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::{Client, Resource};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};
use switchyard_crds::{Manager, Router};
use switchyard_identity::service::{Authenticator, Refusal};
use switchyard_identity::{Kind, SpiffeId, Subject, TOKEN_AUDIENCE};
use tonic::Code;

/// Reviews tokens with the API server.
pub(crate) struct KubeAuthenticator {
    /// The operator's client (RBAC: create tokenreviews; get pods, replicasets, deployments,
    /// routers, managers).
    pub client: Client,
    /// Trust domain of the identities issued.
    pub trust_domain: String,
    /// The namespaces watched: a pod elsewhere is no workload of this operator's, and reading it
    /// would only be refused by RBAC in a namespaced install.
    pub scope: Scope,
    /// Rate limits and reviews kept.
    pub throttle: Arc<Throttle>,
    /// Counts reviews made and spared.
    pub metrics: Arc<Metrics>,
}

/// The limits and the cache, shared by every call.
pub(crate) struct Throttle {
    peers: Mutex<RateLimiter<IpAddr>>,
    accounts: Mutex<RateLimiter<(String, String)>>,
    reviews: Mutex<ReviewCache>,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle {
            peers: Mutex::new(RateLimiter::new(throttle::PER_PEER, throttle::MAX_CALLERS)),
            accounts: Mutex::new(RateLimiter::new(
                throttle::PER_SERVICE_ACCOUNT,
                throttle::MAX_CALLERS,
            )),
            reviews: Mutex::new(ReviewCache::new(throttle::MAX_REVIEWS)),
        }
    }
}

fn limited(reason: &'static str, who: String, wait: Duration) -> Refusal {
    service_refusal(
        Code::ResourceExhausted,
        reason,
        format!(
            "too many certificate requests from {who}; retry in {} ms",
            wait.as_millis().max(1)
        ),
    )
}

impl KubeAuthenticator {
    /// The pod `token` is bound to: from a review kept, or from a new TokenReview (then kept until
    /// the token expires).
    async fn reviewed(&self, token: &str) -> Result<BoundPod, Refusal> {
        let key = throttle::token_key(token);
        // The lock guards a map only; a panic elsewhere leaves it usable.
        let kept = self
            .throttle
            .reviews
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key, SystemTime::now());
        if let Some(bound) = kept {
            self.metrics.token_review("cached");
            return Ok(bound);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: Some(vec![TOKEN_AUDIENCE.to_owned()]),
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(unavailable)?;
        self.metrics.token_review("reviewed");
        let status = reviewed.status.unwrap_or_default();
        let bound = owner::bound_pod(&status, TOKEN_AUDIENCE)?;
        if let Some(until) = throttle::token_expiry(token) {
            self.throttle
                .reviews
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .put(key, bound.clone(), until, SystemTime::now());
        }
        Ok(bound)
    }
}

fn unavailable(e: kube::Error) -> Refusal {
    service_refusal(
        Code::Unavailable,
        "api",
        format!("the token could not be checked now: {e}"),
    )
}

async fn get<K>(api: Api<K>, name: &str, uid: Option<&str>, what: &str) -> Result<K, Refusal>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let obj = api
        .get_opt(name)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| {
            service_refusal(
                Code::PermissionDenied,
                "gone",
                format!("{what} {name} does not exist"),
            )
        })?;
    if let Some(uid) = uid
        && obj.meta().uid.as_deref() != Some(uid)
    {
        return Err(service_refusal(
            Code::PermissionDenied,
            "owner",
            format!("{what} {name} is not the one the chain names (uid differs)"),
        ));
    }
    Ok(obj)
}

impl KubeAuthenticator {
    /// The Router or Manager `name` (checked to be the one of `uid`), as a message names it, and
    /// the ServiceAccount its pods run as.
    async fn workload_account(
        &self,
        ns: &str,
        kind: Kind,
        name: &str,
        uid: &str,
    ) -> Result<(String, String), Refusal> {
        Ok(match kind {
            Kind::Router => {
                let api = Api::namespaced(self.client.clone(), ns);
                let router: Router = get(api, name, Some(uid), "Router").await?;
                (
                    format!("Router {name}"),
                    service_account::of_router(&router),
                )
            }
            _ => {
                let api = Api::namespaced(self.client.clone(), ns);
                let manager: Manager = get(api, name, Some(uid), "Manager").await?;
                (
                    format!("Manager {name}"),
                    service_account::of_manager(&manager),
                )
            }
        })
    }
}

#[tonic::async_trait]
impl Authenticator for KubeAuthenticator {
    async fn authenticate(
        &self,
        token: &str,
        remote: Option<SocketAddr>,
    ) -> Result<Subject, Refusal> {
        if let Some(ip) = remote.map(|r| r.ip()) {
            self.throttle
                .peers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(&ip, Instant::now())
                .map_err(|wait| limited("rate_peer", ip.to_string(), wait))?;
        }
        let bound = self.reviewed(token).await?;
        let account = (bound.namespace.clone(), bound.service_account.clone());
        self.throttle
            .accounts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(&account, Instant::now())
            .map_err(|wait| {
                let who = format!("ServiceAccount {}/{}", account.0, account.1);
                limited("rate_service_account", who, wait)
            })?;
        let ns = &bound.namespace;
        if !self.scope.contains(ns) {
            return Err(service_refusal(
                Code::PermissionDenied,
                "unwatched",
                format!(
                    "pod {ns}/{} is in a namespace this operator does not watch ({})",
                    bound.name, self.scope
                ),
            ));
        }
        let pod: Pod = get(
            Api::namespaced(self.client.clone(), ns),
            &bound.name,
            None,
            "pod",
        )
        .await?;
        let rs_ref = owner::pod_owner(&bound, &pod.metadata)?;
        let rs: ReplicaSet = get(
            Api::namespaced(self.client.clone(), ns),
            &rs_ref.name,
            Some(&rs_ref.uid),
            "ReplicaSet",
        )
        .await?;
        let what = format!("ReplicaSet {}", rs_ref.name);
        let dep_ref = owner::owner_of_kind(&what, &rs.metadata, "Deployment")?;
        let dep: Deployment = get(
            Api::namespaced(self.client.clone(), ns),
            &dep_ref.name,
            Some(&dep_ref.uid),
            "Deployment",
        )
        .await?;
        let (kind, name, uid) = owner::workload(&dep_ref.name, &dep.metadata)?;
        let selector = dep
            .spec
            .as_ref()
            .and_then(|s| s.selector.match_labels.as_ref());
        owner::carries_selector(
            &format!("pod {}", bound.name),
            pod.metadata.labels.as_ref(),
            &dep_ref.name,
            selector,
        )?;
        owner::carries_selector(&what, rs.metadata.labels.as_ref(), &dep_ref.name, selector)?;
        let (workload, expected) = self.workload_account(ns, kind, &name, &uid).await?;
        owner::service_account(&bound, &workload, &expected)?;
        let id = SpiffeId::new(&self.trust_domain, ns, kind, &name)
            .map_err(|e| service_refusal(Code::PermissionDenied, "name", e.to_string()))?;
        tracing::debug!(identity = %id, pod = %bound.name, service_account = %bound.service_account, "token reviewed");
        Ok(Subject {
            id,
            pod: bound.name,
        })
    }
}
