//! The sidecars' half of the chart's Grafana dashboard against real processes: `switchyard up` runs
//! a Router and four Managers, traffic makes every series the dashboard reads appear (requests,
//! WebSocket messages, a CORS refusal, local-API calls, delivery retries and dead letters, both
//! published and unrouted), and every non-operator metric and label in its queries must be on the
//! router's or a manager's `/metrics`. The operator's half: `e2e/tests/dashboard.rs`.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;
use support::up::Up;
use support::{http, wait_for};
use switchyard_e2e::dashboard::{self, Exported, Exporter};

/// Apps of Managers with `app.protocol: grpc` that serve HTTP: every delivery fails as unreachable,
/// is retried, and goes to the dead-letter type.
fn manifest(http_port: u16) -> String {
    let app = |name: &str, events: &str, extra: &str| {
        format!(
            r#"---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata:
  name: {name}
spec:
  routerRef: {{name: edge}}
  events: {events}
{extra}  template:
    spec:
      containers:
        - name: app
          command: [switchyard-example-app, --port, "8000"]
"#
        )
    };
    let failing = |dead_letter: &str| {
        format!(
            "  app: {{port: 8000, protocol: grpc}}\n  workers:\n    timeout: 2s\n    retries: {{attempts: 2, backoff: 10ms, maxBackoff: 10ms}}\n    deadLetter: {dead_letter}\n"
        )
    };
    format!(
        r#"apiVersion: switchyard.dev/v1alpha1
kind: Router
metadata:
  name: edge
spec:
  listeners:
    http: {{port: {http_port}}}
    websocket: {{path: /ws}}
  routes:
    - event: noop
      http: {{method: GET, path: /noop}}
    - event: noop
      websocket: {{command: noop}}
    - event: relay
      http: {{method: POST, path: /relay}}
    - event: doomed
      http: {{method: POST, path: /doomed}}
    - event: lost
      http: {{method: POST, path: /lost}}
  middleware:
    - cors: {{allowOrigins: ["http://allowed.example"]}}
    - timing: {{}}
{}{}{}{}{}"#,
        app(
            "front",
            "[relay, noop]",
            "  app: {port: 8000, path: /events}\n"
        ),
        app(
            "back",
            "[echo, graveyard]",
            "  app: {port: 8000, path: /events}\n"
        ),
        app("doomed", "[doomed]", &failing("graveyard")),
        app("lost", "[lost]", &failing("nowhere")),
        "",
    )
}

#[test]
fn sidecar_queries_name_what_the_sidecars_export() {
    support::require_binaries().unwrap();
    let exprs = dashboard::queries(&dashboard::dashboard_file().unwrap());
    assert!(exprs.len() >= 20, "{exprs:?}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dashboard.yaml");
    // Port 0: the Router binds any free port and `switchyard up` prints which.
    std::fs::write(&path, manifest(0)).unwrap();
    let mut up = Up::start(&path, &[]);
    up.ready(Duration::from_secs(90)).unwrap();
    let port = up.http_port().unwrap();

    // Requests, a relay through the local API (retried while front's outbound connection opens).
    assert_eq!(http::get(port, "/noop").unwrap().status, 200);
    wait_for("POST /relay answered", Duration::from_secs(20), || {
        let a = http::post_json(port, "/relay", r#"{"value":1}"#)?;
        (a.status == 200).then_some(()).ok_or(format!("{a:?}"))
    })
    .unwrap();
    // Deliveries that fail, are retried, and end as dead letters (published, and unrouted).
    for p in ["/doomed", "/lost"] {
        let a = http::post_json(port, p, "{}").unwrap();
        assert_eq!(a.status, 502, "{p}: {a:?}\n{}", up.output());
    }
    // A CORS preflight from an origin the middleware refuses.
    let a = http::request(
        port,
        "OPTIONS",
        "/noop",
        &[
            ("Origin", "http://elsewhere.example"),
            ("Access-Control-Request-Method", "GET"),
        ],
        "",
    )
    .unwrap();
    assert_eq!(a.status, 403, "{a:?}");
    // A WebSocket message.
    {
        use tokio_tungstenite::tungstenite;
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (mut ws, _) =
            tungstenite::client::client(format!("ws://127.0.0.1:{port}/ws"), stream).unwrap();
        ws.send(tungstenite::Message::text(r#"{"command":"noop","id":1}"#))
            .unwrap();
        while !matches!(ws.read().unwrap(), tungstenite::Message::Text(_)) {}
        let _ = ws.close(None);
    }

    // Every sidecar's /metrics, once the dead letters have been counted.
    let admins: Vec<u16> = up
        .seen
        .iter()
        .filter(|l| l.starts_with("✓ router") || l.starts_with("✓ manager sidecar"))
        .filter_map(|l| {
            l.split("(admin :")
                .nth(1)?
                .trim_end_matches(')')
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(admins.len(), 5, "{}", up.output());
    let exported = wait_for("dead letters counted", Duration::from_secs(20), || {
        let mut x = Exported::default();
        for a in &admins {
            x.add(&http::get(*a, "/metrics")?.body);
        }
        let has = |n: &str| x.0.get(n).is_some_and(|l| !l.is_empty());
        (has("switchyard_dead_letter_published_total")
            && has("switchyard_dead_letter_unrouted_total"))
        .then_some(x)
        .ok_or_else(|| "not yet".to_owned())
    })
    .unwrap();
    let problems = dashboard::problems(&exprs, &exported, Exporter::Sidecars);
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}\nexported: {:#?}",
        problems.len(),
        problems.join("\n"),
        exported.0
    );
    up.stop().unwrap();
}
