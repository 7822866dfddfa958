//! Bare hyper HTTP/1.1: `{"ok":true}` for any request, or `n` bytes for `/bytes/N` (the payload-size
//! baseline, same body as the example app's `bytes` event behind the bench Router's `/bytes/{n}`).

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use tokio::net::TcpListener;

/// Largest `n` served, as the example app's `bytes` event.
pub const MAX_BYTES: usize = 4 * 1024 * 1024;

/// The reply size a path asks, if it asks one: `/bytes/N`.
pub fn bytes_asked(path: &str) -> Option<usize> {
    path.strip_prefix("/bytes/")?.parse().ok()
}

fn answer(req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let (body, ct) = if req.uri().path().starts_with("/bytes/") {
        match bytes_asked(req.uri().path()) {
            Some(n) if n <= MAX_BYTES => (Bytes::from(vec![b'x'; n]), "application/octet-stream"),
            _ => {
                let mut r = Response::new(Full::new(Bytes::from_static(b"n: 0..=4194304\n")));
                *r.status_mut() = StatusCode::BAD_REQUEST;
                return r;
            }
        }
    } else {
        (Bytes::from_static(br#"{"ok":true}"#), "application/json")
    };
    let mut resp = Response::new(Full::new(body));
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(ct),
    );
    resp
}

/// Serves until the process ends.
pub async fn serve(listener: TcpListener) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            // Out of descriptors and the like: keep serving the connections we have.
            Err(_) => continue,
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let svc = service_fn(|req| async move { Ok::<_, Infallible>(answer(&req)) });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_n_from_the_path() {
        assert_eq!(bytes_asked("/bytes/1024"), Some(1024));
        assert_eq!(bytes_asked("/bytes/x"), None);
        assert_eq!(bytes_asked("/noop"), None);
    }
}
