//! What one delivery attempt came to, whatever the app's protocol; and errors in one line for logs.

use bytes::Bytes;

/// What one delivery attempt came to.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The app answered (any status).
    Answer {
        /// HTTP status.
        status: u16,
        /// Media type of the body.
        content_type: String,
        /// The app's header fields that pass to the client (`switchyard_protocol::headers::RESPONSE`).
        headers: switchyard_protocol::headers::Fields,
        /// Body (empty when it streams).
        body: Bytes,
        /// The rest of the body when the app streams it (chunked, `text/event-stream`, or larger
        /// than one frame) to a router that takes streams: read as the app writes it.
        stream: Option<super::app_body::AppBody>,
    },
    /// The app could not be reached or broke the connection.
    Unreachable(String),
    /// The app did not answer within the attempt's deadline.
    TimedOut,
    /// The event cannot be expressed as a request (a header value is not legal).
    Invalid(String),
}

/// The error and its sources, one line.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
