//! Finding the programs `switchyard up` runs: next to the `switchyard` binary first (a `cargo build --workspace`
//! puts the sidecar and the example app there), then on PATH.

use anyhow::bail;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Name of the sidecar binary.
pub const SIDECAR: &str = "switchyard-sidecar";
/// Environment variable naming the sidecar binary when it is neither next to `switchyard` nor on PATH.
pub const SIDECAR_ENV: &str = "SWITCHYARD_SIDECAR";

/// The sidecar binary: `--sidecar PATH`, else next to `switchyard`, else on PATH, else `$SWITCHYARD_SIDECAR`.
pub fn sidecar(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = flag {
        if is_executable(path) {
            return Ok(path.to_owned());
        }
        bail!(
            "--sidecar {}: no executable file there; build it with `cargo build -p switchyard-sidecar`",
            path.display()
        );
    }
    if let Some(path) = program(SIDECAR) {
        return Ok(path);
    }
    if let Some(path) = std::env::var_os(SIDECAR_ENV) {
        let path = PathBuf::from(path);
        if is_executable(&path) {
            return Ok(path);
        }
        bail!("{SIDECAR_ENV}={}: no executable file there", path.display());
    }
    let here = own_dir().map_or_else(|| "<unknown>".to_owned(), |d| d.display().to_string());
    bail!(
        "{SIDECAR} not found: not next to switchyard ({here}), not on PATH, and {SIDECAR_ENV} is not set; \
         build it with `cargo build -p switchyard-sidecar` (or `cargo build --workspace`), or pass --sidecar PATH"
    )
}

/// Name of the NATS server binary (durable delivery).
pub const NATS_SERVER: &str = "nats-server";
/// Environment variable naming the NATS server binary when it is neither next to `switchyard` nor on PATH.
pub const NATS_SERVER_ENV: &str = "SWITCHYARD_NATS_SERVER";

/// The NATS server for a YAML that asks for durable delivery: `$SWITCHYARD_NATS_SERVER`, else next to
/// `switchyard`, else on PATH.
pub fn nats_server() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os(NATS_SERVER_ENV) {
        let path = PathBuf::from(path);
        if is_executable(&path) {
            return Ok(path);
        }
        bail!(
            "{NATS_SERVER_ENV}={}: no executable file there",
            path.display()
        );
    }
    if let Some(path) = program(NATS_SERVER) {
        return Ok(path);
    }
    bail!(
        "a Manager sets `delivery: durable`, which needs {NATS_SERVER} (NATS JetStream): not on PATH and          {NATS_SERVER_ENV} is not set; `e2e/cluster/build-nats` builds one into .tools/bin (it prints the path)"
    )
}

/// A program by the name a container's `command` gives it: a path when it has a `/`, else looked up next to
/// `switchyard`, then on PATH.
pub fn program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let path = PathBuf::from(name);
        return is_executable(&path).then_some(path);
    }
    if let Some(dir) = own_dir() {
        let candidate = dir.join(name);
        if is_executable(&candidate) {
            return Some(candidate);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// Is `path` a file this user may execute?
pub fn is_executable(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        true
    }
}

/// The directory holding the running `switchyard` binary.
fn own_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    // Resolve symlinks (e.g. ~/.local/bin/switchyard -> target/release/switchyard) so siblings are found where
    // the build put them.
    let exe = exe.canonicalize().unwrap_or(exe);
    exe.parent().map(Path::to_owned)
}

/// The file name of a program path, for messages and probe choices.
pub fn file_name(path: &Path) -> &str {
    path.file_name().and_then(OsStr::to_str).unwrap_or("")
}
