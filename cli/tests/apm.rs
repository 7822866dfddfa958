//! Traces in a real APM: `switchyard up` runs the examples with tracing pointed at an OpenTelemetry
//! Collector, which exports to Zipkin (both built or fetched by `e2e/apm/build-tools`). Requests over
//! HTTP, gRPC, WebSocket and a Manager-to-Manager relay are checked through Zipkin's API (one trace
//! per request; router, manager and app spans under one root; parent links; the client's
//! `traceparent` kept), then headless Chromium renders Zipkin's trace page and the DOM must show the
//! span names. One collector and one Zipkin serve every test of this binary (libtest-mimic harness:
//! started before, stopped after); the tests run one at a time, as each `switchyard up` takes app
//! ports from 8000 upward.
//!
//! `SWITCHYARD_SCREENSHOT=docs/zipkin-trace.png cargo test -p switchyard --test apm` also writes the
//! screenshot of the HTTP trace the README shows.

#![allow(clippy::unwrap_used)]

mod support;

use libtest_mimic::{Arguments, Failed, Trial};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;
use support::apm::Apm;
use support::up::{Up, example_on_ports};
use support::zipkin::{self, Span, descends, one, one_tree};
use support::{free_port, http, wait_for};

type Test = fn(&Apm) -> Result<(), String>;

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // One `switchyard up` at a time (app ports from 8000 upward), against one shared APM.
    args.test_threads = Some(1);
    let tests: Vec<(&str, Test)> = vec![
        (
            "http_and_grpc_requests_are_one_trace_each_in_zipkin",
            http_and_grpc_traces,
        ),
        ("websocket_message_is_one_trace_in_zipkin", websocket_trace),
        (
            "relay_is_one_trace_across_two_managers_in_zipkin",
            relay_trace,
        ),
        (
            "server_timing_stages_reach_a_cross_origin_page_in_chromium",
            server_timing_in_browser,
        ),
        ("python_example_continues_the_trace", |apm| {
            language_example(apm, "python", "7ef92f3577b34da6a3ce929d0e0e4739")
        }),
        ("js_example_continues_the_trace", |apm| {
            language_example(apm, "js", "8ff92f3577b34da6a3ce929d0e0e473a")
        }),
        ("go_example_continues_the_trace", |apm| {
            language_example(apm, "go", "90f92f3577b34da6a3ce929d0e0e473b")
        }),
    ];
    // Started by the first test that needs it, stopped after the last (statics are never dropped).
    static APM: Mutex<Option<Result<Apm, String>>> = Mutex::new(None);
    let trials = tests
        .into_iter()
        .map(|(name, test)| {
            Trial::test(name, move || {
                support::require_binaries()?;
                let mut slot = APM.lock().unwrap_or_else(|p| p.into_inner());
                let apm = slot
                    .get_or_insert_with(Apm::start)
                    .as_ref()
                    .map_err(|e| Failed::from(format!("the APM did not start: {e}")))?;
                test(apm).map_err(|e| Failed::from(format!("{e}\n{}", apm.logs())))
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    drop(APM.lock().unwrap_or_else(|p| p.into_inner()).take());
    conclusion.exit_code()
}

/// The trace id of a `Server-Timing` value's `trace;desc=` entry.
fn timing_trace(value: &str) -> Result<String, String> {
    value
        .split(", ")
        .find_map(|e| e.strip_prefix("trace;desc="))
        .map(str::to_owned)
        .ok_or_else(|| format!("no trace entry in Server-Timing {value:?}"))
}

/// The spans of `trace_id` once Zipkin has at least `count` of them.
fn wait_trace(apm: &Apm, trace_id: &str, count: usize) -> Result<Vec<Span>, String> {
    let mut last = Vec::new();
    wait_for(
        &format!("{count} spans of trace {trace_id} in Zipkin"),
        Duration::from_secs(30),
        || {
            last = zipkin::trace(apm.zipkin_port, trace_id)?;
            (last.len() >= count)
                .then(|| last.clone())
                .ok_or_else(|| zipkin::names(&last))
        },
    )
}

/// The quickstart with tracing on, its Router on port 0 (the test reads what it bound).
fn traced_quickstart(apm: &Apm, dir: &Path) -> std::path::PathBuf {
    let endpoint = apm.otlp_endpoint.clone();
    example_on_ports(dir, "quickstart.yaml", 0, 0, |t| with_tracing(t, &endpoint))
}

/// The manifest with `spec.tracing` on its Router, pointed at `endpoint`.
fn with_tracing(text: String, endpoint: &str) -> String {
    let edited = text.replacen(
        "kind: Router\nmetadata:\n  name: edge\nspec:\n",
        &format!(
            "kind: Router\nmetadata:\n  name: edge\nspec:\n  tracing:\n    otlpEndpoint: {endpoint}\n    samplingRatio: 1\n"
        ),
        1,
    );
    assert_ne!(edited, text, "the example's Router changed shape");
    edited
}

/// Checks the hops of one quickstart request below its listener span: broker, send (router),
/// process, queue, deliver (manager), handle (app), each with the parent the README documents.
fn assert_hops(spans: &[Span], listener: &Span, event: &str, app: &str) -> Result<(), String> {
    let broker = one(spans, &format!("broker {event}"))?;
    let send = one(spans, &format!("send {event}"))?;
    let process = one(spans, &format!("process {event}"))?;
    let queue = one(spans, &format!("queue {event}"))?;
    let deliver = one(spans, &format!("deliver {event}"))?;
    let handle = one(spans, &format!("handle {event}"))?;
    let all = zipkin::names(spans);
    for (span, service, kind, parent) in [
        (listener, "edge", "SERVER", None),
        (broker, "edge", "", Some(listener)),
        (send, "edge", "CLIENT", Some(broker)),
        (process, "handlers", "SERVER", Some(send)),
        (queue, "handlers", "", Some(process)),
        (deliver, "handlers", "CLIENT", Some(process)),
        (handle, app, "SERVER", Some(deliver)),
    ] {
        if span.service != service || span.kind != kind {
            return Err(format!(
                "{}: service {:?} kind {:?}, want {service:?} {kind:?}; {all}",
                span.name, span.service, span.kind
            ));
        }
        if let Some(p) = parent
            && span.parent != p.id
        {
            return Err(format!("{} is not under {}: {all}", span.name, p.name));
        }
    }
    if send.tag("messaging.message.id").is_empty()
        || process.tag("messaging.system") != "switchyard"
    {
        return Err(format!("messaging tags missing: {send:?} {process:?}"));
    }
    Ok(())
}

/// Every trace with a span of `service` once there are `count`, each a well-formed single tree.
fn wait_traces(apm: &Apm, service: &str, count: usize) -> Result<Vec<Vec<Span>>, String> {
    wait_for(
        &format!("{count} traces of {service} in Zipkin"),
        Duration::from_secs(30),
        || {
            let ts = zipkin::traces_of(apm.zipkin_port, service)?;
            (ts.len() >= count)
                .then(|| ts.clone())
                .ok_or_else(|| format!("{} traces", ts.len()))
        },
    )
}

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn http_and_grpc_traces(apm: &Apm) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let manifest = traced_quickstart(apm, dir.path());
    let mut up = Up::start(&manifest, &[]);
    up.ready(Duration::from_secs(60))?;
    let (port, grpc) = up.router_ports()?;
    let grpc = grpc.ok_or("the quickstart's Router serves gRPC")?;

    // HTTP with the client's traceparent: its trace id, the listener span its child.
    let tp = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let a = http::request(port, "GET", "/noop", &[("traceparent", &tp)], "")?;
    if a.status != 200 {
        return Err(format!("GET /noop: {a:?}"));
    }
    let timing = a.header("server-timing").unwrap_or_default().to_owned();
    if timing_trace(&timing)? != CLIENT_TRACE {
        return Err(format!("Server-Timing names another trace: {timing}"));
    }
    let spans = wait_trace(apm, CLIENT_TRACE, 7)?;
    let listener = one_tree(&spans, CLIENT_SPAN)?;
    if listener.name != "get /noop" || spans.len() != 7 {
        return Err(format!(
            "want 7 spans under get /noop: {}",
            zipkin::names(&spans)
        ));
    }
    assert_hops(&spans, listener, "noop", "handlers-app")?;
    for (k, v) in [
        ("http.request.method", "GET"),
        ("http.route", "/noop"),
        ("http.response.status_code", "200"),
    ] {
        if listener.tag(k) != v {
            return Err(format!("{k} of get /noop: {:?}", listener.tags));
        }
    }

    // HTTP without one: a new root at the listener.
    let a = http::post_json(port, "/echo", r#"{"value":1}"#)?;
    let echo_trace = timing_trace(a.header("server-timing").unwrap_or_default())?;
    let spans = wait_trace(apm, &echo_trace, 7)?;
    let listener = one_tree(&spans, "")?;
    if listener.name != "post /echo" {
        return Err(format!("root is not post /echo: {}", zipkin::names(&spans)));
    }
    assert_hops(&spans, listener, "echo", "handlers-app")?;

    // gRPC `Call` with the client's traceparent in the metadata.
    const GRPC_TRACE: &str = "5cf92f3577b34da6a3ce929d0e0e4737";
    let grpc_tp = format!("00-{GRPC_TRACE}-{CLIENT_SPAN}-01");
    let (status, server_timing) = grpc_call_noop(grpc, &grpc_tp)?;
    if status != 200 || timing_trace(&server_timing)? != GRPC_TRACE {
        return Err(format!(
            "gRPC Call: status {status}, server-timing {server_timing:?}"
        ));
    }
    let spans = wait_trace(apm, GRPC_TRACE, 7)?;
    let listener = one_tree(&spans, CLIENT_SPAN)?;
    if listener.name != "switchyard.v1.gateway/call" || listener.tag("rpc.system.name") != "grpc" {
        return Err(format!("gRPC listener span: {listener:?}"));
    }
    assert_hops(&spans, listener, "noop", "handlers-app")?;

    // One trace per request: three requests, three traces, nothing else.
    let traces = wait_traces(apm, "handlers-app", 3)?;
    let mut ids: Vec<&str> = traces
        .iter()
        .filter_map(|t| t.first().map(|s| s.trace_id.as_str()))
        .collect();
    ids.sort_unstable();
    let mut want = vec![CLIENT_TRACE, GRPC_TRACE, echo_trace.as_str()];
    want.sort_unstable();
    if ids != want {
        return Err(format!("traces in Zipkin: {ids:?}, want {want:?}"));
    }

    // Zipkin's own page shows the trace: every span name is in the rendered DOM.
    let page = apm.trace_page(CLIENT_TRACE);
    let dom = support::browser::dump_dom(&page, Duration::from_secs(10))?;
    for name in [
        "get /noop",
        "broker noop",
        "send noop",
        "process noop",
        "queue noop",
        "deliver noop",
        "handle noop",
    ] {
        if !dom.contains(name) {
            return Err(format!("{page} does not show {name:?}; DOM:\n{dom}"));
        }
    }
    let shot = dir.path().join("zipkin-trace.png");
    support::browser::screenshot(&page, &shot, Duration::from_secs(10))?;
    if let Some(dest) = std::env::var_os("SWITCHYARD_SCREENSHOT") {
        std::fs::copy(&shot, &dest).map_err(|e| format!("{dest:?}: {e}"))?;
    }
    up.stop()
}

/// One `Gateway/Call` of `noop` carrying `traceparent`: the reply's status and its `server-timing`.
fn grpc_call_noop(port: u16, traceparent: &str) -> Result<(i32, String), String> {
    use switchyard_protocol::gateway::v1::CallRequest;
    use switchyard_protocol::gateway::v1::gateway_client::GatewayClient;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| format!("connect to the gRPC listener: {e}"))?;
        let mut req = tonic::Request::new(CallRequest {
            method: "noop".into(),
            payload: b"{}".to_vec(),
            metadata: Default::default(),
        });
        req.metadata_mut().insert(
            "traceparent",
            traceparent.parse().map_err(|e| format!("{e:?}"))?,
        );
        let reply = GatewayClient::new(channel)
            .call(req)
            .await
            .map_err(|e| format!("Call noop: {e}"))?;
        let timing = reply
            .metadata()
            .get("server-timing")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        Ok((reply.into_inner().status, timing))
    })
}

fn websocket_trace(apm: &Apm) -> Result<(), String> {
    use tokio_tungstenite::tungstenite;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let manifest = traced_quickstart(apm, dir.path());
    let mut up = Up::start(&manifest, &[]);
    up.ready(Duration::from_secs(60))?;
    let port = up.http_port()?;
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let (mut ws, _) = tungstenite::client::client(format!("ws://127.0.0.1:{port}/ws"), stream)
        .map_err(|e| format!("WebSocket handshake: {e}"))?;
    let mut traces = Vec::new();
    for id in 1..=2 {
        ws.send(tungstenite::Message::text(format!(
            r#"{{"command":"noop","id":{id}}}"#
        )))
        .map_err(|e| e.to_string())?;
        let reply = loop {
            match ws.read().map_err(|e| format!("WebSocket reply: {e}"))? {
                tungstenite::Message::Text(t) => break t.to_string(),
                _ => continue,
            }
        };
        let v: serde_json::Value = serde_json::from_str(&reply).map_err(|e| e.to_string())?;
        if v["status"] != 200 {
            return Err(format!("reply {reply}"));
        }
        traces.push(timing_trace(v["timing"].as_str().unwrap_or_default())?);
    }
    let _ = ws.close(None);
    if traces[0] == traces[1] {
        return Err(format!("two messages share trace {}", traces[0]));
    }
    for t in &traces {
        // The router's listener and broker spans, the manager's and the app's, under one root.
        let spans = wait_trace(apm, t, 7)?;
        let root = one_tree(&spans, "")?;
        let handle = one(&spans, "handle noop")?;
        let process = one(&spans, "process noop")?;
        if root.service != "edge"
            || !descends(&spans, process, root)
            || !descends(&spans, handle, process)
        {
            return Err(format!("WebSocket trace {t}: {}", zipkin::names(&spans)));
        }
    }
    up.stop()
}

fn relay_trace(apm: &Apm) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let endpoint = apm.otlp_endpoint.clone();
    let manifest = example_on_ports(dir.path(), "relay.yaml", 0, 0, |t| {
        with_tracing(t, &endpoint)
    });
    let mut up = Up::start(&manifest, &[]);
    up.ready(Duration::from_secs(60))?;
    let port = up.http_port()?;
    // front's outbound connection to back may still be opening: until an untraced relay is
    // answered, a 503 is retried.
    wait_for("POST /relay answered", Duration::from_secs(20), || {
        let a = http::post_json(port, "/relay", r#"{"value":0}"#)?;
        (a.status != 503).then_some(()).ok_or(a.body)
    })?;
    // A trace id of its own: the other tests' traces share this Zipkin.
    const RELAY_TRACE: &str = "6df92f3577b34da6a3ce929d0e0e4738";
    let tp = format!("00-{RELAY_TRACE}-{CLIENT_SPAN}-01");
    let answer = http::request(
        port,
        "POST",
        "/relay",
        &[("Content-Type", "application/json"), ("traceparent", &tp)],
        r#"{"value":7}"#,
    )?;
    if answer.status != 200 || !answer.body.ends_with(r#"{"value":7}"#) {
        return Err(format!("POST /relay: {answer:?}\n{}", up.output()));
    }
    // edge (3) + front (3) + front-app (1) + back (3) + back-app (1), and the local-API hop's
    // spans in front's sidecar if it has any: one tree under the client's span.
    let spans = wait_trace(apm, RELAY_TRACE, 11)?;
    let root = one_tree(&spans, CLIENT_SPAN)?;
    if root.name != "post /relay" || root.service != "edge" {
        return Err(format!("root: {}", zipkin::names(&spans)));
    }
    let get = |name: &str, service: &str| {
        spans
            .iter()
            .find(|s| s.name == name && s.service == service)
            .ok_or_else(|| format!("no {name} ({service}) in {}", zipkin::names(&spans)))
    };
    let chain = [
        get("process relay", "front")?,
        get("handle relay", "front-app")?,
        get("process echo", "back")?,
        get("deliver echo", "back")?,
        get("handle echo", "back-app")?,
    ];
    let mut above = root;
    for span in chain {
        if !descends(&spans, span, above) {
            return Err(format!(
                "{} ({}) is not under {} ({}): {}",
                span.name,
                span.service,
                above.name,
                above.service,
                zipkin::names(&spans)
            ));
        }
        above = span;
    }
    up.stop()
}

/// A page that fetches `url` cross-origin and writes the `serverTiming` of its resource-timing
/// entry into `<pre id="out">` as JSON (`[{name, duration}, ...]`).
fn timing_page(url: &str) -> String {
    format!(
        r#"<!doctype html><html><body><pre id="out">pending</pre><script>
fetch("{url}").then(r => r.text()).then(() => {{
  const e = performance.getEntriesByType("resource").find(x => x.name === "{url}");
  document.getElementById("out").textContent = e
    ? JSON.stringify(e.serverTiming.map(s => ({{name: s.name, duration: s.duration}})))
    : "no resource entry";
}}).catch(err => {{ document.getElementById("out").textContent = "fetch failed: " + err; }});
</script></body></html>"#
    )
}

/// The `<pre id="out">` text of `page` once Chromium ran it.
fn page_output(page: &support::page::Page) -> Result<String, String> {
    let dom = support::browser::dump_dom(&page.origin(), Duration::from_secs(5))?;
    let start = dom
        .find(r#"<pre id="out">"#)
        .ok_or_else(|| format!("no output element in {dom}"))?
        + r#"<pre id="out">"#.len();
    let end = dom[start..]
        .find("</pre>")
        .ok_or_else(|| format!("unclosed output in {dom}"))?;
    Ok(dom[start..start + end].replace("&quot;", "\""))
}

fn server_timing_in_browser(_: &Apm) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/noop");
    // Two pages of other origins: one the timing middleware lets read the timing, one it does not.
    let allowed = support::page::Page::serve(timing_page(&url));
    let other = support::page::Page::serve(timing_page(&url));
    let (a, o) = (allowed.origin(), other.origin());
    let manifest = example_on_ports(dir.path(), "quickstart.yaml", port, free_port(), |t| {
        let edited = t.replace(
            "  middleware:\n    - timing: {}\n",
            &format!(
                "  middleware:\n    - cors: {{allowOrigins: [\"{a}\", \"{o}\"]}}\n    - timing: {{allowOrigins: [\"{a}\"]}}\n"
            ),
        );
        assert_ne!(edited, t, "the quickstart's middleware changed shape");
        edited
    });
    let mut up = Up::start(&manifest, &[]);
    up.ready(Duration::from_secs(60))?;
    let head = http::request(port, "GET", "/noop", &[("Origin", &a)], "")?;
    if head.header("timing-allow-origin") != Some(a.as_str()) {
        return Err(format!("no Timing-Allow-Origin: {head:?}"));
    }

    let out = page_output(&allowed)?;
    let stages: Vec<serde_json::Value> =
        serde_json::from_str(&out).map_err(|e| format!("{e}: page wrote {out:?}"))?;
    let got: Vec<(String, f64)> = stages
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or("").to_owned(),
                s["duration"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect();
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    if names
        != [
            "listener", "broker", "router", "net", "queue", "app", "total",
        ]
    {
        return Err(format!("serverTiming in Chromium: {got:?}"));
    }
    let total = got[6].1;
    let parts: f64 = got[..6].iter().map(|(_, d)| d).sum();
    if got.iter().any(|(_, d)| *d < 0.0) || total <= 0.0 || (parts - total).abs() > 0.01 {
        return Err(format!("stage durations do not add up to total: {got:?}"));
    }

    // The other origin may call the API (CORS) but not read its timing.
    let out = page_output(&other)?;
    if out != "[]" {
        return Err(format!("a page of {o} read the timing: {out}"));
    }
    up.stop()
}

/// `examples/<lang>.yaml` (the CloudEvents SDK of that language) through `switchyard up`: `noop` and
/// `echo` answered, and the echo's trace goes on into the app's own spans, through the `noop` the
/// app publishes on the local API, to that event's delivery and handling.
fn language_example(apm: &Apm, lang: &str, trace_id: &str) -> Result<(), String> {
    // Installs the app's dependencies from the registries (cached in git-ignored folders).
    let run = support::repo_file(&format!("examples/{lang}/run"));
    let started = std::time::Instant::now();
    let prepared = std::process::Command::new(&run)
        .arg("--prepare")
        .status()
        .map_err(|e| format!("{}: {e}", run.display()))?;
    if !prepared.success() {
        return Err(format!("{} --prepare: {prepared}", run.display()));
    }
    eprintln!("examples/{lang} prepared in {:?}", started.elapsed());
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let endpoint = apm.otlp_endpoint.clone();
    let manifest = example_on_ports(dir.path(), &format!("{lang}.yaml"), 0, 0, |t| {
        with_tracing(t, &endpoint)
    });
    let mut up = Up::start(&manifest, &[]);
    up.ready(Duration::from_secs(90))?;
    let port = up.http_port()?;

    let a = http::get(port, "/noop")?;
    let body: serde_json::Value =
        serde_json::from_str(&a.body).map_err(|e| format!("{e}: {a:?}"))?;
    if a.status != 200 || body != serde_json::json!({"ok": true}) {
        return Err(format!("GET /noop: {a:?}\n{}", up.output()));
    }
    let tp = format!("00-{trace_id}-{CLIENT_SPAN}-01");
    let a = http::request(
        port,
        "POST",
        "/echo",
        &[("Content-Type", "application/json"), ("traceparent", &tp)],
        r#"{"value":1}"#,
    )?;
    let body: serde_json::Value =
        serde_json::from_str(&a.body).map_err(|e| format!("{e}: {a:?}"))?;
    if a.status != 200 || body != serde_json::json!({"value": 1}) {
        return Err(format!("POST /echo: {a:?}\n{}", up.output()));
    }

    let app = format!("{lang}-app");
    let mut spans = Vec::new();
    wait_for(
        &format!("the {lang} app's spans in trace {trace_id}"),
        Duration::from_secs(30),
        || {
            spans = zipkin::trace(apm.zipkin_port, trace_id)?;
            let has = |n: &str| spans.iter().any(|s| s.name == n && s.service == app);
            (has("handle echo") && has("handle noop"))
                .then_some(())
                .ok_or_else(|| zipkin::names(&spans))
        },
    )
    .map_err(|e| format!("{e}\n--- switchyard up ---\n{}", up.output()))?;
    let root = one_tree(&spans, CLIENT_SPAN)?;
    let get = |name: &str, service: &str| {
        spans
            .iter()
            .find(|s| s.name == name && s.service == service)
            .ok_or_else(|| format!("no {name} ({service}) in {}", zipkin::names(&spans)))
    };
    // echo: router -> manager -> the app's span; its publish: the manager -> the app again.
    let chain = [
        get("post /echo", "edge")?,
        get("deliver echo", lang)?,
        get("handle echo", &app)?,
        get("process noop", lang)?,
        get("deliver noop", lang)?,
        get("handle noop", &app)?,
    ];
    if chain[0].id != root.id {
        return Err(format!("root: {}", zipkin::names(&spans)));
    }
    for pair in chain.windows(2) {
        if !descends(&spans, pair[1], pair[0]) {
            return Err(format!(
                "{} ({}) is not under {} ({}): {}",
                pair[1].name,
                pair[1].service,
                pair[0].name,
                pair[0].service,
                zipkin::names(&spans)
            ));
        }
    }
    up.stop()
}
