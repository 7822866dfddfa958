//! `deploy/debs`, the pinned Debian packages under every image (issue 39, item 1), when Debian has
//! moved on: deb.debian.org keeps only the current version of a package, so a point release takes
//! a pinned version away. A lock pinning `netbase` at a version the mirror never had stands for
//! that. A release build fails naming the package and the version; with
//! `SWITCHYARD_DEBS_MOVE_ON=1`, which `make test` sets (`e2e/cluster/session`), the set is re-pinned
//! for that build alone from the lock's own first line, with a warning, and unpacks. No cluster;
//! the real mirror, through the script's private apt state in `.tools/debian/`.

use anyhow::{Context, Result, ensure};
use switchyard_e2e::{Cmd, repo_root};

/// The set's name: its re-pinned lock goes to `.tools/debian/e2e-gone.lock`.
const SET: &str = "e2e-gone";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_version_debian_replaced_fails_a_release_and_moves_on_in_tests() -> Result<()> {
    let locks = tempfile::tempdir()?;
    std::fs::write(
        locks.path().join(format!("{SET}.lock")),
        format!(
            "# deploy/debs pin {SET} netbase\n\
             # arch package version sha256 (of the .deb, as Debian's index gives it)\n\
             amd64 netbase 0.0-gone {zero}\n\
             arm64 netbase 0.0-gone {zero}\n",
            zero = "0".repeat(64)
        ),
    )?;
    let root = tempfile::tempdir()?;
    let unpack = |move_on: &str| {
        Cmd::new(repo_root().join("deploy/debs"))
            .args(["unpack", SET, "amd64"])
            .arg(root.path())
            .env("SWITCHYARD_DEBS_LOCKS", locks.path())
            .env("SWITCHYARD_DEBS_MOVE_ON", move_on)
    };

    let refused = unpack("0").fails().await?;
    for said in [
        "no longer on the mirror",
        "netbase 0.0-gone",
        "re-pin with deploy/debs pin",
    ] {
        ensure!(
            refused.stderr.contains(said),
            "the refusal does not say {said:?}:\n{}",
            refused.stderr
        );
    }
    ensure!(
        !root.path().join("etc/services").exists(),
        "a refused build unpacked netbase"
    );

    let moved = unpack("1").ok().await?;
    ensure!(
        moved
            .stderr
            .contains("WARNING: re-pinning e2e-gone for this build only"),
        "no warning of the re-pin:\n{}",
        moved.stderr
    );
    ensure!(
        root.path().join("etc/services").is_file(),
        "netbase's /etc/services is not in the unpacked root:\n{}",
        moved.stderr
    );
    let repinned =
        std::fs::read_to_string(switchyard_e2e::tools_dir().join(format!("debian/{SET}.lock")))
            .context("the re-pinned lock")?;
    let line = repinned
        .lines()
        .find(|l| l.starts_with("amd64 netbase "))
        .with_context(|| format!("no amd64 netbase line in the re-pinned lock:\n{repinned}"))?;
    ensure!(
        !line.contains("0.0-gone"),
        "the re-pinned lock kept the gone version: {line}"
    );
    let lock = std::fs::read_to_string(locks.path().join(format!("{SET}.lock")))?;
    ensure!(
        lock.contains("0.0-gone"),
        "the committed lock was rewritten:\n{lock}"
    );
    eprintln!("[e2e] deploy/debs moved on from netbase 0.0-gone to: {line}");
    Ok(())
}
