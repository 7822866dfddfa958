//! A raw tokio-tungstenite echo: every text or binary message comes back unchanged. The load generator's
//! `{"command","id"}` messages carry their id, so an echo is a matching reply.

use futures::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// Serves until the process ends.
pub async fn serve(listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
                return;
            };
            let (mut tx, mut rx) = ws.split();
            while let Some(Ok(m)) = rx.next().await {
                let reply = match m {
                    Message::Text(_) | Message::Binary(_) => m,
                    Message::Close(_) => break,
                    // tungstenite answers pings itself.
                    _ => continue,
                };
                if tx.send(reply).await.is_err() {
                    break;
                }
            }
        });
    }
}
