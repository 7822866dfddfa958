//! A client's request body streamed to a manager (issue 14): DATA frames under the manager's window
//! as the client sends, the last with END; at most `limit` bytes (the route's `bodyLimit`). To a
//! manager that speaks no streams (an older version), the body is read whole and sent in one
//! REQUEST as before, up to what a frame carries.

use super::conn::Conn;
use crate::net::stream::window::SendWindow;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::sync::Mutex;
use switchyard_protocol::frame::Frame;
use switchyard_protocol::stream::{self, Data, Trailers};

/// A request body not read yet, sent with the event's head.
pub(crate) struct Upload {
    body: Mutex<Option<Incoming>>,
    /// The most bytes taken (the route's `bodyLimit`).
    pub limit: usize,
}

/// Why an upload stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UploadError {
    /// More than the limit: that many bytes were seen.
    TooLarge(usize),
    /// The client's body failed (it went away mid-body).
    Client,
    /// The stream ended first (the manager reset it, or the connection went).
    Gone,
}

impl Upload {
    /// `body`, to be streamed at most `limit` bytes.
    pub(crate) fn new(body: Incoming, limit: usize) -> Upload {
        Upload {
            body: Mutex::new(Some(body)),
            limit,
        }
    }

    /// The body, once: after its head was written it belongs to that stream.
    pub(crate) fn take(&self) -> Option<Incoming> {
        self.body.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Reads `body` whole, at most `max` bytes (for a manager that takes no streams).
pub(crate) async fn read_whole(mut body: Incoming, max: usize) -> Result<Bytes, UploadError> {
    let mut out = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| UploadError::Client)?;
        if let Ok(d) = frame.into_data() {
            if out.len() + d.len() > max {
                crate::net::body::linger(body);
                return Err(UploadError::TooLarge(out.len() + d.len()));
            }
            out.extend_from_slice(&d);
        }
    }
    Ok(out.freeze())
}

/// Streams `body` on stream `id` of `conn` under `window`: DATA as it arrives, END (or TRAILERS)
/// at its end.
pub(crate) async fn pump(
    conn: &Conn,
    id: u64,
    mut body: Incoming,
    window: &SendWindow,
    limit: usize,
) -> Result<(), UploadError> {
    let mut seen = 0usize;
    loop {
        let Some(frame) = body.frame().await else {
            let end = Frame::Data(Data {
                id,
                end: true,
                returns_credit: false,
                data: Bytes::new(),
            });
            return conn.send(end).await.map_err(|_| UploadError::Gone);
        };
        let frame = frame.map_err(|_| UploadError::Client)?;
        let frame = match frame.into_data() {
            Ok(data) => {
                seen += data.len();
                if seen > limit {
                    // Read on and dropped, so the 413 reaches a client that is still sending.
                    crate::net::body::linger(body);
                    return Err(UploadError::TooLarge(seen));
                }
                send_data(conn, id, data, window).await?;
                continue;
            }
            Err(f) => f,
        };
        if let Ok(trailers) = frame.into_trailers() {
            let fields = trailers
                .iter()
                .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
                .take(255)
                .collect();
            let end = Frame::Trailers(Trailers {
                id,
                queue_us: 0,
                app_us: 0,
                fields,
                returns_credit: false,
            });
            return conn.send(end).await.map_err(|_| UploadError::Gone);
        }
    }
}

async fn send_data(
    conn: &Conn,
    id: u64,
    data: Bytes,
    window: &SendWindow,
) -> Result<(), UploadError> {
    for mut chunk in stream::chunks(data) {
        while !chunk.is_empty() {
            let n = window.take(chunk.len()).await.ok_or(UploadError::Gone)?;
            let part = chunk.split_to(n);
            let frame = Frame::Data(Data {
                id,
                end: false,
                returns_credit: false,
                data: part,
            });
            conn.send(frame).await.map_err(|_| UploadError::Gone)?;
        }
    }
    Ok(())
}
