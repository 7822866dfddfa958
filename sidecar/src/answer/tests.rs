//! Every failure, rendered for every protocol: the one table the front doors share.

use super::http::Reply;
use super::{Answer, Failure, grpc, ws};
use serde_json::{Map, Value, json};
use std::time::Duration;
use tonic::Code;

struct Row {
    failure: Failure,
    status: u16,
    code: Code,
    retry_after: Option<u64>,
    detail: &'static str,
}

fn table() -> Vec<Row> {
    let row = |failure, status, code, retry_after, detail| Row {
        failure,
        status,
        code,
        retry_after,
        detail,
    };
    vec![
        row(
            Failure::Shed,
            503,
            Code::ResourceExhausted,
            Some(1),
            "too many requests pending in this sidecar; retry shortly",
        ),
        row(
            Failure::NoManager,
            503,
            Code::Unavailable,
            Some(1),
            "no Manager handles event type orders.create",
        ),
        row(
            Failure::NoEndpoint,
            503,
            Code::Unavailable,
            Some(1),
            "no endpoint of the Manager for orders.create is reachable; retry shortly",
        ),
        row(
            Failure::NoCredit,
            503,
            Code::ResourceExhausted,
            Some(1),
            "the Manager for orders.create is saturated; the request was not sent",
        ),
        row(
            Failure::Timeout,
            504,
            Code::DeadlineExceeded,
            None,
            "no reply within 1500ms",
        ),
        row(
            Failure::Lost,
            502,
            Code::Unknown,
            None,
            "the connection to the Manager failed after the request was sent; it may have been handled",
        ),
        row(
            Failure::KeyReused {
                key: "order-42".into(),
            },
            409,
            Code::Aborted,
            None,
            "key order-42 was already used for another orders.create event from this publisher within the duplicate window; use a new key for a new event (a retry must carry the same payload)",
        ),
        row(
            Failure::StreamFull {
                manager: "orders".into(),
                limit: "33554432 bytes, its spec.durable.maxBytes".into(),
            },
            503,
            Code::ResourceExhausted,
            Some(5),
            "the orders.create event was not kept: the event store of Manager orders is full (33554432 bytes, its spec.durable.maxBytes) of events not yet delivered; retry once its app has worked the backlog down, or raise the limit",
        ),
        row(
            Failure::StoreTooLarge {
                bytes: 2_000_000,
                max: 1_048_576,
            },
            413,
            Code::OutOfRange,
            None,
            "the orders.create event is 2000000 bytes; with its headers it is more than the 1048576 bytes the event store's server takes (NATS max_payload): raise the server's max_payload, or send a smaller event",
        ),
        row(
            Failure::Manager {
                status: 503,
                detail: "the Manager's queue is full; retry shortly".into(),
            },
            503,
            Code::ResourceExhausted,
            Some(1),
            "the Manager's queue is full; retry shortly",
        ),
        row(
            Failure::Manager {
                status: 502,
                detail: "the handler app is unreachable".into(),
            },
            502,
            Code::Unknown,
            None,
            "the handler app is unreachable",
        ),
        row(
            Failure::Manager {
                status: 504,
                detail: "the handler app did not answer within 5s".into(),
            },
            504,
            Code::DeadlineExceeded,
            None,
            "the handler app did not answer within 5s",
        ),
    ]
}

fn answers() -> Vec<(Row, Answer)> {
    table()
        .into_iter()
        .map(|r| {
            let a = Answer::of(&r.failure, "orders.create", Duration::from_millis(1500));
            (r, a)
        })
        .collect()
}

#[test]
fn every_failure_has_one_status_code_detail_and_retry() {
    for (row, a) in answers() {
        let name = row.failure.name();
        assert_eq!(a.status, row.status, "{name}");
        assert_eq!(a.code, row.code, "{name}");
        assert_eq!(a.retry_after, row.retry_after, "{name}");
        assert_eq!(a.detail, row.detail, "{name}");
        // The promise of each class: 503 is safe to retry, nothing else is announced as such.
        assert_eq!(a.status == 503, a.retry_after.is_some(), "{name}");
    }
}

#[test]
fn http_and_the_local_apis_http_render_problem_json_with_retry_after() {
    for (row, a) in answers() {
        let name = row.failure.name();
        let resp = Reply::answer(&a).into_response(None);
        assert_eq!(resp.status().as_u16(), row.status, "{name}");
        let h = resp.headers();
        assert_eq!(h["content-type"], "application/problem+json", "{name}");
        assert_eq!(
            h.get("retry-after")
                .map(|v| v.to_str().expect("ascii").to_owned()),
            row.retry_after.map(|s| s.to_string()),
            "{name}"
        );
        let body: Value = serde_json::from_slice(&a.problem_body()).expect("json");
        assert_eq!(body["status"], row.status, "{name}");
        assert_eq!(body["title"], crate::problem::title(row.status), "{name}");
        assert_eq!(body["detail"], row.detail, "{name}");
        assert_eq!(body["type"], "about:blank", "{name}");
    }
}

#[test]
fn grpc_and_the_local_apis_grpc_render_the_code_message_and_retry_after() {
    for (row, a) in answers() {
        let name = row.failure.name();
        let s = grpc::status(&a, None);
        assert_eq!(s.code(), row.code, "{name}");
        assert_eq!(s.message(), row.detail, "{name}");
        assert_eq!(
            s.metadata()
                .get("retry-after")
                .map(|v| v.to_str().expect("ascii").to_owned()),
            row.retry_after.map(|s| s.to_string()),
            "{name}"
        );
    }
}

#[test]
fn websocket_replies_carry_the_status_error_and_retry_after() {
    for (row, a) in answers() {
        let name = row.failure.name();
        let mut reply = Map::new();
        ws::error_members(&a, &mut reply);
        let mut expected = json!({
            "error": {"title": crate::problem::title(row.status), "detail": row.detail},
        });
        if let Some(secs) = row.retry_after {
            expected["retryAfter"] = json!(secs);
        }
        assert_eq!(Value::Object(reply), expected, "{name}");
    }
}

#[test]
fn refusals_take_the_code_of_their_status() {
    let cases = [
        (400, Code::InvalidArgument),
        (401, Code::Unauthenticated),
        (403, Code::PermissionDenied),
        (404, Code::NotFound),
        (405, Code::Unimplemented),
        (408, Code::DeadlineExceeded),
        (413, Code::OutOfRange),
        (415, Code::InvalidArgument),
        (429, Code::ResourceExhausted),
        (503, Code::Unavailable),
        (504, Code::DeadlineExceeded),
        (502, Code::Unknown),
    ];
    for (status, code) in cases {
        let a = Answer::refusal(status, "x");
        assert_eq!(a.code, code, "{status}");
        assert_eq!(a.retry_after.is_some(), status == 503, "{status}");
    }
    assert_eq!(
        Answer::refusal(429, "slow down").retry_after(3).retry_after,
        Some(3)
    );
}

#[test]
fn durations_read_the_same_everywhere() {
    assert_eq!(super::duration(Duration::from_secs(2)), "2s");
    assert_eq!(super::duration(Duration::from_millis(1500)), "1500ms");
    assert_eq!(super::duration(Duration::from_millis(250)), "250ms");
    assert_eq!(super::duration(Duration::from_micros(2_000_500)), "2000ms");
}
