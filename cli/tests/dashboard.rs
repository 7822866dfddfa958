//! The sidecars' half of the chart's Grafana dashboard against real processes: `switchyard up` runs
//! a Router and four Managers, traffic makes every series the dashboard reads appear (requests,
//! WebSocket messages, a CORS refusal, local-API calls, delivery retries and dead letters, both
//! published and unrouted), and every non-operator metric and label in its queries must be on the
//! router's or a manager's `/metrics`. The operator's half: `e2e/tests/dashboard.rs`.
//!
//! Then a real Prometheus (built from the Go module proxy by `e2e/cluster/build-prometheus`) scrapes
//! the same sidecars while traffic flows, and every sidecar query of the dashboard returns data,
//! with each request counted once per role.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Mutex;
use std::time::Duration;
use support::prometheus::Prometheus;
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

/// The tests of this file each run `switchyard up` with app ports from 8000: one at a time.
static ONE_RUN: Mutex<()> = Mutex::new(());

/// `switchyard up` of [`manifest`], with the traffic that makes every series the dashboard reads
/// appear, once the dead letters are counted: the run, its Router's HTTP port, and each sidecar's
/// admin port by name (`router`, or the Manager's name).
fn run_with_traffic() -> (Up, u16, Vec<(String, u16)>) {
    support::require_binaries().unwrap();
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

    let admins: Vec<(String, u16)> = up
        .seen
        .iter()
        .filter_map(|l| {
            let name = if l.starts_with("✓ router") {
                "router".to_owned()
            } else {
                l.strip_prefix("✓ manager sidecar ")?
                    .split_whitespace()
                    .next()?
                    .to_owned()
            };
            let admin = l
                .split("(admin :")
                .nth(1)?
                .trim_end_matches(')')
                .parse()
                .ok()?;
            Some((name, admin))
        })
        .collect();
    assert_eq!(admins.len(), 5, "{}", up.output());
    wait_for("dead letters counted", Duration::from_secs(20), || {
        let x = exported(&admins)?;
        let has = |n: &str| x.0.get(n).is_some_and(|l| !l.is_empty());
        (has("switchyard_dead_letter_published_total")
            && has("switchyard_dead_letter_unrouted_total"))
        .then_some(())
        .ok_or_else(|| "not yet".to_owned())
    })
    .unwrap();
    (up, port, admins)
}

/// What the sidecars at `admins` export now.
fn exported(admins: &[(String, u16)]) -> Result<Exported, String> {
    let mut x = Exported::default();
    for (_, a) in admins {
        x.add(&http::get(*a, "/metrics")?.body);
    }
    Ok(x)
}

/// The dashboard's queries that read the sidecars (not the operator, which `switchyard up` does
/// not run: its half is checked against a real operator in `e2e/tests/operator_telemetry.rs`).
fn sidecar_queries() -> Vec<String> {
    let exprs = dashboard::queries(&dashboard::dashboard_file().unwrap());
    assert!(exprs.len() >= 20, "{exprs:?}");
    exprs
        .into_iter()
        .filter(|e| !e.contains("switchyard_operator_"))
        .collect()
}

#[test]
fn sidecar_queries_name_what_the_sidecars_export() {
    let _one = ONE_RUN.lock().unwrap_or_else(|p| p.into_inner());
    let exprs = dashboard::queries(&dashboard::dashboard_file().unwrap());
    let (up, _, admins) = run_with_traffic();
    let exported = exported(&admins).unwrap();
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

/// The dashboard's variables as Grafana fills them for this run: every namespace and role, and a
/// rate window of a few scrapes.
fn filled(expr: &str) -> String {
    expr.replace("$namespace", "local")
        .replace("$role", "router|manager")
        .replace("$__rate_interval", "10s")
}

#[test]
fn every_sidecar_query_returns_data_from_a_real_prometheus() {
    let _one = ONE_RUN.lock().unwrap_or_else(|p| p.into_inner());
    let queries = sidecar_queries();
    let (up, port, admins) = run_with_traffic();
    let targets: Vec<(String, u16)> = admins.clone();
    let prometheus = Prometheus::start(&targets).unwrap();

    // Traffic while Prometheus scrapes, so the rates and quantiles have something to show: noop
    // at about 50 per second, and a failing delivery about every half second (the 5xx ratio's
    // numerator).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sent = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if http::get(port, "/noop").is_ok_and(|a| a.status == 200) {
                    sent += 1;
                }
                if sent.is_multiple_of(25) {
                    let _ = http::post_json(port, "/doomed", "{}");
                }
                // Paces the load; nothing waits on it.
                std::thread::sleep(Duration::from_millis(20));
            }
            sent
        })
    };

    let mut missing = Vec::new();
    for q in &queries {
        let promql = filled(q);
        let got = wait_for(q, Duration::from_secs(60), || {
            let series = prometheus.query(&promql)?;
            // Data: a sample that is a number (NaN is what a ratio or quantile of no traffic gives).
            series
                .iter()
                .any(|(_, v)| v.is_finite())
                .then_some(series.clone())
                .ok_or_else(|| format!("{series:?}"))
        });
        if let Err(e) = got {
            missing.push(e);
        }
    }

    // Each request counts once per role: the router's and the manager's noop rates agree, where
    // the sum over both (the dashboard's old query) was twice either.
    let per_role = wait_for("noop per role", Duration::from_secs(30), || {
        let series = prometheus.query(
            r#"sum by (role) (increase(switchyard_requests_total{event="noop",status="200"}[30s]))"#,
        )?;
        let of = |role: &str| {
            series
                .iter()
                .find(|(l, _)| l.get("role").map(String::as_str) == Some(role))
                .map(|(_, v)| *v)
        };
        match (of("router"), of("manager")) {
            (Some(r), Some(m)) if r > 20.0 && (r - m).abs() <= 0.1 * r => Ok((r, m)),
            other => Err(format!("{other:?} from {series:?}")),
        }
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = load.join().unwrap();
    let scraped = prometheus.query("up").unwrap();
    drop(prometheus);
    up.stop().unwrap();

    assert!(
        missing.is_empty(),
        "{} of {} sidecar queries returned no data:\n{}\nscrape targets: {scraped:?}",
        missing.len(),
        queries.len(),
        missing.join("\n")
    );
    assert_eq!(
        scraped.len(),
        targets.len(),
        "every sidecar scraped: {scraped:?}"
    );
    let (router, manager) = per_role.unwrap();
    assert!(
        sent > 0 && router > 0.0 && manager > 0.0,
        "{sent} {router} {manager}"
    );
}
