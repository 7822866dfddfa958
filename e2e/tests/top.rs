//! `switchyard top --kubeconfig` against a real API server: it finds a Manager's pods by their
//! labels (with `-n` and `-l`) and reads each through the pod proxy
//! (`/api/v1/namespaces/NS/pods/POD:9901/proxy/metrics`), listing a pod it cannot read with the
//! API server's reason. The pod here runs on the `kwok-loopback` node, so its IP is a loopback
//! address, which the API server refuses to proxy to: the test sees the refusal, and nothing is
//! ever dialled off this host (kwok's other pods have made-up addresses, which `-l` leaves out).
//! A successful scrape through the proxy needs a pod IP the API server may dial; it is not covered
//! here.

use anyhow::{Context, Result, ensure};
use switchyard_e2e::operator::{OperatorLock, free_port};
use switchyard_e2e::sidecar::cli_binary;
use switchyard_e2e::{
    Cmd, Operator, OperatorOpts, TestNamespace, cluster, eventually, fixtures, loopback, timeout,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_finds_a_clusters_manager_pods_and_reads_them_through_the_pod_proxy() -> Result<()> {
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let client = c.client().await?;
    loopback::ensure_node(&client).await?;
    let ns = TestNamespace::create(c, "top").await?;
    let op = Operator::start(
        c,
        OperatorOpts {
            control_plane_port: Some(free_port()?),
            ..OperatorOpts::new("e2e-top")
        },
    )
    .await?;
    let manifests = format!(
        "{}---\n{}",
        fixtures::router("edge"),
        fixtures::manager("handlers", "edge", "[noop]", loopback::TEMPLATE_LINES),
    );
    c.kubectl()
        .args(["apply", "-n", &ns.name, "-f", "-"])
        .stdin(manifests)
        .ok()
        .await?;
    let top = cli_binary().await?;
    let view = eventually("top to list the manager pod", timeout(), || async {
        let out = Cmd::new(&top)
            .arg("top")
            .arg("--kubeconfig")
            .arg(&c.kubeconfig)
            .args(["-n", &ns.name, "-l", "switchyard.dev/manager=handlers"])
            .args(["--once", "--interval", "200ms"])
            .ok()
            .await?;
        let v: serde_json::Value = serde_json::from_str(&out.stdout)
            .with_context(|| format!("not JSON: {}", out.stdout))?;
        let sidecars = v["sidecars"].as_array().context("no sidecars")?;
        ensure!(sidecars.len() == 1, "want the one manager pod: {v}");
        Ok(v)
    })
    .await?;
    let m = &view["sidecars"][0];
    ensure!(m["role"] == "manager", "{m}");
    let name = m["name"].as_str().unwrap_or("");
    ensure!(
        name.starts_with(&format!("{}/handlers-manager-", ns.name)),
        "{m}"
    );
    let pod = name.split('/').nth(1).unwrap_or("");
    ensure!(
        m["address"]
            == format!(
                "/api/v1/namespaces/{}/pods/{pod}:9901/proxy/metrics",
                ns.name
            )
            .as_str(),
        "{m}"
    );
    ensure!(
        m["error"]
            .as_str()
            .is_some_and(|e| e.contains("address not allowed")),
        "the API server's refusal of a loopback pod IP: {m}"
    );
    op.stop().await?;
    Ok(())
}
