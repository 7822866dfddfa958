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
use kube::config::{KubeConfigOptions, Kubeconfig};
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
    let (client, context) = client(args).await?;
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

/// The API client, as kubectl would make it, and the context's name when a kubeconfig named one.
async fn client(args: &Args) -> anyhow::Result<(kube::Client, Option<String>)> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let (config, kubeconfig) = match &args.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(kc.clone(), &options)
                .await
                .with_context(|| format!("--kubeconfig {}", path.display()))?;
            (config, Some(kc))
        }
        None => match Kubeconfig::read() {
            Ok(kc) => {
                let config = kube::Config::from_custom_kubeconfig(kc.clone(), &options)
                    .await
                    .context("the kubeconfig (KUBECONFIG or ~/.kube/config)")?;
                (config, Some(kc))
            }
            // No kubeconfig in a pod: its service account, as kubectl does. Anywhere else (or
            // with KUBECONFIG set, or a context asked for) the kubeconfig's error is the answer.
            Err(e)
                if args.context.is_none()
                    && std::env::var_os("KUBECONFIG").is_none()
                    && std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() =>
            {
                let config = kube::Config::incluster().with_context(|| {
                    format!("no kubeconfig ({e}), and the pod's service account cannot be used")
                })?;
                (config, None)
            }
            Err(e) => return Err(e).context("the kubeconfig (KUBECONFIG, else ~/.kube/config)"),
        },
    };
    let context = args
        .context
        .clone()
        .or_else(|| kubeconfig.and_then(|k| k.current_context));
    let client = kube::Client::try_from(config).context("building the API client")?;
    Ok((client, context))
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

    const KUBECONFIG: &str = r#"apiVersion: v1
kind: Config
current-context: first
clusters:
  - name: c
    cluster: {server: "https://127.0.0.1:1"}
users:
  - name: u
    user: {token: "t"}
contexts:
  - name: first
    context: {cluster: c, user: u, namespace: ns-first}
  - name: second
    context: {cluster: c, user: u, namespace: ns-second}
"#;

    #[tokio::test]
    async fn the_kubeconfig_context_is_the_current_one_or_the_one_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, KUBECONFIG).expect("write");
        let mut args = parse(&["--kubeconfig", &path.to_string_lossy()]).expect("parses");
        let (api, context) = client(&args).await.expect("a client");
        assert_eq!(context.as_deref(), Some("first"));
        assert_eq!(api.default_namespace(), "ns-first");
        args.context = Some("second".into());
        let (api, context) = client(&args).await.expect("a client");
        assert_eq!(context.as_deref(), Some("second"));
        assert_eq!(api.default_namespace(), "ns-second");
        args.context = Some("third".into());
        let Err(e) = client(&args).await else {
            panic!("a context the kubeconfig does not have was taken");
        };
        assert!(format!("{e:#}").contains("third"), "{e:#}");
        args.kubeconfig = Some(dir.path().join("missing"));
        let Err(e) = client(&args).await else {
            panic!("a kubeconfig that does not exist was taken");
        };
        assert!(format!("{e:#}").contains("missing"), "{e:#}");
    }
}
