use super::*;
use crate::cluster::report::Status;
use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use switchyard_identity::Ca;
use switchyard_identity::ca::ROOT_LIFETIME;

fn op(desired: i32, ready: i32) -> OperatorDeployment {
    OperatorDeployment {
        name: "switchyard".into(),
        desired,
        ready,
        image: "reg/operator:0.1.0".into(),
        ready_pods: vec!["switchyard-a".into()],
        sidecar_image: "reg/sidecar:0.1.0".into(),
        leader_election: true,
        lease_name: "switchyard-operator".into(),
        mesh_tls: true,
        ca_secret: "switchyard-ca".into(),
    }
}

#[test]
fn crds_must_be_established_and_serve_this_clis_versions() {
    let want = Router::crd();
    let mut found = want.clone();
    assert_eq!(crd_check(&want, None).status, Status::Fail);
    // No status yet: not Established.
    assert_eq!(crd_check(&want, Some(&found)).status, Status::Fail);
    found.status = serde_json::from_value(serde_json::json!({
        "conditions": [{"type": "Established", "status": "True"}]
    }))
    .expect("status");
    let ok = crd_check(&want, Some(&found));
    assert_eq!(ok.status, Status::Pass, "{}", ok.detail);
    assert!(ok.detail.contains("v1alpha1"), "{}", ok.detail);
    found.spec.versions[0].served = false;
    let unserved = crd_check(&want, Some(&found));
    assert_eq!(unserved.status, Status::Fail);
    assert!(
        unserved.detail.contains("not v1alpha1"),
        "{}",
        unserved.detail
    );
}

#[test]
fn an_operator_scaled_to_zero_or_without_ready_replicas_fails() {
    let check = |found| operator_ready_check("switchyard-system", &found);
    assert_eq!(check(Ok(Some(op(2, 2)))).status, Status::Pass);
    assert_eq!(check(Ok(Some(op(2, 1)))).status, Status::Warn);
    let zero = check(Ok(Some(op(0, 0))));
    assert_eq!(zero.status, Status::Fail);
    assert!(zero.detail.contains("scaled to 0"), "{}", zero.detail);
    assert_eq!(check(Ok(Some(op(1, 0)))).status, Status::Fail);
    assert_eq!(check(Ok(None)).status, Status::Fail);
    assert_eq!(check(Err("forbidden".into())).status, Status::Fail);
}

fn lease(holder: Option<&str>, renewed: SystemTime) -> Lease {
    Lease {
        spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(
                k8s_openapi::jiff::Timestamp::try_from(renewed).expect("a time after 1970"),
            )),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn a_ready_pod_holding_a_fresh_lease_leads() {
    let now = SystemTime::now();
    let pods = vec!["switchyard-a".to_owned()];
    let fresh = lease(Some("switchyard-a"), now - Duration::from_secs(3));
    assert_eq!(
        leader_check("l", Some(&fresh), &pods, true, now).status,
        Status::Pass
    );
    let stale = lease(Some("switchyard-a"), now - Duration::from_secs(60));
    let c = leader_check("l", Some(&stale), &pods, true, now);
    assert_eq!(c.status, Status::Fail);
    assert!(c.detail.contains("60s ago"), "{}", c.detail);
    let released = lease(None, now);
    assert_eq!(
        leader_check("l", Some(&released), &pods, true, now).status,
        Status::Fail
    );
    assert_eq!(
        leader_check("l", None, &pods, true, now).status,
        Status::Fail
    );
    let foreign = lease(Some("laptop-1234"), now);
    assert_eq!(
        leader_check("l", Some(&foreign), &pods, true, now).status,
        Status::Warn
    );
    assert_eq!(
        leader_check("l", None, &pods, false, now).status,
        Status::Pass
    );
}

fn ca_secret(now: SystemTime) -> Secret {
    let (_, pem) = Ca::generate("cluster.local", now).expect("a root");
    Secret {
        data: Some(BTreeMap::from([
            ("tls.crt".to_owned(), ByteString(pem.cert.into_bytes())),
            ("tls.key".to_owned(), ByteString(pem.key.into_bytes())),
        ])),
        ..Default::default()
    }
}

#[test]
fn the_mesh_ca_is_read_from_its_secret_and_judged_by_its_end() {
    let made = SystemTime::now();
    let certs = ca_certificates(&ca_secret(made)).expect("certificates");
    assert_eq!(certs.len(), 1, "a self-signed issuer is its own anchor");
    assert!(
        certs[0].subject.contains("switchyard mesh CA"),
        "{}",
        certs[0].subject
    );
    let check = |at: SystemTime| ca_check("ns", "switchyard-ca", Some(Ok(certs.clone())), at);
    assert_eq!(check(made).status, Status::Pass);
    let soon = check(made + ROOT_LIFETIME - Duration::from_secs(10 * 86_400));
    assert_eq!(soon.status, Status::Warn);
    assert!(
        soon.detail.contains("ends in 9 days") || soon.detail.contains("ends in 10 days"),
        "{}",
        soon.detail
    );
    let after = check(made + ROOT_LIFETIME + Duration::from_secs(60));
    assert_eq!(after.status, Status::Fail);
    assert!(after.detail.contains("has expired"), "{}", after.detail);
    assert_eq!(
        ca_check("ns", "switchyard-ca", None, made).status,
        Status::Fail
    );
    let no_cert = Secret::default();
    assert!(ca_certificates(&no_cert).is_err());
}

#[test]
fn image_versions_come_from_the_tag_not_the_registry_port() {
    assert_eq!(
        image_version("reg:5000/sidecar:0.2.1@sha256:ab"),
        Some((0, 2, 1))
    );
    assert_eq!(image_version("ghcr.io/x/sidecar:v1.3.0"), Some((1, 3, 0)));
    assert_eq!(image_version("reg:5000/sidecar@sha256:ab"), None);
    assert_eq!(image_version("sidecar:latest"), None);
}

#[test]
fn sidecars_one_minor_apart_warn_and_further_apart_fail() {
    let pods = |images: &[&str]| -> Vec<(String, String)> {
        images
            .iter()
            .enumerate()
            .map(|(i, im)| (format!("ns/p{i}"), (*im).to_owned()))
            .collect()
    };
    let now = "reg/sidecar:0.3.0";
    assert_eq!(skew_check(now, &pods(&[])).status, Status::Pass);
    assert_eq!(skew_check(now, &pods(&[now, now])).status, Status::Pass);
    let rolling = skew_check(now, &pods(&[now, "reg/sidecar:0.2.4"]));
    assert_eq!(rolling.status, Status::Warn);
    assert!(
        rolling
            .detail
            .contains("1 pod(s) on reg/sidecar:0.2.4 (e.g. ns/p1)"),
        "{}",
        rolling.detail
    );
    let far = skew_check(now, &pods(&[now, "reg/sidecar:0.1.0"]));
    assert_eq!(far.status, Status::Fail);
    assert!(far.detail.contains("reg/sidecar:0.1.0"), "{}", far.detail);
    // Digests only: another image is a rollout, its distance unknown.
    let digests = skew_check("reg/sidecar@sha256:aa", &pods(&["reg/sidecar@sha256:bb"]));
    assert_eq!(digests.status, Status::Warn);
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

#[test]
fn a_manager_not_ready_fails_with_its_reason() {
    let ready = vec![condition("Ready", "True", "Available", "")];
    let blocked = vec![
        condition(
            "Ready",
            "False",
            "InvalidSpec",
            "the spec cannot be applied",
        ),
        condition(
            "Degraded",
            "True",
            "InvalidSpec",
            "spec.template: privileged",
        ),
    ];
    let fine = ready_check("managers-ready", "Manager", &[("a/one".into(), &ready)]);
    assert_eq!(fine.status, Status::Pass);
    assert_eq!(fine.detail, "all 1 Managers Ready");
    let c = ready_check(
        "managers-ready",
        "Manager",
        &[
            ("a/one".into(), &ready),
            ("a/two".into(), &blocked),
            ("a/new".into(), &[]),
        ],
    );
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.detail.starts_with("2 of 3 not Ready: Manager a/two not Ready (InvalidSpec: the spec cannot be applied; Degraded InvalidSpec: spec.template: privileged)"),
        "{}",
        c.detail
    );
    assert!(
        c.detail
            .contains("Manager a/new not Ready (no Ready condition yet"),
        "{}",
        c.detail
    );
    assert!(
        !c.detail.contains("a/one"),
        "a Ready Manager is not named: {}",
        c.detail
    );
    assert!(
        c.hint
            .as_deref()
            .is_some_and(|h| h.contains("kubectl describe manager"))
    );
    assert_eq!(
        ready_check("managers-ready", "Manager", &[]).status,
        Status::Pass
    );
}

#[test]
fn a_manager_ready_but_degraded_warns_with_the_reason() {
    let orphan = vec![
        condition("Ready", "True", "Available", "1/1 pods ready"),
        condition(
            "Degraded",
            "True",
            "RouterNotFound",
            "Router \"edge\" does not exist",
        ),
    ];
    let settled = vec![
        condition("Ready", "True", "Available", "1/1 pods ready"),
        condition("Degraded", "False", "AsExpected", "no problems found"),
    ];
    let c = ready_check(
        "managers-ready",
        "Manager",
        &[("a/orphan".into(), &orphan), ("a/fine".into(), &settled)],
    );
    assert_eq!(c.status, Status::Warn);
    assert!(
        c.detail.contains(
            "Manager a/orphan Ready but Degraded RouterNotFound: Router \"edge\" does not exist"
        ),
        "{}",
        c.detail
    );
    assert!(!c.detail.contains("a/fine"), "{}", c.detail);
}

#[test]
fn the_sidecar_is_found_among_init_containers_and_containers() {
    let pod = |spec: serde_json::Value| -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
            .expect("pod")
    };
    // A Manager pod: the native sidecar is the first init container.
    let manager = pod(serde_json::json!({
        "initContainers": [{"name": SIDECAR_CONTAINER, "image": "reg/sidecar:0.1.0", "restartPolicy": "Always"}],
        "containers": [{"name": "app", "image": "reg/app:1"}],
    }));
    assert_eq!(
        sidecar_image(&manager).as_deref(),
        Some("reg/sidecar:0.1.0")
    );
    let router = pod(serde_json::json!({
        "containers": [{"name": SIDECAR_CONTAINER, "image": "reg/sidecar:0.2.0"}],
    }));
    assert_eq!(sidecar_image(&router).as_deref(), Some("reg/sidecar:0.2.0"));
    let other = pod(serde_json::json!({"containers": [{"name": "app", "image": "reg/app:1"}]}));
    assert_eq!(sidecar_image(&other), None);
}
