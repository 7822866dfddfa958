//! Third-party CRDs that ship inside a Go module (the Gateway API's, the Prometheus Operator's),
//! for tests that apply examples or chart objects against them: the module's version from
//! `e2e/cluster/versions.env`, its source from the Go module proxy, and the CRDs installed on the
//! test API server.

use crate::cluster;
use crate::cmd::Cmd;
use anyhow::{Context, Result, ensure};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The value of `key` in `e2e/cluster/versions.env`.
pub fn pinned_version(key: &str) -> Result<String> {
    crate::images::read_env(&crate::repo_root().join("e2e/cluster/versions.env"))?
        .remove(key)
        .with_context(|| format!("no {key} in e2e/cluster/versions.env"))
}

/// The source folder of Go module `module` at `version`, downloaded from the Go module proxy (and
/// cached by Go afterwards).
pub async fn download(module: &str, version: &str) -> Result<PathBuf> {
    let out = Cmd::new("go")
        .args(["mod", "download", "-json"])
        .arg(format!("{module}@{version}"))
        .env("GOFLAGS", "-mod=mod")
        .cwd(std::env::temp_dir())
        .timeout(Duration::from_secs(600))
        .ok()
        .await?;
    let info: Value =
        serde_json::from_str(&out.stdout).context("`go mod download -json` output")?;
    let dir = info["Dir"]
        .as_str()
        .with_context(|| format!("`go mod download` gave no Dir: {}", out.stdout))?;
    Ok(PathBuf::from(dir))
}

/// Applies the CRD `files` (server-side, so reruns and other test processes agree), waits until the
/// API server serves each of `crds` (`<plural>.<group>`), and returns the first one as served, for
/// its caller to check the version it carries.
pub async fn install(files: &[PathBuf], crds: &[String]) -> Result<Value> {
    let c = cluster().await?;
    let mut apply = c
        .kubectl()
        .args(["apply", "--server-side", "--force-conflicts"])
        .args(["--field-manager", "switchyard-e2e"]);
    for file in files {
        ensure!(file.is_file(), "{} is not in the module", file.display());
        apply = apply.arg("-f").arg(file);
    }
    apply.ok().await?;
    let names: Vec<String> = crds.iter().map(|n| format!("crd/{n}")).collect();
    c.kubectl()
        .args(["wait", "--for=condition=Established", "--timeout=60s"])
        .args(&names)
        .timeout(Duration::from_secs(90))
        .ok()
        .await?;
    let first = names.first().context("no CRD named")?;
    let out = c.kubectl().args(["get", first, "-o", "json"]).ok().await?;
    Ok(serde_json::from_str(&out.stdout)?)
}

/// `dir/<prefix><name>.yaml` for each of `names`.
pub fn files(dir: &Path, prefix: &str, names: &[&str]) -> Vec<PathBuf> {
    names
        .iter()
        .map(|n| dir.join(format!("{prefix}{n}.yaml")))
        .collect()
}
