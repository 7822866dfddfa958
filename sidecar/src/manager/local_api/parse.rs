//! Reading a local API call (pure): which operation and event type a path names, the reply deadline,
//! the app's CloudEvents id. Every rejection names what to fix.

use crate::answer::Answer;
use std::time::Duration;
use switchyard_crds::EventType;

/// Reply deadline of `request` when the app gives none.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest reply deadline of `request`; a longer `timeout` is cut to it.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// How long `publish` (and `request`) may wait for a manager endpoint and credit.
pub(crate) const SEND_DEADLINE: Duration = Duration::from_secs(2);

/// What the app asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Fire-and-forget to the Manager of the type.
    Publish,
    /// Send and wait for the reply.
    Request,
    /// To the WebSocket subscribers of every connected router.
    Push,
}

impl Op {
    /// The metric label and path segment.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Op::Publish => "publish",
            Op::Request => "request",
            Op::Push => "push",
        }
    }
}

/// `/v1/{publish|request|push}/{event}` -> the operation and the event type.
pub(crate) fn route(path: &str) -> Result<(Op, &str), Answer> {
    let not_found = || {
        Answer::refusal(
            404,
            format!(
                "no local API at {path}; use POST /v1/publish/{{event}}, /v1/request/{{event}} or /v1/push/{{event}}"
            ),
        )
    };
    let rest = path.strip_prefix("/v1/").ok_or_else(not_found)?;
    let (op, event) = rest.split_once('/').ok_or_else(not_found)?;
    let op = match op {
        "publish" => Op::Publish,
        "request" => Op::Request,
        "push" => Op::Push,
        _ => return Err(not_found()),
    };
    event_type(event)?;
    Ok((op, event))
}

/// Checks an event-type name as the CRDs do (400 naming the rule).
pub(crate) fn event_type(name: &str) -> Result<(), Answer> {
    EventType::check(name).map_err(|e| Answer::refusal(400, e))
}

/// The app's `ce-id`, kept when legal (1 to 255 visible ASCII characters), else a new one.
pub(crate) fn ce_id(given: Option<&str>) -> Result<Option<String>, Answer> {
    match given {
        None | Some("") => Ok(None),
        Some(id) if id.len() <= 255 && id.bytes().all(|b| b.is_ascii_graphic()) => {
            Ok(Some(id.to_owned()))
        }
        Some(_) => Err(Answer::refusal(
            400,
            "ce-id must be 1 to 255 visible ASCII characters",
        )),
    }
}

/// The `timeout` value of the query string, if any.
pub(crate) fn timeout_query(query: Option<&str>) -> Option<&str> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "timeout")
        .map(|(_, v)| v)
}

/// The reply deadline from a `timeout` such as `250ms`, `5s` or `1m`: default when absent, cut to
/// the cap, 400 when it does not parse or is zero.
pub(crate) fn timeout(value: Option<&str>) -> Result<Duration, Answer> {
    let Some(v) = value else {
        return Ok(DEFAULT_TIMEOUT);
    };
    let d = humantime::parse_duration(v.trim()).map_err(|e| {
        Answer::refusal(
            400,
            format!("timeout {v:?} is not a duration such as 500ms or 5s: {e}"),
        )
    })?;
    if d.is_zero() {
        return Err(Answer::refusal(400, "timeout must be more than zero"));
    }
    Ok(d.min(MAX_TIMEOUT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            route("/v1/publish/orders.create"),
            Ok((Op::Publish, "orders.create"))
        );
        assert_eq!(route("/v1/request/echo"), Ok((Op::Request, "echo")));
        assert_eq!(route("/v1/push/tick"), Ok((Op::Push, "tick")));
        assert_eq!(route("/v1/send/echo").map_err(|r| r.status), Err(404));
        assert_eq!(route("/v2/publish/echo").map_err(|r| r.status), Err(404));
        assert_eq!(route("/v1/publish").map_err(|r| r.status), Err(404));
        let bad = route("/v1/publish/Bad/x").expect_err("refused");
        assert_eq!(bad.status, 400);
        assert!(bad.detail.contains("event type"), "{}", bad.detail);
    }

    #[test]
    fn ce_ids() {
        assert_eq!(ce_id(None), Ok(None));
        assert_eq!(ce_id(Some("")), Ok(None));
        assert_eq!(ce_id(Some("abc-1")), Ok(Some("abc-1".into())));
        assert_eq!(ce_id(Some("a b")).map_err(|r| r.status), Err(400));
        assert_eq!(
            ce_id(Some(&"x".repeat(256))).map_err(|r| r.status),
            Err(400)
        );
    }

    #[test]
    fn timeouts() {
        assert_eq!(timeout(None), Ok(DEFAULT_TIMEOUT));
        assert_eq!(timeout(Some("250ms")), Ok(Duration::from_millis(250)));
        assert_eq!(timeout(Some("2h")), Ok(MAX_TIMEOUT));
        assert_eq!(timeout(Some("soon")).map_err(|r| r.status), Err(400));
        assert_eq!(timeout(Some("0s")).map_err(|r| r.status), Err(400));
        assert_eq!(timeout_query(Some("a=1&timeout=5s")), Some("5s"));
        assert_eq!(timeout_query(Some("a=1")), None);
        assert_eq!(timeout_query(None), None);
    }
}
