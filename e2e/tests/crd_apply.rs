//! The CRDs applied the way a platform team without Helm or server-side apply would: a client-side
//! `kubectl apply -f` of the chart's generated files. kubectl copies each object, as JSON, into the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation, and the API server refuses an
//! object whose annotations pass 256 KiB; the Manager CRD once did (597 KB of YAML).
//!
//! The shared cluster already has these CRDs from the chart, so the apply is the update path: the
//! objects are patched with the annotation, their content unchanged. The annotation is removed again
//! afterwards, leaving the chart's objects as Helm made them.

use anyhow::{Context, Result, ensure};
use switchyard_e2e::{charts_dir, cluster};

const CRDS: [&str; 2] = ["routers.switchyard.dev", "managers.switchyard.dev"];
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[tokio::test]
async fn crds_apply_with_client_side_kubectl() -> Result<()> {
    let c = cluster().await?;
    let dir = charts_dir().join("switchyard-crds").join("templates");
    let applied = c
        .kubectl()
        .args(["apply", "--server-side=false", "-f"])
        .arg(&dir)
        .ok()
        .await
        .with_context(|| format!("client-side `kubectl apply -f {}`", dir.display()));
    let stored = last_applied_sizes(c).await;
    // Whatever happened, leave the chart's objects without the annotation.
    let cleaned = c
        .kubectl()
        .args(["annotate", "crd"])
        .args(CRDS)
        .arg(format!("{LAST_APPLIED}-"))
        .ok()
        .await;
    let applied = applied?;
    for crd in CRDS {
        ensure!(
            applied.stdout.contains(&format!(
                "customresourcedefinition.apiextensions.k8s.io/{crd}"
            )),
            "`kubectl apply` did not report {crd}:\n{}",
            applied.combined()
        );
    }
    // The apply went the client-side way: each CRD now carries itself in the annotation.
    for (crd, size) in CRDS.iter().zip(stored?) {
        ensure!(
            size > 10_000,
            "{crd} has a {LAST_APPLIED} annotation of {size} bytes after a client-side apply"
        );
        eprintln!("{crd}: {LAST_APPLIED} is {size} bytes");
    }
    cleaned.context("removing the last-applied annotation again")?;
    c.kubectl()
        .args(["wait", "--for=condition=Established", "--timeout=60s"])
        .args(CRDS.map(|n| format!("crd/{n}")))
        .ok()
        .await
        .context("the CRDs are not Established after the apply")?;
    Ok(())
}

/// Length of each CRD's last-applied annotation (0 when it has none), in `CRDS` order.
async fn last_applied_sizes(c: &switchyard_e2e::Cluster) -> Result<Vec<usize>> {
    let mut sizes = Vec::new();
    for crd in CRDS {
        let out = c
            .kubectl()
            .args(["get", "crd", crd, "-o"])
            .arg(format!(
                "jsonpath={{.metadata.annotations.{}}}",
                LAST_APPLIED.replace('.', "\\.")
            ))
            .ok()
            .await?;
        sizes.push(out.stdout.trim().len());
    }
    Ok(sizes)
}
