//! The chart's default of two operator replicas, as local processes: leader election on a Lease of
//! a unique name, each replica on its own control-plane port. The first one started leads; the
//! second stands by. Sidecars in the tests are pointed at the standby on purpose: what they send
//! must reach the leader's autoscaler through it.

use crate::cluster::Cluster;
use crate::operator::{Operator, OperatorOpts};
use crate::{eventually, timeout, unique_suffix};
use anyhow::{Context, Result, bail, ensure};

/// A leader and a standby sharing one Lease.
#[derive(Debug)]
pub struct Replicas {
    /// The replica holding the Lease.
    pub leader: Operator,
    /// The replica standing by.
    pub standby: Operator,
    /// Name of their Lease (in switchyard-system).
    pub lease: String,
}

/// The `switchyard_operator_leader` gauge of `op`.
pub async fn leader_gauge(op: &Operator) -> Result<f64> {
    op.metrics()
        .await?
        .value("switchyard_operator_leader")
        .context("no switchyard_operator_leader sample")
}

impl Replicas {
    /// Starts `<name>-a`, waits until it leads, then starts `<name>-b` as the standby.
    pub async fn start(cluster: &Cluster, name: &str) -> Result<Replicas> {
        Replicas::start_with(cluster, name, OperatorOpts::new(name)).await
    }

    /// [`Replicas::start`] with further options for both replicas (mesh TLS, the release they run
    /// under, arguments, environment); their identities and the Lease are set here. A
    /// `control_plane_port` in `base` is the leader's (so a `--control-plane-url` in `base` can
    /// name it, as the chart's Service would); the standby gets a free one.
    pub async fn start_with(cluster: &Cluster, name: &str, base: OperatorOpts) -> Result<Replicas> {
        let lease = format!("e2e-{name}-{}", unique_suffix());
        let replica = |suffix: &str, port: Option<u16>| {
            OperatorOpts {
                identity: format!("{name}-{suffix}"),
                control_plane_port: port,
                ..base.clone()
            }
            .leader_election(&lease)
        };
        let leader = Operator::start(cluster, replica("a", base.control_plane_port)).await?;
        let led = eventually("the first replica to lead", timeout(), || async {
            let l = leader_gauge(&leader).await?;
            ensure!(l == 1.0, "switchyard_operator_leader is {l}");
            Ok(())
        })
        .await;
        if let Err(e) = led {
            bail!("{e:#}\n--- leader log ---\n{}", leader.log_tail(40));
        }
        let standby = Operator::start(cluster, replica("b", None)).await?;
        Ok(Replicas {
            leader,
            standby,
            lease,
        })
    }

    /// The standby's control-plane URL, for sidecars and report pushers.
    pub fn standby_url(&self) -> String {
        self.standby.control_plane_url()
    }

    /// Both logs' tails, for failure messages.
    pub fn log_tails(&self, n: usize) -> String {
        format!(
            "--- leader {} log ---\n{}\n--- standby {} log ---\n{}",
            self.leader.identity,
            self.leader.log_tail(n),
            self.standby.identity,
            self.standby.log_tail(n)
        )
    }

    /// SIGTERM to both, the standby first (so the leader's exit hands the Lease to nobody).
    pub async fn stop(self) -> Result<()> {
        let standby = self.standby.stop().await?;
        let leader = self.leader.stop().await?;
        ensure!(
            standby == Some(0) && leader == Some(0),
            "exit codes: standby {standby:?}, leader {leader:?}"
        );
        Ok(())
    }
}
