//! Reads one durable Manager's consumers from JetStream (I/O): consumer info of each planned
//! consumer, and when one is missing the stream's stored messages per subject, once.

use super::lag::{self, Reading};
use async_nats::jetstream::{self, context::ConsumerInfoErrorKind};
use futures::TryStreamExt;
use std::collections::{BTreeMap, HashMap};
use switchyard_crds::Manager;
use switchyard_protocol::durable::{self as plan, ConsumerPlan};

/// Why a backlog could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// A consumer's info was refused or did not come.
    #[error("consumer `{consumer}` of stream `{stream}`: {message}")]
    Consumer {
        /// The stream.
        stream: String,
        /// The consumer.
        consumer: String,
        /// The client's or the server's words.
        message: String,
    },
    /// The stream's per-subject counts were refused or did not come.
    #[error("stream `{stream}`: {message}")]
    Stream {
        /// The stream.
        stream: String,
        /// The client's or the server's words.
        message: String,
    },
    /// The whole read took longer than allowed.
    #[error("no answer from JetStream within {0:?}")]
    Timeout(std::time::Duration),
}

impl ReadError {
    /// The metric label of this failure.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            ReadError::Timeout(_) => "timeout",
            _ => "error",
        }
    }
}

/// The consumers the sidecars of `m` (named `name`) pull its durable types and durable
/// subscriptions from (names and subjects as they create them, from the one plan in
/// `switchyard_protocol::durable`); a subscription's backlog counts under its pattern, as its
/// load does.
pub(crate) fn plans(namespace: &str, name: &str, m: &Manager) -> Vec<ConsumerPlan> {
    let events: Vec<String> = m
        .spec
        .durable_events()
        .iter()
        .map(|e| e.as_str().to_owned())
        .collect();
    let subscriptions: Vec<(String, plan::StartFrom)> = m
        .spec
        .durable_subscriptions()
        .map(|s| (s.event.clone(), s.start().unwrap_or_default()))
        .collect();
    let w = &m.spec.workers;
    let attempts = u32::try_from(w.retries.attempts).unwrap_or(1);
    let ordered = w.ordering_key.is_some();
    let mut plans = plan::consumers(
        namespace,
        name,
        &events,
        w.timeout.into(),
        attempts,
        ordered,
    );
    plans.extend(plan::subscription_consumers(
        namespace,
        name,
        &subscriptions,
        w.timeout.into(),
        attempts,
        ordered,
    ));
    plans
}

/// Reads the backlog of each event type of `plans` in Manager `manager`'s stream.
pub(crate) async fn backlog(
    js: &jetstream::Context,
    namespace: &str,
    manager: &str,
    plans: &[ConsumerPlan],
) -> Result<BTreeMap<String, u64>, ReadError> {
    let name = plan::stream_name(namespace, manager);
    // No request here: consumer info names the stream itself, and says when it is missing.
    let stream = js
        .get_stream_no_info(&name)
        .await
        .map_err(|e| ReadError::Stream {
            stream: name.clone(),
            message: e.to_string(),
        })?;
    let mut readings = Vec::with_capacity(plans.len());
    for p in plans {
        let reading = match stream.consumer_info(&p.name).await {
            Ok(info) => Reading::Consumer {
                pending: info.num_pending,
                ack_pending: u64::try_from(info.num_ack_pending).unwrap_or(u64::MAX),
            },
            Err(e) => match e.kind() {
                ConsumerInfoErrorKind::NotFound => Reading::NoConsumer,
                ConsumerInfoErrorKind::StreamNotFound => Reading::NoStream,
                _ => {
                    return Err(ReadError::Consumer {
                        stream: name,
                        consumer: p.name.clone(),
                        message: e.to_string(),
                    });
                }
            },
        };
        readings.push(reading);
    }
    let mut stored = HashMap::new();
    if lag::needs_subjects(&readings) {
        let stream_err = |e: String| ReadError::Stream {
            stream: name.clone(),
            message: e,
        };
        let full = js
            .get_stream(&name)
            .await
            .map_err(|e| stream_err(e.to_string()))?;
        let subjects = full
            .info_with_subjects(plan::stream_subjects(namespace, manager))
            .await
            .map_err(|e| stream_err(e.to_string()))?;
        let counts: Vec<(String, usize)> = subjects
            .try_collect()
            .await
            .map_err(|e| stream_err(e.to_string()))?;
        stored = counts
            .into_iter()
            .map(|(s, n)| (s, u64::try_from(n).unwrap_or(u64::MAX)))
            .collect();
    }
    Ok(lag::per_event(plans, &readings, &stored))
}
