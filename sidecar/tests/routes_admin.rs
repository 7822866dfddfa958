//! `GET /routes` on the router's admin port, and a router told to follow a control plane that is not
//! there: it keeps serving from its config's table and says so.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

async fn routes(client: &Http, admin: u16) -> Value {
    let r = client
        .get(&format!("http://127.0.0.1:{admin}/routes"))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("application/json"));
    r.json()
}

fn route<'a>(table: &'a Value, event: &str) -> &'a Value {
    table["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["eventType"] == event)
        .unwrap_or_else(|| panic!("no route for {event} in {table:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_shows_the_config_table_with_live_endpoints() {
    let mesh = Mesh::start(Opts::default()).await;
    let table = routes(&mesh.client, mesh.router_admin).await;
    assert_eq!(table["router"], "edge");
    assert_eq!(table["namespace"], "default");
    assert_eq!(table["source"], "config");
    assert_eq!(table["version"], 0);
    assert!(table.get("controlPlane").is_none(), "{table:#}");
    let noop = route(&table, "noop");
    assert_eq!(noop["manager"], "handlers");
    let endpoint = format!("127.0.0.1:{}", mesh.manager_port);
    assert_eq!(noop["endpoints"][0]["address"], endpoint.as_str());
    // Mesh::start waited until /noop was answered, so the connection is open.
    assert_eq!(noop["endpoints"][0]["connected"], true, "{table:#}");
    assert_eq!(
        table["routes"].as_array().unwrap().len(),
        5,
        "one route per destination: {table:#}"
    );

    let r = mesh
        .client
        .get(&format!("http://127.0.0.1:{}/routes", mesh.manager_admin))
        .await
        .unwrap();
    // The manager role shows its outbound table (where the app's events go): here its config has none.
    assert_eq!(r.status, 200);
    let outbound = r.json();
    assert_eq!(outbound["router"], "edge", "{outbound:#}");
    assert_eq!(outbound["source"], "config");
    assert_eq!(outbound["routes"], serde_json::json!([]), "{outbound:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_control_plane_leaves_the_config_table_serving() {
    let mesh = Mesh::start(Opts::default()).await;
    let mut cfg = router_config(mesh.manager_port, "3s");
    cfg["name"] = "edge2".into();
    let cfg = write_json(mesh.dir.path(), "router2.json", &cfg);
    // Nothing listens on this port: every connect fails and the follower keeps retrying.
    let absent = ClosedPort::new();
    let url = format!("http://127.0.0.1:{}", absent.port);
    let sub = mesh.dir.path().join("r2");
    std::fs::create_dir_all(&sub).unwrap();
    let (router, ports) =
        start_router(&sub, &cfg, &[], &[("SWITCHYARD_CONTROL_PLANE", &url)]).await;
    let (http_port, admin) = (ports.http, ports.admin);

    let served = poll(Duration::from_secs(20), "request through edge2", || async {
        let r = mesh
            .client
            .get(&format!("http://127.0.0.1:{http_port}/noop"))
            .await
            .ok()?;
        (r.status == 200).then_some(r)
    })
    .await;
    assert_eq!(served.status, 200);
    let table = routes(&mesh.client, admin).await;
    assert_eq!(table["source"], "config", "{table:#}");
    assert_eq!(table["controlPlane"]["url"], url.as_str());
    assert_eq!(table["controlPlane"]["connected"], false);
    assert_eq!(table["controlPlane"]["tablesReceived"], 0);
    let metrics = mesh
        .client
        .get(&format!("http://127.0.0.1:{admin}/metrics"))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    assert!(
        text.contains("switchyard_control_plane_connected 0"),
        "{text}"
    );
    let log = poll(Duration::from_secs(20), "follower warning", || async {
        let log = router.log_text();
        log.contains("routing-table stream ended").then_some(log)
    })
    .await;
    assert!(log.contains("cannot connect"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_url_without_http_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_json(dir.path(), "router.json", &router_config(1, "3s"));
    let mut router = spawn_router(
        dir.path(),
        &cfg,
        &["--control-plane", "switchyard.system.svc:7443"],
        &[],
    );
    let code = router.wait_exit(Duration::from_secs(20)).await;
    assert_eq!(code, Some(1), "{}", router.log_text());
    assert!(
        router.log_text().contains("must start with https://"),
        "{}",
        router.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ready_file_names_the_ports_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = router_config(1, "3s");
    cfg["spec"]["listeners"]["grpc"] = serde_json::json!({"port": 0});
    cfg["spec"]["routes"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"event": "noop", "grpc": {"method": "noop"}}));
    let cfg = write_json(dir.path(), "router.json", &cfg);
    let file = dir.path().join("ready.json");
    let (_router, ports) = start_router(
        dir.path(),
        &cfg,
        &["--ready-file", file.to_str().unwrap()],
        &[],
    )
    .await;
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let grpc = ports.grpc.unwrap();
    assert_eq!(
        written,
        serde_json::json!({
            "http": format!("127.0.0.1:{}", ports.http),
            "grpc": format!("127.0.0.1:{grpc}"),
            "admin": format!("127.0.0.1:{}", ports.admin),
        })
    );
    assert!(ports.http != 0 && grpc != 0 && grpc != ports.http);
    // Those are the live listeners.
    let client = Http::new();
    let r = client
        .get(&format!("http://127.0.0.1:{}/readyz", ports.admin))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    tokio::net::TcpStream::connect(("127.0.0.1", ports.http))
        .await
        .unwrap();
    tokio::net::TcpStream::connect(("127.0.0.1", grpc))
        .await
        .unwrap();
}
