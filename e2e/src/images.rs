//! The images `deploy/build-images` builds (release binaries, no container engine), built once per
//! test process. They reach the node only through the registry ([`crate::release`]); this is for the
//! tests that read the archives themselves.

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
    /// The pinned tag.
    pub tag: String,
    /// Folder of the archives.
    pub dir: PathBuf,
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
    let dir = crate::target_dir().join("images");
    Cmd::new(&script)
        .env("SWITCHYARD_IMAGES_DIR", &dir)
        // A cold release build of three binaries on two cores.
        .timeout(Duration::from_secs(60 * 60))
        .ok()
        .await?;
    let env_file = dir.join("images.env");
    let env = read_env(&env_file)?;
    let get = |k: &str| {
        env.get(k)
            .cloned()
            .with_context(|| format!("{} has no {k}", env_file.display()))
    };
    Ok(Images {
        operator: get("SWITCHYARD_OPERATOR_IMAGE")?,
        sidecar: get("SWITCHYARD_SIDECAR_IMAGE")?,
        example_app: get("SWITCHYARD_EXAMPLE_APP_IMAGE")?,
        tag: get("SWITCHYARD_IMAGE_TAG")?,
        dir,
    })
}

/// `KEY=value` lines of a file the scripts wrote.
pub(crate) fn read_env(path: &std::path::Path) -> Result<BTreeMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}
