//! Every span a sidecar exports: its name, kind, the role that makes it, when, and every attribute
//! and event it may carry (pure). The user guide's span reference (`docs/reference/spans.md`) is
//! written from this list, and every span the sidecar's tests receive at their OTLP receiver is
//! checked against it ([`check`]), so the list, the page and the code cannot drift apart.

use opentelemetry_semantic_conventions::attribute as attr;
pub use switchyard_protocol::spans::{Kind, Mismatch, SpanDoc};

const RESPONSE_STATUS: &str = "switchyard.response.status";

/// The messaging attributes of every hop span.
const MESSAGING: [&str; 2] = [attr::MESSAGING_SYSTEM, attr::MESSAGING_DESTINATION_NAME];

/// A hop that sends or processes an event without naming it (a request, a push)...
const HOP: &[&str] = &[
    MESSAGING[0],
    MESSAGING[1],
    attr::MESSAGING_OPERATION_TYPE,
    attr::MESSAGING_OPERATION_NAME,
    RESPONSE_STATUS,
    attr::ERROR_TYPE,
];

/// ...and one that names it by its CloudEvents id (a publish, a send, a process, a dead letter).
const HOP_WITH_ID: &[&str] = &[
    MESSAGING[0],
    MESSAGING[1],
    attr::MESSAGING_MESSAGE_ID,
    attr::MESSAGING_OPERATION_TYPE,
    attr::MESSAGING_OPERATION_NAME,
    RESPONSE_STATUS,
    attr::ERROR_TYPE,
];

/// Every span, in the order a request meets them.
pub const SPANS: &[SpanDoc] = &[
    SpanDoc {
        name: "{METHOD}",
        kind: Kind::Server,
        role: "router",
        when: "an HTTP request, until a route matches it (and one no route matches)",
        attributes: &[
            attr::HTTP_REQUEST_METHOD,
            attr::URL_PATH,
            attr::HTTP_RESPONSE_STATUS_CODE,
            attr::ERROR_TYPE,
        ],
        events: &[],
    },
    SpanDoc {
        name: "{METHOD} {route}",
        kind: Kind::Server,
        role: "router",
        when: "an HTTP request a route matched (the route's template)",
        attributes: &[
            attr::HTTP_REQUEST_METHOD,
            attr::URL_PATH,
            attr::HTTP_ROUTE,
            attr::MESSAGING_DESTINATION_NAME,
            attr::HTTP_RESPONSE_STATUS_CODE,
            attr::ERROR_TYPE,
        ],
        events: &[],
    },
    SpanDoc {
        name: "switchyard.v1.Gateway/{rpc}",
        kind: Kind::Server,
        role: "router",
        when: "a gRPC `Call`, or one message of a `Connect` stream",
        attributes: &[
            attr::RPC_SYSTEM_NAME,
            attr::RPC_METHOD,
            "switchyard.route.method",
            attr::MESSAGING_DESTINATION_NAME,
            attr::RPC_RESPONSE_STATUS_CODE,
            RESPONSE_STATUS,
            attr::ERROR_TYPE,
        ],
        events: &[],
    },
    SpanDoc {
        name: "WebSocket {path}",
        kind: Kind::Server,
        role: "router",
        when: "a WebSocket session, from the upgrade to the close",
        attributes: &[
            attr::NETWORK_PROTOCOL_NAME,
            attr::URL_PATH,
            "switchyard.websocket.messages",
            "switchyard.websocket.close",
        ],
        events: &[],
    },
    SpanDoc {
        name: "WS {command}",
        kind: Kind::Server,
        role: "router",
        when: "one command of a WebSocket session: a trace of its own, linked to the session's span",
        attributes: &[
            attr::NETWORK_PROTOCOL_NAME,
            attr::URL_PATH,
            "switchyard.websocket.command",
            attr::MESSAGING_DESTINATION_NAME,
            RESPONSE_STATUS,
            attr::ERROR_TYPE,
        ],
        events: &[],
    },
    SpanDoc {
        name: "request {event}",
        kind: Kind::Server,
        role: "manager",
        when: "an app's request through its local API",
        attributes: HOP,
        events: &[],
    },
    SpanDoc {
        name: "publish {event}",
        kind: Kind::Producer,
        role: "manager",
        when: "an app's publish through its local API",
        attributes: HOP_WITH_ID,
        events: &[],
    },
    SpanDoc {
        name: "push {event}",
        kind: Kind::Producer,
        role: "manager",
        when: "an app's push to WebSocket clients through its local API",
        attributes: HOP,
        events: &[],
    },
    SpanDoc {
        name: "broker {event}",
        kind: Kind::Internal,
        role: "router, manager",
        when: "admission, the choice of a Manager pod and the call, under the front door's span",
        attributes: &[
            MESSAGING[0],
            MESSAGING[1],
            RESPONSE_STATUS,
            attr::ERROR_TYPE,
        ],
        events: &[],
    },
    SpanDoc {
        name: "send {event}",
        kind: Kind::Client,
        role: "router, manager",
        when: "the hop to a Manager pod; its context travels in the frame",
        attributes: HOP_WITH_ID,
        events: &[],
    },
    SpanDoc {
        name: "process {event}",
        kind: Kind::Server,
        role: "manager",
        when: "an event a Manager pod received (over the mesh, or pulled from JetStream)",
        attributes: HOP_WITH_ID,
        events: &[],
    },
    SpanDoc {
        name: "queue {event}",
        kind: Kind::Internal,
        role: "manager",
        when: "the event's wait for a worker",
        attributes: &[MESSAGING[0], MESSAGING[1], attr::ERROR_TYPE],
        events: &[],
    },
    SpanDoc {
        name: "deliver {event}",
        kind: Kind::Client,
        role: "manager",
        when: "the delivery to the app, every attempt of it",
        attributes: &[
            MESSAGING[0],
            MESSAGING[1],
            attr::MESSAGING_MESSAGE_ID,
            attr::MESSAGING_OPERATION_NAME,
            attr::HTTP_REQUEST_METHOD,
            attr::URL_PATH,
            attr::RPC_SYSTEM_NAME,
            attr::RPC_METHOD,
            "switchyard.delivery.attempts",
            attr::HTTP_RESPONSE_STATUS_CODE,
            attr::ERROR_TYPE,
        ],
        events: &[(
            "retry",
            &[attr::HTTP_REQUEST_RESEND_COUNT, attr::ERROR_TYPE],
        )],
    },
    SpanDoc {
        name: "dead-letter {type}",
        kind: Kind::Producer,
        role: "manager",
        when: "an event that failed its last attempt, published to the dead-letter type",
        attributes: HOP_WITH_ID,
        events: &[],
    },
];

/// The entry a span named `name` is made from (see [`switchyard_protocol::spans::find`]).
pub fn find(name: &str) -> Option<&'static SpanDoc> {
    switchyard_protocol::spans::find(SPANS, name)
}

/// Checks a span as a sidecar exported it against [`SPANS`]: every problem, named.
pub fn check(
    name: &str,
    kind: i32,
    attributes: &[&str],
    events: &[(&str, Vec<&str>)],
) -> Result<(), Mismatch> {
    switchyard_protocol::spans::check(SPANS, name, kind, attributes, events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_is_found_by_its_most_specific_pattern() {
        assert_eq!(find("GET").map(|d| d.name), Some("{METHOD}"));
        assert_eq!(
            find("GET /orders/{id}").map(|d| d.name),
            Some("{METHOD} {route}")
        );
        assert_eq!(
            find("broker orders").map(|d| d.name),
            Some("broker {event}")
        );
        assert_eq!(
            find("switchyard.v1.Gateway/Call").map(|d| d.name),
            Some("switchyard.v1.Gateway/{rpc}")
        );
        assert!(find("a b c").is_none(), "three words fit no entry");
        assert!(
            find("switchyard.v1.Gateway/").is_none(),
            "a placeholder is not empty"
        );
    }

    #[test]
    fn every_entry_names_a_distinct_pattern() {
        for (i, a) in SPANS.iter().enumerate() {
            assert!(!a.attributes.is_empty(), "{}", a.name);
            for b in &SPANS[i + 1..] {
                assert_ne!(a.name, b.name);
            }
        }
    }
}
