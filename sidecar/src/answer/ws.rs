//! An [`Answer`](super::Answer) in a WebSocket reply: the `error` member (title and detail) and
//! `retryAfter`, beside the reply's `status`.

use super::Answer;
use serde_json::{Map, Value, json};

/// Sets `error` and, when a retry is safe, `retryAfter` on a reply object.
pub(crate) fn error_members(answer: &Answer, reply: &mut Map<String, Value>) {
    reply.insert(
        "error".into(),
        json!({"title": answer.title(), "detail": answer.detail}),
    );
    if let Some(secs) = answer.retry_after {
        reply.insert("retryAfter".into(), Value::from(secs));
    }
}
