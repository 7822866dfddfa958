//! The release the real node runs, made the way a user's is: `deploy/release` (what `make release`
//! runs) against the test cluster's OCI registry, once per test process. It pushes the images with
//! crane and both charts with `helm push`; the node's containerd pulls the images from that registry
//! by digest, and the tests install the charts from it (`helm install oci://…`).
//!
//! nats-server, which the project does not release, is put in the same registry the way a user
//! mirrors a public image for an air-gapped cluster (`crane push` of the image `deploy/build-images
//! nats` makes from the nats-server the tests run), and reached through the chart's
//! `global.imageRegistry` like every other image.

use crate::cmd::Cmd;
use crate::images::read_env;
use crate::lock::FileLock;
use crate::node::Node;
use anyhow::{Context, Result, anyhow, ensure};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::OnceCell;

/// The version the tests release: the workspace's, so the examples' image tags resolve too.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The languages of the handler examples released as images (`switchyard-example-<lang>`).
pub const HANDLERS: [&str; 3] = ["python", "js", "go"];

/// An image in the registry: its reference by digest and that digest.
#[derive(Clone, Debug)]
pub struct Pushed {
    /// `registry/path/name@sha256:…`
    pub reference: String,
    /// `sha256:…`
    pub digest: String,
}

/// What `deploy/release` pushed to the cluster's registry.
#[derive(Clone, Debug)]
pub struct Release {
    /// Release version (chart version and image tag).
    pub version: String,
    /// `host:port` of the registry: the chart's `global.imageRegistry`.
    pub registry: String,
    /// The operator image.
    pub operator: Pushed,
    /// The sidecar image the operator injects.
    pub sidecar: Pushed,
    /// The example app.
    pub example_app: Pushed,
    /// The handler examples' images (`examples/cluster/<lang>.yaml`), by language: python, js, go.
    pub handlers: BTreeMap<&'static str, Pushed>,
    /// nats-server, mirrored into the registry as `<registry>/nats:<tag>`.
    pub nats: Pushed,
    /// Its tag (the nats-server version).
    pub nats_tag: String,
    /// `oci://…/charts/switchyard`.
    pub operator_chart: String,
    /// `oci://…/charts/switchyard-crds`.
    pub crds_chart: String,
    /// Release folder (images.env, charts.env, SHA256SUMS, the CLI tarball).
    pub dir: PathBuf,
}

static RELEASE: OnceCell<Result<Release, String>> = OnceCell::const_new();

/// Releases into the node's registry once per process (the images and the release binaries are
/// rebuilt only when they changed; pushing what the registry holds already moves no layer).
pub async fn release(node: &Node) -> Result<&'static Release> {
    RELEASE
        .get_or_init(|| async { make(node).await.map_err(|e| format!("{e:#}")) })
        .await
        .as_ref()
        .map_err(|e| anyhow!("cannot release into the test registry: {e}"))
}

async fn make(node: &Node) -> Result<Release> {
    // One release at a time into the shared target folder (nextest runs test processes in parallel).
    let _lock = FileLock::acquire("release").await?;
    let repo = crate::repo_root();
    let dir = crate::target_dir().join("dist/e2e");
    let registry_path = format!("{}/switchyard-dev", node.registry);
    // The phases that make what a cluster runs, as the release workflow runs them; the third, `cli`,
    // is a release build of one more binary that nothing here installs.
    for phase in ["images", "charts"] {
        Cmd::new(repo.join("deploy/release"))
            .arg(phase)
            .env("VERSION", VERSION)
            .env("REGISTRY", &registry_path)
            .env("SWITCHYARD_RELEASE_DIR", &dir)
            .env("SWITCHYARD_RELEASE_PLAIN_HTTP", "1")
            // A cold release build of three binaries on two cores.
            .timeout(Duration::from_secs(60 * 60))
            .ok()
            .await
            .with_context(|| format!("deploy/release {phase} into the test registry"))?;
    }
    let images = read_env(&dir.join("images.env"))?;
    let charts = read_env(&dir.join("charts.env"))?;
    let (nats, nats_tag) = mirror_nats(node, &dir.join("images")).await?;
    let mut handlers = BTreeMap::new();
    for lang in HANDLERS {
        let key = format!("EXAMPLE_{}", lang.to_uppercase());
        handlers.insert(lang, pushed(&images, &key, &dir)?);
    }
    Ok(Release {
        version: VERSION.to_string(),
        registry: node.registry.clone(),
        operator: pushed(&images, "OPERATOR", &dir)?,
        sidecar: pushed(&images, "SIDECAR", &dir)?,
        example_app: pushed(&images, "EXAMPLE_APP", &dir)?,
        handlers,
        nats,
        nats_tag,
        operator_chart: get(&charts, "SWITCHYARD_OPERATOR_CHART", &dir)?,
        crds_chart: get(&charts, "SWITCHYARD_CRDS_CHART", &dir)?,
        dir,
    })
}

fn get(env: &BTreeMap<String, String>, key: &str, dir: &Path) -> Result<String> {
    env.get(key)
        .cloned()
        .with_context(|| format!("the release in {} recorded no {key}", dir.display()))
}

fn pushed(env: &BTreeMap<String, String>, name: &str, dir: &Path) -> Result<Pushed> {
    let reference = get(env, &format!("SWITCHYARD_{name}_IMAGE"), dir)?;
    let digest = get(env, &format!("SWITCHYARD_{name}_DIGEST"), dir)?;
    ensure!(
        reference.ends_with(&format!("@{digest}")),
        "{reference} is not the reference by digest {digest}"
    );
    Ok(Pushed { reference, digest })
}

/// The nats-server image pushed to `<registry>/nats:<version>`: (pushed, tag).
async fn mirror_nats(node: &Node, images_dir: &Path) -> Result<(Pushed, String)> {
    let repo = crate::repo_root();
    let server = Cmd::new(repo.join("e2e/cluster/build-nats"))
        .timeout(Duration::from_secs(30 * 60))
        .ok()
        .await?;
    let built = Cmd::new(repo.join("deploy/build-images"))
        .env("SWITCHYARD_IMAGES_DIR", images_dir)
        .args(["nats", server.stdout.trim()])
        .timeout(Duration::from_secs(5 * 60))
        .ok()
        .await?;
    let tag = built
        .stdout
        .trim()
        .rsplit_once(':')
        .map(|(_, t)| t.to_string())
        .with_context(|| format!("build-images nats printed {:?}", built.stdout.trim()))?;
    let repository = format!("{}/nats", node.registry);
    let out = Cmd::new(crate::tools_dir().join("bin/crane"))
        .args(["push", "--insecure"])
        .arg(images_dir.join("nats.tar"))
        .arg(format!("{repository}:{tag}"))
        .timeout(Duration::from_secs(5 * 60))
        .ok()
        .await
        .context("crane push of the nats-server image")?;
    let reference = out.stdout.trim().to_string();
    let digest = reference
        .rsplit_once('@')
        .map(|(_, d)| d.to_string())
        .with_context(|| format!("crane push printed no digest: {reference:?}"))?;
    Ok((Pushed { reference, digest }, tag))
}

impl Release {
    /// `helm upgrade --install RELEASE CHART` from the registry, at this version, over plain HTTP.
    pub fn helm_install(&self, helm: Cmd, release: &str, chart: &str) -> Cmd {
        helm.args(["upgrade", "--install", release, chart]).args([
            "--version",
            &self.version,
            "--plain-http",
        ])
    }
}
