//! The GitHub Actions workflows (.github/workflows), which cannot run here, checked offline with
//! actionlint: syntax, expressions and their types, job dependencies, runner labels, and the inputs of
//! well-known actions. Any finding fails. actionlint is built from the Go module proxy by
//! `e2e/cluster/build-tools actionlint` (version in e2e/cluster/versions.env), with no cluster.
//!
//! shellcheck and pyflakes, which actionlint runs on `run:` scripts when it finds them on PATH, are
//! turned off: whether they are installed, and which version, would make the result differ from
//! machine to machine.

use std::path::{Path, PathBuf};
use std::process::Command;
use switchyard_e2e::{repo_root, tools_dir};

/// Builds actionlint once (idempotent, seconds when cached) and returns its path.
fn actionlint() -> PathBuf {
    let script = repo_root().join("e2e/cluster/build-tools");
    let out = Command::new(&script)
        .arg("actionlint")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "`{} actionlint` failed ({}):\n{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    tools_dir().join("bin").join("actionlint")
}

/// actionlint's findings on `files` (empty when clean), one per line.
fn lint(bin: &Path, files: &[PathBuf]) -> (bool, String) {
    let out = Command::new(bin)
        .args(["-no-color", "-shellcheck=", "-pyflakes="])
        .args(files)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn workflows() -> Vec<PathBuf> {
    let dir = repo_root().join(".github/workflows");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yml" || x == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn workflows_pass_actionlint() {
    let files = workflows();
    let names: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    for want in ["ci.yml", "release.yml"] {
        assert!(names.iter().any(|n| n == want), "no {want} in {names:?}");
    }
    let bin = actionlint();
    let (clean, findings) = lint(&bin, &files);
    assert!(
        clean && findings.trim().is_empty(),
        "actionlint:\n{findings}"
    );
}

/// The check above can fail: a workflow with a mistake actionlint knows is reported, by line.
#[test]
fn actionlint_reports_a_broken_workflow() {
    let dir = std::env::temp_dir().join(format!("switchyard-actionlint-{}", std::process::id()));
    let wf = dir.join(".github/workflows");
    std::fs::create_dir_all(&wf).expect("temp dir");
    let file = wf.join("broken.yml");
    std::fs::write(
        &file,
        "on: push\njobs:\n  build:\n    needs: [missing]\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ matrix.nope }}\n",
    )
    .expect("write");
    let bin = actionlint();
    let (clean, findings) = lint(&bin, std::slice::from_ref(&file));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!clean, "actionlint passed a broken workflow:\n{findings}");
    assert!(
        findings.contains("broken.yml:3:")
            && findings.contains("needs job \"missing\"")
            && findings.contains("broken.yml:7:")
            && findings.contains("\"nope\""),
        "{findings}"
    );
}
