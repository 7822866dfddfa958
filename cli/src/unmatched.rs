//! Why a subscription would match nothing, for `switchyard check` (pure): a pattern that covers no
//! event type the file names for its Router, `requests`/`responses` observed where no Manager
//! handles a covered type, and a filter no event the mesh sends can pass (an attribute the mesh
//! never carries, a `type` outside the subscription's event, a `source` outside the mesh's).
//! Warnings, not problems: an app may publish a type that no file names.

use kube::ResourceExt;
use switchyard_crds::Manager;
use switchyard_crds::subscription::{Filter, Observe, Subscription, pattern_matches};
use switchyard_crds::yaml::Objects;

/// The CloudEvents attributes the mesh carries, which a filter can see (docs/subscriptions.md).
const CARRIED: [&str; 4] = ["type", "id", "source", "datacontenttype"];
/// Every event's `source` starts with this: `/switchyard/<namespace>/<Manager or Router>`.
const SOURCE_PREFIX: &str = "/switchyard/";

/// One warning on one subscription.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The subscribing Manager.
    pub manager: String,
    /// The subscription's field path (`spec.subscriptions[i]`).
    pub field: String,
    /// Why it matches nothing (or part of what it observes does).
    pub text: String,
}

/// Every subscription of `objs` that would match nothing, with why.
pub fn warnings(objs: &Objects) -> Vec<Warning> {
    let mut out = Vec::new();
    for m in &objs.managers {
        let router = &m.spec.router_ref.name;
        let peers: Vec<&Manager> = objs
            .managers
            .iter()
            .filter(|o| &o.spec.router_ref.name == router)
            .collect();
        let routes: Vec<&str> = objs
            .routers
            .iter()
            .filter(|r| &r.name_any() == router)
            .flat_map(|r| r.spec.routes.iter().map(|route| route.event.as_str()))
            .collect();
        for (i, s) in m.spec.subscriptions.iter().enumerate() {
            let field = format!("spec.subscriptions[{i}]");
            for text in why_nothing(s, router, &peers, &routes) {
                out.push(Warning {
                    manager: m.name_any(),
                    field: field.clone(),
                    text: format!("{field} ({}): {text}", s.event),
                });
            }
        }
    }
    out
}

/// Why subscription `s` (of a Manager of Router `router`, whose Managers are `peers` and routes
/// `routes`) matches nothing.
fn why_nothing(s: &Subscription, router: &str, peers: &[&Manager], routes: &[&str]) -> Vec<String> {
    let handled = || {
        peers
            .iter()
            .flat_map(|p| p.spec.events.iter().map(|e| e.as_str()))
            .filter(|e| pattern_matches(&s.event, e))
    };
    let dead_letters = peers
        .iter()
        .filter_map(|p| p.spec.workers.dead_letter.as_ref().map(|e| e.as_str()));
    let known = handled()
        .chain(routes.iter().copied())
        .chain(dead_letters)
        .any(|e| pattern_matches(&s.event, e));
    let mut out = Vec::new();
    if !known {
        out.push(format!(
            "covers no event type Router {router} has in this file (no route, handler or dead \
             letter of a matching type); only an app's publish of such a type would reach it"
        ));
    } else if handled().next().is_none() {
        for what in [Observe::Requests, Observe::Responses] {
            if s.observes(what) {
                out.push(format!(
                    "observes {}, but no Manager of Router {router} handles a type it covers: \
                     copies of requests and answers come from a type's handler",
                    what.as_str()
                ));
            }
        }
    }
    if let Some(f) = &s.filter
        && let Truth::Never(why) = truth(f, &s.event)
    {
        out.push(format!("its filter passes no event: {why}"));
    }
    out
}

/// What a filter can be over the events of a subscription's pattern.
#[derive(Debug, PartialEq, Eq)]
enum Truth {
    /// It passes none of them, and why.
    Never(String),
    /// It passes every one of them.
    Always,
    /// It depends on the event.
    Maybe,
}

/// What `f` can be for events of `pattern`. The keys of one filter are all required (as
/// [`Filter::matches`] reads them), so they are combined like `all`.
fn truth(f: &Filter, pattern: &str) -> Truth {
    let leaves = [
        ("exact", &f.exact),
        ("prefix", &f.prefix),
        ("suffix", &f.suffix),
    ]
    .into_iter()
    .flat_map(|(kind, m)| m.iter().map(move |(a, v)| leaf(kind, a, v, pattern)));
    let all = f.all.iter().map(|g| truth(g, pattern));
    let any = (!f.any.is_empty()).then(|| {
        let each: Vec<Truth> = f.any.iter().map(|g| truth(g, pattern)).collect();
        if each.contains(&Truth::Always) {
            Truth::Always
        } else if each.iter().all(|t| matches!(t, Truth::Never(_))) {
            let why: Vec<String> = each
                .into_iter()
                .filter_map(|t| match t {
                    Truth::Never(w) => Some(w),
                    _ => None,
                })
                .collect();
            Truth::Never(format!("no filter of its any passes: {}", why.join("; ")))
        } else {
            Truth::Maybe
        }
    });
    let not = f.not.as_ref().map(|g| match truth(g, pattern) {
        Truth::Never(_) => Truth::Always,
        Truth::Always => Truth::Never("its not negates a filter that passes every event".into()),
        Truth::Maybe => Truth::Maybe,
    });
    let mut whole = Truth::Always;
    for t in leaves.chain(all).chain(any).chain(not) {
        match t {
            Truth::Never(_) => return t,
            Truth::Maybe => whole = Truth::Maybe,
            Truth::Always => {}
        }
    }
    whole
}

/// What one `exact`/`prefix`/`suffix` condition on `attr` can be for events of `pattern`.
fn leaf(kind: &str, attr: &str, value: &str, pattern: &str) -> Truth {
    if !CARRIED.contains(&attr) {
        return Truth::Never(format!(
            "{kind} on {attr:?}, an attribute the mesh does not carry (it carries {}; an event \
             without the attribute fails exact, prefix and suffix)",
            CARRIED.join(", ")
        ));
    }
    // (some event of the pattern passes, every one does)
    let (some, every) = match (attr, kind) {
        ("type", "exact") => (pattern_matches(pattern, value), pattern == value),
        ("type", "prefix") => type_prefix(pattern, value),
        ("source", "exact") => (value.starts_with(SOURCE_PREFIX), false),
        ("source", "prefix") => (
            value.starts_with(SOURCE_PREFIX) || SOURCE_PREFIX.starts_with(value),
            SOURCE_PREFIX.starts_with(value),
        ),
        _ => (true, false),
    };
    match (some, every) {
        (true, true) => Truth::Always,
        (true, false) => Truth::Maybe,
        _ if attr == "type" => Truth::Never(format!(
            "{kind} type {value:?} is no type the event {pattern} covers"
        )),
        _ => Truth::Never(format!(
            "{kind} source {value:?}: the mesh's sources are {SOURCE_PREFIX}<namespace>/<Manager or Router>"
        )),
    }
}

/// Whether some type covered by `pattern` starts with `prefix`, and whether every one does.
fn type_prefix(pattern: &str, prefix: &str) -> (bool, bool) {
    if pattern == "*" {
        return (true, prefix.is_empty());
    }
    match pattern.strip_suffix(".*") {
        // Types `p.<more>`: some start with a prefix within `p.` or extending it; all with one
        // within `p.`.
        Some(p) => {
            let base = format!("{p}.");
            let every = base.starts_with(prefix);
            (every || prefix.starts_with(&base), every)
        }
        None => (pattern.starts_with(prefix), pattern.starts_with(prefix)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESH: &str = r#"
apiVersion: switchyard.dev/v1alpha1
kind: Router
metadata: {name: edge}
spec:
  listeners: {http: {port: 8080}}
  routes:
    - {event: orders.get, http: {method: GET, path: /orders}}
---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: orders}
spec:
  routerRef: {name: edge}
  events: [orders.created]
  workers: {deadLetter: orders.failed}
  template: {spec: {containers: [{name: app, image: app}]}}
---
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata: {name: audit}
spec:
  routerRef: {name: edge}
  events: [audit.entry]
  template: {spec: {containers: [{name: app, image: app}]}}
  subscriptions:
SUBS
"#;

    fn warned(subs: &str) -> Vec<String> {
        let text = MESH.replace("SUBS", subs);
        let objs = switchyard_crds::yaml::parse(&text).expect("typed");
        warnings(&objs).into_iter().map(|w| w.text).collect()
    }

    #[test]
    fn subscriptions_that_can_match_are_not_warned_of() {
        let ok = warned(
            r#"    - {event: orders.*}
    - {event: orders.created, observe: [requests, responses]}
    - {event: orders.failed}
    - {event: orders.get, observe: [published]}
    - {event: "*", filter: {all: [{prefix: {source: /switchyard/}}, {exact: {type: orders.created}}]}}
    - {event: users.*, filter: {not: {exact: {subject: x}}}}"#,
        );
        // users.* covers nothing here: that one warning only.
        assert_eq!(ok.len(), 1, "{ok:?}");
        assert!(
            ok[0].starts_with(
                "spec.subscriptions[5] (users.*): covers no event type Router edge has"
            ),
            "{ok:?}"
        );
    }

    #[test]
    fn each_reason_names_the_subscription() {
        // One subscription per event and Manager: two files.
        let mut w = warned(
            r#"    - {event: billing.*}
    - {event: orders.get, observe: [requests]}
    - {event: orders.created, filter: {exact: {subject: "123"}}}
    - {event: orders.*, filter: {any: [{exact: {type: users.created}}, {prefix: {myext: a}}]}}"#,
        );
        w.extend(warned(
            r#"    - {event: orders.failed}
    - {event: orders.get}
    - {event: orders.created, filter: {prefix: {source: /web}}}
    - {event: orders.*, filter: {not: {prefix: {type: orders.}}}}"#,
        ));
        let has = |start: &str, part: &str| {
            assert!(
                w.iter().any(|t| t.starts_with(start) && t.contains(part)),
                "{start} / {part}: {w:#?}"
            );
        };
        has(
            "spec.subscriptions[0] (billing.*)",
            "covers no event type Router edge has",
        );
        has(
            "spec.subscriptions[1] (orders.get)",
            "observes requests, but no Manager of Router edge handles",
        );
        has(
            "spec.subscriptions[2] (orders.created)",
            "exact on \"subject\", an attribute the mesh does not carry",
        );
        has(
            "spec.subscriptions[3] (orders.*)",
            "exact type \"users.created\" is no type the event orders.* covers",
        );
        has("spec.subscriptions[3] (orders.*)", "prefix on \"myext\"");
        has(
            "spec.subscriptions[2] (orders.created)",
            "prefix source \"/web\"",
        );
        has(
            "spec.subscriptions[3] (orders.*)",
            "negates a filter that passes every event",
        );
        assert_eq!(w.len(), 6, "{w:#?}");
    }
}
