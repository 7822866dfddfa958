//! The images the real node runs: `deploy/build-images` (release binaries, no container engine),
//! built once per test process and imported into the node's containerd.

use crate::cmd::Cmd;
use anyhow::{Context, Result, anyhow};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::OnceCell;

/// References of the built images (`images.env`) and their archives.
#[derive(Clone, Debug)]
pub struct Images {
    /// The operator image, pinned tag.
    pub operator: String,
    /// The sidecar image, pinned tag.
    pub sidecar: String,
    /// The example app, pinned tag (also tagged with the bare version that the quickstart names).
    pub example_app: String,
    /// nats-server (the version the tests run, `e2e/cluster/build-nats`), for the chart's
    /// JetStream on the node.
    pub nats: String,
    /// The pinned tag.
    pub tag: String,
    /// Folder of the archives.
    pub dir: PathBuf,
}

impl Images {
    /// (repository, tag) of a reference.
    pub fn split(reference: &str) -> (&str, &str) {
        reference.rsplit_once(':').unwrap_or((reference, ""))
    }

    /// The archives of the three images, the pause image and nats-server. (The node imported pause when it
    /// started, but a kubelet under disk pressure deletes unused images, and containerd 1.6 cannot
    /// pin one: importing it again costs a second.)
    pub fn archives(&self) -> Vec<PathBuf> {
        [
            "pause",
            "switchyard-operator",
            "switchyard-sidecar",
            "switchyard-example-app",
            "nats",
        ]
        .iter()
        .map(|n| self.dir.join(format!("{n}.tar")))
        .collect()
    }
}

static IMAGES: OnceCell<Result<Images, String>> = OnceCell::const_new();

/// Builds the images once per process (a no-op when nothing changed).
pub async fn images() -> Result<&'static Images> {
    IMAGES
        .get_or_init(|| async { build().await.map_err(|e| format!("{e:#}")) })
        .await
        .as_ref()
        .map_err(|e| anyhow!("cannot build the images: {e}"))
}

async fn build() -> Result<Images> {
    let script = crate::repo_root().join("deploy/build-images");
    let dir = crate::operator::target_dir().join("images");
    Cmd::new(&script)
        .env("SWITCHYARD_IMAGES_DIR", &dir)
        // A cold release build of three binaries on two cores.
        .timeout(Duration::from_secs(60 * 60))
        .ok()
        .await?;
    let nats = Cmd::new(
        crate::repo_root()
            .join("e2e/cluster/build-nats")
            .to_string_lossy()
            .as_ref(),
    )
    .timeout(Duration::from_secs(30 * 60))
    .ok()
    .await?;
    Cmd::new(&script)
        .env("SWITCHYARD_IMAGES_DIR", &dir)
        .args(["nats", nats.stdout.trim()])
        .timeout(Duration::from_secs(5 * 60))
        .ok()
        .await?;
    let env_file = dir.join("images.env");
    let text = std::fs::read_to_string(&env_file)
        .with_context(|| format!("reading {}", env_file.display()))?;
    let env: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| {
        env.get(k)
            .map(|v| v.to_string())
            .with_context(|| format!("{} has no {k}", env_file.display()))
    };
    Ok(Images {
        operator: get("SWITCHYARD_OPERATOR_IMAGE")?,
        sidecar: get("SWITCHYARD_SIDECAR_IMAGE")?,
        example_app: get("SWITCHYARD_EXAMPLE_APP_IMAGE")?,
        nats: get("SWITCHYARD_NATS_IMAGE")?,
        tag: get("SWITCHYARD_IMAGE_TAG")?,
        dir,
    })
}
