//! The app on a Unix socket (`app.transport: unix`): it replaces a socket a previous run left (and
//! refuses to replace any other file), answers there, lets a sidecar of another user connect, and
//! removes the socket when it stops.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use switchyard_example_app::listener::Listener;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

#[tokio::test]
async fn serves_on_a_unix_socket_and_removes_it_when_stopped() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("app.sock");
    // A path that is some other file is refused, and the file kept.
    let other = dir.path().join("notes.txt");
    std::fs::write(&other, b"keep me").expect("file");
    let refused = Listener::bind_unix(&other).err().expect("not a socket");
    assert!(refused.to_string().contains("not a socket"), "{refused}");
    assert_eq!(std::fs::read(&other).expect("kept"), b"keep me");
    // What a killed app leaves behind (a std listener does not unlink its socket): binding over it
    // must still work.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("stale socket"));
    assert!(path.exists());
    let listener = Listener::bind_unix(&path).expect("bind");
    let meta = std::fs::metadata(&path).expect("socket");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o666);
    assert_eq!(listener.describe(), format!("unix:{}", path.display()));

    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(switchyard_example_app::serve(listener, async {
        let _ = stopped.await;
    }));
    let stream = UnixStream::connect(&path).await.expect("connect");
    let (mut send, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let req = Request::post("/events")
        .header("host", "localhost")
        .header("ce-type", "echo")
        .header("ce-id", "1")
        .header("ce-source", "/test")
        .header("ce-specversion", "1.0")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{\"value\":3}")))
        .expect("request");
    let resp = send.send_request(req).await.expect("answer");
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"{\"value\":3}");
    drop(send);

    let _ = stop.send(());
    task.await.expect("server task").expect("server result");
    assert!(!path.exists(), "the socket outlived the app");
}
