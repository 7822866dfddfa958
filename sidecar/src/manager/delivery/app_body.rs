//! An app's answer body read as it arrives, and the stack of idle connections it goes back to once
//! read to its end. Apart from `app_conns`, so the delivery outcome can carry such a body without
//! importing the connection code (which imports the outcome's error formatting).

use crate::net::stream::out_body::OutBody;
use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, ready};
use std::time::Instant;

/// The sending half of one HTTP/1 connection to the app.
pub(super) type Sender = SendRequest<OutBody>;

/// An answer's body as the app writes it. Its connection goes back to the idle stack once the body
/// was read to its end, so a streamed answer costs no new connection; one dropped unfinished closes
/// its connection with it (the app may still be writing the rest).
pub(crate) struct AppBody {
    body: Incoming,
    back: Option<(Sender, Arc<Idle>)>,
}

impl std::fmt::Debug for AppBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppBody")
            .field("body", &self.body)
            .field("reusable", &self.back.is_some())
            .finish()
    }
}

impl AppBody {
    /// `body`, whose connection `sender` goes back to `idle` once the body ended.
    pub(super) fn new(body: Incoming, sender: Sender, idle: Arc<Idle>) -> AppBody {
        AppBody {
            body,
            back: Some((sender, idle)),
        }
    }

    fn give_back(&mut self) {
        if let Some((sender, idle)) = self.back.take() {
            idle.give_back(sender);
        }
    }
}

impl Body for AppBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.body).poll_frame(cx));
        match &frame {
            None => this.give_back(),
            Some(Ok(_)) if this.body.is_end_stream() => this.give_back(),
            // A failed body leaves its connection unusable: dropped with the sender.
            Some(Err(_)) => this.back = None,
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Open connections between requests, most recently used on top.
pub(super) struct Idle {
    stack: Mutex<Vec<(Sender, Instant)>>,
    max: usize,
}

impl Idle {
    /// An empty stack keeping at most `max` connections.
    pub(super) fn new(max: usize) -> Idle {
        Idle {
            stack: Mutex::new(Vec::new()),
            max,
        }
    }

    /// The stack, most recently used on top.
    pub(super) fn stack(&self) -> MutexGuard<'_, Vec<(Sender, Instant)>> {
        // The stack holds no invariant a panic could break: keep using it.
        self.stack.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `sender` for the next request, unless it closed or the stack is full.
    pub(super) fn give_back(&self, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.stack();
        if idle.len() < self.max {
            idle.push((sender, Instant::now()));
        }
    }
}
