//! An app's streamed answer on its way to the router: the head (RESPONSE flagged MORE), then the
//! app's body in DATA frames as the app writes it, never more in flight than the router's window,
//! then TRAILERS (the app's time to the end, the app's trailers) or a RESET. Holds at most one
//! chunk of the app's body: the app is read only as fast as the router takes it.

use crate::manager::delivery::app_body::AppBody;
use crate::net::stream::window::SendWindow;
use bytes::Bytes;
use http_body_util::BodyExt;
use std::time::Instant;
use switchyard_protocol::frame::{Frame, Response};
use switchyard_protocol::stream::{self, Data, Reset, Trailers, code};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How a streamed answer ended, for its last frame.
pub(crate) enum Ended {
    /// The app's body ended: its trailers, and the app's time from delivery to the end.
    Done {
        /// The app's HTTP trailers.
        fields: Vec<(String, String)>,
        /// Microseconds from the delivery to the body's end.
        app_us: u32,
    },
    /// The router reset the stream (its client went away) or the connection ended.
    Cancelled,
    /// The app's body failed (it broke the connection mid-body).
    Failed,
}

/// Sends `head` and pumps `body` into DATA frames under `window`, until the end or `cancel`.
pub(crate) async fn pump(
    tx: &mpsc::Sender<Frame>,
    head: Response,
    mut body: AppBody,
    window: &SendWindow,
    cancel: &CancellationToken,
) -> Ended {
    let id = head.id;
    let started = Instant::now();
    let app_head_us = head.app_us;
    if tx.send(Frame::Response(head)).await.is_err() {
        return Ended::Cancelled;
    }
    let mut fields = Vec::new();
    loop {
        let frame = tokio::select! {
            f = body.frame() => f,
            _ = cancel.cancelled() => return Ended::Cancelled,
        };
        let frame = match frame {
            None => break,
            Some(Err(e)) => {
                tracing::warn!(id, error = %e, "the app's streamed answer failed");
                return Ended::Failed;
            }
            Some(Ok(f)) => f,
        };
        let frame = match frame.into_data() {
            Ok(data) => {
                if !send_data(tx, id, data, window, cancel).await {
                    return Ended::Cancelled;
                }
                continue;
            }
            Err(f) => f,
        };
        if let Ok(trailers) = frame.into_trailers() {
            for (name, value) in &trailers {
                if let Ok(v) = value.to_str() {
                    fields.push((name.as_str().to_owned(), v.to_owned()));
                }
            }
        }
    }
    let app_us = app_head_us
        .saturating_add(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
    Ended::Done { fields, app_us }
}

/// Sends `data` in DATA frames as the window allows; false when the stream ended meanwhile.
async fn send_data(
    tx: &mpsc::Sender<Frame>,
    id: u64,
    data: Bytes,
    window: &SendWindow,
    cancel: &CancellationToken,
) -> bool {
    for mut chunk in stream::chunks(data) {
        while !chunk.is_empty() {
            let n = tokio::select! {
                n = window.take(chunk.len()) => n,
                _ = cancel.cancelled() => None,
            };
            let Some(n) = n else { return false };
            let part = chunk.split_to(n);
            let frame = Frame::Data(Data {
                id,
                end: false,
                returns_credit: false,
                data: part,
            });
            if tx.send(frame).await.is_err() {
                return false;
            }
        }
    }
    true
}

/// The last frame of a streamed answer, carrying the credit when `credit` (an implicit-credit
/// router whose credit this was).
pub(crate) fn last_frame(id: u64, queue_us: u32, ended: Ended, credit: bool) -> Frame {
    match ended {
        Ended::Done { fields, app_us } => Frame::Trailers(Trailers {
            id,
            queue_us,
            app_us,
            // A trailer set the frame cannot carry is dropped rather than the stream failed.
            fields: if fields.len() > 255
                || fields
                    .iter()
                    .any(|(n, v)| n.len() > 255 || v.len() > usize::from(u16::MAX))
            {
                Vec::new()
            } else {
                fields
            },
            returns_credit: credit,
        }),
        Ended::Cancelled => Frame::Reset(Reset {
            id,
            code: code::CANCEL,
            returns_credit: credit,
        }),
        Ended::Failed => Frame::Reset(Reset {
            id,
            code: code::INTERNAL,
            returns_credit: credit,
        }),
    }
}
