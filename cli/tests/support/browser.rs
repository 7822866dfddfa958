//! Headless Chromium (Debian's), as the tests drive it: `--dump-dom` for what a page shows after its
//! scripts ran, `--screenshot` for a picture. A throwaway profile and HOME per run; the
//! background-networking flags keep it from calling out of this closed network.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Runs Chromium on `url` with `mode` (`--dump-dom`, or `--screenshot=<file>`); its stdout.
fn run(url: &str, mode: &str, budget: Duration) -> Result<String, String> {
    let chromium = super::apm::tool("CHROMIUM")?;
    let home = tempfile::tempdir().map_err(|e| e.to_string())?;
    let out = Command::new(&chromium)
        .env("HOME", home.path())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1400,900",
        ])
        .arg(format!(
            "--user-data-dir={}",
            home.path().join("profile").display()
        ))
        // Without a budget of virtual time the page is caught before its scripts have drawn it.
        .arg(format!("--virtual-time-budget={}", budget.as_millis()))
        .arg(mode)
        .arg(url)
        .output()
        .map_err(|e| format!("{}: {e}", chromium.display()))?;
    if !out.status.success() {
        return Err(format!(
            "chromium {mode} {url}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The DOM of `url` once its scripts ran for `budget` of virtual time.
pub fn dump_dom(url: &str, budget: Duration) -> Result<String, String> {
    run(url, "--dump-dom", budget)
}

/// A PNG of `url` at 1400x900 into `file`.
pub fn screenshot(url: &str, file: &Path, budget: Duration) -> Result<(), String> {
    run(url, &format!("--screenshot={}", file.display()), budget)?;
    match std::fs::metadata(file) {
        Ok(m) if m.len() > 0 => Ok(()),
        _ => Err(format!(
            "chromium wrote no screenshot at {}",
            file.display()
        )),
    }
}
