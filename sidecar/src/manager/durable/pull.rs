//! One pull request on a durable consumer, over an inbox of its own, so that it can be withdrawn
//! without dropping what the server already sent: [`Pull::stop`] unsubscribes and reads on until
//! the server confirms. nats-server hands a waiting pull request no message once its inbox has no
//! interest, so a withdrawn request takes nothing more, and what it took before comes through
//! [`Pull::next`]. I/O only: the lane decides how many events, and how many bytes, to ask for.

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::consumer::pull::BatchConfig;
use async_nats::jetstream::{self, Message};
use async_nats::{StatusCode, Subscriber};
use futures::StreamExt;
use std::time::Duration;
use tokio::time::Instant;

/// How long an idle lane's request waits on the server before it is renewed.
pub(super) const IDLE_EXPIRES: Duration = Duration::from_secs(10);
/// How long a request for what is there now, or the withdrawal of a request, may take.
const NOW_LIMIT: Duration = Duration::from_secs(5);
/// Past the server's expiry, before a request is given up here: a connection lost meanwhile took
/// the server's timeout status with it.
const LOCAL_SLACK: Duration = Duration::from_secs(2);

/// The events of its batch a request's closing status says the server did not send.
fn unsent(status: &async_nats::Message) -> Option<usize> {
    status
        .headers
        .as_ref()?
        .get("Nats-Pending-Messages")?
        .as_str()
        .trim()
        .parse()
        .ok()
}

/// Why a pull request could not be made (the connection is closing, or lost meanwhile).
#[derive(Debug, thiserror::Error)]
pub(super) enum PullError {
    #[error(transparent)]
    Subscribe(#[from] async_nats::SubscribeError),
    #[error(transparent)]
    Request(#[from] async_nats::jetstream::consumer::pull::BatchRequestError),
}

/// A pull request in progress.
pub(super) struct Pull {
    sub: Subscriber,
    context: jetstream::Context,
    /// Events the request may still bring.
    left: usize,
    /// When it is given up here.
    until: Instant,
    /// The server ended it because the next event is larger than the bytes it had left (409).
    over_bytes: bool,
}

impl Pull {
    /// Asks `consumer` for up to `batch` events of at most `max_bytes` together as the server
    /// counts them (0: no bound): those there now (`wait` none), or else those that come within
    /// `wait`.
    pub(super) async fn start(
        consumer: &PullConsumer,
        context: &jetstream::Context,
        (batch, max_bytes): (usize, usize),
        wait: Option<Duration>,
    ) -> Result<Pull, PullError> {
        let client = context.client();
        let inbox = client.new_inbox();
        let sub = client.subscribe(inbox.clone()).await?;
        let config = BatchConfig {
            batch,
            expires: wait,
            no_wait: wait.is_none(),
            max_bytes,
            ..BatchConfig::default()
        };
        consumer.request_batch(config, inbox.into()).await?;
        Ok(Pull {
            sub,
            context: context.clone(),
            left: batch,
            until: Instant::now() + wait.unwrap_or(NOW_LIMIT) + LOCAL_SLACK,
            over_bytes: false,
        })
    }

    /// The request's next event; `None` once it is over: every event asked for came, the server
    /// said there are none (404), the wait ran out (408), the consumer's limit is reached (409: another
    /// pod holds a partition's event), the next event did not fit the bytes left or the batch is
    /// complete (409) and every event sent before has come, or the request was withdrawn and
    /// everything sent has come.
    pub(super) async fn next(&mut self) -> Option<Message> {
        while self.left > 0 {
            let Ok(Some(message)) = tokio::time::timeout_at(self.until, self.sub.next()).await
            else {
                // The server's own end (a status) never came: the request, or its answer, was
                // lost on the way (a server or route gone meanwhile).
                tracing::debug!(left = self.left, "pull request unanswered by its deadline");
                self.left = 0;
                break;
            };
            match message.status {
                None | Some(StatusCode::OK) => {
                    self.left -= 1;
                    return Some(Message {
                        message,
                        context: self.context.clone(),
                    });
                }
                Some(StatusCode::IDLE_HEARTBEAT) => {}
                Some(status) => {
                    tracing::trace!(%status, description = ?message.description, "pull request over");
                    let said = |what: &str| {
                        status == StatusCode::REQUEST_TERMINATED
                            && message
                                .description
                                .as_deref()
                                .is_some_and(|d| d.contains(what))
                    };
                    let over_bytes = said("MaxBytes");
                    self.over_bytes |= over_bytes;
                    // A replicated consumer sends its events only once their delivery is stored
                    // on a quorum, but the 409s that end a request with a byte bound (the next
                    // event does not fit; the batch is complete with bytes to spare) at once: the
                    // events it sent come after them. The 409 says how many of the batch it did
                    // not send; the others are still to come (dropping them would leave them to
                    // AckWait, counted against their deliveries, and end the same way again).
                    self.left = if over_bytes || said("Batch Completed") {
                        self.left
                            .saturating_sub(unsent(&message).unwrap_or(self.left))
                    } else {
                        0
                    };
                }
            }
        }
        None
    }

    /// Whether the server ended the request because its next event did not fit the bytes left.
    pub(super) fn over_bytes(&self) -> bool {
        self.over_bytes
    }

    /// The bytes the server counts for `msg` against a request's `max_bytes`: its subject, reply
    /// subject, headers and payload.
    pub(super) fn size(msg: &Message) -> usize {
        // The client's length of a message already counts its subject and reply subject.
        msg.length
    }

    /// Withdraws the request: the server sends nothing more once it has the unsubscribe, and what it
    /// sent before still comes through [`Pull::next`], which ends at its confirmation.
    pub(super) async fn stop(&mut self) {
        self.until = self.until.min(Instant::now() + NOW_LIMIT);
        if let Err(e) = self.sub.drain().await {
            tracing::debug!(error = %e, "pull request not withdrawn; the connection is closing");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::HeaderMap;

    fn status(headers: Option<HeaderMap>) -> async_nats::Message {
        async_nats::Message {
            subject: "_INBOX.x".into(),
            reply: None,
            payload: bytes::Bytes::new(),
            headers,
            status: Some(StatusCode::REQUEST_TERMINATED),
            description: Some("Batch Completed".into()),
            length: 0,
        }
    }

    #[test]
    fn a_closing_status_names_the_events_it_did_not_send() {
        let mut h = HeaderMap::new();
        h.insert("Nats-Pending-Messages", "3");
        h.insert("Nats-Pending-Bytes", "1024");
        assert_eq!(unsent(&status(Some(h))), Some(3));
        let mut bad = HeaderMap::new();
        bad.insert("Nats-Pending-Messages", "many");
        assert_eq!(
            unsent(&status(Some(bad))),
            None,
            "unreadable: none assumed sent"
        );
        assert_eq!(unsent(&status(None)), None);
    }
}
