//! One attempt at a call on one connection to a manager: take a credit, register the request,
//! write its head (with its body whole, or streamed after it), then wait for the answer and say
//! whether another endpoint may be tried.

use super::conn::{self, Answered, Conn, Lost, Slot};
use super::upload::{self, Upload};
use super::{Attempt, CallError, CallTimes, Outgoing, Upstream};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;
use switchyard_protocol::frame::{FLAG_NO_REPLY, Frame, MAX_PAYLOAD};
use tokio::sync::oneshot;
use tokio::time::{error::Elapsed, timeout_at};

/// How an attempt's wait for its answer ended: the deadline, the connection's end, or the answer
/// (or its loss).
type Waited = Result<Result<Result<Answered, Lost>, oneshot::error::RecvError>, Elapsed>;

impl Upstream {
    /// One try on `conn`: the attempt's outcome says whether another endpoint may take it.
    pub(super) async fn once(
        &self,
        conn: &Arc<Conn>,
        out: &Outgoing,
        flags: u8,
        deadline: Instant,
        times: &mut CallTimes,
    ) -> Result<Answered, Attempt> {
        self.take_credit(conn, out, deadline, times).await?;
        let no_reply = flags & FLAG_NO_REPLY != 0;
        let publish = no_reply.then(|| conn::Published {
            event: out.event.clone(),
            ce_id: out.ce_id.clone(),
        });
        let slot = conn.register(publish).ok_or(Attempt::NotSent)?;
        let mut guard = CancelOnDrop {
            conn,
            id: slot.id,
            // A published event belongs to the manager once written: nothing to cancel.
            armed: !no_reply,
        };
        let (payload, streamed, flags) = body_for(conn, out, flags, deadline).await?;
        let frame = request_frame(out, slot.id, flags, no_reply, deadline, payload);
        // Opened before the head is queued, so a WINDOW answering it finds it.
        let window = streamed.map(|(_, w)| conn.open_upload(slot.id, w));
        times.sent = Some(Instant::now());
        match timeout_at(deadline.into(), conn.send(frame)).await {
            Err(_) => return Err(Attempt::Failed(CallError::Timeout)),
            Ok(Err(conn::Closed)) => {
                guard.armed = false;
                return Err(Attempt::NotSent);
            }
            Ok(Ok(())) => {}
        }
        let answer = match (streamed, window) {
            (Some((up, _)), Some(window)) => {
                // Boxed: this rare path's future is most of `once`'s size, and every request's
                // future (the listener's, the dispatch's) holds room for it and is moved with it.
                Box::pin(stream_until_answered(conn, slot, up, window, deadline)).await?
            }
            _ => timeout_at(deadline.into(), slot.reply).await,
        };
        settle(answer, &mut guard, no_reply, times)
    }

    /// Waits (until `deadline`) for a credit on `conn`, and spends it.
    async fn take_credit(
        &self,
        conn: &Conn,
        out: &Outgoing,
        deadline: Instant,
        times: &mut CallTimes,
    ) -> Result<(), Attempt> {
        let waited = Instant::now();
        self.metrics.queued.inc();
        let waiting = self.metrics.wait(&out.event);
        let credit = timeout_at(deadline.into(), conn.credits.acquire()).await;
        drop(waiting);
        self.metrics.queued.dec();
        times.credit_wait += waited.elapsed();
        match credit {
            Err(_) => Err(Attempt::Failed(CallError::NoCredit)),
            Ok(Err(_closed)) => Err(Attempt::NotSent),
            // The manager re-grants the credit when it finishes the work, so it is consumed here.
            Ok(Ok(permit)) => {
                permit.forget();
                Ok(())
            }
        }
    }
}

/// The head's payload, the body to stream after it (with the manager's window) and the flags. A
/// body to stream goes to a manager that speaks streams; one that does not (an older version) gets
/// it whole in the head, when it fits a frame.
async fn body_for<'o>(
    conn: &Conn,
    out: &'o Outgoing,
    flags: u8,
    deadline: Instant,
) -> Result<(Bytes, Option<(&'o Upload, u32)>, u8), Attempt> {
    let Some(up) = &out.upload else {
        return Ok((out.payload.clone(), None, flags));
    };
    if let Some(window) = conn.peer_window() {
        let flags = flags | switchyard_protocol::stream::FLAG_MORE;
        return Ok((out.payload.clone(), Some((up, window)), flags));
    }
    let Some(body) = up.take() else {
        return Err(Attempt::Failed(CallError::Lost));
    };
    let max = up.limit.min(MAX_PAYLOAD - 4096);
    match timeout_at(deadline.into(), upload::read_whole(body, max)).await {
        Err(_) => Err(Attempt::Failed(CallError::Timeout)),
        Ok(Ok(whole)) => Ok((whole, None, flags)),
        Ok(Err(upload::UploadError::TooLarge(_))) if max < up.limit => {
            Err(Attempt::Failed(CallError::PeerTakesNoStreams { max }))
        }
        Ok(Err(upload::UploadError::TooLarge(_))) => {
            Err(Attempt::Failed(CallError::OverLimit { limit: up.limit }))
        }
        Ok(Err(_)) => Err(Attempt::Failed(CallError::Lost)),
    }
}

/// The REQUEST frame of `out` as request `id`.
fn request_frame(
    out: &Outgoing,
    id: u64,
    flags: u8,
    no_reply: bool,
    deadline: Instant,
    payload: Bytes,
) -> Frame {
    let remaining = deadline.saturating_duration_since(Instant::now());
    // The publisher's deadline only bounds getting the event out; the manager then delivers
    // under its own attempt timeout and retries.
    let deadline_ms = if no_reply {
        0
    } else {
        u32::try_from(remaining.as_millis())
            .unwrap_or(u32::MAX)
            .max(1)
    };
    Frame::Request(out.request(id, flags, deadline_ms, payload))
}

/// Streams the request's body within the manager's window while waiting for the answer; the
/// stream is closed once answered (the rest of the body is not wanted) or out of time, and reset
/// when the body fails.
async fn stream_until_answered(
    conn: &Conn,
    slot: Slot,
    up: &Upload,
    window: Arc<crate::net::stream::window::SendWindow>,
    deadline: Instant,
) -> Result<Waited, Attempt> {
    let Some(body) = up.take() else {
        return Err(Attempt::Failed(CallError::Lost));
    };
    let pumped = upload::pump(conn, slot.id, body, &window, up.limit);
    let answer = timeout_at(deadline.into(), async {
        tokio::pin!(pumped);
        let mut reply = slot.reply;
        let mut pumping = true;
        loop {
            tokio::select! {
                r = &mut reply => return Ok(r),
                p = &mut pumped, if pumping => {
                    pumping = false;
                    p?;
                }
            }
        }
    })
    .await;
    match answer {
        Err(elapsed) => {
            conn.close_upload(slot.id, None);
            Ok(Err(elapsed))
        }
        Ok(Ok(r)) => {
            // Answered: whatever is left of the body is not wanted.
            conn.close_upload(slot.id, None);
            Ok(Ok(r))
        }
        Ok(Err(e)) => {
            let code = switchyard_protocol::stream::code::CANCEL;
            conn.close_upload(slot.id, Some(code));
            Err(Attempt::Failed(match e {
                upload::UploadError::TooLarge(_) => CallError::OverLimit { limit: up.limit },
                _ => CallError::Lost,
            }))
        }
    }
}

/// The attempt's outcome from how its wait ended; disarms the cancel once nothing is left to cancel.
fn settle(
    answer: Waited,
    guard: &mut CancelOnDrop<'_>,
    no_reply: bool,
    times: &mut CallTimes,
) -> Result<Answered, Attempt> {
    match answer {
        Err(_) => Err(Attempt::Failed(CallError::Timeout)),
        Ok(Ok(Ok(resp))) => {
            guard.armed = false;
            times.received = Some(Instant::now());
            if no_reply && resp.head.from_mesh && resp.head.status == 503 {
                return Err(Attempt::Refused(resp.head));
            }
            Ok(resp)
        }
        Ok(Ok(Err(lost))) => {
            guard.armed = false;
            // A publish not acknowledged was not taken: another endpoint may take it (with
            // the same ce-id, so a pod that took it and died makes a duplicate, not a loss).
            if lost.written && !no_reply {
                Err(Attempt::Failed(CallError::Lost))
            } else {
                Err(Attempt::NotSent)
            }
        }
        Ok(Err(_)) => {
            guard.armed = false;
            Err(Attempt::Failed(CallError::Lost))
        }
    }
}

/// Sends CANCEL when a request is abandoned: its deadline passed or the client went away (the
/// listener drops the request future).
struct CancelOnDrop<'a> {
    conn: &'a Conn,
    id: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.conn.cancel(self.id);
        }
    }
}
