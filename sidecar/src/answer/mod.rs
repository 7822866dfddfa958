//! The one mapping from "why there is no app answer" to what every front door says: the HTTP status,
//! the gRPC code, the problem+json title and detail, and Retry-After. HTTP, gRPC, WebSocket and the
//! manager's local API all render an [`Answer`]; none of them maps a failure on its own.
//!
//! Pure. `http.rs` and `grpc.rs` render an answer for their protocol; the WebSocket listener puts the
//! same fields into its `error` member.
//!
//! Promises, whatever the protocol: 503 (and its gRPC codes UNAVAILABLE / RESOURCE_EXHAUSTED) means
//! the event was not handled (for a publish: not accepted) and a retry is safe, so it carries
//! Retry-After; 502 (UNKNOWN) means it was sent and may have been handled; 504 (DEADLINE_EXCEEDED)
//! means no reply came in time. `docs/delivery.md` states what each promise covers per operation.

pub(crate) mod grpc;
pub(crate) mod http;
pub(crate) mod ws;

use bytes::Bytes;
use std::time::Duration;
use tonic::Code;

/// Seconds a client is asked to wait before retrying a request the mesh did not handle.
pub(crate) const RETRY_AFTER_SECS: u64 = 1;

/// Seconds a client is asked to wait before retrying a publish its Manager's full stream refused:
/// a backlog drains at the app's pace, not in the second a shed request waits.
pub(crate) const STREAM_FULL_RETRY_AFTER_SECS: u64 = 5;

/// A manager's deadline answer that arrives this close to the router's own deadline is that deadline
/// passing there: it is reported as the router's timeout, in the same words.
pub(crate) const DEADLINE_SLACK: Duration = Duration::from_millis(50);

/// Why an event got no answer from its handler app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// This sidecar's bound on pending requests is reached; nothing was sent.
    Shed,
    /// No Manager handles the event type.
    NoManager,
    /// No endpoint of the Manager is connected; nothing was sent.
    NoEndpoint,
    /// The Manager gave no credit before the deadline; nothing was sent.
    NoCredit,
    /// The deadline passed after the event was sent.
    Timeout,
    /// The connection failed after the event was written: it may have been handled.
    Lost,
    /// The event is larger than the mesh carries; nothing was sent.
    TooLarge {
        /// Its size in bytes.
        bytes: usize,
    },
    /// A streamed request body went over the route's `bodyLimit` (413).
    OverLimit {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body is larger than the chosen Manager's sidecar takes whole: it is of a version that
    /// does not speak streams (its HELLO offered none), so it takes one frame's worth (413).
    PeerTakesNoStreams {
        /// The most that sidecar takes, in bytes.
        max: usize,
    },
    /// The event store (JetStream) did not confirm a durable publish: it may or may not be kept,
    /// so a retry with the same ce-id is safe (the stream drops the duplicate).
    NotKept,
    /// A durable publish reused a key (same event type and publisher, within the duplicate window)
    /// for another event (409); nothing was stored.
    KeyReused {
        /// The key (the publisher's ce-id or Idempotency-Key).
        key: String,
    },
    /// A durable publish found its Manager's stream full (`limit`: its `durable.maxBytes`, or the
    /// events a stream holds at most); nothing was stored and nothing stored was dropped, so a
    /// retry is safe once the Manager's app works its backlog down.
    StreamFull {
        /// The Manager whose stream is full.
        manager: String,
        /// The limit reached, as the store words it.
        limit: String,
    },
    /// A durable event is larger than the event store's server takes (NATS `max_payload`, 413);
    /// nothing was stored.
    StoreTooLarge {
        /// The event's size in bytes.
        bytes: usize,
        /// The server's `max_payload`.
        max: usize,
    },
    /// The manager sidecar answered instead of the app (its queue was full, the app was unreachable,
    /// every attempt failed, ...): its status and its problem detail.
    Manager {
        /// The manager's status.
        status: u16,
        /// The manager's problem detail.
        detail: String,
    },
}

impl Failure {
    /// A short name for spans (`error.type`) and logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Failure::Shed => "shed",
            Failure::NoManager => "no_manager",
            Failure::NoEndpoint => "no_endpoint",
            Failure::NoCredit => "no_credit",
            Failure::Timeout => "timeout",
            Failure::Lost => "lost",
            Failure::TooLarge { .. } => "too_large",
            Failure::OverLimit { .. } => "over_limit",
            Failure::PeerTakesNoStreams { .. } => "peer_takes_no_streams",
            Failure::NotKept => "not_kept",
            Failure::KeyReused { .. } => "key_reused",
            Failure::StreamFull { .. } => "stream_full",
            Failure::StoreTooLarge { .. } => "store_too_large",
            Failure::Manager { .. } => "manager",
        }
    }
}

/// What a front door says when it does not pass on an app's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// HTTP status (also the WebSocket reply's `status` and gRPC `ConnectReply.status`).
    pub(crate) status: u16,
    /// gRPC status code.
    pub(crate) code: Code,
    /// Problem detail: what happened and what to do, never an internal error.
    pub(crate) detail: String,
    /// Retry-After seconds, when trying again later is safe.
    pub(crate) retry_after: Option<u64>,
}

impl Answer {
    /// The answer to `failure` for an event of type `event` whose reply was awaited for `within`.
    pub(crate) fn of(failure: &Failure, event: &str, within: Duration) -> Answer {
        let retry = |status, code, detail: String| Answer {
            status,
            code,
            detail,
            retry_after: Some(RETRY_AFTER_SECS),
        };
        match failure {
            Failure::Shed => retry(
                503,
                Code::ResourceExhausted,
                "too many requests pending in this sidecar; retry shortly".to_owned(),
            ),
            Failure::NoManager => retry(
                503,
                Code::Unavailable,
                format!("no Manager handles event type {event}"),
            ),
            Failure::NoEndpoint => retry(
                503,
                Code::Unavailable,
                format!("no endpoint of the Manager for {event} is reachable; retry shortly"),
            ),
            Failure::NoCredit => retry(
                503,
                Code::ResourceExhausted,
                format!("the Manager for {event} is saturated; the request was not sent"),
            ),
            Failure::Timeout => {
                Answer::refusal(504, format!("no reply within {}", duration(within)))
            }
            // Not UNAVAILABLE: that tells gRPC clients a retry is safe, and this one may have been handled.
            Failure::Lost => Answer::refusal(
                502,
                "the connection to the Manager failed after the request was sent; it may have been handled",
            ),
            Failure::TooLarge { bytes } => Answer::refusal(
                413,
                format!(
                    "the event is {bytes} bytes; the mesh carries at most {} bytes",
                    switchyard_protocol::frame::MAX_PAYLOAD
                ),
            ),
            Failure::OverLimit { limit } => {
                Answer::refusal(413, format!("body is larger than {limit} bytes"))
            }
            Failure::PeerTakesNoStreams { max } => Answer::refusal(
                413,
                format!(
                    "the body is larger than {max} bytes, the most the Manager's sidecar takes: it runs a version from before streamed bodies (its HELLO offered no streams); upgrade it, or send a smaller body"
                ),
            ),
            Failure::NotKept => retry(
                503,
                Code::Unavailable,
                format!(
                    "the event store did not confirm the {event} event was kept; retry with the same ce-id (a duplicate is dropped)"
                ),
            ),
            Failure::KeyReused { key } => Answer::refusal(
                409,
                format!(
                    "key {key} was already used for another {event} event from this publisher within the duplicate window; use a new key for a new event (a retry must carry the same payload)"
                ),
            ),
            // 503, not 507: the client's retry is what this asks for, and 503 is the status clients
            // and gRPC (RESOURCE_EXHAUSTED) retry; its detail names the limit, so it reads apart
            // from an unreachable store.
            Failure::StreamFull { manager, limit } => Answer {
                status: 503,
                code: Code::ResourceExhausted,
                detail: format!(
                    "the {event} event was not kept: the event store of Manager {manager} is full ({limit}) of events not yet delivered; retry once its app has worked the backlog down, or raise the limit"
                ),
                retry_after: Some(STREAM_FULL_RETRY_AFTER_SECS),
            },
            Failure::StoreTooLarge { bytes, max } => Answer::refusal(
                413,
                format!(
                    "the {event} event is {bytes} bytes; with its headers it is more than the {max} bytes the event store's server takes (NATS max_payload): raise the server's max_payload, or send a smaller event"
                ),
            ),
            // A full queue there is saturation, as here: the event was not handled.
            Failure::Manager {
                status: 503,
                detail,
            } => retry(503, Code::ResourceExhausted, detail.clone()),
            Failure::Manager { status, detail } => Answer::refusal(*status, detail.clone()),
        }
    }

    /// A refusal with `status` and `detail` (edge checks, middleware, bad input): the gRPC code of
    /// the same meaning, and Retry-After on a 503.
    pub(crate) fn refusal(status: u16, detail: impl Into<String>) -> Answer {
        Answer {
            status,
            code: code_of(status),
            detail: detail.into(),
            retry_after: (status == 503).then_some(RETRY_AFTER_SECS),
        }
    }

    /// The same answer asking the client to wait `secs` before retrying (429, 503).
    pub(crate) fn retry_after(mut self, secs: u64) -> Answer {
        self.retry_after = Some(secs);
        self
    }

    /// The problem title: the status's reason phrase.
    pub(crate) fn title(&self) -> &'static str {
        crate::problem::title(self.status)
    }

    /// The RFC 9457 problem body.
    pub(crate) fn problem_body(&self) -> Bytes {
        crate::problem::body(self.status, self.title(), &self.detail)
    }
}

/// The gRPC code of an HTTP status, as the gRPC spec's HTTP mapping reads in reverse.
pub(crate) fn code_of(status: u16) -> Code {
    match status {
        200..=299 => Code::Ok,
        400 | 411 | 415 | 422 => Code::InvalidArgument,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        405 | 501 => Code::Unimplemented,
        408 | 504 => Code::DeadlineExceeded,
        409 => Code::Aborted,
        412 => Code::FailedPrecondition,
        413 => Code::OutOfRange,
        429 => Code::ResourceExhausted,
        499 => Code::Cancelled,
        500 => Code::Internal,
        503 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// A duration as every answer writes it: whole seconds as `2s`, anything else in milliseconds (`1500ms`).
pub(crate) fn duration(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests;
