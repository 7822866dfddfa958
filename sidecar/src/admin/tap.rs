//! `GET /tap`: one tap's lines as a streamed `application/x-ndjson` body, for as long as the client
//! reads it (clients inside the pod only: `gate`). A bad query or a full house is a problem body.

use crate::tap::{Filter, Tap, Taps};
use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode, header};
use std::convert::Infallible;

/// An admin answer's body: whole, or a tap's stream.
pub(super) type AdminBody = UnsyncBoxBody<Bytes, Infallible>;

/// The answer to `GET /tap?query`.
pub(super) fn open(taps: &std::sync::Arc<Taps>, query: Option<&str>) -> Response<AdminBody> {
    let filter = match Filter::parse(query) {
        Ok(f) => f,
        Err(e) => return problem(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let tap = match taps.open(filter) {
        Ok(t) => t,
        Err(e) => return problem(StatusCode::TOO_MANY_REQUESTS, &e.to_string()),
    };
    let hello = tap.hello();
    let lines = futures::stream::unfold(
        (Some(hello), tap),
        |(first, tap): (Option<Bytes>, Tap)| async move {
            let line = match first {
                Some(l) => l,
                None => tap.next().await,
            };
            Some((Ok::<_, Infallible>(Frame::data(line)), (None, tap)))
        },
    );
    let mut resp = Response::new(StreamBody::new(lines).boxed_unsync());
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/x-ndjson"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    resp
}

fn problem(status: StatusCode, detail: &str) -> Response<AdminBody> {
    let code = status.as_u16();
    let mut resp = Response::new(
        Full::new(crate::problem::body(
            code,
            crate::problem::title(code),
            detail,
        ))
        .boxed_unsync(),
    );
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(crate::problem::CONTENT_TYPE),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tap::MAX_TAPS;

    async fn first_frame(resp: Response<AdminBody>) -> Bytes {
        let mut body = resp.into_body();
        let frame = body.frame().await.expect("a frame").expect("infallible");
        frame.into_data().unwrap_or_default()
    }

    #[tokio::test]
    async fn a_tap_streams_ndjson_starting_with_its_bounds() {
        let taps = Taps::new("router", Vec::new());
        let resp = open(&taps, Some("type=echo&payload=8"));
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/x-ndjson");
        assert!(taps.watching(), "open while its answer lives");
        let hello: serde_json::Value =
            serde_json::from_slice(&first_frame(resp).await).expect("json");
        assert_eq!(hello["kind"], "tapping");
        assert_eq!(hello["payload"], 8);
        assert!(!taps.watching(), "closed with its body");
    }

    #[tokio::test]
    async fn a_bad_query_or_a_full_house_is_a_problem_naming_why() {
        let taps = Taps::new("manager", Vec::new());
        let resp = open(&taps, Some("payload=99999"));
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        let body = first_frame(resp).await;
        assert!(
            String::from_utf8_lossy(&body).contains("payload"),
            "{body:?}"
        );
        let held: Vec<_> = (0..MAX_TAPS).map(|_| open(&taps, None)).collect();
        let resp = open(&taps, None);
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        let body = first_frame(resp).await;
        assert!(
            String::from_utf8_lossy(&body).contains("taps are open"),
            "{body:?}"
        );
        drop(held);
        assert!(!taps.watching());
    }
}
