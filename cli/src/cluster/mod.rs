//! `switchyard check` against a cluster, as `linkerd check`: with `--pre`, whether the cluster can
//! take Switchyard; without, whether the installed Switchyard is healthy. Each check is named and
//! passes, warns or fails with a hint; `--output json` prints the same for scripts; any failure
//! exits 1. The kubeconfig is read as kubectl reads it: `--kubeconfig`, else `KUBECONFIG` (a list of
//! files, merged), else `~/.kube/config`, else the pod's service account; `--context` picks a
//! context other than the current one.

mod operator;
mod post;
mod pre;
mod report;

use anyhow::Context as _;
use clap::ValueEnum;
use report::{Phase, Report};
use std::path::PathBuf;
use std::process::ExitCode;

/// How to print the report.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
}

/// The arguments of `switchyard check`: a file offline (`-f`, run by `check`), or a cluster.
#[derive(Clone, Debug, clap::Args)]
pub struct Args {
    /// YAML file with Router and Manager documents, checked offline as the API server (CEL rules),
    /// the operator and the sidecars would. Without it, the cluster of the kubeconfig is checked.
    #[arg(
        short = 'f',
        long = "file",
        conflicts_with_all = ["pre", "kubeconfig", "context", "namespace", "mesh_namespaces", "output"]
    )]
    pub file: Option<PathBuf>,
    /// Pre-install checks: whether the cluster can take Switchyard (API server version, CRD apply,
    /// Pod Security of the namespaces, NetworkPolicy support).
    #[arg(long)]
    pub pre: bool,
    /// Kubeconfig file (default: KUBECONFIG, then ~/.kube/config, as kubectl).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
    /// The operator's namespace (where the switchyard chart is, or will be, installed).
    #[arg(short = 'n', long, default_value = "switchyard-system")]
    pub namespace: String,
    /// A namespace the mesh runs (or will run) in; repeatable. Default: every namespace after
    /// install, the operator's alone with --pre.
    #[arg(long = "mesh-namespace", value_name = "NAMESPACE")]
    pub mesh_namespaces: Vec<String>,
    /// Report format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// Runs the checks and prints the report: exit 0 when none failed (warnings allowed), 1 when one
/// did. `Err` when the checks could not run at all (no kubeconfig, unknown context).
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = rt.block_on(checks(args))?;
    match args.output {
        Output::Text => print!("{}", report.text()),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report).context("printing the report")?
        ),
    }
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn checks(args: &Args) -> anyhow::Result<Report> {
    let (client, context) =
        crate::kubeconfig::client(args.kubeconfig.as_deref(), args.context.clone()).await?;
    Ok(if args.pre {
        let mut namespaces = vec![args.namespace.clone()];
        namespaces.extend(
            args.mesh_namespaces
                .iter()
                .filter(|n| **n != args.namespace)
                .cloned(),
        );
        Report::new(Phase::Pre, context, pre::run(&client, &namespaces).await)
    } else {
        let scope = post::Scope {
            namespace: &args.namespace,
            mesh_namespaces: &args.mesh_namespaces,
        };
        Report::new(Phase::Post, context, post::run(&client, &scope).await)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::Path;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
        Cli::try_parse_from(std::iter::once("check").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn a_file_is_checked_offline_and_takes_none_of_the_cluster_flags() {
        let a = parse(&["-f", "x.yaml"]).expect("parses");
        assert_eq!(a.file.as_deref(), Some(Path::new("x.yaml")));
        for flags in [
            &["--pre"][..],
            &["--kubeconfig", "k"],
            &["--context", "c"],
            &["-n", "ns"],
            &["--mesh-namespace", "a"],
            &["-o", "json"],
        ] {
            let argv: Vec<&str> = ["-f", "x.yaml"].iter().chain(flags).copied().collect();
            assert!(parse(&argv).is_err(), "-f with {flags:?}");
        }
        let a = parse(&[
            "--pre",
            "--mesh-namespace",
            "a",
            "--mesh-namespace",
            "b",
            "-o",
            "json",
        ])
        .expect("parses");
        assert!(a.pre && a.file.is_none());
        assert_eq!(a.namespace, "switchyard-system");
        assert_eq!(a.mesh_namespaces, ["a", "b"]);
        assert!(matches!(a.output, Output::Json));
    }
}
