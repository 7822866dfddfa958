//! Charts and CRDs against the real API server, no operator needed: helm install/template/lint,
//! the chart's RBAC as the operator's token sees it, CRD schema and CEL rejections, printer
//! columns and `kubectl explain`. Each test works in a namespace of its own, so they run in
//! parallel.

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use serde_json::Value;
use std::collections::BTreeSet;
use switchyard_e2e::{
    CRD_RELEASE, Cmd, KUBE_VERSION, RELEASE, SYSTEM_NAMESPACE, TestNamespace, charts_dir, cluster,
    fixtures,
};

/// `helm template` of a chart from the repository, parsed into its documents.
async fn template(chart: &str, extra: &[&str]) -> Result<Vec<Value>> {
    let out = Cmd::helm_offline()
        .args(["template", RELEASE])
        .arg(charts_dir().join(chart))
        .args(["--namespace", SYSTEM_NAMESPACE])
        .args(["--kube-version", KUBE_VERSION])
        .args(extra)
        .ok()
        .await?;
    parse_documents(&out.stdout)
}

fn parse_documents(yaml: &str) -> Result<Vec<Value>> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(yaml).context("parsing helm template output")?;
    Ok(docs.into_iter().filter(|d| d.is_object()).collect())
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .with_context(|| format!("no {kind}/{name} in the rendered chart"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn charts_install_with_helm() -> Result<()> {
    let c = cluster().await?;
    let out = c
        .helm()
        .args(["list", "--all-namespaces", "--output", "json"])
        .ok()
        .await?;
    let releases: Vec<Value> = serde_json::from_str(&out.stdout)?;
    for name in [CRD_RELEASE, RELEASE] {
        let r = releases
            .iter()
            .find(|r| r["name"] == name)
            .with_context(|| format!("no helm release {name}: {releases:?}"))?;
        ensure!(
            r["status"] == "deployed",
            "release {name} is {}",
            r["status"]
        );
        if name == RELEASE {
            ensure!(
                r["namespace"] == SYSTEM_NAMESPACE,
                "release {name} is in {}",
                r["namespace"]
            );
        } else if r["namespace"] != SYSTEM_NAMESPACE {
            eprintln!(
                "[e2e] note: release {name} lives in namespace {} (installed there by something else)",
                r["namespace"]
            );
        }
    }

    let client = c.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in ["routers.switchyard.dev", "managers.switchyard.dev"] {
        let crd = crds.get(name).await?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        ensure!(established, "CRD {name} is not Established");
        let version = crd
            .spec
            .versions
            .iter()
            .find(|v| v.name == "v1alpha1")
            .with_context(|| format!("CRD {name} has no v1alpha1"))?;
        let sub = version.subresources.as_ref();
        ensure!(
            version.served && version.storage,
            "{name} v1alpha1 not served+stored"
        );
        ensure!(
            sub.is_some_and(|s| s.status.is_some() && s.scale.is_some()),
            "CRD {name} lacks the status or scale subresource"
        );
    }

    Api::<ServiceAccount>::namespaced(client.clone(), SYSTEM_NAMESPACE)
        .get(RELEASE)
        .await
        .context("ServiceAccount switchyard")?;
    Api::<ClusterRole>::all(client.clone())
        .get(RELEASE)
        .await
        .context("ClusterRole switchyard")?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .get(RELEASE)
        .await
        .context("ClusterRoleBinding switchyard")?;
    let le = "switchyard-leader-election";
    Api::<Role>::namespaced(client.clone(), SYSTEM_NAMESPACE)
        .get(le)
        .await
        .context("Role switchyard-leader-election")?;
    Api::<RoleBinding>::namespaced(client.clone(), SYSTEM_NAMESPACE)
        .get(le)
        .await
        .context("RoleBinding switchyard-leader-election")?;
    let svc = Api::<Service>::namespaced(client.clone(), SYSTEM_NAMESPACE)
        .get("switchyard-metrics")
        .await
        .context("Service switchyard-metrics")?;
    let port_names: Vec<_> = svc
        .spec
        .and_then(|s| s.ports)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| p.name)
        .collect();
    ensure!(
        port_names == ["metrics"],
        "switchyard-metrics ports: {port_names:?}"
    );
    let deploy = Api::<Deployment>::namespaced(client.clone(), SYSTEM_NAMESPACE)
        .get(RELEASE)
        .await
        .context("Deployment switchyard")?;
    let want = deploy.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);

    // The chart's operator pods land on the kwok fake nodes (they never really run there).
    let pods = Api::<Pod>::namespaced(client, SYSTEM_NAMESPACE);
    switchyard_e2e::eventually(
        "the chart's operator pods to be scheduled on kwok nodes",
        switchyard_e2e::timeout(),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app.kubernetes.io/instance=switchyard"))
                .await?;
            let nodes: Vec<String> = list
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
                .collect();
            ensure!(
                nodes.len() == want as usize && nodes.iter().all(|n| n.starts_with("kwok-node-")),
                "want {want} operator pods on kwok nodes, scheduled on: {nodes:?}"
            );
            Ok(())
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn operator_chart_renders_least_privilege_rbac() -> Result<()> {
    let docs = template("switchyard", &[]).await?;
    let expected = [
        ("ServiceAccount", "switchyard"),
        ("ClusterRole", "switchyard"),
        ("ClusterRoleBinding", "switchyard"),
        ("Role", "switchyard-leader-election"),
        ("RoleBinding", "switchyard-leader-election"),
        // Mesh TLS is on by default: the CA Secret's Role.
        ("Role", "switchyard-identity"),
        ("RoleBinding", "switchyard-identity"),
        ("Service", "switchyard-metrics"),
        ("Service", "switchyard-control-plane"),
        ("Deployment", "switchyard"),
        ("NetworkPolicy", "switchyard"),
        // On by default: ownerReferences to Routers and Managers from the operator only.
        ("ValidatingAdmissionPolicy", "switchyard-owner-references"),
        (
            "ValidatingAdmissionPolicyBinding",
            "switchyard-owner-references",
        ),
    ];
    for (kind, name) in expected {
        let doc = find(&docs, kind, name)?;
        if !matches!(
            kind,
            "ClusterRole"
                | "ClusterRoleBinding"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
        ) {
            ensure!(
                doc["metadata"]["namespace"] == SYSTEM_NAMESPACE,
                "{kind}/{name} is not in {SYSTEM_NAMESPACE}: {}",
                doc["metadata"]
            );
        }
    }
    let kinds: BTreeSet<String> = docs
        .iter()
        .filter_map(|d| d["kind"].as_str().map(str::to_string))
        .collect();
    ensure!(
        !kinds.contains("Secret"),
        "the operator chart renders a Secret: {kinds:?}"
    );

    let rules = find(&docs, "ClusterRole", "switchyard")?["rules"]
        .as_array()
        .context("ClusterRole without rules")?
        .clone();
    ensure!(!rules.is_empty(), "ClusterRole has no rules");
    for rule in &rules {
        let (groups, resources, verbs) = (
            strings(&rule["apiGroups"]),
            strings(&rule["resources"]),
            strings(&rule["verbs"]),
        );
        ensure!(
            !groups
                .iter()
                .chain(&resources)
                .chain(&verbs)
                .any(|s| s.contains('*')),
            "wildcard in ClusterRole rule {rule}"
        );
        ensure!(
            !resources
                .iter()
                .any(|r| r == "secrets" || r.starts_with("secrets/")),
            "ClusterRole grants access to secrets: {rule}"
        );
        ensure!(
            !verbs
                .iter()
                .any(|v| matches!(v.as_str(), "escalate" | "bind" | "impersonate")),
            "ClusterRole grants a privilege-escalation verb: {rule}"
        );
        ensure!(
            rule.get("nonResourceURLs").is_none(),
            "ClusterRole grants nonResourceURLs: {rule}"
        );
    }
    // What the operator needs is there.
    let grants = |group: &str, resource: &str, verb: &str| {
        rules.iter().any(|r| {
            strings(&r["apiGroups"]).iter().any(|g| g == group)
                && strings(&r["resources"]).iter().any(|x| x == resource)
                && strings(&r["verbs"]).iter().any(|v| v == verb)
        })
    };
    for (group, resource, verb) in [
        ("switchyard.dev", "routers", "watch"),
        ("switchyard.dev", "managers", "watch"),
        ("switchyard.dev", "routers/status", "patch"),
        ("switchyard.dev", "managers/status", "patch"),
        ("apps", "deployments", "create"),
        ("apps", "deployments", "patch"),
        ("apps", "deployments", "delete"),
        ("", "services", "create"),
        ("", "configmaps", "create"),
        ("events.k8s.io", "events", "create"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        // A Manager's namespace labels: whether its template may escalate.
        ("", "namespaces", "get"),
        // Certifying a sidecar (mesh TLS, on by default): its token reviewed, then its pod and
        // the pod's owners read by name.
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("", "pods", "get"),
        ("apps", "replicasets", "get"),
        // Each Router's and Manager's own ServiceAccount.
        ("", "serviceaccounts", "create"),
        ("", "serviceaccounts", "patch"),
        // What the owner-reference policy asks of whoever writes their workloads.
        ("switchyard.dev", "routers", "own"),
        ("switchyard.dev", "managers", "own"),
    ] {
        ensure!(
            grants(group, resource, verb),
            "ClusterRole does not grant {verb} {group}/{resource}"
        );
    }
    let role = find(&docs, "Role", "switchyard-leader-election")?;
    ensure!(
        role["rules"].as_array().is_some_and(|rs| rs
            .iter()
            .any(|r| strings(&r["apiGroups"]) == ["coordination.k8s.io"]
                && strings(&r["resources"]) == ["leases"])),
        "leader-election Role does not cover leases: {role}"
    );
    // The operator's own NetworkPolicy: the control plane only from the mesh's pods.
    let policy = find(&docs, "NetworkPolicy", "switchyard")?;
    let control = &policy["spec"]["ingress"][0];
    ensure!(
        control["ports"][0]["port"] == "control-plane"
            && strings(&control["from"][0]["podSelector"]["matchExpressions"][0]["values"])
                == ["switchyard-router", "switchyard-manager"],
        "operator NetworkPolicy: {policy}"
    );
    // The CA Secret, and only it, may be read and watched (every replica follows a rotation of it);
    // the Role grants nothing else but creating it.
    let identity = find(&docs, "Role", "switchyard-identity")?;
    let rules = identity["rules"]
        .as_array()
        .context("identity Role without rules")?;
    ensure!(
        rules.iter().all(|r| strings(&r["resources"]) == ["secrets"]
            && (strings(&r["verbs"]) == ["create"]
                || (strings(&r["verbs"]) == ["get", "list", "watch"]
                    && strings(&r["resourceNames"]) == ["switchyard-ca"]))),
        "identity Role grants more than get/list/watch/create of the CA Secret: {identity}"
    );

    let crb = find(&docs, "ClusterRoleBinding", "switchyard")?;
    ensure!(
        crb["roleRef"]["kind"] == "ClusterRole" && crb["roleRef"]["name"] == "switchyard",
        "ClusterRoleBinding roleRef: {}",
        crb["roleRef"]
    );
    ensure!(
        crb["subjects"][0]["kind"] == "ServiceAccount"
            && crb["subjects"][0]["name"] == "switchyard"
            && crb["subjects"][0]["namespace"] == SYSTEM_NAMESPACE,
        "ClusterRoleBinding subjects: {}",
        crb["subjects"]
    );

    let deploy = find(&docs, "Deployment", "switchyard")?;
    let pod = &deploy["spec"]["template"]["spec"];
    ensure!(
        pod["serviceAccountName"] == "switchyard",
        "serviceAccountName: {}",
        pod["serviceAccountName"]
    );
    let container = &pod["containers"][0];
    let args = strings(&container["args"]);
    for want in ["--leader-election=true", "--lease-name=switchyard-operator"] {
        ensure!(
            args.iter().any(|a| a == want),
            "operator args {args:?} lack {want}"
        );
    }
    for prefix in [
        "--metrics-addr=",
        "--sidecar-image=",
        "--log-format=",
        "--log-level=",
    ] {
        ensure!(
            args.iter().any(|a| a.starts_with(prefix)),
            "operator args {args:?} lack {prefix}…"
        );
    }
    let env: Vec<String> = container["env"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter_map(|v| v["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    ensure!(
        env.contains(&"POD_NAME".to_string()) && env.contains(&"POD_NAMESPACE".to_string()),
        "operator env {env:?} lacks POD_NAME/POD_NAMESPACE"
    );
    ensure!(
        container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            && container["readinessProbe"]["httpGet"]["path"] == "/readyz",
        "probes: {} {}",
        container["livenessProbe"],
        container["readinessProbe"]
    );

    // The chart refuses replicas without leader election, and unknown values.
    let out = Cmd::helm_offline()
        .args(["template", RELEASE])
        .arg(charts_dir().join("switchyard"))
        .args(["--namespace", SYSTEM_NAMESPACE])
        .args(["--kube-version", KUBE_VERSION])
        .args([
            "--set",
            "replicaCount=2",
            "--set",
            "leaderElection.enabled=false",
        ])
        .fails()
        .await?;
    ensure!(
        out.stderr.contains("leaderElection.enabled=true"),
        "unexpected error for replicaCount=2 without leader election: {}",
        out.stderr
    );
    Cmd::helm_offline()
        .args(["template", RELEASE])
        .arg(charts_dir().join("switchyard"))
        .args(["--namespace", SYSTEM_NAMESPACE])
        .args(["--kube-version", KUBE_VERSION])
        .args(["--set", "noSuchValue=1"])
        .fails()
        .await
        .context("an unknown value must be rejected by values.schema.json")?;

    // The CRD chart renders exactly the two CRDs.
    let crds = template("switchyard-crds", &[]).await?;
    let names: BTreeSet<String> = crds
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap_or("?"),
                d["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect();
    ensure!(
        names
            == BTreeSet::from([
                "CustomResourceDefinition/managers.switchyard.dev".to_string(),
                "CustomResourceDefinition/routers.switchyard.dev".to_string(),
            ]),
        "CRD chart renders {names:?}"
    );
    Ok(())
}

#[tokio::test]
async fn operator_chart_renders_namespaced_rbac_with_watch_namespaces() -> Result<()> {
    let watched = ["team-a", "team-b"];
    let list = format!("watchNamespaces={{{}}}", watched.join(","));
    let tls = ["--set", "meshTLS.enabled=true"];
    let cluster_wide = template("switchyard", &tls).await?;
    let docs = template("switchyard", &[tls[0], tls[1], "--set", &list]).await?;
    let rules_of = |d: &Value| d["rules"].as_array().cloned().unwrap_or_default();
    let is_token_review = |r: &Value| strings(&r["resources"]) == ["tokenreviews"];

    // Each watched namespace gets exactly the cluster-wide install's rules on namespaced
    // resources, bound to the operator's ServiceAccount.
    let expected: Vec<Value> = rules_of(find(&cluster_wide, "ClusterRole", "switchyard")?)
        .into_iter()
        .filter(|r| !is_token_review(r))
        .collect();
    ensure!(
        !expected.is_empty(),
        "the cluster-wide ClusterRole has no rules"
    );
    for ns in watched {
        let in_ns = |kind: &str| {
            docs.iter()
                .find(|d| {
                    d["kind"] == kind
                        && d["metadata"]["name"] == "switchyard"
                        && d["metadata"]["namespace"] == ns
                })
                .with_context(|| format!("no {kind} switchyard in namespace {ns}"))
        };
        let role = in_ns("Role")?;
        ensure!(
            rules_of(role) == expected,
            "Role in {ns} differs from the ClusterRole's namespaced rules: {}",
            role["rules"]
        );
        let binding = in_ns("RoleBinding")?;
        ensure!(
            binding["roleRef"]["kind"] == "Role" && binding["roleRef"]["name"] == "switchyard",
            "RoleBinding in {ns} roleRef: {}",
            binding["roleRef"]
        );
        ensure!(
            binding["subjects"][0]["kind"] == "ServiceAccount"
                && binding["subjects"][0]["name"] == "switchyard"
                && binding["subjects"][0]["namespace"] == SYSTEM_NAMESPACE,
            "RoleBinding in {ns} subjects: {}",
            binding["subjects"]
        );
    }
    let roles: BTreeSet<String> = docs
        .iter()
        .filter(|d| d["kind"] == "Role" && d["metadata"]["name"] == "switchyard")
        .filter_map(|d| d["metadata"]["namespace"].as_str().map(str::to_string))
        .collect();
    ensure!(
        roles == watched.iter().map(|n| n.to_string()).collect(),
        "Roles switchyard in {roles:?}, not exactly {watched:?}"
    );

    // Cluster-wide, only TokenReview create: no write (nor read) of anything else.
    let cluster_roles: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "ClusterRole").collect();
    ensure!(
        cluster_roles.len() == 1,
        "{} ClusterRoles rendered",
        cluster_roles.len()
    );
    let rules = rules_of(cluster_roles[0]);
    ensure!(
        rules.len() == 1
            && strings(&rules[0]["apiGroups"]) == ["authentication.k8s.io"]
            && is_token_review(&rules[0])
            && strings(&rules[0]["verbs"]) == ["create"],
        "the ClusterRole of a namespaced install grants more than TokenReview create: {rules:?}"
    );
    let crb = find(&docs, "ClusterRoleBinding", "switchyard")?;
    ensure!(
        crb["roleRef"]["name"] == "switchyard",
        "ClusterRoleBinding roleRef: {}",
        crb["roleRef"]
    );
    // The leader-election and CA Secret Roles stay in the release namespace.
    for name in ["switchyard-leader-election", "switchyard-identity"] {
        ensure!(
            find(&docs, "Role", name)?["metadata"]["namespace"] == SYSTEM_NAMESPACE,
            "Role {name} is not in {SYSTEM_NAMESPACE}"
        );
    }
    let deploy = find(&docs, "Deployment", "switchyard")?;
    let args = strings(&deploy["spec"]["template"]["spec"]["containers"][0]["args"]);
    ensure!(
        args.iter().any(|a| a == "--watch-namespaces=team-a,team-b"),
        "operator args {args:?} lack --watch-namespaces=team-a,team-b"
    );
    let all = strings(
        &find(&cluster_wide, "Deployment", "switchyard")?["spec"]["template"]["spec"]["containers"]
            [0]["args"],
    );
    ensure!(
        !all.iter().any(|a| a.starts_with("--watch-namespaces")),
        "a cluster-wide install passes {all:?}"
    );

    // Without mesh TLS nothing cluster-scoped is needed: no ClusterRole, no binding.
    let plain = template(
        "switchyard",
        &["--set", "meshTLS.enabled=false", "--set", &list],
    )
    .await?;
    let kinds: Vec<&str> = plain.iter().filter_map(|d| d["kind"].as_str()).collect();
    ensure!(
        !kinds.iter().any(|k| k.starts_with("ClusterRole")),
        "a namespaced install without mesh TLS renders {kinds:?}"
    );
    ensure!(
        plain
            .iter()
            .filter(|d| d["kind"] == "Role" && d["metadata"]["name"] == "switchyard")
            .count()
            == watched.len(),
        "a namespaced install without mesh TLS lacks its Roles"
    );

    // A namespace name the API server would refuse is refused by the schema.
    let out = Cmd::helm_offline()
        .args(["template", RELEASE])
        .arg(charts_dir().join("switchyard"))
        .args(["--namespace", SYSTEM_NAMESPACE])
        .args(["--kube-version", KUBE_VERSION])
        .args(["--set", "watchNamespaces={Team_A}"])
        .fails()
        .await?;
    ensure!(
        out.stderr.contains("watchNamespaces"),
        "unexpected error for watchNamespaces={{Team_A}}: {}",
        out.stderr
    );
    Ok(())
}

#[tokio::test]
async fn monitoring_objects_render_only_when_enabled() -> Result<()> {
    let kinds = ["ServiceMonitor", "PodMonitor", "PrometheusRule"];
    let docs = template("switchyard", &[]).await?;
    for kind in kinds {
        ensure!(
            !docs.iter().any(|d| d["kind"] == kind),
            "{kind} rendered by default (needs the Prometheus Operator's CRDs)"
        );
    }
    let docs = template(
        "switchyard",
        &[
            "--set",
            "monitoring.serviceMonitor.enabled=true",
            "--set",
            "monitoring.podMonitors.enabled=true",
            "--set",
            "monitoring.rules.enabled=true",
            "--set",
            "monitoring.labels.release=prometheus",
            "--set",
            "monitoring.podMonitors.namespaces={shop}",
        ],
    )
    .await?;
    for d in docs
        .iter()
        .filter(|d| kinds.iter().any(|k| d["kind"] == *k))
    {
        ensure!(
            d["metadata"]["labels"]["release"] == "prometheus",
            "{} without monitoring.labels: {d}",
            d["kind"]
        );
        ensure!(d["metadata"]["namespace"] == SYSTEM_NAMESPACE, "{d}");
    }
    // The operator's metrics Service, by its selector labels and port name.
    let sm = find(&docs, "ServiceMonitor", "switchyard")?;
    let svc = find(&docs, "Service", "switchyard-metrics")?;
    for (k, v) in svc["spec"]["selector"]
        .as_object()
        .context("metrics Service selector")?
    {
        ensure!(
            svc["metadata"]["labels"][k] == *v && sm["spec"]["selector"]["matchLabels"][k] == *v,
            "the ServiceMonitor does not select the metrics Service by {k}: {sm}"
        );
    }
    ensure!(
        svc["spec"]["ports"][0]["name"] == "metrics"
            && sm["spec"]["endpoints"][0]["port"] == "metrics",
        "{sm}"
    );
    // The durable backlog gauge's `namespace` (the Manager's) is kept, not renamed under the pod's.
    ensure!(sm["spec"]["endpoints"][0]["honorLabels"] == true, "{sm}");
    ensure!(
        strings(&sm["spec"]["namespaceSelector"]["matchNames"]) == [SYSTEM_NAMESPACE],
        "{sm}"
    );
    // The sidecars: the pods the operator renders, by their name label, on the admin port.
    for role in ["router", "manager"] {
        let pm = find(&docs, "PodMonitor", &format!("switchyard-{role}s"))?;
        ensure!(
            pm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
                == format!("switchyard-{role}"),
            "{pm}"
        );
        ensure!(
            pm["spec"]["podMetricsEndpoints"][0]["port"] == "admin"
                && pm["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics",
            "{pm}"
        );
        ensure!(
            strings(&pm["spec"]["namespaceSelector"]["matchNames"]) == ["shop"],
            "{pm}"
        );
    }
    let rule = find(&docs, "PrometheusRule", "switchyard")?;
    let groups: Vec<&str> = rule["spec"]["groups"]
        .as_array()
        .context("spec.groups")?
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    ensure!(
        groups == ["switchyard.rules", "switchyard.alerts"],
        "{groups:?}"
    );
    // Without the metrics Service there is nothing to monitor: refused, naming both values.
    let out = Cmd::helm_offline()
        .args(["template", RELEASE])
        .arg(charts_dir().join("switchyard"))
        .args(["--set", "monitoring.serviceMonitor.enabled=true"])
        .args(["--set", "metrics.service.enabled=false"])
        .fails()
        .await?;
    ensure!(
        out.stderr.contains("metrics.service.enabled"),
        "{}",
        out.combined()
    );
    // Every PodMonitor namespace selector: any namespace by default.
    let docs = template(
        "switchyard",
        &["--set", "monitoring.podMonitors.enabled=true"],
    )
    .await?;
    let pm = find(&docs, "PodMonitor", "switchyard-managers")?;
    ensure!(pm["spec"]["namespaceSelector"]["any"] == true, "{pm}");
    Ok(())
}

#[tokio::test]
async fn charts_lint_strict() -> Result<()> {
    for chart in ["switchyard-crds", "switchyard"] {
        let out = Cmd::helm_offline()
            .args(["lint", "--strict"])
            .arg(charts_dir().join(chart))
            .args(["--kube-version", KUBE_VERSION])
            .ok()
            .await
            .with_context(|| format!("helm lint --strict {chart}"))?;
        ensure!(
            out.stdout.contains("0 chart(s) failed"),
            "helm lint {chart}: {}",
            out.combined()
        );
        ensure!(
            !out.stdout.contains("[WARNING]") && !out.stdout.contains("[ERROR]"),
            "helm lint {chart} reports findings:\n{}",
            out.stdout
        );
    }
    Ok(())
}

#[tokio::test]
async fn operator_token_has_no_more_rights_than_needed() -> Result<()> {
    let c = cluster().await?;
    let kc = c.operator_kubeconfig().await?;
    let can_i = |args: &[&str]| {
        Cmd::kubectl(kc)
            .args(["auth", "can-i"])
            .args(args.iter().copied())
            .output()
    };
    let mut wrong = Vec::new();
    for (args, want) in [
        (
            &["list", "routers.switchyard.dev", "--all-namespaces"][..],
            "yes",
        ),
        (
            &["watch", "managers.switchyard.dev", "--all-namespaces"][..],
            "yes",
        ),
        (
            &[
                "patch",
                "routers.switchyard.dev",
                "--subresource=status",
                "-n",
                "default",
            ][..],
            "yes",
        ),
        (&["create", "deployments.apps", "-n", "default"][..], "yes"),
        (&["create", "configmaps", "-n", "default"][..], "yes"),
        (
            &["create", "events.events.k8s.io", "-n", "default"][..],
            "yes",
        ),
        (
            &[
                "update",
                "leases.coordination.k8s.io",
                "-n",
                SYSTEM_NAMESPACE,
            ][..],
            "yes",
        ),
        (&["watch", "pods", "--all-namespaces"][..], "yes"),
        // Mesh TLS (on by default) reads a certifying sidecar's pod by name; it can list and watch
        // pods anyway.
        (&["get", "pods", "-n", "default"][..], "yes"),
        (&["create", "tokenreviews.authentication.k8s.io"][..], "yes"),
        (
            &["get", "secrets/switchyard-ca", "-n", SYSTEM_NAMESPACE][..],
            "yes",
        ),
        (&["delete", "pods", "-n", "default"][..], "no"),
        (&["list", "secrets", "--all-namespaces"][..], "no"),
        (&["get", "secrets", "-n", SYSTEM_NAMESPACE][..], "no"),
        (&["delete", "namespaces"][..], "no"),
        (
            &["create", "routers.switchyard.dev", "-n", "default"][..],
            "no",
        ),
        (
            &["update", "leases.coordination.k8s.io", "-n", "default"][..],
            "no",
        ),
        (&["create", "pods", "-n", "default"][..], "no"),
        (&["create", "clusterrolebindings"][..], "no"),
    ] {
        let out = can_i(args).await?;
        if out.stdout.trim() != want {
            wrong.push(format!(
                "can-i {} => {:?} (want {want}) {}",
                args.join(" "),
                out.stdout.trim(),
                out.stderr.trim()
            ));
        }
    }
    ensure!(
        wrong.is_empty(),
        "operator token permissions:\n{}",
        wrong.join("\n")
    );

    // Real requests, not just the review API.
    let out = Cmd::kubectl(kc)
        .args(["get", "secrets", "--all-namespaces"])
        .fails()
        .await?;
    ensure!(
        out.stderr.to_lowercase().contains("forbidden"),
        "listing secrets failed, but not as forbidden: {}",
        out.stderr
    );
    let out = Cmd::kubectl(kc)
        .args(["delete", "namespace", "default", "--dry-run=server"])
        .fails()
        .await?;
    ensure!(
        out.stderr.to_lowercase().contains("forbidden"),
        "deleting a namespace failed, but not as forbidden: {}",
        out.stderr
    );
    Ok(())
}

#[tokio::test]
async fn api_server_rejects_invalid_objects_naming_the_field() -> Result<()> {
    let c = cluster().await?;
    let ns = TestNamespace::create(c, "reject").await?;
    let cases = [
        (
            "scaling min > max",
            fixtures::manager(
                "bad-minmax",
                "edge",
                "[noop]",
                "  scaling:\n    minReplicas: 5\n    maxReplicas: 2\n",
            ),
            vec!["spec.scaling.minReplicas", "must not exceed maxReplicas"],
        ),
        (
            "event-type name",
            fixtures::manager("bad-event", "edge", "[Orders.Create]", ""),
            vec!["spec.events[0]", "should match"],
        ),
        (
            "duplicate event type",
            fixtures::manager("bad-dup", "edge", "[noop, noop]", ""),
            vec!["spec.events[1]", "Duplicate value"],
        ),
        (
            "http port out of range",
            fixtures::router("bad-port").replace("port: 8080", "port: 70000"),
            vec!["spec.listeners.http.port", "less than or equal to 65535"],
        ),
        (
            "scaling enabled without targets",
            fixtures::manager(
                "bad-targets",
                "edge",
                "[noop, echo]",
                "  scaling:\n    enabled: true\n",
            ),
            vec!["spec.scaling.targets", "missing:"],
        ),
    ];
    let mut failures = Vec::new();
    for (what, yaml, wants) in &cases {
        let out = c
            .kubectl()
            .args(["apply", "-n", &ns.name, "-f", "-"])
            .stdin(yaml.clone())
            .output()
            .await?;
        if out.success() {
            failures.push(format!("{what}: accepted:\n{}", out.stdout));
            continue;
        }
        let missing: Vec<_> = wants.iter().filter(|w| !out.stderr.contains(**w)).collect();
        if !missing.is_empty() {
            failures.push(format!(
                "{what}: error lacks {missing:?}:\n{}",
                out.stderr.trim()
            ));
        }
    }
    let left = c
        .kubectl()
        .args(["get", "routers,managers", "-n", &ns.name, "-o", "name"])
        .ok()
        .await?;
    if !left.stdout.trim().is_empty() {
        failures.push(format!("objects were created: {}", left.stdout));
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("\n\n"));
    }
    Ok(())
}

#[tokio::test]
async fn kubectl_shows_printer_columns_and_explains_fields() -> Result<()> {
    let c = cluster().await?;
    let ns = TestNamespace::create(c, "columns").await?;
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f"])
        .arg(fixtures::quickstart())
        .ok()
        .await?;

    let out = c
        .kubectl()
        .args(["get", "routers,managers", "-n", &ns.name])
        .ok()
        .await?;
    let headers: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("NAME"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    ensure!(
        headers.len() == 2,
        "expected two tables (routers, managers):\n{}",
        out.stdout
    );
    ensure!(
        headers[0] == ["NAME", "READY", "ROUTES", "AGE"],
        "router columns {:?}:\n{}",
        headers[0],
        out.stdout
    );
    ensure!(
        headers[1] == ["NAME", "READY", "EVENTS", "OBSERVES", "REPLICAS", "AGE"],
        "manager columns {:?}:\n{}",
        headers[1],
        out.stdout
    );
    ensure!(
        out.stdout.contains("router.switchyard.dev/edge")
            && out.stdout.contains("manager.switchyard.dev/handlers"),
        "objects missing from:\n{}",
        out.stdout
    );
    // The router's REPLICAS column has priority 1: shown with -o wide.
    let wide = c
        .kubectl()
        .args(["get", "routers", "-n", &ns.name, "-o", "wide"])
        .ok()
        .await?;
    let header: Vec<&str> = wide
        .stdout
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        header == ["NAME", "READY", "ROUTES", "REPLICAS", "AGE"],
        "router wide columns {header:?}"
    );
    // Short names and the category.
    let out = c
        .kubectl()
        .args(["get", "rtr,mgr", "-n", &ns.name, "-o", "name"])
        .ok()
        .await?;
    ensure!(
        out.stdout.contains("router.switchyard.dev/edge")
            && out.stdout.contains("manager.switchyard.dev/handlers"),
        "short names: {}",
        out.stdout
    );
    let out = c
        .kubectl()
        .args(["get", "switchyard", "-n", &ns.name, "-o", "name"])
        .ok()
        .await?;
    ensure!(
        out.stdout.contains("router.switchyard.dev/edge")
            && out.stdout.contains("manager.switchyard.dev/handlers"),
        "category switchyard: {}",
        out.stdout
    );

    let out = c
        .kubectl()
        .args(["explain", "manager.spec.workers"])
        .ok()
        .await?;
    for want in [
        "maxInFlight",
        "Events delivered to the app at once",
        "queueCapacity",
        "retries",
    ] {
        ensure!(
            out.stdout.contains(want),
            "`kubectl explain manager.spec.workers` lacks {want:?}:\n{}",
            out.stdout
        );
    }
    let out = c
        .kubectl()
        .args(["explain", "router.spec.listeners.http.port"])
        .ok()
        .await?;
    ensure!(
        out.stdout.contains("TCP port, 1 to 65535"),
        "`kubectl explain router.spec.listeners.http.port`:\n{}",
        out.stdout
    );
    Ok(())
}

/// The nats-server version the tests run (`e2e/cluster/versions.env`), without its `v`.
fn tested_nats_version() -> Result<String> {
    let env =
        std::fs::read_to_string(switchyard_e2e::repo_root().join("e2e/cluster/versions.env"))?;
    env.lines()
        .find_map(|l| l.strip_prefix("NATS_SERVER_VERSION="))
        .map(|v| v.trim().trim_start_matches('v').to_owned())
        .context("no NATS_SERVER_VERSION in versions.env")
}

fn operator_args(docs: &[Value]) -> Result<Vec<String>> {
    Ok(strings(
        &find(docs, "Deployment", RELEASE)?["spec"]["template"]["spec"]["containers"][0]["args"],
    ))
}

#[tokio::test]
async fn operator_chart_deploys_a_jetstream_cluster_or_points_at_one() -> Result<()> {
    // Off by default: no NATS objects, no URL for the operator.
    let plain = template("switchyard", &[]).await?;
    ensure!(
        !plain
            .iter()
            .any(|d| d["metadata"]["name"] == "switchyard-nats"),
        "NATS objects without jetstream.enabled"
    );
    ensure!(
        !operator_args(&plain)?
            .iter()
            .any(|a| a.starts_with("--jetstream")),
        "a JetStream flag without JetStream"
    );

    // The chart's own 3-node cluster.
    let docs = template("switchyard", &["--set", "jetstream.enabled=true"]).await?;
    let sts = find(&docs, "StatefulSet", "switchyard-nats")?;
    let spec = &sts["spec"];
    ensure!(spec["replicas"] == 3 && spec["serviceName"] == "switchyard-nats");
    ensure!(spec["podManagementPolicy"] == "Parallel");
    let pod = &spec["template"]["spec"];
    let image = pod["containers"][0]["image"].as_str().unwrap_or_default();
    ensure!(
        image == format!("nats:{}-alpine", tested_nats_version()?),
        "the image {image} is not the nats-server version the tests run"
    );
    ensure!(pod["securityContext"]["runAsNonRoot"] == true);
    // The Go collector's pace and its bound (the duplicate windows' ids are most of the heap).
    let env = &pod["containers"][0]["env"];
    let var = |name: &str| {
        env.as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == name))
            .map(|v| v["value"].clone())
    };
    ensure!(
        var("GOGC") == Some("800".into()) && var("GOMEMLIMIT") == Some("900MiB".into()),
        "nats-server env: {env}"
    );
    ensure!(
        spec["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "10Gi",
        "claims: {}",
        spec["volumeClaimTemplates"]
    );
    let svc = find(&docs, "Service", "switchyard-nats")?;
    ensure!(svc["spec"]["clusterIP"] == "None" && svc["spec"]["publishNotReadyAddresses"] == true);
    let pdb = find(&docs, "PodDisruptionBudget", "switchyard-nats")?;
    ensure!(pdb["spec"]["maxUnavailable"] == 1, "pdb: {pdb}");
    // Its NetworkPolicy: the client port from the mesh's sidecars and the operator only, the cluster
    // port from the other servers only.
    let policy = find(&docs, "NetworkPolicy", "switchyard-nats")?;
    let pol = &policy["spec"];
    ensure!(
        pol["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "switchyard-nats"
            && strings(&pol["policyTypes"]) == ["Ingress"],
        "NATS NetworkPolicy selects: {policy}"
    );
    let rule = |port: &str| {
        pol["ingress"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["ports"][0]["port"] == port))
            .with_context(|| format!("no ingress rule for port {port}: {policy}"))
    };
    let client = &rule("client")?["from"];
    ensure!(
        client.as_array().map(Vec::len) == Some(2)
            && client[0]["namespaceSelector"].is_object()
            && strings(&client[0]["podSelector"]["matchExpressions"][0]["values"])
                == ["switchyard-router", "switchyard-manager"]
            && client[1]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "switchyard"
            && client[1]["namespaceSelector"].is_null(),
        "NATS client port is open to more than the sidecars and the operator: {client}"
    );
    let routes = &rule("cluster")?["from"];
    ensure!(
        routes.as_array().map(Vec::len) == Some(1)
            && routes[0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
                == "switchyard-nats"
            && routes[0]["namespaceSelector"].is_null(),
        "NATS cluster port is open to more than the other servers: {routes}"
    );
    // The monitoring port (`/jsz`, `/connz` name every stream and client) from no pod by default;
    // the kubelet's probes come from the node, which a NetworkPolicy always admits.
    ensure!(
        rule("monitor").is_err() && pol["ingress"].as_array().map(Vec::len) == Some(2),
        "NATS monitoring port open without metricsFrom: {policy}"
    );
    let scraped = template(
        "switchyard",
        &[
            "--set",
            "jetstream.enabled=true",
            "--set-json",
            r#"networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]"#,
        ],
    )
    .await?;
    let scraped = &find(&scraped, "NetworkPolicy", "switchyard-nats")?["spec"]["ingress"];
    let monitor = scraped
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["ports"][0]["port"] == "monitor"))
        .with_context(|| format!("no monitor rule with metricsFrom: {scraped}"))?;
    ensure!(
        monitor["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            == "monitoring",
        "NATS monitoring port not from metricsFrom: {monitor}"
    );
    let conf = find(&docs, "ConfigMap", "switchyard-nats")?["data"]["nats.conf"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let routes: Vec<String> = (0..3)
        .map(|i| format!("nats://switchyard-nats-{i}.switchyard-nats.{SYSTEM_NAMESPACE}.svc:6222"))
        .collect();
    for r in &routes {
        ensure!(conf.contains(r.as_str()), "no route {r} in:\n{conf}");
    }
    // An ack is on disk (Jepsen, NATS 2.12.1), and the largest durable event fits.
    ensure!(
        conf.contains("sync_interval: always") && conf.contains("max_payload: 16842752"),
        "nats.conf without sync_interval always or a 16 MiB max_payload:\n{conf}"
    );
    // Behind the mesh's identity: mutual TLS with the mesh CA, each certificate mapped to the NATS
    // user the operator writes into the access Secret, which a reloader beside the server applies.
    ensure!(
        conf.contains("verify_and_map: true")
            && conf.contains("ca_file: /etc/nats-access/ca.crt")
            && conf.contains("include ../nats-access/access.conf"),
        "nats.conf without mutual TLS and the operator's users:\n{conf}"
    );
    // The routes too, taking only the servers' own identity (operator/tests/nats_routes.rs runs
    // this configuration with three real servers).
    let routes_block = conf.split("cluster {").nth(1).unwrap_or_default();
    ensure!(
        routes_block.contains("verify_and_map: true")
            && routes_block.contains(&format!(
                "user: \"spiffe://cluster.local/ns/{SYSTEM_NAMESPACE}/jetstream/nats\""
            )),
        "cluster routes without mutual TLS for the servers' identity:\n{conf}"
    );
    let pod = &sts["spec"]["template"]["spec"];
    ensure!(pod["shareProcessNamespace"] == true, "pod: {pod}");
    let reloader = pod["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "reloader"))
        .context("no reloader beside nats-server")?;
    ensure!(
        reloader["args"][0] == "nats-reload"
            && reloader["image"]
                .as_str()
                .is_some_and(|i| i.contains("switchyard-sidecar")),
        "reloader: {reloader}"
    );
    ensure!(
        pod["volumes"].as_array().is_some_and(|vs| vs
            .iter()
            .any(|v| v["secret"]["secretName"] == "switchyard-nats-access")),
        "no access Secret volume: {pod}"
    );
    let urls: Vec<String> = (0..3)
        .map(|i| format!("tls://switchyard-nats-{i}.switchyard-nats.{SYSTEM_NAMESPACE}.svc:4222"))
        .collect();
    let args = operator_args(&docs)?;
    ensure!(
        args.contains(&format!("--jetstream-url={}", urls.join(",")))
            && args.contains(&"--jetstream-replicas=3".to_owned())
            && args.contains(&"--jetstream-access-secret=switchyard-nats-access".to_owned())
            && args.contains(&format!(
                "--jetstream-server-names={}",
                (0..3)
                    .map(|i| format!("switchyard-nats-{i}.switchyard-nats.{SYSTEM_NAMESPACE}.svc"))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
        "operator args: {args:?}"
    );
    // Where no cluster DNS resolves the servers' names, one pinned address in front of them.
    let pinned = template(
        "switchyard",
        &[
            "--set",
            "jetstream.enabled=true,jetstream.clusterIP=10.0.0.11",
        ],
    )
    .await?;
    let client_svc = find(&pinned, "Service", "switchyard-nats-client")?;
    ensure!(
        client_svc["spec"]["clusterIP"] == "10.0.0.11",
        "client Service: {client_svc}"
    );
    let args = operator_args(&pinned)?;
    ensure!(
        args.contains(&"--jetstream-url=tls://10.0.0.11:4222".to_owned()),
        "operator args: {args:?}"
    );
    // The leader may write that one Secret (and create it once).
    let role = find(&docs, "Role", "switchyard-identity")?;
    ensure!(
        role["rules"]
            .as_array()
            .is_some_and(|rs| rs.iter().any(|r| {
                r["resourceNames"][0] == "switchyard-nats-access" && r["verbs"][1] == "patch"
            })),
        "identity Role: {role}"
    );
    // Without persistence, an emptyDir store.
    let docs = template(
        "switchyard",
        &[
            "--set",
            "jetstream.enabled=true,jetstream.persistence.enabled=false",
        ],
    )
    .await?;
    let spec = &find(&docs, "StatefulSet", "switchyard-nats")?["spec"];
    ensure!(spec["volumeClaimTemplates"].is_null());
    let volumes = spec["template"]["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(
        volumes
            .iter()
            .any(|v| v["name"] == "data" && v["emptyDir"].is_object()),
        "volumes: {volumes:?}"
    );
    // NetworkPolicies off: none for the servers either.
    let docs = template(
        "switchyard",
        &[
            "--set",
            "jetstream.enabled=true,networkPolicy.enabled=false",
        ],
    )
    .await?;
    ensure!(
        !docs.iter().any(|d| d["kind"] == "NetworkPolicy"),
        "a NetworkPolicy with networkPolicy.enabled=false"
    );

    // An existing JetStream: only the URL. A plaintext one inside a mutual-TLS mesh only when
    // accepted knowingly (contract change: it was taken silently).
    let docs = template(
        "switchyard",
        &[
            "--set",
            "jetstream.url=nats://nats.nats.svc:4222,jetstream.insecure=true",
        ],
    )
    .await?;
    ensure!(!docs.iter().any(|d| d["kind"] == "StatefulSet"));
    let args = operator_args(&docs)?;
    ensure!(
        args.contains(&"--jetstream-url=nats://nats.nats.svc:4222".to_owned())
            && args.contains(&"--jetstream-replicas=1".to_owned())
            && args.contains(&"--jetstream-insecure".to_owned())
            && !args
                .iter()
                .any(|a| a.starts_with("--jetstream-access-secret")),
        "operator args: {args:?}"
    );
    let args = operator_args(
        &template(
            "switchyard",
            &["--set", "jetstream.url=tls://nats.nats.svc:4222"],
        )
        .await?,
    )?;
    ensure!(
        args.contains(&"--jetstream-url=tls://nats.nats.svc:4222".to_owned())
            && !args.contains(&"--jetstream-insecure".to_owned()),
        "operator args: {args:?}"
    );
    // Both, or a URL that is not NATS: refused, naming the problem.
    for (set, says) in [
        (
            "jetstream.enabled=true,jetstream.url=nats://x:4222",
            "set one of them",
        ),
        ("jetstream.url=http://x:4222", "/jetstream/url"),
        ("jetstream.url=nats://x:4222", "jetstream.insecure=true"),
        ("jetstream.gc.memoryLimit=lots", "/jetstream/gc/memoryLimit"),
        ("jetstream.gc.percent=5", "/jetstream/gc/percent"),
        ("jetstream.maxPayload=1048576", "/jetstream/maxPayload"),
        (
            "jetstream.syncInterval=sometimes",
            "/jetstream/syncInterval",
        ),
    ] {
        let out = Cmd::helm_offline()
            .args(["template", RELEASE])
            .arg(charts_dir().join("switchyard"))
            .args(["--set", set])
            .output()
            .await?;
        ensure!(
            !out.success() && out.stderr.contains(says),
            "{set}: {}",
            out.stderr
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_release_with_jetstream_installs_its_nats_cluster() -> Result<()> {
    let c = cluster().await?;
    let client = c.client().await?;
    let ns = TestNamespace::create(c, "natschart").await?;
    let release = "sy-nats";
    c.helm()
        .args(["upgrade", "--install", release])
        .arg(charts_dir().join("switchyard"))
        .args(["--namespace", &ns.name])
        // No operator pods and no store claims: kwok nodes run no containers and the test cluster
        // has no volume provisioner; what is checked is what the API server takes and schedules.
        .args([
            "--set",
            "replicaCount=0,meshTLS.enabled=false,jetstream.enabled=true,jetstream.persistence.enabled=false",
        ])
        .args(["--wait=false"])
        .timeout(std::time::Duration::from_secs(180))
        .ok()
        .await
        .context("helm install of the operator chart with jetstream.enabled")?;
    let result = async {
        let name = "sy-nats-switchyard-nats";
        let pods = Api::<Pod>::namespaced(client.clone(), &ns.name);
        switchyard_e2e::eventually(
            "the 3 NATS pods scheduled on kwok nodes",
            switchyard_e2e::timeout(),
            || async {
                let list = pods
                    .list(&ListParams::default().labels("app.kubernetes.io/name=switchyard-nats"))
                    .await?;
                let mut names: Vec<String> = list
                    .items
                    .iter()
                    .filter(|p| {
                        p.spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_deref())
                            .is_some_and(|n| n.starts_with("kwok-node-"))
                    })
                    .map(|p| p.metadata.name.clone().unwrap_or_default())
                    .collect();
                names.sort();
                let want: Vec<String> = (0..3).map(|i| format!("{name}-{i}")).collect();
                ensure!(names == want, "scheduled: {names:?}");
                Ok(())
            },
        )
        .await?;
        let svc = Api::<Service>::namespaced(client.clone(), &ns.name)
            .get(name)
            .await?;
        ensure!(svc.spec.and_then(|s| s.cluster_ip).as_deref() == Some("None"));
        Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(
            client.clone(),
            &ns.name,
        )
        .get(name)
        .await
        .context("the NATS PodDisruptionBudget")?;
        anyhow::Ok(())
    }
    .await;
    let uninstalled = c.helm_uninstall(release, &ns.name).await;
    result?;
    uninstalled?;
    Ok(())
}

/// `# expect api-server: accepts|refuses` of a refused fixture; every example is accepted.
fn api_server_expectation(text: &str) -> Option<bool> {
    text.lines()
        .find_map(|l| l.strip_prefix("# expect api-server: "))
        .map(|v| v.trim() == "accepts")
}

#[tokio::test]
async fn check_and_the_api_server_agree_on_every_example_and_refused_fixture() -> Result<()> {
    let c = cluster().await?;
    let ns = TestNamespace::create(c, "agree").await?;
    let cli = switchyard_e2e::sidecar::cli_binary().await?;
    let root = switchyard_e2e::repo_root().join("examples");
    let mut files = Vec::new();
    for dir in [
        root.clone(),
        root.join("cluster"),
        root.join("accepted"),
        root.join("refused"),
    ] {
        for e in std::fs::read_dir(&dir).with_context(|| dir.display().to_string())? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "yaml") {
                files.push(p);
            }
        }
    }
    files.sort();
    ensure!(files.len() >= 10, "examples and fixtures: {files:?}");
    let mut failures = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        let refused_fixture = file.parent().is_some_and(|d| d.ends_with("refused"));
        let api_accepts_expected = if refused_fixture {
            api_server_expectation(&text)
                .with_context(|| format!("{}: no `# expect api-server:` line", file.display()))?
        } else {
            true
        };
        let api = c
            .kubectl()
            .args(["apply", "--dry-run=server", "-n", &ns.name, "-f"])
            .arg(file)
            .output()
            .await?;
        let check = Cmd::new(&cli)
            .arg("check")
            .arg("-f")
            .arg(file)
            .output()
            .await?;
        // The API server's verdict is the one the fixture states; `check` refuses whatever the API
        // server refuses, and a fixture at all (the rest are the operator's or a sidecar's rules).
        if api.success() != api_accepts_expected {
            failures.push(format!(
                "{}: the API server {} it, the fixture says it {}:\n{}",
                file.display(),
                if api.success() { "accepted" } else { "refused" },
                if api_accepts_expected {
                    "accepts"
                } else {
                    "refuses"
                },
                api.combined().trim()
            ));
        }
        // Where the API server refuses, it and `check` name the same field.
        if refused_fixture && !api.success() {
            let field = text
                .lines()
                .find_map(|l| l.strip_prefix("# expect field: "))
                .map(str::trim)
                .with_context(|| format!("{}: no `# expect field:` line", file.display()))?;
            for (who, out) in [
                ("the API server", api.combined()),
                ("check", check.combined()),
            ] {
                if !out.contains(field) {
                    failures.push(format!(
                        "{}: {who} does not name {field}:\n{}",
                        file.display(),
                        out.trim()
                    ));
                }
            }
        }
        if check.success() == refused_fixture || (!api.success() && check.success()) {
            failures.push(format!(
                "{}: check {} it, the API server {} it:\n{}",
                file.display(),
                if check.success() {
                    "accepted"
                } else {
                    "refused"
                },
                if api.success() { "accepted" } else { "refused" },
                check.combined().trim()
            ));
        }
    }
    let left = c
        .kubectl()
        .args(["get", "routers,managers", "-n", &ns.name, "-o", "name"])
        .ok()
        .await?;
    if !left.stdout.trim().is_empty() {
        failures.push(format!("a dry run created objects: {}", left.stdout));
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("\n\n"));
    }
    Ok(())
}

/// `global.imageRegistry` moves every image the release runs to a user's registry (the operator, the
/// sidecar the operator injects, NATS and its reload sidecar), and a digest pins an image whatever
/// its tag; a digest or registry that is not one is refused, naming the value.
#[tokio::test]
async fn image_registry_and_digests_point_every_image_at_a_users_registry() -> Result<()> {
    let op = format!("sha256:{}", "a".repeat(64));
    let sc = format!("sha256:{}", "b".repeat(64));
    let nats = format!("sha256:{}", "c".repeat(64));
    let set = format!(
        "global.imageRegistry=registry.example.com:5000/mirror,image.digest={op},\
         sidecar.image.digest={sc},jetstream.enabled=true,jetstream.image.digest={nats}"
    );
    let docs = template("switchyard", &["--set", &set]).await?;
    let deployment = find(&docs, "Deployment", RELEASE)?;
    let image = deployment["spec"]["template"]["spec"]["containers"][0]["image"].clone();
    ensure!(
        image
            == format!("registry.example.com:5000/mirror/switchyard-dev/switchyard-operator@{op}")
                .as_str(),
        "operator image {image}"
    );
    let sidecar =
        format!("registry.example.com:5000/mirror/switchyard-dev/switchyard-sidecar@{sc}");
    let args = operator_args(&docs)?;
    ensure!(
        args.contains(&format!("--sidecar-image={sidecar}")),
        "operator args: {args:?}"
    );
    let nats_set = find(&docs, "StatefulSet", "switchyard-nats")?;
    let images: Vec<String> = nats_set["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["image"].as_str().map(str::to_string))
        .collect();
    ensure!(
        images
            == [
                format!("registry.example.com:5000/mirror/nats@{nats}"),
                sidecar
            ],
        "NATS pod images {images:?}"
    );

    // Defaults: the public registries, by tag.
    let docs = template("switchyard", &[]).await?;
    let image =
        find(&docs, "Deployment", RELEASE)?["spec"]["template"]["spec"]["containers"][0]["image"]
            .clone();
    // The chart's appVersion is the workspace's version (RELEASING.md keeps them equal).
    let default = format!(
        "ghcr.io/switchyard-dev/switchyard-operator:{}",
        env!("CARGO_PKG_VERSION")
    );
    ensure!(image == default.as_str(), "default operator image {image}");

    for (set, says) in [
        ("image.digest=sha256:abc", "/image/digest"),
        ("sidecar.image.digest=latest", "/sidecar/image/digest"),
        (
            "global.imageRegistry=https://registry.example.com",
            "/global/imageRegistry",
        ),
    ] {
        let out = Cmd::helm_offline()
            .args(["template", RELEASE])
            .arg(charts_dir().join("switchyard"))
            .args(["--set", set])
            .output()
            .await?;
        ensure!(
            !out.success() && out.stderr.contains(says),
            "{set}: {}",
            out.stderr
        );
    }
    Ok(())
}
