//! A bare hyper HTTP/1.1 server answering every request with `{"ok":true}`: the physical limit the
//! full path is measured against.

#![forbid(unsafe_code)]

use bytes::Bytes;
use clap::Parser;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use tokio::net::TcpListener;

#[derive(Parser)]
#[command(
    name = "switchyard-bare",
    about = "Bare hyper noop server (benchmark baseline)"
)]
struct Args {
    /// Port on 127.0.0.1.
    #[arg(long, default_value_t = 18080)]
    port: u16,
}

async fn noop(_req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut resp = Response::new(Full::new(Bytes::from_static(br#"{"ok":true}"#)));
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = TcpListener::bind(("127.0.0.1", args.port)).await?;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            // Out of descriptors and the like: keep serving the connections we have.
            Err(_) => continue,
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(noop))
                .await;
        });
    }
}
