//! The guide's local tutorials (`docs/tutorials/*.md` marked `<!-- tutorial: local -->`) run as a reader runs
//! them: each marked shell block with bash from the repository root, `switchyard up` in the background until
//! it prints its ready line, the built `switchyard`, sidecar and example app first on PATH (nats-server from
//! `e2e/cluster/build-nats` for the durable tutorial). A renamed flag, field, file or path fails here.
//! See `switchyard_e2e::tutorial` for the markers.
//!
//! Needs `switchyard-sidecar` and `switchyard-example-app` built next to `switchyard` (as `cargo test
//! --workspace` leaves them); fails naming them otherwise.

mod support;

use std::path::PathBuf;
use std::time::Duration;
use switchyard_e2e::tutorial::{self, Place, Runner};

fn nats_server_dir() -> PathBuf {
    let script = support::repo_file("e2e/cluster/build-nats");
    let out = std::process::Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    assert!(out.status.success(), "{} failed", script.display());
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    path.parent().map(PathBuf::from).unwrap_or_default()
}

#[test]
fn local_tutorials_run_as_written() {
    support::require_binaries().unwrap_or_else(|e| panic!("{e}"));
    let pages = tutorial::pages(&support::repo_file("docs")).unwrap_or_else(|e| panic!("{e}"));
    let local: Vec<_> = pages.iter().filter(|p| p.place == Place::Local).collect();
    assert!(
        !local.is_empty(),
        "no local tutorial found under docs/tutorials"
    );
    let scratch = tempfile::tempdir().expect("tempdir");
    let runner = Runner {
        dir: support::repo_file("."),
        env: vec![
            // Files a tutorial writes go here, not into the checkout.
            ("TUTORIAL_TMP".into(), scratch.path().display().to_string()),
        ],
        path: vec![support::target_dir(), nats_server_dir()],
        block_limit: Duration::from_secs(120),
        ready_limit: Duration::from_secs(120),
    };
    let mut failures = Vec::new();
    for page in local {
        match runner.run_page(page) {
            Ok(ran) => {
                assert!(ran > 0, "{}: no block ran", page.path.display());
                eprintln!("[tutorial] {}: {ran} blocks ran", page.path.display());
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
