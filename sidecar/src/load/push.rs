//! Pushes one load report per second to the control plane over a `ReportLoad` client stream, and
//! reconnects with backoff when the stream fails. Reports taken while disconnected are not kept:
//! the autoscaler wants the current load, not a backlog.

use super::meter::LoadMeters;
use super::report::{self, Reporter};
use crate::backoff;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use switchyard_protocol::control::v1::LoadReport;
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

/// How often a report is taken.
pub(crate) const PERIOD: Duration = Duration::from_secs(1);
/// Reports waiting for the transport; a stalled stream drops new reports rather than grow.
const BACKLOG: usize = 4;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Reports `meters` to the control plane at `url` forever, over the channels `dial` opens (plain
/// or mesh TLS: the caller decides; the task is dropped at shutdown).
pub(crate) async fn run<D, F>(url: String, dial: D, meters: Arc<LoadMeters>, who: Reporter)
where
    D: Fn() -> F,
    F: Future<Output = Result<Channel, tonic::transport::Error>>,
{
    let mut retry = backoff::StreamRetry::control_plane();
    loop {
        let started = Instant::now();
        let ended = stream(dial().await, &meters, &who).await;
        let next = retry.ended(started.elapsed(), fastrand::f64());
        if next.first {
            tracing::warn!(control_plane = %url, reason = %ended, "load-report stream ended; reconnecting");
        } else {
            tracing::debug!(control_plane = %url, reason = %ended, "load-report stream still down");
        }
        tokio::time::sleep(next.wait).await;
    }
}

/// One report stream, until it fails; returns why it ended.
async fn stream(
    channel: Result<Channel, tonic::transport::Error>,
    meters: &LoadMeters,
    who: &Reporter,
) -> String {
    let channel = match channel {
        Ok(c) => c,
        Err(e) => return format!("cannot connect: {e}"),
    };
    let mut client = ControlPlaneClient::new(channel);
    let (tx, rx) = mpsc::channel::<LoadReport>(BACKLOG);
    let call = client.report_load(ReceiverStream::new(rx));
    tokio::pin!(call);
    // The first report comes one period in, so its window is a full period.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + PERIOD, PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut before = meters.snapshot();
    let mut taken = Instant::now();
    loop {
        tokio::select! {
            answer = &mut call => {
                return match answer {
                    Ok(_) => "the operator closed the stream".into(),
                    Err(s) => format!("{:?}: {}", s.code(), s.message()),
                };
            }
            _ = tick.tick() => {
                let now = meters.snapshot();
                let window = u32::try_from(taken.elapsed().as_millis()).unwrap_or(u32::MAX);
                taken = Instant::now();
                let r = report::build(who, &before, &now, now_ms(), window);
                before = now;
                if let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(r) {
                    return "the report stream closed".into();
                }
            }
        }
    }
}
