//! `switchyard`: the user's command line.
//!
//! - `switchyard check -f FILE.yaml`: the checks the API server and the operator would make, offline.
//! - `switchyard check [--pre]`: the checks of a cluster, before install (`--pre`) or after.
//! - `switchyard routes -f FILE.yaml`: the route table the Router would serve.
//! - `switchyard crds`: the CRD YAML, for `kubectl apply --server-side -f -`.
//! - `switchyard up -f FILE.yaml`: the same YAML run as local processes, no cluster.
//! - `switchyard top`: live per-event-type traffic of the sidecars (locally or in a cluster).
//! - `switchyard tap`: the live events through a Router's or a Manager's sidecars (locally or in a cluster).

#[cfg(test)]
mod agreement;
mod check;
mod cluster;
mod kubeconfig;
mod routes;
mod tap;
mod top;
mod unmatched;
mod up;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "switchyard",
    version,
    about = "Switchyard: Kubernetes-native event routing"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check Router and Manager YAML offline (`-f FILE`), or a cluster: before install (`--pre`),
    /// or the installed Switchyard (neither).
    Check(cluster::Args),
    /// Print the route table of each Router in the file, with the Manager that handles each event type.
    Routes {
        /// YAML file with Router and Manager documents.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Print the CustomResourceDefinitions as YAML.
    Crds,
    /// Run the Routers and Managers of a file as local processes on 127.0.0.1 (no cluster).
    Up(up::Args),
    /// Live per-event-type rate, success and latency, read from the sidecars' admin /metrics.
    Top(top::Args),
    /// Live events through a Router's or Manager's sidecars: type, id, status, latency, trace.
    Tap(tap::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => match &args.file {
            Some(file) => {
                read(file, Use::Cluster).and_then(|(objs, text)| check::run(&objs, &text))
            }
            None => match cluster::run(&args) {
                Ok(code) => return code,
                Err(e) => Err(e),
            },
        },
        Command::Routes { file } => read(&file, Use::Cluster).map(|(objs, _)| routes::print(&objs)),
        Command::Crds => print_crds(),
        Command::Top(args) => top::run(args),
        Command::Tap(args) => tap::run(args),
        Command::Up(args) => match up::run(args) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What a file is read for: what the API server takes, or a local run, which also takes listener
/// port 0 (any free port).
#[derive(Clone, Copy)]
enum Use {
    Cluster,
    Local,
}

/// Reads a file, refusing whatever the CRDs' schemas refuse (see `switchyard_crds::strict`); the
/// objects, and the text to place later problems by line.
fn read(file: &PathBuf, how: Use) -> anyhow::Result<(switchyard_crds::yaml::Objects, String)> {
    let text =
        std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let parse = match how {
        Use::Cluster => switchyard_crds::yaml::parse,
        Use::Local => switchyard_crds::yaml::parse_for_local_run,
    };
    let objs = parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    if objs.routers.is_empty() && objs.managers.is_empty() {
        anyhow::bail!(
            "{}: no Router or Manager of switchyard.dev/v1alpha1 found",
            file.display()
        );
    }
    Ok((objs, text))
}

fn print_crds() -> anyhow::Result<()> {
    for (_, text) in switchyard_crds::crd::all_yaml()? {
        print!("---\n{text}");
    }
    Ok(())
}
