//! A connection's requests in progress, to close it once it has had none for the idle timeout:
//! keepalive pings keep an h2 connection's bytes moving forever, so only the requests tell a
//! sidecar's stream from a client that connected and does nothing. A request counts from when it
//! reaches the service until its response body is dropped (a routing-table stream, for its life).

use http_body_util::BodyExt;
use std::time::Duration;
use tokio::sync::watch;

/// Counts one connection's requests in progress.
#[derive(Clone)]
pub(crate) struct Activity(watch::Sender<usize>);

/// One request in progress; dropping it ends it.
pub(crate) struct Busy(watch::Sender<usize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Default for Activity {
    fn default() -> Self {
        Activity(watch::Sender::new(0))
    }
}

impl Activity {
    /// A request begins.
    pub(crate) fn begin(&self) -> Busy {
        self.0.send_modify(|n| *n += 1);
        Busy(self.0.clone())
    }

    /// Resolves once the connection has had no request in progress for `idle` at a stretch.
    pub(crate) async fn idle_for(&self, idle: Duration) {
        let mut rx = self.0.subscribe();
        loop {
            if *rx.borrow_and_update() == 0 {
                if tokio::time::timeout(idle, rx.changed()).await.is_err() {
                    return;
                }
            } else if rx.changed().await.is_err() {
                // Cannot happen while `self` holds the sender; never idle then.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// `body` holding `busy` until it is dropped.
pub(crate) fn hold<B>(
    body: B,
    busy: Busy,
) -> impl hyper::body::Body<Data = B::Data, Error = B::Error> + Send + 'static
where
    B: hyper::body::Body + Send + 'static,
{
    body.map_frame(move |frame| {
        let _held = &busy;
        frame
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_after_its_last_request_ended_for_the_whole_timeout() {
        let activity = Activity::default();
        let idle = Duration::from_secs(10);
        let busy = activity.begin();
        let waiting = tokio::spawn({
            let a = activity.clone();
            async move { a.idle_for(idle).await }
        });
        tokio::time::sleep(idle * 3).await;
        assert!(
            !waiting.is_finished(),
            "idle while a request was in progress"
        );
        drop(busy);
        tokio::time::sleep(idle / 2).await;
        let again = activity.begin();
        drop(again);
        tokio::time::sleep(idle / 2 + Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "a request restarts the idle time");
        tokio::time::sleep(idle).await;
        assert!(waiting.is_finished(), "no request for the whole idle time");
    }
}
