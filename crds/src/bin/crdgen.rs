//! Writes the CRD YAML of Router and Manager into the CRD chart, or checks it is fresh.
//!
//! `crdgen` writes `charts/switchyard-crds/templates/*.yaml`; `crdgen --stdout` prints both;
//! `crdgen --check` exits 1 when the committed files differ from the types.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let files = match switchyard_crds::crd::all_yaml() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("crdgen: cannot render CRDs: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.iter().any(|a| a == "--stdout") {
        for (_, text) in &files {
            print!("---\n{text}");
        }
        return ExitCode::SUCCESS;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(switchyard_crds::crd::CHART_DIR);
    let check = args.iter().any(|a| a == "--check");
    let mut stale = false;
    for (file, text) in &files {
        let path = dir.join(file);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                eprintln!(
                    "crdgen: {} is stale; run `cargo run -p switchyard-crds --bin crdgen`",
                    path.display()
                );
                stale = true;
            }
        } else if let Err(e) =
            std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, text))
        {
            eprintln!("crdgen: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        } else {
            println!("wrote {}", path.display());
        }
    }
    if stale {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
