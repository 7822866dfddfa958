//! The shape of a span catalog: every span a component exports, with its name, kind, the role that
//! makes it, when, and every attribute and event it may carry (pure). The sidecar's catalog
//! (`switchyard_sidecar::spans`) and the operator's (`switchyard_operator::spans`) are lists of these;
//! the user guide's span reference is written from both, and the spans their tests receive are
//! checked against them ([`check`]), so a list, the page and the code cannot drift apart.

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
    /// Who makes it: `router`, `manager`, both, or `operator`.
    pub role: &'static str,
    /// When it is made.
    pub when: &'static str,
    /// Every attribute it may carry (some only on an outcome).
    pub attributes: &'static [&'static str],
    /// Its events, each with the attributes it may carry.
    pub events: &'static [(&'static str, &'static [&'static str])],
}

/// The entry of `catalog` a span named `name` is made from: of those whose pattern matches, the one
/// with the most fixed text (`broker orders` is a broker span, not an HTTP request of method
/// `broker`).
pub fn find<'a>(catalog: &'a [SpanDoc], name: &str) -> Option<&'a SpanDoc> {
    catalog
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

/// Checks a span as exported against `catalog`: a known name, of its kind (OTLP's number), with only the attributes
/// and events its entry lists. Every problem, named.
pub fn check(
    catalog: &[SpanDoc],
    name: &str,
    kind: i32,
    attributes: &[&str],
    events: &[(&str, Vec<&str>)],
) -> Result<(), Mismatch> {
    let Some(doc) = find(catalog, name) else {
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

    const CATALOG: &[SpanDoc] = &[
        SpanDoc {
            name: "{METHOD}",
            kind: Kind::Server,
            role: "router",
            when: "a request",
            attributes: &["http.request.method"],
            events: &[],
        },
        SpanDoc {
            name: "broker {event}",
            kind: Kind::Internal,
            role: "router",
            when: "a broker hop",
            attributes: &["a"],
            events: &[("retry", &["error.type"])],
        },
        SpanDoc {
            name: "switchyard.v1.Gateway/{rpc}",
            kind: Kind::Server,
            role: "router",
            when: "a call",
            attributes: &["rpc.method"],
            events: &[],
        },
    ];

    #[test]
    fn a_span_is_found_by_its_most_specific_pattern() {
        let name = |n: &str| find(CATALOG, n).map(|d| d.name);
        assert_eq!(name("GET"), Some("{METHOD}"));
        assert_eq!(name("get"), None, "a method is upper-case");
        assert_eq!(name("broker orders"), Some("broker {event}"));
        assert_eq!(
            name("switchyard.v1.Gateway/Call"),
            Some("switchyard.v1.Gateway/{rpc}")
        );
        assert!(name("a b c").is_none(), "three words fit no entry");
        assert!(
            name("switchyard.v1.Gateway/").is_none(),
            "a placeholder is not empty"
        );
    }

    #[test]
    fn a_span_with_an_attribute_event_or_kind_the_catalog_lacks_is_named() {
        assert!(check(CATALOG, "broker orders", Kind::Internal as i32, &["a"], &[]).is_ok());
        let e = check(
            CATALOG,
            "broker orders",
            Kind::Server as i32,
            &["made.up"],
            &[],
        )
        .expect_err("two")
        .to_string();
        assert!(e.contains("kind 2") && e.contains("\"made.up\""), "{e}");
        let e = check(
            CATALOG,
            "broker orders",
            Kind::Internal as i32,
            &[],
            &[("retry", vec!["error.type", "x"]), ("oops", vec![])],
        )
        .expect_err("events")
        .to_string();
        assert!(
            e.contains("\"x\" of event \"retry\"") && e.contains("\"oops\""),
            "{e}"
        );
        assert_eq!(
            check(CATALOG, "nothing at all here", 1, &[], &[]),
            Err(Mismatch::Unknown("nothing at all here".into()))
        );
    }
}
