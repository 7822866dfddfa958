//! The previous version, which the upgrade test installs first: built from a pinned earlier commit by
//! `e2e/cluster/build-previous` (that commit's own `deploy/build-images`, in a worktree and a target
//! folder of its own, once per commit, the images kept in `.tools/previous/<commit>/`) and pushed to the cluster's registry under
//! `switchyard-previous/`: the images with crane, where the node pulls them by digest like the
//! current release's, and that commit's two charts, packaged as they are, with `helm push`.
//!
//! The pinned commit is the main that landed at the end of the session of 2026-12-07 (the first with
//! the router's stop delay, which an upgrade's roll of the routers needs: see docs/upgrading.md); its
//! chart takes image digests like the current one's.

use crate::cmd::Cmd;
use crate::images::read_env;
use crate::node::Node;
use crate::release::Pushed;
use anyhow::{Context, Result, anyhow, ensure};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

/// The commit the upgrade starts from (main as landed on 2026-12-07, with the router's stop delay).
pub const COMMIT: &str = "4cccea5bfcebbe816dcc808316d61f710b479de1";

/// The previous version's images in the registry and its tree.
#[derive(Clone, Debug)]
pub struct Previous {
    /// The full commit id.
    pub commit: String,
    /// Its tree (a worktree of the commit): the charts come from `charts/`.
    pub src: PathBuf,
    /// The tag the images were pushed under: `<version>-g<short commit>`.
    pub tag: String,
    /// The operator image.
    pub operator: Pushed,
    /// The sidecar image its operator injects.
    pub sidecar: Pushed,
    /// Its example app.
    pub example_app: Pushed,
    /// Its charts' version (both charts have the same).
    pub chart_version: String,
    /// `oci://…/switchyard-previous/charts/switchyard`.
    pub operator_chart: String,
    /// `oci://…/switchyard-previous/charts/switchyard-crds`.
    pub crds_chart: String,
    /// How long building (or finding) and pushing took.
    pub took: Duration,
}

impl Previous {
    /// `repository:tag@digest` of an image: what a chart without digest values can name.
    pub fn tagged(&self, image: &Pushed) -> (String, String) {
        let repository = image
            .reference
            .split_once('@')
            .map_or(image.reference.as_str(), |(r, _)| r);
        (
            repository.to_string(),
            format!("{}@{}", self.tag, image.digest),
        )
    }
}

static PREVIOUS: OnceCell<Result<Previous, String>> = OnceCell::const_new();

/// Builds the previous version (a no-op when cached) and pushes its images, once per process.
pub async fn previous(node: &Node) -> Result<&'static Previous> {
    PREVIOUS
        .get_or_init(|| async { make(node).await.map_err(|e| format!("{e:#}")) })
        .await
        .as_ref()
        .map_err(|e| anyhow!("cannot build and push the previous version {COMMIT}: {e}"))
}

async fn make(node: &Node) -> Result<Previous> {
    let start = Instant::now();
    let built = Cmd::new(crate::repo_root().join("e2e/cluster/build-previous"))
        .arg(COMMIT)
        .env("CARGO_TARGET_DIR", crate::target_dir())
        // A release build of three binaries on two cores (the dependencies seeded from this build's).
        .timeout(Duration::from_secs(60 * 60))
        .ok()
        .await
        .context("e2e/cluster/build-previous")?;
    let dir = PathBuf::from(built.stdout.trim());
    let images = read_env(&dir.join("images/images.env"))?;
    let tag = images
        .get("SWITCHYARD_IMAGE_TAG")
        .cloned()
        .with_context(|| format!("{} names no SWITCHYARD_IMAGE_TAG", dir.display()))?;
    let push = |name: &'static str| {
        let (dir, tag) = (dir.clone(), tag.clone());
        async move {
            let out = Cmd::new(crate::tools_dir().join("bin/crane"))
                .args(["push", "--insecure"])
                .arg(dir.join(format!("images/{name}.tar")))
                .arg(format!(
                    "{}/switchyard-previous/{name}:{tag}",
                    node.registry
                ))
                .timeout(Duration::from_secs(5 * 60))
                .ok()
                .await
                .with_context(|| format!("crane push of the previous {name}"))?;
            let reference = out.stdout.trim().to_string();
            let digest = reference
                .rsplit_once('@')
                .map(|(_, d)| d.to_string())
                .with_context(|| format!("crane push printed no digest: {reference:?}"))?;
            anyhow::Ok(Pushed { reference, digest })
        }
    };
    let src = dir.join("src");
    let charts = format!("oci://{}/switchyard-previous/charts", node.registry);
    let crds_version = push_chart(&src, &dir, "switchyard-crds", &charts).await?;
    let chart_version = push_chart(&src, &dir, "switchyard", &charts).await?;
    ensure!(
        crds_version == chart_version,
        "the previous charts' versions differ: switchyard-crds {crds_version}, switchyard {chart_version}"
    );
    Ok(Previous {
        commit: COMMIT.to_string(),
        operator: push("switchyard-operator").await?,
        sidecar: push("switchyard-sidecar").await?,
        example_app: push("switchyard-example-app").await?,
        operator_chart: format!("{charts}/switchyard"),
        crds_chart: format!("{charts}/switchyard-crds"),
        chart_version,
        src,
        tag,
        took: start.elapsed(),
    })
}

/// `helm package` of the commit's chart `name` as it is, then `helm push` to `repository`: its
/// version (the commit's Chart.yaml's).
async fn push_chart(src: &Path, dir: &Path, name: &str, repository: &str) -> Result<String> {
    let dist = dir.join("charts");
    std::fs::create_dir_all(&dist).with_context(|| format!("creating {}", dist.display()))?;
    let packaged = Cmd::helm_offline()
        .arg("package")
        .arg(src.join("charts").join(name))
        .arg("--destination")
        .arg(&dist)
        .ok()
        .await
        .with_context(|| format!("helm package of the previous {name} chart"))?;
    // "Successfully packaged chart and saved it to: <dir>/<name>-<version>.tgz"
    let archive = packaged
        .stdout
        .trim()
        .rsplit_once(": ")
        .map(|(_, p)| PathBuf::from(p))
        .with_context(|| format!("helm package printed {:?}", packaged.stdout.trim()))?;
    let version = archive
        .file_name()
        .and_then(|f| f.to_str())
        .and_then(|f| f.strip_prefix(&format!("{name}-")))
        .and_then(|f| f.strip_suffix(".tgz"))
        .map(str::to_string)
        .with_context(|| format!("helm package wrote {}", archive.display()))?;
    Cmd::helm_offline()
        .arg("push")
        .arg(&archive)
        .args([repository, "--plain-http"])
        .timeout(Duration::from_secs(120))
        .ok()
        .await
        .with_context(|| format!("helm push of the previous {name} chart to {repository}"))?;
    Ok(version)
}
