//! The real binary: listens where told (`--port`; 0 picks a free port, which it reports), answers, and exits
//! 0 on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Kills the child if the test fails before it is stopped, so no process outlives the test.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the app with `args` and `env` (one of them asking for port 0) and returns it with the port it
/// reports listening on.
fn start_app(args: &[&str], env: &[(&str, &str)]) -> (Guard, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard-example-app"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn app");
    let stderr = child.stderr.take().expect("stderr");
    let guard = Guard(child);
    // The reader drains stderr for the app's whole life, so its later lines never hit a closed pipe.
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .expect("the app reports where it listens");
        if let Some(addr) = line.strip_prefix("switchyard-example-app: listening on ") {
            let addr: SocketAddr = addr.parse().expect("a socket address");
            return (guard, addr.port());
        }
    }
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
    let (mut guard, port) = start_app(&[], &[("PORT", "0")]);
    let answer = get_healthz(port).expect("GET /healthz");
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

    let (_guard, port) = start_app(&["--port", "0", "--protocol", "grpc"], &[]);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect to the app");
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
