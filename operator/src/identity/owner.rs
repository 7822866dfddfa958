//! What a reviewed token proves (pure): the pod it is bound to, and the Router or Manager that owns
//! that pod through its ReplicaSet and Deployment. A token is worth a certificate only when it is
//! bound to a pod (a projected token, not a long-lived Secret token), that pod still exists with the
//! same uid, its controller chain ends at a Router or Manager of the same namespace, it and its
//! ReplicaSet carry the labels of that chain's Deployment's selector, and it runs as that Router's
//! or Manager's ServiceAccount.

use crate::identity::service_refusal;
use k8s_openapi::api::authentication::v1::TokenReviewStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::collections::BTreeMap;
use switchyard_identity::Kind;
use switchyard_identity::service::Refusal;
use tonic::Code;

/// `extra` keys the API server sets on a pod-bound ServiceAccount token.
pub(crate) const POD_NAME_KEY: &str = "authentication.kubernetes.io/pod-name";
/// The bound pod's uid.
pub(crate) const POD_UID_KEY: &str = "authentication.kubernetes.io/pod-uid";

/// The pod a token is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BoundPod {
    /// Its namespace (the ServiceAccount's).
    pub namespace: String,
    /// Its ServiceAccount.
    pub service_account: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

fn denied(code: Code, reason: &'static str, message: impl Into<String>) -> Refusal {
    service_refusal(code, reason, message)
}

/// The pod a TokenReview's `status` proves, for a token of `audience`.
pub(crate) fn bound_pod(status: &TokenReviewStatus, audience: &str) -> Result<BoundPod, Refusal> {
    if status.authenticated != Some(true) {
        let why = status
            .error
            .clone()
            .unwrap_or_else(|| "not authenticated".into());
        return Err(denied(
            Code::Unauthenticated,
            "token",
            format!("the token was refused by the API server: {why}"),
        ));
    }
    if !status
        .audiences
        .as_ref()
        .is_some_and(|a| a.iter().any(|x| x == audience))
    {
        return Err(denied(
            Code::Unauthenticated,
            "audience",
            format!("the token is not for audience {audience:?}"),
        ));
    }
    let user = status
        .user
        .as_ref()
        .ok_or_else(|| denied(Code::Unauthenticated, "token", "the review names no user"))?;
    let username = user.username.as_deref().unwrap_or_default();
    let Some(rest) = username.strip_prefix("system:serviceaccount:") else {
        return Err(denied(
            Code::PermissionDenied,
            "subject",
            format!("{username:?} is not a ServiceAccount"),
        ));
    };
    let (namespace, service_account) = rest.split_once(':').ok_or_else(|| {
        denied(
            Code::PermissionDenied,
            "subject",
            format!("{username:?} is not a ServiceAccount"),
        )
    })?;
    let extra = |key: &str| {
        user.extra
            .as_ref()
            .and_then(|e| e.get(key))
            .and_then(|v| v.first())
            .cloned()
    };
    let (Some(name), Some(uid)) = (extra(POD_NAME_KEY), extra(POD_UID_KEY)) else {
        return Err(denied(
            Code::PermissionDenied,
            "unbound",
            "the token is not bound to a pod: mount a projected ServiceAccount token",
        ));
    };
    Ok(BoundPod {
        namespace: namespace.to_owned(),
        service_account: service_account.to_owned(),
        name,
        uid,
    })
}

/// The controller owner of an object.
pub(crate) fn controller(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// Checks a pod found by name is the one the token is bound to; returns its controller.
pub(crate) fn pod_owner<'a>(
    bound: &BoundPod,
    pod: &'a ObjectMeta,
) -> Result<&'a OwnerReference, Refusal> {
    if pod.uid.as_deref() != Some(bound.uid.as_str()) {
        return Err(denied(
            Code::PermissionDenied,
            "pod",
            format!(
                "pod {}/{} is not the one the token was bound to",
                bound.namespace, bound.name
            ),
        ));
    }
    let owner = controller(pod).ok_or_else(|| {
        denied(
            Code::PermissionDenied,
            "owner",
            format!("pod {} has no controller", bound.name),
        )
    })?;
    if owner.kind != "ReplicaSet" || !owner.api_version.starts_with("apps/") {
        return Err(denied(
            Code::PermissionDenied,
            "owner",
            format!(
                "pod {} is controlled by a {}, not a ReplicaSet of a Router or Manager",
                bound.name, owner.kind
            ),
        ));
    }
    Ok(owner)
}

/// The next controller in the chain, which must be of `kind` (`Deployment`).
pub(crate) fn owner_of_kind<'a>(
    what: &str,
    meta: &'a ObjectMeta,
    kind: &str,
) -> Result<&'a OwnerReference, Refusal> {
    let owner = controller(meta).ok_or_else(|| {
        denied(
            Code::PermissionDenied,
            "owner",
            format!("{what} has no controller"),
        )
    })?;
    if owner.kind != kind || !owner.api_version.starts_with("apps/") {
        return Err(denied(
            Code::PermissionDenied,
            "owner",
            format!("{what} is controlled by a {}, not a {kind}", owner.kind),
        ));
    }
    Ok(owner)
}

/// The workload a Deployment's controller names: a Router or Manager of this operator's group.
pub(crate) fn workload(
    deployment: &str,
    meta: &ObjectMeta,
) -> Result<(Kind, String, String), Refusal> {
    let owner = controller(meta).ok_or_else(|| {
        denied(
            Code::PermissionDenied,
            "owner",
            format!("Deployment {deployment} has no controller: not a Router's or Manager's"),
        )
    })?;
    let group_ok = owner.api_version.starts_with("switchyard.dev/");
    let kind = match owner.kind.as_str() {
        "Router" if group_ok => Kind::Router,
        "Manager" if group_ok => Kind::Manager,
        other => {
            return Err(denied(
                Code::PermissionDenied,
                "owner",
                format!("Deployment {deployment} belongs to a {other}, not a Router or Manager"),
            ));
        }
    };
    Ok((kind, owner.name.clone(), owner.uid.clone()))
}

/// Checks `what` (the pod, or its ReplicaSet) carries every label of its Deployment's selector
/// (`selector`, the Deployment's `matchLabels`). An ownerReference to a ReplicaSet or Deployment is
/// not matched by the chart's admission policy (only those naming a Router or Manager are), so a
/// pod or ReplicaSet could name the operator's as its owner; carrying the selector's labels,
/// `switchyard.dev/router` or `switchyard.dev/manager` among them, is what the policy keeps to the
/// Deployment and ReplicaSet controllers.
pub(crate) fn carries_selector(
    what: &str,
    labels: Option<&BTreeMap<String, String>>,
    deployment: &str,
    selector: Option<&BTreeMap<String, String>>,
) -> Result<(), Refusal> {
    let selector = selector.filter(|s| !s.is_empty()).ok_or_else(|| {
        denied(
            Code::PermissionDenied,
            "selector",
            format!(
                "Deployment {deployment} selects its pods by no label: not one the operator made"
            ),
        )
    })?;
    let missing: Vec<String> = selector
        .iter()
        .filter(|(k, v)| labels.and_then(|l| l.get(*k)) != Some(*v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(denied(
        Code::PermissionDenied,
        "selector",
        format!(
            "{what} lacks the labels Deployment {deployment} selects by ({}): its owner did not make it",
            missing.join(", ")
        ),
    ))
}

/// Checks the token's ServiceAccount is the one the workload's pods run as (`expected`, its own
/// unless its template names another): ownerReferences can be forged by whoever may create pods or
/// Deployments, while the operator sets the ServiceAccount of every pod it makes.
pub(crate) fn service_account(
    bound: &BoundPod,
    workload: &str,
    expected: &str,
) -> Result<(), Refusal> {
    if bound.service_account == expected {
        return Ok(());
    }
    Err(denied(
        Code::PermissionDenied,
        "service_account",
        format!(
            "pod {}/{} runs as ServiceAccount {:?}; the pods of {workload} run as {expected:?}",
            bound.namespace, bound.name, bound.service_account
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::UserInfo;

    fn status(username: &str, pod: Option<(&str, &str)>, audiences: &[&str]) -> TokenReviewStatus {
        let mut extra = BTreeMap::new();
        if let Some((name, uid)) = pod {
            extra.insert(POD_NAME_KEY.to_owned(), vec![name.to_owned()]);
            extra.insert(POD_UID_KEY.to_owned(), vec![uid.to_owned()]);
        }
        TokenReviewStatus {
            authenticated: Some(true),
            audiences: Some(audiences.iter().map(|a| (*a).to_owned()).collect()),
            user: Some(UserInfo {
                username: Some(username.to_owned()),
                extra: Some(extra),
                ..UserInfo::default()
            }),
            ..TokenReviewStatus::default()
        }
    }

    fn owner(api_version: &str, kind: &str, name: &str) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Some(true),
            ..OwnerReference::default()
        }
    }

    fn meta(uid: &str, owner: Option<OwnerReference>) -> ObjectMeta {
        ObjectMeta {
            uid: Some(uid.into()),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_pod_bound_token_of_the_audience_names_its_pod() {
        let s = status(
            "system:serviceaccount:shop:default",
            Some(("p-1", "u-1")),
            &["switchyard-identity"],
        );
        assert_eq!(
            bound_pod(&s, "switchyard-identity").map_err(|r| r.message),
            Ok(BoundPod {
                namespace: "shop".into(),
                service_account: "default".into(),
                name: "p-1".into(),
                uid: "u-1".into()
            })
        );
    }

    #[test]
    fn other_tokens_are_refused_with_the_reason() {
        let wrong_aud = status(
            "system:serviceaccount:shop:default",
            Some(("p", "u")),
            &["https://kubernetes.default.svc"],
        );
        assert_eq!(
            bound_pod(&wrong_aud, "switchyard-identity").map_err(|r| r.reason),
            Err("audience")
        );
        let unbound = status(
            "system:serviceaccount:shop:default",
            None,
            &["switchyard-identity"],
        );
        let e = bound_pod(&unbound, "switchyard-identity").expect_err("unbound");
        assert_eq!((e.reason, e.code), ("unbound", Code::PermissionDenied));
        let user = status("alice", Some(("p", "u")), &["switchyard-identity"]);
        assert_eq!(
            bound_pod(&user, "switchyard-identity").map_err(|r| r.reason),
            Err("subject")
        );
        let mut refused = status(
            "system:serviceaccount:a:b",
            Some(("p", "u")),
            &["switchyard-identity"],
        );
        refused.authenticated = Some(false);
        refused.error = Some("token expired".into());
        let e = bound_pod(&refused, "switchyard-identity").expect_err("refused");
        assert!(e.message.contains("token expired"), "{}", e.message);
        assert_eq!(e.code, Code::Unauthenticated);
    }

    #[test]
    fn the_owner_chain_must_end_at_a_router_or_manager() {
        let bound = BoundPod {
            namespace: "shop".into(),
            service_account: "default".into(),
            name: "p".into(),
            uid: "u".into(),
        };
        let pod = meta("u", Some(owner("apps/v1", "ReplicaSet", "rs")));
        assert_eq!(
            pod_owner(&bound, &pod)
                .map(|o| o.name.as_str())
                .map_err(|r| r.reason),
            Ok("rs")
        );
        let replaced = meta("other", Some(owner("apps/v1", "ReplicaSet", "rs")));
        assert_eq!(
            pod_owner(&bound, &replaced)
                .map(|_| ())
                .map_err(|r| r.reason),
            Err("pod")
        );
        let job = meta("u", Some(owner("batch/v1", "Job", "j")));
        assert_eq!(
            pod_owner(&bound, &job).map(|_| ()).map_err(|r| r.reason),
            Err("owner")
        );
        let rs = meta("r", Some(owner("apps/v1", "Deployment", "edge-router")));
        assert!(owner_of_kind("ReplicaSet rs", &rs, "Deployment").is_ok());
        let dep = meta(
            "d",
            Some(owner("switchyard.dev/v1alpha1", "Router", "edge")),
        );
        assert_eq!(
            workload("edge-router", &dep).map_err(|r| r.reason),
            Ok((Kind::Router, "edge".into(), "uid-edge".into()))
        );
        let foreign = meta("d", Some(owner("example.com/v1", "Router", "edge")));
        assert_eq!(
            workload("x", &foreign).map(|_| ()).map_err(|r| r.reason),
            Err("owner")
        );
        assert_eq!(
            workload("x", &meta("d", None))
                .map(|_| ())
                .map_err(|r| r.reason),
            Err("owner")
        );
    }

    #[test]
    fn the_token_must_be_of_the_workloads_service_account() {
        let bound = BoundPod {
            namespace: "shop".into(),
            service_account: "default".into(),
            name: "p".into(),
            uid: "u".into(),
        };
        let e = service_account(&bound, "Manager orders", "orders-manager").expect_err("other SA");
        assert_eq!(
            (e.reason, e.code),
            ("service_account", Code::PermissionDenied)
        );
        assert_eq!(
            e.message,
            "pod shop/p runs as ServiceAccount \"default\"; the pods of Manager orders run as \"orders-manager\""
        );
        let own = BoundPod {
            service_account: "orders-manager".into(),
            ..bound
        };
        assert!(service_account(&own, "Manager orders", "orders-manager").is_ok());
    }

    #[test]
    fn the_pod_and_its_replica_set_must_carry_the_deployments_selector() {
        let selector = BTreeMap::from([
            ("switchyard.dev/manager".to_owned(), "orders".to_owned()),
            (
                "app.kubernetes.io/name".to_owned(),
                "switchyard-manager".to_owned(),
            ),
        ]);
        let mut labels = selector.clone();
        labels.insert("pod-template-hash".into(), "abc".into());
        assert!(
            carries_selector("pod p", Some(&labels), "orders-manager", Some(&selector)).is_ok()
        );
        labels.remove("switchyard.dev/manager");
        let e = carries_selector("pod p", Some(&labels), "orders-manager", Some(&selector))
            .expect_err("unlabelled");
        assert_eq!((e.reason, e.code), ("selector", Code::PermissionDenied));
        assert_eq!(
            e.message,
            "pod p lacks the labels Deployment orders-manager selects by (switchyard.dev/manager=orders): its owner did not make it"
        );
        assert!(carries_selector("pod p", None, "orders-manager", Some(&selector)).is_err());
        let none = carries_selector("pod p", Some(&labels), "d", Some(&BTreeMap::new()))
            .expect_err("empty selector");
        assert_eq!(none.reason, "selector");
    }
}
