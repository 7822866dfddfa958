//! Reading a request body within a limit, and refusing one without losing the answer.

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::time::Duration;

/// How much of a refused body is still read and dropped, and for how long. A client still sending
/// when the 413 is written would otherwise meet a closed socket with its bytes unread, which the
/// kernel answers with RST, and an RST can discard the 413 at the client before it reads it (the
/// "lingering close" of nginx and Apache). Bounded so a refused client cannot hold the task.
const LINGER_BYTES: usize = 16 << 20;
const LINGER_TIME: Duration = Duration::from_secs(2);

/// Reads and drops what is left of `body` in the background, within the bounds above.
pub(crate) fn linger(mut body: Incoming) {
    tokio::spawn(async move {
        let mut seen = 0usize;
        let drain = async {
            while let Some(Ok(frame)) = body.frame().await {
                seen += frame.data_ref().map_or(0, |d| d.len());
                if seen > LINGER_BYTES {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(LINGER_TIME, drain).await;
    });
}

/// Why a body was not read whole.
pub(crate) enum Unread {
    /// Over the limit: the rest, to linger on.
    TooLarge(Incoming),
    /// The client's stream failed.
    Failed,
}

/// The body, if it is at most `limit` bytes. A body in one frame (the common small one) is not
/// copied.
pub(crate) async fn read_limited(mut body: Incoming, limit: usize) -> Result<Bytes, Unread> {
    let mut first: Option<Bytes> = None;
    let mut more = BytesMut::new();
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|_| Unread::Failed)?.into_data() else {
            continue;
        };
        len += data.len();
        if len > limit {
            return Err(Unread::TooLarge(body));
        }
        match first.take() {
            None if more.is_empty() => first = Some(data),
            Some(f) => {
                more.extend_from_slice(&f);
                more.extend_from_slice(&data);
            }
            None => more.extend_from_slice(&data),
        }
    }
    Ok(first.unwrap_or_else(|| more.freeze()))
}
