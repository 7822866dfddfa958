//! The core routing loop in one process, for the criterion bench: route lookup, broker admission and
//! REQUEST encoding on the router side; decode and RESPONSE on a manager task; the RESPONSE decoded
//! back at the router. Frames travel over an in-memory duplex pipe, so the number is the routing
//! core's cost without sockets, the app or HTTP.

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use switchyard_crds::router::RouterSpec;
use switchyard_protocol::frame::{Frame, FrameCodec, Request, Response};
use switchyard_sidecar::bench::Broker;
use switchyard_sidecar::bench::{Lookup, RouteTable};
use switchyard_sidecar::bench::{Metrics, Role};
use tokio::io::DuplexStream;
use tokio_util::codec::Framed;

/// The quickstart's HTTP routes (examples/quickstart.yaml) plus parameterised ones, so lookups scan
/// a realistic table.
pub fn quickstart_table() -> anyhow::Result<RouteTable> {
    let spec: RouterSpec = serde_json::from_value(serde_json::json!({
        "listeners": {"http": {"port": 8080}},
        "routes": [
            {"event": "orders.get", "http": {"method": "GET", "path": "/orders/{id}"}, "params": {"id": "integer"}},
            {"event": "orders.search", "http": {"method": "GET", "path": "/orders/search"}},
            {"event": "orders.update", "http": {"method": "PUT", "path": "/orders/{id}"}},
            {"event": "echo", "http": {"method": "POST", "path": "/echo"},
             "schema": {"type": "object", "required": ["value"], "properties": {"value": {"type": "integer"}}}},
            {"event": "noop", "http": {"method": "GET", "path": "/noop"}},
        ],
    }))?;
    RouteTable::build(&spec).map_err(|e| anyhow::anyhow!("{}: {}", e.field, e.message))
}

/// A router end and a manager task joined by a duplex pipe.
pub struct Loop {
    table: RouteTable,
    broker: Broker,
    conn: Framed<DuplexStream, FrameCodec>,
    next_id: u64,
}

impl Loop {
    /// Starts the manager task on the current runtime.
    pub fn start(table: RouteTable, capacity: usize) -> Loop {
        let (router, manager) = tokio::io::duplex(256 * 1024);
        tokio::spawn(manager_side(Framed::new(manager, FrameCodec::default())));
        Loop {
            table,
            broker: Broker::new(capacity, Metrics::new(Role::Router)),
            conn: Framed::new(router, FrameCodec::default()),
            next_id: 0,
        }
    }

    /// Routes `n` GET `path` events, at most `window` in flight; returns how many came back 200.
    pub async fn run(&mut self, path: &str, n: usize, window: usize) -> anyhow::Result<usize> {
        let mut ok = 0;
        let mut left = n;
        let mut held = Vec::with_capacity(window);
        while left > 0 {
            let batch = left.min(window);
            for _ in 0..batch {
                let Lookup::Found { route, .. } = self.table.lookup("GET", path) else {
                    anyhow::bail!("no route for GET {path}");
                };
                let admitted = self
                    .broker
                    .admit()
                    .ok_or_else(|| anyhow::anyhow!("broker shed"))?;
                held.push(admitted);
                self.next_id += 1;
                self.conn
                    .feed(Frame::Request(Request {
                        headers: Vec::new(),
                        id: self.next_id,
                        flags: 0,
                        deadline_ms: 30_000,
                        event: route.event.to_string(),
                        ce_id: String::new(),
                        traceparent: String::new(),
                        tracestate: String::new(),
                        content_type: "application/json".to_owned(),
                        payload: Bytes::from_static(b"{}"),
                    }))
                    .await?;
            }
            self.conn.flush().await?;
            for _ in 0..batch {
                match self.conn.next().await {
                    Some(Ok(Frame::Response(r))) if r.status == 200 => ok += 1,
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e.into()),
                    None => anyhow::bail!("manager side closed"),
                }
                held.pop();
            }
            left -= batch;
        }
        Ok(ok)
    }
}

/// Answers every REQUEST with a small 200 RESPONSE, flushing when no more requests are buffered.
async fn manager_side(mut conn: Framed<DuplexStream, FrameCodec>) {
    while let Some(Ok(frame)) = conn.next().await {
        let Frame::Request(req) = frame else { continue };
        let resp = Frame::Response(Response {
            headers: Vec::new(),
            id: req.id,
            status: 200,
            queue_us: 0,
            app_us: 0,
            content_type: "application/json".to_owned(),
            payload: Bytes::from_static(br#"{"ok":true}"#),
            returns_credit: false,
            from_mesh: false,
            more: false,
        });
        if conn.send(resp).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_event_comes_back_answered() {
        let mut lp = Loop::start(quickstart_table().expect("table"), 64);
        assert_eq!(lp.run("/noop", 100, 16).await.expect("runs"), 100);
        assert!(lp.run("/nowhere", 1, 1).await.is_err());
    }
}
