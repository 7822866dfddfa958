//! Reading a request body within a limit, and refusing one without losing the answer.

use super::budget::{ByteBudget, Held};
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

/// A request body that is lingered on (see `linger`) if it is dropped unread, so every refusal
/// given on a request's head (no route, wrong method, a declared length over the limit) reaches a
/// client that is still sending, whichever early return gives it.
pub(crate) struct Unconsumed(Option<Incoming>);

impl Unconsumed {
    pub(crate) fn new(body: Incoming) -> Self {
        Self(Some(body))
    }

    /// The body, to be read now.
    pub(crate) fn into_inner(mut self) -> Incoming {
        match self.0.take() {
            Some(body) => body,
            // `new` holds a body and only this, consuming the guard, takes it.
            None => unreachable!("an Unconsumed body is taken once"),
        }
    }
}

impl Drop for Unconsumed {
    fn drop(&mut self) {
        if let Some(body) = self.0.take()
            && !hyper::body::Body::is_end_stream(&body)
        {
            linger(body);
        }
    }
}

/// Why a body was not read whole.
pub(crate) enum Unread {
    /// Over the limit: the rest, to linger on.
    TooLarge(Incoming),
    /// The process's byte budget has no room for it now: the rest, to linger on.
    NoRoom(Incoming),
    /// The client's stream failed.
    Failed,
}

/// The body, if it is at most `limit` bytes and fits in `budget`, with the bytes it holds there
/// (keep them until the request is done). A declared length is taken from the budget before any
/// byte is read; a body without one takes its bytes frame by frame. A body in one frame (the
/// common small one) is not copied.
pub(crate) async fn read_limited(
    mut body: Incoming,
    limit: usize,
    declared: Option<u64>,
    budget: &ByteBudget,
) -> Result<(Bytes, Held), Unread> {
    let mut held = Held::default();
    // A declared length over the limit is the caller's 413; here it is at most `limit`.
    let upfront = declared.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX).min(limit));
    if !budget.grow(&mut held, upfront) {
        return Err(Unread::NoRoom(body));
    }
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
        // Past what was declared (or with nothing declared): this frame's bytes first.
        let short = len.saturating_sub(held.bytes());
        if !budget.grow(&mut held, short) {
            return Err(Unread::NoRoom(body));
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
    Ok((first.unwrap_or_else(|| more.freeze()), held))
}
