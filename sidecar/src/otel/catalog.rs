//! Every span a sidecar exports: its name, kind, the role that makes it, when, and every attribute
//! and event it may carry (pure). The user guide's span reference (`docs/reference/spans.md`) is
//! written from this list, and every span the sidecar's tests receive at their OTLP receiver is
//! checked against it ([`check`]), so the list, the page and the code cannot drift apart.

use opentelemetry_semantic_conventions::attribute as attr;

/// The kind of a span, as OTLP numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
    Producer = 4,
}

impl Kind {
    /// Its name in OTLP's JSON and in trace viewers.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Internal => "INTERNAL",
            Kind::Server => "SERVER",
            Kind::Client => "CLIENT",
            Kind::Producer => "PRODUCER",
        }
    }
}

/// One span.
#[derive(Debug)]
pub struct SpanDoc {
    /// Its name; `{…}` stands for a part that varies (without spaces), `{METHOD}` for an HTTP
    /// method (upper-case letters).
    pub name: &'static str,
    pub kind: Kind,
    /// `router`, `manager`, or both.
    pub role: &'static str,
    /// When it is made.
    pub when: &'static str,
    /// Every attribute it may carry (some only on an outcome).
    pub attributes: &'static [&'static str],
    /// Its events, each with the attributes it may carry.
    pub events: &'static [(&'static str, &'static [&'static str])],
}

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

/// The entry a span named `name` is made from: of those whose pattern matches, the one with the
/// most fixed text (`broker orders` is a broker span, not an HTTP request of method `broker`).
pub fn find(name: &str) -> Option<&'static SpanDoc> {
    SPANS
        .iter()
        .filter(|doc| matches(doc.name, name))
        .max_by_key(|doc| fixed_len(doc.name))
}

/// How an exported span differs from the catalog.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("span {0:?} is not in the span catalog")]
    Unknown(String),
    #[error("span {span:?} (catalog entry {entry:?}): {}", problems.join("; "))]
    Differs {
        span: String,
        entry: &'static str,
        problems: Vec<String>,
    },
}

/// Checks a span as exported: a known name, of its kind (OTLP's number), with only the attributes
/// and events its entry lists. Every problem, named.
pub fn check(
    name: &str,
    kind: i32,
    attributes: &[&str],
    events: &[(&str, Vec<&str>)],
) -> Result<(), Mismatch> {
    let Some(doc) = find(name) else {
        return Err(Mismatch::Unknown(name.to_owned()));
    };
    let mut wrong = Vec::new();
    if kind != doc.kind as i32 {
        wrong.push(format!("kind {kind}, the catalog says {}", doc.kind.name()));
    }
    for a in attributes.iter().filter(|a| !doc.attributes.contains(a)) {
        wrong.push(format!("attribute {a:?} not listed"));
    }
    for (event, attrs) in events {
        match doc.events.iter().find(|(e, _)| e == event) {
            None => wrong.push(format!("event {event:?} not listed")),
            Some((_, listed)) => {
                for a in attrs.iter().filter(|a| !listed.contains(a)) {
                    wrong.push(format!("attribute {a:?} of event {event:?} not listed"));
                }
            }
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(Mismatch::Differs {
            span: name.to_owned(),
            entry: doc.name,
            problems: wrong,
        })
    }
}

/// Whether `name` fits `pattern` word by word: a word with `{…}` fits any word that has its text
/// before and after the braces around something; `{METHOD}` only an upper-case word.
fn matches(pattern: &str, name: &str) -> bool {
    let (mut p, mut n) = (pattern.split(' '), name.split(' '));
    loop {
        match (p.next(), n.next()) {
            (None, None) => return true,
            (Some(pw), Some(nw)) if word_matches(pw, nw) => {}
            _ => return false,
        }
    }
}

fn word_matches(pattern: &str, word: &str) -> bool {
    if pattern == "{METHOD}" {
        return !word.is_empty() && word.bytes().all(|b| b.is_ascii_uppercase());
    }
    let Some((before, rest)) = pattern.split_once('{') else {
        return pattern == word;
    };
    let after = rest.split_once('}').map_or("", |(_, a)| a);
    word.len() > before.len() + after.len() && word.starts_with(before) && word.ends_with(after)
}

fn fixed_len(pattern: &str) -> usize {
    pattern
        .split(' ')
        .map(|w| match w.split_once('{') {
            None => w.len(),
            Some((before, rest)) => before.len() + rest.split_once('}').map_or(0, |(_, a)| a.len()),
        })
        .sum()
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
    fn a_span_with_an_attribute_or_kind_the_catalog_lacks_is_named() {
        assert!(
            check(
                "send orders",
                Kind::Client as i32,
                &[attr::MESSAGING_SYSTEM],
                &[]
            )
            .is_ok()
        );
        let e = check("send orders", Kind::Server as i32, &["made.up"], &[])
            .expect_err("two")
            .to_string();
        assert!(e.contains("kind 2") && e.contains("\"made.up\""), "{e}");
        let e = check(
            "deliver orders",
            Kind::Client as i32,
            &[],
            &[("retry", vec![attr::ERROR_TYPE, "x"]), ("oops", vec![])],
        )
        .expect_err("events")
        .to_string();
        assert!(
            e.contains("\"x\" of event \"retry\"") && e.contains("\"oops\""),
            "{e}"
        );
        assert!(check("nothing at all here", 1, &[], &[]).is_err());
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
