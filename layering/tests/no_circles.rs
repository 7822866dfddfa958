//! No files import each other in a circle, in any crate of the workspace: each library, binary and
//! bench target, as `cargo metadata` lists them, read from its root through its `mod` declarations.
//! (Test targets may reach anywhere.) The sidecar's floors are checked in `sidecar/src/layering.rs`.

use std::path::PathBuf;
use std::process::Command;
use switchyard_layering::{Crate, circles, show};

/// Each target's name and root file.
fn targets() -> Vec<(String, PathBuf)> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let mut found = Vec::new();
    for package in meta["packages"].as_array().expect("packages") {
        for target in package["targets"].as_array().expect("targets") {
            let kinds = target["kind"].as_array().expect("kind");
            if !kinds
                .iter()
                .any(|k| matches!(k.as_str(), Some("lib" | "bin" | "bench")))
            {
                continue;
            }
            let name = format!(
                "{} ({})",
                package["name"].as_str().unwrap_or("?"),
                target["name"].as_str().unwrap_or("?")
            );
            let root = PathBuf::from(target["src_path"].as_str().expect("src_path"));
            found.push((name, root));
        }
    }
    found
}

#[test]
fn no_files_import_each_other_in_a_circle_in_any_crate() {
    let targets = targets();
    let mut files = 0;
    let mut arrows = 0;
    let mut found = Vec::new();
    for (name, root) in &targets {
        let krate = Crate::read(root).unwrap_or_else(|e| panic!("{name}: {e}"));
        let g = krate.graph();
        files += g.len();
        arrows += g.values().map(|t| t.len()).sum::<usize>();
        for c in circles(&g) {
            let list: Vec<String> = c.iter().map(|m| show(m)).collect();
            found.push(format!("{name}: {}", list.join(" <-> ")));
        }
    }
    // The reader must see the workspace, or this test would pass on nothing.
    assert!(
        targets
            .iter()
            .any(|(n, _)| n.starts_with("switchyard-sidecar ("))
            && targets
                .iter()
                .any(|(n, _)| n.starts_with("switchyard-e2e ("))
            && files > 300
            && arrows > 500,
        "read {} targets, {files} files, {arrows} arrows",
        targets.len()
    );
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}
