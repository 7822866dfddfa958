//! The local API over HTTP: `POST /v1/{publish|request|push}/{event}` with a JSON body.

use super::parse::{self, Op};
use super::{Call, Done, LocalApi, MAX_BODY};
use crate::answer::Answer;
use crate::answer::http::Reply;
use crate::edge;
use crate::net::body::{Unconsumed, Unread, linger, read_limited};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use std::sync::Arc;
use std::time::Duration;

static CE_ID: HeaderName = HeaderName::from_static("ce-id");
static TIMEOUT: HeaderName = HeaderName::from_static("timeout");
/// Time the app has to send its body.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Answers one HTTP call of the app.
pub(crate) async fn handle(api: Arc<LocalApi>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let op = parse::route(req.uri().path()).ok().map(|(op, _)| op);
    let resp = match serve(&api, req).await {
        Ok(done) => answer(done),
        Err(r) => problem_response(&r),
    };
    if let Some(op) = op {
        api.count(op, resp.status().as_u16());
    }
    resp
}

async fn serve(api: &LocalApi, req: Request<Incoming>) -> Result<Done, Answer> {
    let (parts, body) = req.into_parts();
    // Any refusal below, before the body is read, lingers on it (see `Unconsumed`).
    let body = Unconsumed::new(body);
    let (op, event) = parse::route(parts.uri.path())?;
    if parts.method != Method::POST {
        return Err(Answer::refusal(
            405,
            format!("{} is not allowed here; use POST", parts.method),
        ));
    }
    let header = |name: &HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let declared_len = header(&CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok());
    edge::check_content_type(header(&CONTENT_TYPE), declared_len)
        .map_err(|r| Answer::refusal(r.status, r.detail))?;
    if declared_len.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let timeout = match op {
        Op::Request => {
            parse::timeout(parse::timeout_query(parts.uri.query()).or_else(|| header(&TIMEOUT)))?
        }
        Op::Publish | Op::Push => parse::DEFAULT_TIMEOUT,
    };
    let ce_id = parse::ce_id(header(&CE_ID))?;
    // A retry key is the event's id too; given with a different `ce-id`, one of them is a mistake.
    let key = edge::idempotency_key(
        parts
            .headers
            .get(edge::IDEMPOTENCY_KEY)
            .map(HeaderValue::as_bytes),
    )
    .map_err(|r| Answer::refusal(r.status, r.detail))?;
    let ce_id = match (ce_id, key) {
        (Some(id), Some(key)) if id != key => {
            return Err(Answer::refusal(
                400,
                "ce-id and Idempotency-Key differ; give one, or the same value in both",
            ));
        }
        (id, key) => id.or(key),
    };
    let read = read_limited(body.into_inner(), MAX_BODY, declared_len, &api.body_budget);
    // `_held` keeps the body's bytes counted until the call is done.
    let (raw, _held) = match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(Ok(read)) => read,
        Ok(Err(Unread::NoRoom(rest))) => {
            linger(rest);
            return Err(Answer::refusal(
                503,
                format!(
                    "the sidecar holds {} bytes of request bodies at most and has no room for this one now",
                    api.body_budget.total()
                ),
            ));
        }
        Ok(Err(Unread::TooLarge(rest))) => {
            // Read on and dropped, so the app still sending reads its 413 (see `linger`).
            linger(rest);
            return Err(too_large());
        }
        Ok(Err(Unread::Failed)) => {
            return Err(Answer::refusal(400, "the request body could not be read"));
        }
        Err(_) => {
            return Err(Answer::refusal(
                408,
                "the request body did not arrive in time",
            ));
        }
    };
    // An empty body is the empty object, as on the gRPC side.
    let payload = if raw.is_empty() {
        Bytes::from_static(b"{}")
    } else {
        edge::check_syntax(&raw).map_err(|r| Answer::refusal(r.status, r.detail))?;
        raw
    };
    let traceparent = parts
        .headers
        .get(crate::traceparent::HEADER)
        .map(HeaderValue::as_bytes);
    api.call(Call {
        op,
        event,
        ce_id,
        traceparent,
        tracestate: crate::traceparent::tracestate_in(traceparent, &parts.headers),
        payload,
        timeout,
    })
    .await
}

fn too_large() -> Answer {
    Answer::refusal(413, format!("body is larger than {MAX_BODY} bytes"))
}

fn json_response(status: u16, body: Bytes, content_type: HeaderValue) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    resp.headers_mut().insert(CONTENT_TYPE, content_type);
    resp
}

fn answer(done: Done) -> Response<Full<Bytes>> {
    let json = HeaderValue::from_static(edge::JSON);
    match done {
        Done::Accepted { ce_id } => {
            let body = serde_json::json!({ "id": ce_id }).to_string();
            let mut r = json_response(202, Bytes::from(body), json);
            if let Ok(v) = HeaderValue::from_str(&ce_id) {
                r.headers_mut().insert(CE_ID.clone(), v);
            }
            r
        }
        Done::Pushed { routers } => {
            let body = serde_json::json!({ "routers": routers }).to_string();
            json_response(202, Bytes::from(body), json)
        }
        Done::Reply {
            ce_id,
            status,
            content_type,
            body,
        } => {
            let ct = HeaderValue::from_str(&content_type)
                .ok()
                .filter(|_| !content_type.is_empty())
                .unwrap_or_else(|| HeaderValue::from_static("application/octet-stream"));
            let mut r = json_response(status, body, ct);
            if let Ok(v) = HeaderValue::from_str(&ce_id) {
                r.headers_mut().insert(CE_ID.clone(), v);
            }
            r
        }
    }
}

fn problem_response(a: &Answer) -> Response<Full<Bytes>> {
    let mut reply = Reply::answer(a);
    if a.status == 405 {
        reply.allow = Some(HeaderValue::from_static("POST"));
    }
    reply.into_response(None)
}
