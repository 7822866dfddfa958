//! The WebSocket listener: upgrades on the HTTP port at `listeners.websocket.path`; each message is
//! a command routed like an HTTP request (see `incoming.rs`, `outgoing.rs`), plus push subscriptions.

mod handshake;
mod incoming;
mod outgoing;
pub(crate) mod push;
mod session;

use super::Edge;
use crate::answer::http::Reply;
use crate::middleware::Grant;
use crate::routes::ws::WsRoutes;
use crate::timing::StageTimes;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONNECTION, HeaderName, HeaderValue, SEC_WEBSOCKET_ACCEPT, UPGRADE};
use hyper::{Request, Response, StatusCode};
use push::Hub;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What the WebSocket listener needs beside the [`Edge`]: its routes, the push hub, and the drain.
pub(crate) struct WsEdge {
    /// Path, size limit and command routes.
    pub routes: WsRoutes,
    /// Subscriptions of this router process.
    pub hub: Arc<Hub>,
    /// Fires when the router drains: sessions finish their replies and close with 1001.
    pub drain: CancellationToken,
    /// Open sessions, awaited by the drain.
    pub sessions: TaskTracker,
}

fn problem(status: u16, detail: &str, start: Instant) -> Response<Full<Bytes>> {
    let times = StageTimes {
        listener: Some(start.elapsed()),
        total: start.elapsed(),
        ..StageTimes::default()
    };
    Reply::problem(status, detail).into_response(Some(&times))
}

/// Answers a request on the WebSocket path: 101 and a session, or a problem saying what to send.
pub(crate) fn upgrade(edge: &Arc<Edge>, mut req: Request<Incoming>) -> Response<Full<Bytes>> {
    let start = Instant::now();
    let Some(ws) = edge.ws.as_ref() else {
        return problem(404, "no WebSocket endpoint here", start);
    };
    let accept = match handshake::check(req.method(), req.version(), req.headers()) {
        Ok(a) => a,
        Err(refused) => {
            edge.metrics.ws.message(incoming::INVALID, refused.status);
            let mut resp = problem(refused.status, &refused.detail, start);
            for (name, value) in refused.headers {
                resp.headers_mut().insert(
                    HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                );
            }
            return resp;
        }
    };
    if ws.drain.is_cancelled() {
        return problem(
            503,
            "this router is draining; connect to another one",
            start,
        );
    }
    let Ok(accept) = HeaderValue::from_str(&accept) else {
        return problem(400, "the Sec-WebSocket-Key cannot be answered", start);
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    // The session's span continues the upgrade request's trace; each message starts its own.
    let traceparent = req
        .headers()
        .get(crate::traceparent::HEADER)
        .map(|v| v.as_bytes().to_vec());
    // Its tracestate goes with every message (each a trace linked to the session's).
    let tracestate = crate::traceparent::tracestate_in(traceparent.as_deref(), req.headers());
    // The credential the auth middleware admitted: the session ends when it lapses.
    let grant = req.extensions_mut().remove::<Grant>();
    let edge = edge.clone();
    // The session keeps the connection's place under the connection caps until it ends.
    let held = req
        .extensions_mut()
        .remove::<crate::net::conn::tracked::Held>();
    ws.sessions.spawn(async move {
        let _held = held;
        match on_upgrade.await {
            Ok(upgraded) => session::run(edge, upgraded, traceparent, tracestate, grant).await,
            Err(e) => tracing::debug!(error = %e, "WebSocket upgrade failed"),
        }
    });
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(SEC_WEBSOCKET_ACCEPT, accept);
    resp
}
