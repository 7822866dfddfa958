//! The real binary: listens where told (`PORT` env), answers, and exits 0 on SIGTERM.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the child if the test fails before it is stopped, so no process outlives the test.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn get_healthz(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

#[test]
fn serves_on_port_env_and_stops_on_sigterm() {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_switchyard-example-app"))
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn app");
    let mut guard = Guard(child);

    let deadline = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        if let Some(a) = get_healthz(port) {
            break a;
        }
        assert!(Instant::now() < deadline, "app did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // No libc (unsafe is forbidden): the kill(1) command sends the signal.
    let status = Command::new("kill")
        .args(["-TERM", &guard.0.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = guard.0.try_wait().expect("wait") {
            break exit;
        }
        assert!(Instant::now() < deadline, "app did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_mode_answers_the_handler_service() {
    use switchyard_protocol::gateway::v1::CloudEvent;
    use switchyard_protocol::gateway::v1::handler_client::HandlerClient;

    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_switchyard-example-app"))
        .args(["--port", &port.to_string(), "--protocol", "grpc"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn app");
    let _guard = Guard(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    let channel = loop {
        let ep = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .expect("endpoint");
        if let Ok(c) = ep.connect().await {
            break c;
        }
        assert!(Instant::now() < deadline, "app did not listen on {port}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut client = HandlerClient::new(channel);
    let event = |ty: &str, data: &[u8]| CloudEvent {
        id: "1".into(),
        source: "/test".into(),
        spec_version: "1.0".into(),
        r#type: ty.into(),
        data_content_type: "application/json".into(),
        data: data.to_vec(),
        extensions: Default::default(),
    };
    let r = client
        .handle(event("echo", b"{\"value\":1}"))
        .await
        .expect("echo")
        .into_inner();
    assert_eq!((r.status, &r.data[..]), (200, &b"{\"value\":1}"[..]));
    assert_eq!(r.content_type, "application/json");
    let r = client
        .handle(event("nope", b"{}"))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(r.status, 404);
    assert_eq!(r.content_type, "application/problem+json");
    let err = client.handle(event("", b"{}")).await.expect_err("no type");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}
