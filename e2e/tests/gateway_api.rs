//! The examples of a Gateway API `HTTPRoute` and `GRPCRoute` and of an `Ingress` in front of a Router
//! (`examples/gateway/`, docs/edge.md) applied to the real API server, with the Gateway API CRDs of
//! the `sigs.k8s.io/gateway-api` module installed (the version in `e2e/cluster/versions.env`), so a
//! field the Gateway API renames or tightens fails here. No operator needed: the routes are checked
//! against the Service the operator renders for the quickstart's Router (`<name>-router`, a port per
//! listener).

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use switchyard_e2e::{TestNamespace, cluster, fixtures, module_crds, repo_root};

/// The CRDs the examples need, of the module's standard channel.
const CRDS: [&str; 4] = ["gatewayclasses", "gateways", "httproutes", "grpcroutes"];

/// Installs the module's CRDs and checks the API server serves this version of them, not some other
/// version a cluster had before.
async fn install_gateway_api(version: &str) -> Result<()> {
    let module = module_crds::download("sigs.k8s.io/gateway-api", version).await?;
    let files = module_crds::files(
        &module.join("config/crd/standard"),
        "gateway.networking.k8s.io_",
        &CRDS,
    );
    let names: Vec<String> = CRDS
        .iter()
        .map(|n| format!("{n}.gateway.networking.k8s.io"))
        .collect();
    let crd = module_crds::install(&files, &names).await?;
    let bundle = &crd["metadata"]["annotations"]["gateway.networking.k8s.io/bundle-version"];
    ensure!(
        bundle == version,
        "the cluster's {} CRD is bundle {bundle}, not {version}",
        names[0]
    );
    Ok(())
}

/// The quickstart Router's Service as the operator renders it: its name and the port of each
/// listener.
struct RouterService {
    name: String,
    http: i32,
    grpc: i32,
}

fn quickstart_service() -> Result<RouterService> {
    let text = std::fs::read_to_string(fixtures::quickstart())?;
    let objects = switchyard_crds::yaml::parse(&text)?;
    let router = objects
        .routers
        .first()
        .context("no Router in the quickstart")?;
    let name = router.metadata.name.clone().context("unnamed Router")?;
    Ok(RouterService {
        name: format!("{name}-router"),
        http: router.spec.listeners.http.port,
        grpc: router
            .spec
            .listeners
            .grpc
            .as_ref()
            .context("the quickstart's Router has no gRPC listener")?
            .port,
    })
}

/// `kubectl get KIND NAME -o json` in `ns`.
async fn get(ns: &str, kind: &str, name: &str) -> Result<Value> {
    let out = cluster()
        .await?
        .kubectl()
        .args(["get", "-n", ns, kind, name, "-o", "json"])
        .ok()
        .await?;
    Ok(serde_json::from_str(&out.stdout)?)
}

#[tokio::test]
async fn gateway_api_routes_and_an_ingress_in_front_of_a_router_apply() -> Result<()> {
    let version = module_crds::pinned_version("GATEWAY_API_VERSION")?;
    install_gateway_api(&version).await?;
    let c = cluster().await?;
    let ns = TestNamespace::create(c, "gateway").await?;
    let dir = repo_root().join("examples/gateway");
    for file in ["http-route.yaml", "grpc-route.yaml", "ingress.yaml"] {
        c.kubectl()
            .args(["apply", "-n", &ns.name, "-f"])
            .arg(dir.join(file))
            .ok()
            .await
            .with_context(|| format!("examples/gateway/{file}"))?;
    }

    // Each points at the Service the operator makes for the quickstart's Router, on its listener.
    let service = quickstart_service()?;
    let http = get(&ns.name, "httproute", "edge").await?;
    let backend = &http["spec"]["rules"][0]["backendRefs"][0];
    ensure!(
        backend["name"] == service.name.as_str() && backend["port"] == service.http,
        "HTTPRoute backend {backend}, want {} port {}",
        service.name,
        service.http
    );
    let grpc = get(&ns.name, "grpcroute", "edge").await?;
    let backend = &grpc["spec"]["rules"][0]["backendRefs"][0];
    ensure!(
        backend["name"] == service.name.as_str() && backend["port"] == service.grpc,
        "GRPCRoute backend {backend}, want {} port {}",
        service.name,
        service.grpc
    );
    let methods: Vec<&Value> = grpc["spec"]["rules"][0]["matches"]
        .as_array()
        .map(|m| m.iter().map(|m| &m["method"]).collect())
        .unwrap_or_default();
    for name in ["Call", "Connect", "CallStream"] {
        ensure!(
            methods
                .iter()
                .any(|m| m["service"] == "switchyard.v1.Gateway" && m["method"] == name),
            "GRPCRoute matches no switchyard.v1.Gateway/{name}: {methods:?}"
        );
    }
    let ingress = get(&ns.name, "ingress", "edge").await?;
    let backend = &ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"];
    ensure!(
        backend["name"] == service.name.as_str() && backend["port"]["name"] == "http",
        "Ingress backend {backend}, want {} port http",
        service.name
    );

    // The Gateway API's own rules are in force (so an example breaking one would fail above): a
    // GRPCRoute match with neither service nor method is refused.
    let bad = r#"apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata:
  name: no-method
spec:
  rules:
    - matches:
        - method: {type: Exact}
      backendRefs:
        - name: edge-router
          port: 50051
"#;
    let refused = c
        .kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(bad)
        .fails()
        .await?;
    ensure!(
        refused
            .combined()
            .contains("One or both of 'service' or 'method' must be specified"),
        "refusal does not name the field:\n{}",
        refused.combined()
    );
    Ok(())
}
