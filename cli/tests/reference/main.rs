//! The user guide's reference pages, generated from the code: the Router and Manager fields from the CRD
//! schemas, the `switchyard` command's help from the built binary, the metrics of the sidecar and the
//! operator from their registries, and the sidecar's spans from its span catalog. The test renders every
//! page and fails when a committed page differs, as `crds/tests/crds.rs` does for the CRD YAML; with
//! `SWITCHYARD_WRITE_REFERENCE=1` (`make reference`) it writes them instead.

mod cli;
mod crds;
mod metrics;
mod spans;

use std::path::{Path, PathBuf};

const SWITCHYARD: &str = env!("CARGO_BIN_EXE_switchyard");

fn reference_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference")
}

/// Writes the page (`SWITCHYARD_WRITE_REFERENCE=1`) or compares it with the committed one.
fn fresh(file: &str, text: &str) {
    let path = reference_dir().join(file);
    if std::env::var_os("SWITCHYARD_WRITE_REFERENCE").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(reference_dir()).expect("create docs/reference");
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        eprintln!("wrote {}", path.display());
        return;
    }
    let Ok(committed) = std::fs::read_to_string(&path) else {
        panic!(
            "{} is missing: run `make reference` and commit the result",
            path.display()
        );
    };
    if committed != text {
        let line = committed
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || committed.lines().count().min(text.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "{} is stale (first difference at line {line}): run `make reference` and commit the result",
            path.display()
        );
    }
}

#[test]
fn crd_field_reference_is_fresh() {
    fresh("crds.md", &crds::page());
}

#[test]
fn cli_reference_is_fresh() {
    fresh("cli.md", &cli::page(Path::new(SWITCHYARD)));
}

#[test]
fn metrics_reference_is_fresh() {
    fresh("metrics.md", &metrics::page());
}

#[test]
fn span_reference_is_fresh() {
    fresh("spans.md", &spans::page());
}
