//! Forwarding to the leader: only the leader's autoscaler reads load reports and activations, but
//! sidecars reach whichever replica the Service picked. A standby passes both on to the leader it
//! sees in the Lease (the URL the leader wrote there), so every report counts whatever replica it
//! landed on.
//!
//! Reports from all of a standby's sidecars share one `ReportLoad` stream to the leader (each report
//! names its pod), fed through a bounded queue: when the leader is slow or unknown, reports are
//! dropped and counted, never buffered, since the autoscaler wants the current load. Forwarded
//! calls carry [`FORWARDED`], and a replica never forwards a forwarded call again, so two replicas
//! that briefly disagree on the leader cannot bounce reports between them.
//!
//! With mesh TLS the leader is dialed over TLS with this replica's certificate, and checked to be
//! the operator; the leader takes a forwarded call only from an operator's certificate, since the
//! standby checked the original caller before passing it on (`caller`).

use crate::leader::view::{Leader, LeaderView};
use crate::metrics::Metrics;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_identity::connect::MeshConnector;
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use switchyard_protocol::control::v1::{ActivateRequest, LoadReport};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

/// gRPC metadata key marking a call one replica forwarded to another.
pub(crate) const FORWARDED: &str = "x-switchyard-forwarded";
/// Reports waiting to be forwarded; beyond this they are dropped.
const QUEUE: usize = 1024;
/// Longest wait for connecting to the leader.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for a forwarded activation's answer (the router repeats each second anyway).
const ACTIVATE_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause after a failed connection before trying again.
const RETRY: Duration = Duration::from_millis(500);

/// Why a forward failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ForwardError {
    /// No leader known, or it published no URL.
    #[error("no leader known to forward to; retry shortly")]
    NoLeader,
    /// The leader's URL is not usable.
    #[error("the leader's URL {0:?} is not valid")]
    BadUrl(String),
    /// The leader did not answer in time or refused.
    #[error("the leader at {url} did not take it: {reason}")]
    Leader {
        /// Leader URL.
        url: String,
        /// What happened.
        reason: String,
    },
}

/// Passes load reports and activations on to the leader.
pub(crate) struct Forwarder {
    reports: mpsc::Sender<LoadReport>,
    view: Arc<LeaderView>,
    metrics: Arc<Metrics>,
    activate: Mutex<Option<(String, ControlPlaneClient<Channel>)>>,
    /// Mesh TLS to the leader; `None`: h2c.
    tls: Option<MeshConnector>,
}

impl Forwarder {
    /// A forwarder following `view`, dialing through `tls` when given; its background task stops
    /// when the returned forwarder and every clone of its queue are dropped.
    pub(crate) fn start(
        view: Arc<LeaderView>,
        metrics: Arc<Metrics>,
        tls: Option<MeshConnector>,
    ) -> Arc<Forwarder> {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(pump(rx, view.clone(), metrics.clone(), tls.clone()));
        Arc::new(Forwarder {
            reports: tx,
            view,
            metrics,
            activate: Mutex::new(None),
            tls,
        })
    }

    /// Queues `report` for the leader; dropped (and counted) when the queue is full.
    pub(crate) fn report(&self, report: LoadReport) {
        if self.reports.try_send(report).is_err() {
            self.metrics.forward_dropped();
        }
    }

    /// Forwards an activation to the leader and waits for its answer.
    pub(crate) async fn activate(&self, request: ActivateRequest) -> Result<(), ForwardError> {
        let Leader::Other { url: Some(url), .. } = self.view.get() else {
            return Err(ForwardError::NoLeader);
        };
        let mut client = self.activate_client(&url)?;
        let mut req = tonic::Request::new(request);
        req.metadata_mut()
            .insert(FORWARDED, tonic::metadata::MetadataValue::from_static("1"));
        req.set_timeout(ACTIVATE_TIMEOUT);
        match tokio::time::timeout(ACTIVATE_TIMEOUT, client.activate(req)).await {
            Ok(Ok(_)) => {
                self.metrics.forwarded("activation");
                Ok(())
            }
            Ok(Err(s)) => Err(ForwardError::Leader {
                url,
                reason: format!("{:?}: {}", s.code(), s.message()),
            }),
            Err(_) => Err(ForwardError::Leader {
                url,
                reason: format!("no answer within {ACTIVATE_TIMEOUT:?}"),
            }),
        }
    }

    fn activate_client(&self, url: &str) -> Result<ControlPlaneClient<Channel>, ForwardError> {
        let mut cached = self.activate.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((u, c)) = cached.as_ref()
            && u == url
        {
            return Ok(c.clone());
        }
        let ep = endpoint(url)?;
        let channel = match &self.tls {
            Some(c) => ep.connect_with_connector_lazy(c.clone()),
            None => ep.connect_lazy(),
        };
        let client = ControlPlaneClient::new(channel);
        *cached = Some((url.to_owned(), client.clone()));
        Ok(client)
    }
}

fn endpoint(url: &str) -> Result<Endpoint, ForwardError> {
    Ok(Endpoint::from_shared(url.to_owned())
        .map_err(|_| ForwardError::BadUrl(url.to_owned()))?
        .connect_timeout(CONNECT_TIMEOUT))
}

async fn connect(
    ep: &Endpoint,
    tls: Option<&MeshConnector>,
) -> Result<Channel, tonic::transport::Error> {
    match tls {
        Some(c) => ep.connect_with_connector(c.clone()).await,
        None => ep.connect().await,
    }
}

/// Keeps one report stream open to the current leader and feeds it from `rx`.
async fn pump(
    mut rx: mpsc::Receiver<LoadReport>,
    view: Arc<LeaderView>,
    metrics: Arc<Metrics>,
    tls: Option<MeshConnector>,
) {
    let mut changes = view.watch();
    loop {
        let target = changes.borrow_and_update().clone();
        let Leader::Other { url: Some(url), .. } = target else {
            // Nobody to forward to (or we lead, and the server records locally): drop what comes
            // until the leader changes.
            tokio::select! {
                r = rx.recv() => match r {
                    Some(_) => { metrics.forward_dropped(); continue; }
                    None => return,
                },
                c = changes.changed() => if c.is_err() { return } else { continue },
            }
        };
        let ended = stream_to(&url, tls.as_ref(), &mut rx, &mut changes, &metrics).await;
        match ended {
            Ended::Closed => return,
            Ended::LeaderChanged => {}
            Ended::Failed(reason) => {
                tracing::warn!(leader = %url, reason = %reason, "forwarding load reports to the leader failed; retrying");
                // Reports arriving during the pause are dropped by the next round's full queue.
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

enum Ended {
    /// The forwarder is gone.
    Closed,
    /// A new leader: reconnect there.
    LeaderChanged,
    /// The stream broke.
    Failed(String),
}

async fn stream_to(
    url: &str,
    tls: Option<&MeshConnector>,
    rx: &mut mpsc::Receiver<LoadReport>,
    changes: &mut tokio::sync::watch::Receiver<Leader>,
    metrics: &Metrics,
) -> Ended {
    let channel = match endpoint(url) {
        Ok(ep) => match connect(&ep, tls).await {
            Ok(c) => c,
            Err(e) => return Ended::Failed(format!("cannot connect: {e}")),
        },
        Err(e) => return Ended::Failed(e.to_string()),
    };
    let mut client = ControlPlaneClient::new(channel);
    // A small queue into the call: a stalled leader makes `try_send` fail and reports drop.
    let (tx, call_rx) = mpsc::channel::<LoadReport>(64);
    let mut req = tonic::Request::new(ReceiverStream::new(call_rx));
    req.metadata_mut()
        .insert(FORWARDED, tonic::metadata::MetadataValue::from_static("1"));
    let call = client.report_load(req);
    tokio::pin!(call);
    loop {
        tokio::select! {
            answer = &mut call => {
                return Ended::Failed(match answer {
                    Ok(_) => "the leader closed the stream".into(),
                    Err(s) => format!("{:?}: {}", s.code(), s.message()),
                });
            }
            c = changes.changed() => {
                return if c.is_err() { Ended::Closed } else { Ended::LeaderChanged };
            }
            r = rx.recv() => match r {
                Some(report) => match tx.try_send(report) {
                    Ok(()) => metrics.forwarded("report"),
                    Err(_) => metrics.forward_dropped(),
                },
                None => return Ended::Closed,
            },
        }
    }
}
