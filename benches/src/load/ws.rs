//! WebSocket round trips: each worker keeps one socket and sends `{"command": C, "id": N}`, waiting for
//! the reply that carries the same id (the router's protocol).

use super::{RETRY_PAUSE, Tally, Window};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Whether a reply answers request `id` with a success status.
pub fn reply_matches(text: &str, id: u64) -> Option<bool> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    if v.get("id")?.as_u64()? != id {
        return None;
    }
    let status = v.get("status").and_then(|s| s.as_u64()).unwrap_or(200);
    Some((200..300).contains(&status))
}

async fn round_trip(ws: &mut Socket, command: &str, id: u64) -> bool {
    let msg = serde_json::json!({"command": command, "id": id}).to_string();
    if ws.send(Message::text(msg)).await.is_err() {
        return false;
    }
    while let Some(Ok(m)) = ws.next().await {
        if let Message::Text(t) = m
            && let Some(ok) = reply_matches(t.as_str(), id)
        {
            return ok;
        }
    }
    false
}

/// A closed-loop WebSocket worker.
pub async fn worker(url: String, command: String, w: Window) -> Tally {
    let mut tally = Tally::new();
    let mut ws: Option<Socket> = None;
    let mut id = 0u64;
    while Instant::now() < w.end {
        let Some(s) = ws.as_mut() else {
            ws = tokio_tungstenite::connect_async(url.as_str())
                .await
                .ok()
                .map(|(s, _)| s);
            if ws.is_none() {
                tally.count(&w, Instant::now(), false);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            continue;
        };
        id += 1;
        let sent = Instant::now();
        let ok = round_trip(s, &command, id).await;
        tally.count(&w, sent, ok);
        if !ok {
            ws = None;
        }
    }
    if let Some(mut s) = ws {
        let _ = s.close(None).await;
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_replies_by_id_and_status() {
        assert_eq!(
            reply_matches(r#"{"id":3,"status":200,"data":{}}"#, 3),
            Some(true)
        );
        assert_eq!(reply_matches(r#"{"id":3,"status":503}"#, 3), Some(false));
        assert_eq!(reply_matches(r#"{"id":2,"status":200}"#, 3), None);
        assert_eq!(reply_matches("not json", 3), None);
    }
}
