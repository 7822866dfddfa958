//! The guide's cluster tutorials (`docs/tutorials/*.md` marked `<!-- tutorial: cluster -->`) run against
//! the e2e cluster as a reader runs them: each marked shell block with bash from the repository root,
//! `KUBECONFIG` the cluster's admin kubeconfig and `NS` a namespace of the test's own, while an operator
//! (the binary from this checkout, with the chart's ServiceAccount) reconciles. See
//! `switchyard_e2e::tutorial` for the markers; the local tutorials run in `cli/tests/tutorials.rs`.

use anyhow::{Result, bail, ensure};
use std::time::Duration;
use switchyard_e2e::operator::{OperatorLock, free_port};
use switchyard_e2e::tutorial::{self, Place, Runner};
use switchyard_e2e::{Operator, OperatorOpts, TestNamespace, cluster, repo_root};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_tutorials_run_as_written() -> Result<()> {
    let pages = tutorial::pages(&repo_root().join("docs")).map_err(anyhow::Error::msg)?;
    let pages: Vec<_> = pages
        .into_iter()
        .filter(|p| p.place == Place::Cluster)
        .collect();
    ensure!(
        !pages.is_empty(),
        "no cluster tutorial under docs/tutorials"
    );
    let _lock = OperatorLock::acquire().await?;
    let c = cluster().await?;
    let op = Operator::start(
        c,
        OperatorOpts {
            control_plane_port: Some(free_port()?),
            ..OperatorOpts::new("e2e-tutorials")
        },
    )
    .await?;
    let mut failures = Vec::new();
    for page in &pages {
        // A namespace per page, deleted when the page is done (pass or fail).
        let ns = TestNamespace::create(c, "tutorial").await?;
        let runner = Runner {
            dir: repo_root(),
            env: vec![
                ("KUBECONFIG".into(), c.kubeconfig.display().to_string()),
                ("NS".into(), ns.name.clone()),
            ],
            path: Vec::new(),
            block_limit: Duration::from_secs(240),
            ready_limit: Duration::from_secs(120),
        };
        // The runner blocks (child processes and waits); off the async workers.
        let page_result = tokio::task::block_in_place(|| runner.run_page(page));
        match page_result {
            Ok(ran) if ran > 0 => eprintln!("[tutorial] {}: {ran} blocks ran", page.path.display()),
            Ok(_) => failures.push(format!("{}: no block ran", page.path.display())),
            Err(e) => failures.push(format!("{e}\noperator log:\n{}", op.log_tail(30))),
        }
    }
    op.stop().await?;
    if !failures.is_empty() {
        bail!("{}", failures.join("\n\n"));
    }
    Ok(())
}
