//! `CallStream`: the app's answer relayed as server-streamed messages, the first with its status
//! and media type, then one for each part of a streamed body as it arrives. A client that goes away
//! drops the body, which resets its stream (the manager stops reading the app); an answer cut on
//! the way ends the call with an error, never as if it were whole.

use super::message::AppAnswer;
use http_body_util::BodyExt;
use switchyard_protocol::gateway::v1::CallChunk;
use tokio::sync::mpsc;
use tonic::Status;

/// Messages queued towards the client: what is beyond them waits in the stream's window.
pub(super) const CHUNKS_QUEUED: usize = 16;

/// Sends `answer` on `tx`, the body as it comes.
pub(super) async fn relay(answer: AppAnswer, tx: mpsc::Sender<Result<CallChunk, Status>>) {
    let first = CallChunk {
        status: answer.status.into(),
        content_type: answer.content_type,
        data: answer.payload.to_vec(),
    };
    if tx.send(Ok(first)).await.is_err() {
        return;
    }
    let Some(mut body) = answer.stream else {
        return;
    };
    while let Some(frame) = body.frame().await {
        let chunk = match frame {
            Ok(f) => match f.into_data() {
                Ok(data) => Ok(CallChunk {
                    status: 0,
                    content_type: String::new(),
                    data: data.to_vec(),
                }),
                // Trailers: the body ended.
                Err(_) => continue,
            },
            Err(e) => Err(Status::data_loss(format!(
                "the app's streamed answer was cut: {e}"
            ))),
        };
        let failed = chunk.is_err();
        if tx.send(chunk).await.is_err() || failed {
            return;
        }
    }
}
