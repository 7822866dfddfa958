//! Who may say a workload belongs to a Router or Manager (issue 38, deliverable 2: "a
//! ValidatingAdmissionPolicy in the chart refuses ownerReferences to Routers and Managers from
//! anyone but the operator"). The Identity service certifies a pod as a Manager when its owners lead
//! there, so a namespace user who could write such an ownerReference could take the Manager's
//! identity.
//!
//! A release of the chart (`switchyard-owners`, namespaced to the test's namespace, no operator
//! pods) brings the policy and its binding. A namespace user (a ServiceAccount bound to the
//! built-in `edit` role, so RBAC lets it create Pods, ReplicaSets and Deployments) is refused each
//! of them with an ownerReference to the quickstart's Manager, by the API server, with the policy's
//! message; the same Pod without it is taken, and the release's operator ServiceAccount may create
//! the Deployment. No operator runs: the API server alone decides.

use anyhow::{Context, Result, ensure};
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};
use std::time::Duration;
use switchyard_crds::Manager;
use switchyard_e2e::{Cluster, TestNamespace, cluster, eventually, fixtures, timeout};

/// Helm release (and full name of its objects, its ServiceAccount among them) and its namespace.
const RELEASE: &str = "switchyard-owners";
const NAMESPACE: &str = "switchyard-owners";
/// The namespace user.
const USER: &str = "dev";

async fn helm_install(c: &Cluster, watched: &str) -> Result<()> {
    c.helm()
        .args(["upgrade", "--install", RELEASE])
        .arg(switchyard_e2e::charts_dir().join("switchyard"))
        .args(["--namespace", NAMESPACE, "--create-namespace"])
        .args(["--set", "replicaCount=0,meshTLS.enabled=false", "--set"])
        .arg(format!("watchNamespaces={{{watched}}}"))
        .args(["--wait=false"])
        .timeout(Duration::from_secs(180))
        .ok()
        .await
        .context("helm install of the operator chart with watchNamespaces")?;
    Ok(())
}

/// The namespace user: a ServiceAccount with the built-in `edit` role in `ns`.
async fn namespace_user(c: &Cluster, ns: &str) -> Result<String> {
    c.kubectl()
        .args(["-n", ns, "create", "serviceaccount", USER])
        .ok()
        .await?;
    c.kubectl()
        .args([
            "-n",
            ns,
            "create",
            "rolebinding",
            USER,
            "--clusterrole=edit",
        ])
        .arg(format!("--serviceaccount={ns}:{USER}"))
        .ok()
        .await?;
    Ok(format!("system:serviceaccount:{ns}:{USER}"))
}

fn pod(owner: Option<&Value>) -> Value {
    let mut p = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "forged"},
        "spec": {"containers": [{"name": "app", "image": "example/app:1"}]},
    });
    if let Some(o) = owner {
        p["metadata"]["ownerReferences"] = json!([o]);
    }
    p
}

fn workload(kind: &str, owner: &Value) -> Value {
    let labels = json!({"app": "forged"});
    json!({
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "forged", "ownerReferences": [owner]},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "example/app:1"}]},
            },
        },
    })
}

/// `kubectl create` of `obj` in `ns` as `user`; `dry_run` asks the API server to judge it (every
/// admission step runs) without keeping it.
async fn create_as(
    c: &Cluster,
    ns: &str,
    user: &str,
    obj: &Value,
    dry_run: bool,
) -> Result<switchyard_e2e::Output> {
    let mut cmd = c
        .kubectl()
        .args(["-n", ns, "create", "-f", "-", "--as", user]);
    if dry_run {
        cmd = cmd.arg("--dry-run=server");
    }
    cmd.stdin(obj.to_string()).output().await
}

#[tokio::test]
async fn only_the_operator_may_make_a_workload_owned_by_a_manager() -> Result<()> {
    let c = cluster().await?;
    let ns = TestNamespace::create(c, "owners").await?;
    helm_install(c, &ns.name).await?;
    let result = run(c, &ns.name).await;
    let uninstalled = c.helm_uninstall(RELEASE, NAMESPACE).await;
    result?;
    uninstalled
}

async fn run(c: &Cluster, ns: &str) -> Result<()> {
    c.kubectl()
        .args(["apply", "-n", ns, "-f"])
        .arg(fixtures::quickstart())
        .ok()
        .await?;
    let managers: Api<Manager> = Api::namespaced(c.client().await?, ns);
    let manager = managers.get("handlers").await?;
    let owner = json!({
        "apiVersion": "switchyard.dev/v1alpha1",
        "kind": "Manager",
        "name": manager.name_any(),
        "uid": manager.uid().context("Manager without uid")?,
        "controller": true,
        "blockOwnerDeletion": true,
    });
    let user = namespace_user(c, ns).await?;

    // RBAC lets the user create the pod: without the ownerReference it is taken.
    let plain = create_as(c, ns, &user, &pod(None), true).await?;
    ensure!(plain.success(), "a plain pod: {}", plain.describe());

    // With it, each kind is refused by the policy. The API server picks up a new policy and
    // binding within seconds, so the wait asks with server-side dry runs (every admission step
    // runs, nothing is kept); once the policy answers, a real create must be refused too.
    for (kind, obj) in [
        ("Pod", pod(Some(&owner))),
        ("Deployment", workload("Deployment", &owner)),
        ("ReplicaSet", workload("ReplicaSet", &owner)),
    ] {
        let expected = format!(
            "metadata.ownerReferences: {user} may not create or change a {kind} owned by Manager handlers"
        );
        let refused = |out: &switchyard_e2e::Output| {
            !out.success()
                && out.stderr.contains("ValidatingAdmissionPolicy")
                && out.stderr.contains(&expected)
        };
        eventually(
            &format!("the policy refusing a {kind} owned by the Manager"),
            timeout(),
            || async {
                let out = create_as(c, ns, &user, &obj, true).await?;
                ensure!(
                    refused(&out),
                    "not refused by the policy: {}",
                    out.describe()
                );
                Ok(())
            },
        )
        .await?;
        let out = create_as(c, ns, &user, &obj, false).await?;
        eprintln!("[e2e] {kind} as {user}: {}", out.combined().trim());
        ensure!(
            refused(&out),
            "a {kind} owned by the Manager not refused by the policy: {}",
            out.describe()
        );
    }
    // Nor a Pod or ReplicaSet carrying the Manager's label, which the Identity service requires of
    // a pod and its ReplicaSet (an ownerReference naming the operator's ReplicaSet or Deployment
    // is not matched): only the ReplicaSet and Deployment controllers make those.
    let labelled = |mut obj: Value| {
        obj["metadata"]["labels"] = json!({"switchyard.dev/manager": "handlers"});
        obj
    };
    for (kind, obj) in [
        ("Pod", labelled(pod(None))),
        ("ReplicaSet", labelled(workload("ReplicaSet", &json!(null)))),
    ] {
        let mut obj = obj;
        if let Some(meta) = obj["metadata"].as_object_mut() {
            meta.remove("ownerReferences");
        }
        let expected = format!(
            "metadata.labels: {user} may not create or change a {kind} labelled switchyard.dev/manager=handlers"
        );
        let out = create_as(c, ns, &user, &obj, false).await?;
        eprintln!("[e2e] labelled {kind} as {user}: {}", out.combined().trim());
        ensure!(
            !out.success() && out.stderr.contains(&expected),
            "a labelled {kind} not refused by the policy: {}",
            out.describe()
        );
    }
    let left = c
        .kubectl()
        .args([
            "-n",
            ns,
            "get",
            "pods,replicasets,deployments",
            "-o",
            "name",
        ])
        .ok()
        .await?;
    ensure!(
        !left.stdout.contains("forged"),
        "a refused object exists: {}",
        left.stdout
    );

    // The operator's ServiceAccount may.
    let operator = format!("system:serviceaccount:{NAMESPACE}:{RELEASE}");
    let out = create_as(c, ns, &operator, &workload("Deployment", &owner), true).await?;
    ensure!(
        out.success(),
        "the operator's Deployment was refused: {}",
        out.describe()
    );
    Ok(())
}
