//! `switchyard check` against the real cluster (issue 39, item 8), as a user runs it: the CLI
//! binary with the admin kubeconfig, read the way kubectl reads it (`KUBECONFIG`, `--kubeconfig`,
//! `--context`), and `--output json` parsed by the test.
//!
//! Before install (`--pre`): the API server's version, both CRDs taken by a server-side dry-run
//! apply (and nothing written by it), the Pod Security of the test's namespaces (a namespace that
//! lets the operator take privileged templates while enforcing `baseline` is a warning, which does
//! not fail the run), and a NetworkPolicy admitted there by a dry run.
//!
//! After install: a release of the operator chart of the test's own, in its namespace, with one
//! replica and mesh TLS. Its pod sits on a kwok node, where nothing runs in it, so the checks
//! first fail on what is missing (no Lease held, no CA Secret: exit 1). Then the operator runs as a
//! local process under that release's ServiceAccount with the pod's name as its identity, as the
//! pod would: it takes the release's Lease and writes the CA Secret, and the checks report the
//! CRDs and their versions, the operator ready and leading, the CA, the sidecars of the mesh pods
//! on the injected image, and a Manager the operator refuses (a privileged template) not Ready
//! with its reason (exit 1); with that Manager deleted every check passes (exit 0). Routers,
//! Managers and pods are looked at in the test's namespace only (`--mesh-namespace`).

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use switchyard_crds::{Manager, Router};
use switchyard_e2e::k8s::{wait_condition, wait_ready};
use switchyard_e2e::operator::{OperatorLock, RunAs, free_port};
use switchyard_e2e::sidecar::cli_binary;
use switchyard_e2e::{
    Cluster, Cmd, Operator, OperatorOpts, Output, SIDECAR_IMAGE, TestNamespace, cluster,
    eventually, fixtures, timeout,
};

const PSA_ENFORCE: &str = "pod-security.kubernetes.io/enforce";
const ALLOW_PRIVILEGED: &str = "switchyard.dev/allow-privileged-templates";
const CRDS: [&str; 2] = ["routers.switchyard.dev", "managers.switchyard.dev"];
/// The chart's default Lease name (`leaderElection.leaseName`).
const LEASE: &str = "switchyard-operator";

/// `switchyard check ARGS` with `KUBECONFIG` set as given.
async fn check(kubeconfig_env: &Path, args: &[&str]) -> Result<Output> {
    Cmd::new(cli_binary().await?)
        .arg("check")
        .args(args)
        .env("KUBECONFIG", kubeconfig_env)
        .output()
        .await
}

/// The JSON report of a run, and its exit code.
fn report(out: &Output) -> Result<(Option<i32>, Value)> {
    let v: Value = serde_json::from_str(&out.stdout)
        .with_context(|| format!("not a JSON report:\n{}", out.describe()))?;
    Ok((out.code, v))
}

/// The checks of a report named `name`.
fn named<'a>(report: &'a Value, name: &str) -> Vec<&'a Value> {
    report["checks"]
        .as_array()
        .map(|a| a.iter().filter(|c| c["name"] == name).collect())
        .unwrap_or_default()
}

/// The one check named `name`, required to have `status`; its detail.
fn one(report: &Value, name: &str, status: &str) -> Result<String> {
    let found = named(report, name);
    ensure!(found.len() == 1, "want one {name} check: {report:#}");
    let c = found[0];
    ensure!(c["status"] == status, "{name} is not {status}: {c:#}");
    Ok(c["detail"].as_str().unwrap_or_default().to_owned())
}

fn current_context(kubeconfig: &Path) -> Result<String> {
    kube::config::Kubeconfig::read_from(kubeconfig)?
        .current_context
        .context("the admin kubeconfig names no current context")
}

#[tokio::test]
async fn pre_install_checks_pass_on_the_test_cluster() -> Result<()> {
    let c = cluster().await?;
    let client = c.client().await?;
    let restricted = TestNamespace::create_with(
        c,
        "check-pre",
        BTreeMap::from([(PSA_ENFORCE.to_owned(), "restricted".to_owned())]),
        BTreeMap::new(),
    )
    .await?;
    let clash = TestNamespace::create_with(
        c,
        "check-clash",
        BTreeMap::from([
            (PSA_ENFORCE.to_owned(), "baseline".to_owned()),
            (ALLOW_PRIVILEGED.to_owned(), "true".to_owned()),
        ]),
        BTreeMap::new(),
    )
    .await?;

    // KUBECONFIG, as kubectl reads it; the context it names is reported.
    let out = check(
        &c.kubeconfig,
        &["--pre", "-n", &restricted.name, "-o", "json"],
    )
    .await?;
    let (code, r) = report(&out)?;
    ensure!(code == Some(0), "exit {code:?}:\n{}", out.describe());
    ensure!(r["phase"] == "pre", "{r:#}");
    let context = current_context(&c.kubeconfig)?;
    ensure!(r["context"] == context.as_str(), "context {context}: {r:#}");
    let version = client.apiserver_version().await?;
    let detail = one(&r, "kubernetes-version", "pass")?;
    ensure!(
        detail.starts_with(&format!("{} (", version.git_version)),
        "the API server is {}: {detail}",
        version.git_version
    );
    let applies = named(&r, "crd-apply");
    ensure!(applies.len() == 2, "one crd-apply per CRD: {r:#}");
    for (check, crd) in applies.iter().zip(CRDS) {
        let detail = check["detail"].as_str().unwrap_or_default();
        ensure!(
            check["status"] == "pass"
                && detail.starts_with(&format!("{crd}: accepted (server-side dry run)")),
            "{check:#}"
        );
    }
    let detail = one(&r, "pod-security", "pass")?;
    ensure!(
        detail.contains(&restricted.name) && detail.contains("\"restricted\""),
        "{detail}"
    );
    let detail = one(&r, "network-policy", "pass")?;
    ensure!(
        detail.contains(&format!("admitted in {}", restricted.name)),
        "{detail}"
    );
    ensure!(
        r["summary"] == serde_json::json!({"pass": 5, "warn": 0, "fail": 0}),
        "{r:#}"
    );
    // Dry runs only: no policy made, and the CRDs carry no field manager of the check.
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), &restricted.name);
    ensure!(
        policies
            .list(&ListParams::default())
            .await?
            .items
            .is_empty(),
        "the NetworkPolicy dry run left a policy"
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in CRDS {
        let managers: Vec<String> = crds
            .get(name)
            .await?
            .managed_fields()
            .iter()
            .filter_map(|f| f.manager.clone())
            .collect();
        ensure!(
            !managers.iter().any(|m| m == "switchyard-check"),
            "{name} was written by the check: {managers:?}"
        );
    }

    // --kubeconfig wins over KUBECONFIG (here a file that does not exist); a warning is no failure.
    let out = check(
        Path::new("/nonexistent/kubeconfig"),
        &[
            "--pre",
            "--kubeconfig",
            &c.kubeconfig.to_string_lossy(),
            "--context",
            &context,
            "-n",
            &restricted.name,
            "--mesh-namespace",
            &clash.name,
            "-o",
            "json",
        ],
    )
    .await?;
    let (code, r) = report(&out)?;
    ensure!(
        code == Some(0),
        "a warning fails nothing: {}",
        out.describe()
    );
    let security = named(&r, "pod-security");
    ensure!(security.len() == 2, "one per namespace: {r:#}");
    let warned = security[1];
    let detail = warned["detail"].as_str().unwrap_or_default();
    ensure!(
        warned["status"] == "warn"
            && detail.contains(&clash.name)
            && detail.contains(ALLOW_PRIVILEGED),
        "{warned:#}"
    );
    ensure!(
        r["summary"]["warn"] == 1 && r["summary"]["fail"] == 0,
        "{r:#}"
    );

    // Text for people: one line per check and the counts.
    let out = check(&c.kubeconfig, &["--pre", "-n", &restricted.name]).await?;
    ensure!(out.success(), "{}", out.describe());
    ensure!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("[pass] network-policy"))
            && out
                .stdout
                .ends_with("pre-install checks: 5 passed, 0 warned, 0 failed\n"),
        "{}",
        out.stdout
    );

    // A context the kubeconfig does not have: no checks, an error naming it.
    let out = check(&c.kubeconfig, &["--pre", "--context", "no-such-context"]).await?;
    ensure!(
        out.code == Some(1) && out.stdout.is_empty() && out.stderr.contains("no-such-context"),
        "{}",
        out.describe()
    );
    Ok(())
}

/// A release of the operator chart in `namespace`: one replica, mesh TLS, the tests' sidecar image.
/// Its ClusterRole takes the release's name, so the name is unique per run.
async fn install_release(c: &Cluster, release: &str, namespace: &str) -> Result<()> {
    let (repository, tag) = SIDECAR_IMAGE
        .rsplit_once(':')
        .context("the tests' sidecar image has no tag")?;
    // The shared release's choice: a cluster-wide admission policy would outlive this release's
    // namespace and bind every other test.
    let values = format!(
        "replicaCount=1,meshTLS.enabled=true,admissionPolicy.enabled=false,\
         sidecar.image.repository={repository},sidecar.image.tag={tag}"
    );
    c.helm()
        .args(["install", release])
        .arg(switchyard_e2e::charts_dir().join("switchyard"))
        .args(["--namespace", namespace, "--set", &values, "--wait=false"])
        .timeout(Duration::from_secs(180))
        .ok()
        .await
        .context("helm install of the operator chart in the test's namespace")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_install_checks_report_the_installed_switchyard() -> Result<()> {
    let lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let ns = TestNamespace::create(c, "check-post").await?;
    let suffix = ns.name.rsplit('-').next().unwrap_or_default();
    let release = format!("switchyard-check-{suffix}");
    install_release(c, &release, &ns.name).await?;
    let result = post_install(c, &ns.name, &release).await;
    let uninstalled = c.helm_uninstall(&release, &ns.name).await;
    drop(lock);
    result.and(uninstalled)
}

async fn post_install(c: &Cluster, ns: &str, release: &str) -> Result<()> {
    let client = c.client().await?;
    let args = ["-n", ns, "--mesh-namespace", ns, "-o", "json"];

    // The release's one pod, on a kwok node: Ready as far as the API server knows.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    eventually(
        "the release's Deployment to be ready",
        timeout(),
        || async {
            let d = deployments.get(release).await?;
            let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
            ensure!(ready == 1, "{release}: {ready} of 1 ready");
            Ok(())
        },
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={release}")))
        .await?
        .items
        .into_iter()
        .find(|p| p.metadata.deletion_timestamp.is_none())
        .context("no pod of the release")?
        .name_any();

    // Nothing runs in that pod: no replica leads, no CA.
    let out = check(&c.kubeconfig, &args).await?;
    let (code, r) = report(&out)?;
    ensure!(
        code == Some(1),
        "a failed check exits 1: {}",
        out.describe()
    );
    let detail = one(&r, "operator-ready", "pass")?;
    ensure!(
        detail.starts_with(&format!("Deployment {ns}/{release}: 1 of 1 replicas ready")),
        "{detail}"
    );
    let detail = one(&r, "operator-leader", "fail")?;
    ensure!(
        detail == format!("no Lease {LEASE}: no replica leads"),
        "{detail}"
    );
    let detail = one(&r, "mesh-ca", "fail")?;
    ensure!(
        detail.starts_with(&format!("Secret {ns}/switchyard-ca does not exist")),
        "{detail}"
    );
    ensure!(
        r["summary"] == serde_json::json!({"pass": 6, "warn": 0, "fail": 2}),
        "only the leader and the CA fail: {r:#}"
    );

    // The operator, as that pod would run it.
    let cp_port = free_port()?;
    let op = Operator::start(
        c,
        OperatorOpts {
            mesh_tls: true,
            run_as: RunAs {
                namespace: ns.to_owned(),
                service_account: release.to_owned(),
            },
            control_plane_port: Some(cp_port),
            extra_args: vec![format!("--control-plane-url=https://127.0.0.1:{cp_port}")],
            ..OperatorOpts::new(pod.clone()).leader_election(LEASE)
        },
    )
    .await?;
    let result = with_operator(c, ns, &pod, &args).await;
    let stopped = op.stop().await;
    result?;
    stopped?;
    Ok(())
}

async fn with_operator(c: &Cluster, ns: &str, pod: &str, args: &[&str]) -> Result<()> {
    let client = c.client().await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    eventually(
        "the operator to hold the release's Lease",
        timeout(),
        || async {
            let holder = leases
                .get(LEASE)
                .await?
                .spec
                .and_then(|s| s.holder_identity)
                .unwrap_or_default();
            ensure!(holder == pod, "held by {holder:?}");
            Ok(())
        },
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    eventually("the operator's CA Secret", timeout(), || async {
        secrets.get("switchyard-ca").await.context("switchyard-ca")
    })
    .await?;
    let manifests = [
        fixtures::router("edge"),
        fixtures::manager("handlers", "edge", "[noop]", ""),
        // Refused by the operator: the namespace does not allow privileged templates.
        fixtures::manager(
            "locked",
            "edge",
            "[noop]",
            "          securityContext: {privileged: true}\n",
        ),
    ]
    .join("---\n");
    c.kubectl()
        .args(["apply", "-n", ns, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    let routers: Api<Router> = Api::namespaced(client.clone(), ns);
    let managers: Api<Manager> = Api::namespaced(client.clone(), ns);
    wait_ready(&routers, "edge").await?;
    wait_ready(&managers, "handlers").await?;
    wait_condition(&managers, "locked", "Ready", "False", Some("InvalidSpec")).await?;

    let out = check(&c.kubeconfig, args).await?;
    let (code, r) = report(&out)?;
    ensure!(
        code == Some(1),
        "a Manager not Ready fails the run: {}",
        out.describe()
    );
    ensure!(r["phase"] == "post", "{r:#}");
    // The CRDs, with the versions the API server says they serve and store.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let found = named(&r, "crds");
    ensure!(found.len() == 2, "one crds check per CRD: {r:#}");
    for (check, name) in found.iter().zip(CRDS) {
        let crd = crds.get(name).await?;
        let served: Vec<&str> = crd
            .spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.as_str())
            .collect();
        let storage = crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.as_str())
            .unwrap_or_default();
        let want = format!(
            "{name}: Established, serving {} (storage {storage})",
            served.join(", ")
        );
        ensure!(
            check["status"] == "pass" && check["detail"] == want.as_str(),
            "want {want:?}: {check:#}"
        );
    }
    one(&r, "operator-ready", "pass")?;
    let detail = one(&r, "operator-leader", "pass")?;
    ensure!(
        detail.starts_with(&format!("{pod} leads (Lease {LEASE}, renewed ")),
        "{detail}"
    );
    let detail = one(&r, "mesh-ca", "pass")?;
    ensure!(
        detail.starts_with(&format!("{ns}/switchyard-ca: issuer "))
            && detail.contains("switchyard mesh CA")
            && detail.contains(" ends in "),
        "{detail}"
    );
    let mesh_pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(
            &ListParams::default()
                .labels("app.kubernetes.io/name in (switchyard-router,switchyard-manager)"),
        )
        .await?
        .items
        .len();
    ensure!(
        mesh_pods >= 2,
        "the Router's and the Manager's pods: {mesh_pods}"
    );
    let detail = one(&r, "sidecar-skew", "pass")?;
    ensure!(
        detail
            == format!(
                "all {mesh_pods} mesh pods run the sidecar the operator injects ({SIDECAR_IMAGE})"
            ),
        "{detail}"
    );
    // Both Managers claim `noop`: the Router runs, Degraded, and says so (a warning).
    let detail = one(&r, "routers-ready", "warn")?;
    ensure!(
        detail.starts_with(&format!(
            "all 1 Routers Ready; Router {ns}/edge Ready but Degraded EventTypeConflict: "
        )),
        "{detail}"
    );
    let detail = one(&r, "managers-ready", "fail")?;
    ensure!(
        detail.starts_with(&format!(
            "1 of 2 not Ready: Manager {ns}/locked not Ready (InvalidSpec: "
        )) && detail.contains("Degraded InvalidSpec: ")
            && detail.contains("securityContext.privileged")
            && !detail.contains("handlers"),
        "{detail}"
    );
    ensure!(
        r["summary"] == serde_json::json!({"pass": 6, "warn": 1, "fail": 1}),
        "only managers-ready fails: {r:#}"
    );

    // The same for people.
    let text_args: Vec<&str> = args.iter().copied().take(4).collect();
    let out = check(&c.kubeconfig, &text_args).await?;
    ensure!(
        out.code == Some(1)
            && out
                .stdout
                .lines()
                .any(|l| l.starts_with("[FAIL] managers-ready ")
                    && l.contains(&format!("1 of 2 not Ready: Manager {ns}/locked")))
            && out
                .stdout
                .ends_with("post-install checks: 6 passed, 1 warned, 1 failed\n"),
        "{}",
        out.describe()
    );

    // Without the refused Manager, everything passes.
    managers.delete("locked", &DeleteParams::default()).await?;
    eventually("Manager locked to be gone", timeout(), || async {
        ensure!(managers.get_opt("locked").await?.is_none(), "still there");
        Ok(())
    })
    .await?;
    wait_condition(&routers, "edge", "Degraded", "False", None).await?;
    let out = check(&c.kubeconfig, args).await?;
    let (code, r) = report(&out)?;
    ensure!(
        code == Some(0) && r["summary"] == serde_json::json!({"pass": 8, "warn": 0, "fail": 0}),
        "{}",
        out.describe()
    );
    Ok(())
}
