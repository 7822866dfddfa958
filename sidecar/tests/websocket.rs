//! The WebSocket listener end to end: a tokio-tungstenite client -> router sidecar (upgrade on the
//! HTTP port) -> manager sidecar -> app; pushes from a stand-in manager (`common::pusher`) -> router
//! -> subscribers.

#![allow(clippy::unwrap_used)]

mod common;

use common::pusher::Pusher;
use common::*;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Client = WebSocketStream<MaybeTlsStream<TcpStream>>;

const MAX_MESSAGE: usize = 4096;
/// How long a test waits for any one message; generous for a loaded machine.
const WAIT: Duration = Duration::from_secs(20);

/// Adds the WebSocket listener and routes, and, with a pusher, the Manager that sends `tick` and
/// `marker` pushes.
fn with_ws(cfg: &mut Value, pusher: Option<u16>) {
    cfg["spec"]["listeners"]["websocket"] = json!({"path": "/ws", "maxMessageBytes": MAX_MESSAGE});
    let routes = cfg["spec"]["routes"].as_array_mut().unwrap();
    routes.extend([
        json!({"event": "echo", "websocket": {"command": "echo"},
               "schema": {"type": "object", "required": ["value"], "properties": {"value": {"type": "integer"}}}}),
        json!({"event": "slow", "websocket": {"command": "slow"}, "timeout": "1s"}),
        json!({"event": "slowish", "websocket": {"command": "slowish"}}),
        json!({"event": "fail", "websocket": {"command": "fail"}}),
        // No Manager handles this one.
        json!({"event": "orphan", "websocket": {"command": "orphan"}}),
    ]);
    if let Some(port) = pusher {
        // `pusher` handles `tick` and `marker` and lists `alert` in its spec.push.
        let dest = json!({"manager": "pusher", "service": "pusher", "port": port, "podSelector": {},
                          "push": ["alert"]});
        cfg["destinations"]["tick"] = dest.clone();
        cfg["destinations"]["marker"] = dest;
        cfg["staticEndpoints"]["pusher"] = json!([format!("127.0.0.1:{port}")]);
    }
}

async fn mesh(pusher: Option<&Pusher>) -> Mesh {
    let port = pusher.map(|p| p.port);
    let mesh = Mesh::start_with(Opts::default(), |cfg| with_ws(cfg, port)).await;
    if let Some(p) = pusher {
        p.wait_connected().await;
    }
    mesh
}

async fn connect(mesh: &Mesh) -> Client {
    let url = format!("ws://127.0.0.1:{}/ws", mesh.http_port);
    let (ws, resp) = tokio_tungstenite::connect_async(url).await.unwrap();
    assert_eq!(resp.status(), 101);
    ws
}

async fn send(ws: &mut Client, v: Value) {
    ws.send(Message::text(v.to_string())).await.unwrap();
}

/// The next text message as JSON (pings and pongs skipped).
async fn next_json(ws: &mut Client) -> Value {
    loop {
        let m = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a message in time")
            .expect("connection open")
            .expect("valid frame");
        match m {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a text message, got {other:?}"),
        }
    }
}

/// Sends a command and returns its reply.
async fn ask(ws: &mut Client, v: Value) -> Value {
    send(ws, v).await;
    let r = next_json(ws).await;
    assert_eq!(r["type"], "reply", "{r}");
    r
}

fn timing_names(reply: &Value) -> Vec<String> {
    reply["timing"]
        .as_str()
        .unwrap_or("")
        .split(", ")
        .filter_map(|e| e.split_once(";dur=").map(|(n, _)| n.to_owned()))
        .collect()
}

async fn metrics(mesh: &Mesh) -> String {
    let r = mesh
        .client
        .get(&format!("http://127.0.0.1:{}/metrics", mesh.router_admin))
        .await
        .unwrap();
    String::from_utf8_lossy(&r.body).into_owned()
}

/// The value of a metric line starting with `prefix`, or 0.
fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn commands_reply_with_id_status_data_and_timing() {
    let mesh = mesh(None).await;
    let mut ws = connect(&mesh).await;

    let r = ask(&mut ws, json!({"command": "noop", "id": 1})).await;
    assert_eq!(r["id"], 1);
    assert_eq!(r["status"], 200);
    assert_eq!(r["data"], json!({}));
    assert_eq!(r["contentType"], "application/json");
    assert_eq!(
        timing_names(&r),
        [
            "listener", "broker", "router", "net", "queue", "app", "total"
        ]
    );

    let r = ask(
        &mut ws,
        json!({"command": "echo", "id": "e-1", "value": 5, "note": "hi"}),
    )
    .await;
    assert_eq!(r["id"], "e-1");
    assert_eq!(r["status"], 200);
    assert_eq!(r["data"], json!({"value": 5, "note": "hi"}));
    assert_eq!(
        mesh.app
            .state
            .headers
            .lock()
            .unwrap()
            .get("ce-type")
            .map(String::as_str),
        Some("echo")
    );

    // The app's own error status is an answer, with its body as data.
    let r = ask(&mut ws, json!({"command": "fail", "id": true})).await;
    assert_eq!(
        (r["id"].clone(), r["status"].clone()),
        (json!(true), json!(500))
    );
    assert_eq!(r["data"], json!({"error": "boom"}));
    assert!(r.get("error").is_none());

    // Many at once: every id answered exactly once.
    for i in 0..40 {
        send(&mut ws, json!({"command": "echo", "id": i, "value": i})).await;
    }
    let mut seen = BTreeSet::new();
    for _ in 0..40 {
        let r = next_json(&mut ws).await;
        assert_eq!(r["status"], 200, "{r}");
        assert_eq!(r["data"]["value"], r["id"]);
        assert!(seen.insert(r["id"].as_i64().unwrap()));
    }

    let m = metrics(&mesh).await;
    assert_eq!(metric(&m, "switchyard_ws_connections "), 1.0, "{m}");
    assert_eq!(
        metric(
            &m,
            "switchyard_ws_messages_total{command=\"echo\",status=\"200\"}"
        ),
        41.0,
        "{m}"
    );
    assert!(m.contains("switchyard_requests_total{role=\"router\",event=\"echo\",status=\"200\"}"));
}

#[tokio::test]
async fn bad_messages_get_errors_and_the_connection_stays_open() {
    let mesh = mesh(None).await;
    let mut ws = connect(&mesh).await;
    let cases: Vec<(Message, Value, u16, &str)> = vec![
        (
            Message::text("{\"command\": "),
            Value::Null,
            400,
            "message is not valid JSON at line 1",
        ),
        (
            Message::text("[1, 2]"),
            Value::Null,
            400,
            "must be a JSON object",
        ),
        (
            Message::text("{\"id\": 3}"),
            json!(3),
            400,
            "has no `command`",
        ),
        (
            Message::text("{\"id\": 4, \"command\": 7}"),
            json!(4),
            400,
            "`command` must be a string",
        ),
        (
            Message::text("{\"id\": [1], \"command\": \"noop\"}"),
            Value::Null,
            400,
            "`id` must be",
        ),
        (
            Message::text("{\"id\": 5, \"command\": \"nope\"}"),
            json!(5),
            404,
            "unknown command \"nope\"",
        ),
        (
            Message::text("{\"id\": 6, \"command\": \"echo\", \"value\": \"x\"}"),
            json!(6),
            400,
            "field `/value`",
        ),
        (
            Message::text("{\"id\": 7, \"command\": \"echo\"}"),
            json!(7),
            400,
            "field `/value` is required",
        ),
        (
            Message::binary(b"{\"command\":\"noop\"}".to_vec()),
            Value::Null,
            415,
            "binary messages",
        ),
        (
            Message::text(
                "{\"id\": 8, \"command\": \"subscribe\", \"event\": \"t\", \"filters\": [{\"field\": \"p\", \"op\": \"gt\", \"value\": [1]}]}",
            ),
            json!(8),
            400,
            "filters[0].value: `gt` compares with a number or a string",
        ),
    ];
    for (msg, id, status, detail) in cases {
        let shown = format!("{msg:?}");
        ws.send(msg).await.unwrap();
        let r = next_json(&mut ws).await;
        assert_eq!(r["type"], "reply", "{shown}: {r}");
        assert_eq!(r["id"], id, "{shown}: {r}");
        assert_eq!(r["status"], status, "{shown}: {r}");
        let got = r["error"]["detail"].as_str().unwrap_or("");
        assert!(
            got.contains(detail),
            "{shown}: {got:?} should contain {detail:?}"
        );
        assert!(timing_names(&r).contains(&"total".to_owned()), "{r}");
    }
    // Still open and working.
    let r = ask(&mut ws, json!({"command": "noop", "id": "after"})).await;
    assert_eq!(r["status"], 200);
    let m = metrics(&mesh).await;
    assert!(
        metric(
            &m,
            "switchyard_ws_messages_total{command=\"invalid\",status=\"400\"}"
        ) >= 4.0,
        "{m}"
    );
}

#[tokio::test]
async fn mesh_refusals_have_the_http_statuses() {
    let mesh = mesh(None).await;
    let mut ws = connect(&mesh).await;
    let r = ask(&mut ws, json!({"command": "orphan", "id": 1})).await;
    assert_eq!(r["status"], 503);
    assert_eq!(r["retryAfter"], 1);
    assert!(
        r["error"]["detail"]
            .as_str()
            .unwrap()
            .contains("no Manager handles event type orphan")
    );

    let r = ask(&mut ws, json!({"command": "slow", "id": 2})).await;
    assert_eq!(r["status"], 504, "{r}");
    // The manager's deadline is the router's remaining time, so either side's 504 may come first:
    // the router's ("no reply within 1s") or the manager's ("... did not answer within 1s"). Both
    // are the mesh's answer, so both are an `error`: `data` is only ever the app's.
    let detail = r["error"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail == "no reply within 1s" || detail.contains("did not answer within"),
        "{r}"
    );
    assert!(r.get("data").is_none(), "{r}");
    assert!(timing_names(&r).contains(&"broker".to_owned()), "{r}");
}

#[tokio::test]
async fn oversize_messages_close_with_1009_and_others_are_unaffected() {
    let mesh = mesh(None).await;
    let mut other = connect(&mesh).await;
    let mut ws = connect(&mesh).await;
    // Just under the limit is fine.
    let pad = "x".repeat(MAX_MESSAGE - 60);
    let r = ask(&mut ws, json!({"command": "noop", "id": 1, "pad": pad})).await;
    assert_eq!(r["status"], 200);

    // Over the limit: refused with a reply, the connection stays open.
    ws.send(Message::text("x".repeat(MAX_MESSAGE + 1)))
        .await
        .unwrap();
    let r = next_json(&mut ws).await;
    assert_eq!(
        (r["status"].clone(), r["id"].clone()),
        (json!(413), Value::Null)
    );
    assert!(
        r["error"]["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("over the limit of {MAX_MESSAGE}")),
        "{r}"
    );
    let r = ask(&mut ws, json!({"command": "noop", "id": 2})).await;
    assert_eq!(r["status"], 200);

    // Far over it (past twice the limit): the connection closes with 1009.
    let hard = MAX_MESSAGE * 2 + 1024;
    ws.send(Message::text("x".repeat(hard + 1))).await.unwrap();
    let close = loop {
        let m = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("close in time");
        match m {
            Some(Ok(Message::Close(frame))) => break frame.expect("a close frame with a code"),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(close.code, CloseCode::Size);
    assert!(
        close.reason.as_str().contains(&format!("{hard} bytes")),
        "{close:?}"
    );

    let r = ask(&mut other, json!({"command": "noop", "id": 2})).await;
    assert_eq!(r["status"], 200);
}

#[tokio::test]
async fn plain_requests_on_the_path_are_told_to_upgrade() {
    let mesh = mesh(None).await;
    let r = mesh.client.get(&mesh.url("/ws")).await.unwrap();
    assert_eq!(r.status, 426);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(r.header("upgrade"), Some("websocket"));
    assert!(
        r.json()["detail"]
            .as_str()
            .unwrap()
            .contains("Upgrade: websocket")
    );
    let r = mesh
        .client
        .post(&mesh.url("/ws"), "application/json", "{}")
        .await
        .unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET"));
    // The HTTP routes are untouched.
    assert_eq!(
        mesh.client.get(&mesh.url("/noop")).await.unwrap().status,
        200
    );
}

/// Sends pushes, then a `marker` push, and collects every push this client gets up to the marker,
/// as subscription id -> payloads (pushes of one connection arrive in order).
async fn pushes_until_marker(
    ws: &mut Client,
    pusher: &Pusher,
    marker_sub: u64,
    payloads: &[Value],
) -> BTreeMap<u64, Vec<Value>> {
    for p in payloads {
        pusher.push("tick", p.to_string());
    }
    pusher.push("marker", "{}");
    let mut got: BTreeMap<u64, Vec<Value>> = BTreeMap::new();
    loop {
        let m = next_json(ws).await;
        assert_eq!(m["type"], "push", "{m}");
        let sub = m["subscription"].as_u64().unwrap();
        if sub == marker_sub {
            return got;
        }
        assert_eq!(m["event"], "tick");
        got.entry(sub).or_default().push(m["data"].clone());
    }
}

#[tokio::test]
async fn subscriptions_receive_matching_pushes_until_unsubscribed() {
    let pusher = Pusher::start().await;
    let mesh = mesh(Some(&pusher)).await;
    let mut ws = connect(&mesh).await;

    let filters = [
        ("eq", json!([{"field": "sym", "op": "eq", "value": "ACME"}])),
        ("ne", json!([{"field": "sym", "op": "ne", "value": "ACME"}])),
        (
            "in",
            json!([{"field": "sym", "op": "in", "value": ["XYZ", "QQQ"]}]),
        ),
        ("gt", json!([{"field": "price", "op": "gt", "value": 20}])),
        ("gte", json!([{"field": "price", "op": "gte", "value": 20}])),
        ("lt", json!([{"field": "price", "op": "lt", "value": 20}])),
        ("lte", json!([{"field": "price", "op": "lte", "value": 20}])),
        (
            "dotted",
            json!([{"field": "book.side", "op": "eq", "value": "bid"},
                          {"field": "price", "op": "gte", "value": 10}]),
        ),
        ("all", json!([])),
    ];
    let mut ids = BTreeMap::new();
    for (name, f) in &filters {
        let r = ask(
            &mut ws,
            json!({"command": "subscribe", "id": name, "event": "tick", "filters": f}),
        )
        .await;
        assert_eq!(r["status"], 200, "{r}");
        ids.insert(*name, r["subscription"].as_u64().unwrap());
    }
    let r = ask(
        &mut ws,
        json!({"command": "subscribe", "id": "m", "event": "marker"}),
    )
    .await;
    let marker = r["subscription"].as_u64().unwrap();

    let payloads = [
        json!({"sym": "ACME", "price": 10, "book": {"side": "bid"}}),
        json!({"sym": "XYZ", "price": 20, "book": {"side": "ask"}}),
        json!({"sym": "QQQ", "price": 30, "book": {"side": "bid"}}),
        json!({"other": true}),
    ];
    let got = pushes_until_marker(&mut ws, &pusher, marker, &payloads).await;
    let expect = |name: &str, which: &[usize]| {
        let want: Vec<Value> = which.iter().map(|i| payloads[*i].clone()).collect();
        assert_eq!(
            got.get(&ids[name]).cloned().unwrap_or_default(),
            want,
            "subscription {name}"
        );
    };
    expect("eq", &[0]);
    expect("ne", &[1, 2]);
    expect("in", &[1, 2]);
    expect("gt", &[2]);
    expect("gte", &[1, 2]);
    expect("lt", &[0]);
    expect("lte", &[0, 1]);
    expect("dotted", &[0, 2]);
    expect("all", &[0, 1, 2, 3]);

    // Unsubscribe stops pushes; an unknown id is 404.
    let r = ask(
        &mut ws,
        json!({"command": "unsubscribe", "id": "u", "subscription": ids["all"]}),
    )
    .await;
    assert_eq!(
        (r["status"].clone(), r["subscription"].clone()),
        (json!(200), json!(ids["all"]))
    );
    let r = ask(
        &mut ws,
        json!({"command": "unsubscribe", "id": "u2", "subscription": ids["all"]}),
    )
    .await;
    assert_eq!(r["status"], 404);
    let got = pushes_until_marker(&mut ws, &pusher, marker, &payloads[..1]).await;
    assert!(!got.contains_key(&ids["all"]), "{got:?}");
    assert_eq!(got[&ids["eq"]], vec![payloads[0].clone()]);

    // Non-JSON pushes reach unfiltered subscribers as text.
    let r = ask(
        &mut ws,
        json!({"command": "subscribe", "id": "t", "event": "tick"}),
    )
    .await;
    let plain = r["subscription"].as_u64().unwrap();
    pusher.push_typed("tick", "text/plain", "hello");
    pusher.push("marker", "{}");
    let m = next_json(&mut ws).await;
    assert_eq!(
        (m["subscription"].as_u64(), m["data"].clone()),
        (Some(plain), json!("hello"))
    );
    assert_eq!(next_json(&mut ws).await["subscription"], marker);

    // Subscriptions per connection are bounded (10 held here, 32 allowed).
    for i in 0..22 {
        let r = ask(
            &mut ws,
            json!({"command": "subscribe", "id": i, "event": "x"}),
        )
        .await;
        assert_eq!(r["status"], 200, "{r}");
    }
    let r = ask(
        &mut ws,
        json!({"command": "subscribe", "id": "over", "event": "x"}),
    )
    .await;
    assert_eq!(r["status"], 400);
    assert!(
        r["error"]["detail"]
            .as_str()
            .unwrap()
            .contains("32 subscriptions")
    );

    let m = metrics(&mesh).await;
    assert_eq!(metric(&m, "switchyard_ws_subscriptions "), 32.0, "{m}");
    assert!(
        metric(&m, "switchyard_ws_pushes_delivered_total ") >= 20.0,
        "{m}"
    );
    drop(ws);
    // Closing the connection releases its subscriptions.
    poll(WAIT, "subscriptions released", || async {
        let m = metrics(&mesh).await;
        (metric(&m, "switchyard_ws_subscriptions ") == 0.0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_slow_reader_loses_its_own_pushes_and_never_slows_another() {
    let pusher = Pusher::start().await;
    let mesh = mesh(Some(&pusher)).await;
    let mut slow = connect(&mesh).await;
    let mut fast = connect(&mesh).await;
    for ws in [&mut slow, &mut fast] {
        let r = ask(
            ws,
            json!({"command": "subscribe", "id": 1, "event": "tick"}),
        )
        .await;
        assert_eq!(r["subscription"], 1);
    }
    let r = ask(
        &mut fast,
        json!({"command": "subscribe", "id": 2, "event": "marker"}),
    )
    .await;
    let marker = r["subscription"].as_u64().unwrap();

    // Far more than the slow client's outbox and socket buffers hold: 2000 pushes of 8 KiB, in
    // batches the fast client reads before the next is sent, so its outbox (256) never fills
    // however loaded the machine is.
    let pad = "p".repeat(8 * 1024);
    let (batches, batch) = (10, 200);
    let mut next = 0;
    for b in 0..batches {
        for i in 0..batch {
            pusher.push("tick", json!({"n": b * batch + i, "pad": pad}).to_string());
        }
        pusher.push("marker", "{}");
        loop {
            let m = next_json(&mut fast).await;
            if m["subscription"] == marker {
                break;
            }
            assert_eq!(
                m["data"]["n"], next,
                "the fast client gets every push, in order"
            );
            assert!(m.get("dropped").is_none());
            next += 1;
        }
    }
    assert_eq!(next, batches * batch);
    let m = metrics(&mesh).await;
    let dropped = metric(&m, "switchyard_ws_pushes_dropped_total ");
    assert!(dropped > 0.0, "the slow client's outbox overflowed: {m}");

    // The slow client, reading at last, learns how many it missed with its next push.
    let reader = tokio::spawn(async move {
        let mut missed = 0u64;
        loop {
            let m = next_json(&mut slow).await;
            if let Some(d) = m["dropped"].as_u64() {
                missed += d;
                return missed;
            }
        }
    });
    poll(
        Duration::from_secs(60),
        "the slow client told of drops",
        || {
            pusher.push("tick", "{\"late\": true}");
            let done = reader.is_finished();
            async move { done.then_some(()) }
        },
    )
    .await;
    let missed = reader.await.unwrap();
    // Late pushes may have been dropped too, so the count is read again.
    let dropped = metric(&metrics(&mesh).await, "switchyard_ws_pushes_dropped_total ");
    assert!(
        missed > 0 && missed as f64 <= dropped,
        "missed {missed}, dropped {dropped}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_cancels_its_commands() {
    let m = mesh(None).await;
    let mut ws = connect(&m).await;
    send(&mut ws, json!({"command": "slow", "id": 1})).await;
    poll(WAIT, "slow event in flight", || async {
        let text = m.manager_metrics().await;
        (common::metric(&text, "switchyard_in_flight") == 1.0).then_some(())
    })
    .await;
    let gone = std::time::Instant::now();
    drop(ws);
    // The route's deadline is 1 s and the app sleeps 3 s: a cancel well before 1 s comes from the
    // client going away.
    poll(WAIT, "cancelled delivery", || async {
        let text = m.manager_metrics().await;
        let cancelled = r#"switchyard_requests_total{role="manager",event="slow",status="499"}"#;
        (common::metric(&text, cancelled) == 1.0).then_some(())
    })
    .await;
    assert!(
        gone.elapsed() < Duration::from_millis(800),
        "cancel took {:?}",
        gone.elapsed()
    );
}

#[tokio::test]
async fn drain_sends_pending_replies_then_closes_with_1001() {
    let mut mesh = mesh(None).await;
    let mut ws = connect(&mesh).await;
    let served = mesh
        .app
        .state
        .served
        .load(std::sync::atomic::Ordering::SeqCst);
    send(&mut ws, json!({"command": "slowish", "id": "last"})).await;
    // Drain only once the command is at the app, so it is in flight.
    poll(WAIT, "slowish at the app", || async {
        (mesh
            .app
            .state
            .served
            .load(std::sync::atomic::Ordering::SeqCst)
            > served)
            .then_some(())
    })
    .await;
    mesh.router.sigterm();
    let r = next_json(&mut ws).await;
    assert_eq!(
        (r["id"].clone(), r["status"].clone()),
        (json!("last"), json!(200))
    );
    let close = loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("close in time")
        {
            Some(Ok(Message::Close(frame))) => break frame.expect("a close frame"),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(close.code, CloseCode::Away);
    assert_eq!(
        mesh.router.wait_exit(Duration::from_secs(40)).await,
        Some(0)
    );
}

#[tokio::test]
async fn the_server_pings_and_closes_connections_that_stop_answering() {
    let mesh = mesh(None).await;
    let mut alive = connect(&mesh).await;
    // Never read, so it never answers a ping.
    let _silent = connect(&mesh).await;
    poll(WAIT, "two connections", || async {
        let m = metrics(&mesh).await;
        (metric(&m, "switchyard_ws_connections ") == 2.0).then_some(())
    })
    .await;
    // The server pings (every 10 s); the client library answers while it reads.
    let pinged = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(Ok(Message::Ping(_))) = alive.next().await {
                return;
            }
        }
    })
    .await;
    assert!(pinged.is_ok(), "no ping from the server");
    // The silent one is closed after 30 s without a frame; the one that reads stays open.
    let reader = tokio::spawn(async move {
        loop {
            match alive.next().await {
                Some(Ok(_)) => continue,
                other => return format!("{other:?}"),
            }
        }
    });
    poll(
        Duration::from_secs(90),
        "the silent connection closed",
        || async {
            let m = metrics(&mesh).await;
            (metric(&m, "switchyard_ws_connections ") == 1.0).then_some(())
        },
    )
    .await;
    assert!(
        !reader.is_finished(),
        "the connection that reads was closed"
    );
    reader.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_pushes_only_what_it_handles_or_lists_and_the_rest_is_refused() {
    let pusher = Pusher::start().await;
    let mesh = mesh(Some(&pusher)).await;
    let mut ws = connect(&mesh).await;
    let mut subs = BTreeMap::new();
    for event in ["echo", "alert", "marker"] {
        let r = ask(
            &mut ws,
            json!({"command": "subscribe", "id": event, "event": event}),
        )
        .await;
        assert_eq!(r["status"], 200, "{r}");
        subs.insert(r["subscription"].as_u64().unwrap(), event);
    }
    // `echo` is the `handlers` Manager's type: a push of it from `pusher`'s connection is forged.
    pusher.push("echo", r#"{"forged":true}"#);
    pusher.push("alert", r#"{"n":1}"#);
    pusher.push("marker", "{}");
    let mut got = Vec::new();
    loop {
        let m = next_json(&mut ws).await;
        assert_eq!(m["type"], "push", "{m}");
        let event = subs[&m["subscription"].as_u64().unwrap()];
        got.push(event);
        if event == "marker" {
            break;
        }
    }
    // Pushes of one connection arrive in order: the forged one would have come first.
    assert_eq!(got, ["alert", "marker"]);
    let text = metrics(&mesh).await;
    assert_eq!(
        metric(
            &text,
            r#"switchyard_pushes_refused_total{manager="pusher"}"#
        ),
        1.0,
        "{text}"
    );
}
