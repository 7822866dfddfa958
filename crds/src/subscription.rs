//! A Manager's subscriptions: event types it observes beside the ones it handles, as EDRI's router
//! keeps request and response subscribers per type and Knative's Triggers filter a Broker's events.
//!
//! Pure: the types, their schema (with the CEL rules the API server runs) and what a filter and a
//! pattern match. The sidecars, `switchyard up` and `switchyard check` all call [`Filter::matches`]
//! and [`pattern_matches`], so a subscription means one thing everywhere.

use crate::delivery::DeliveryMode;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Pattern of a subscription's `event`: an event type, a prefix ending in `.*`, or `*` (the
/// syntax of the Router's WebSocket subscribe rules).
pub const EVENT_PATTERN: &str = r"^(\*|[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*(\.\*)?)$";
/// Pattern of `startFrom`: `new`, `stored`, or a Go-style duration back from now.
pub const START_FROM_PATTERN: &str = r"^(new|stored|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$";
/// How deep `all`, `any` and `not` nest in the CRD's schema (a structural schema cannot recurse).
pub const FILTER_DEPTH: usize = 3;
/// Most attributes one `exact`, `prefix` or `suffix` names, and most filters in one `all` or `any`.
pub const FILTER_WIDTH: usize = 8;

/// One subscription: which events of which type a Manager observes, and how they reach it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.startFrom) || (has(self.delivery) && self.delivery == 'durable')",
        "message": "startFrom replays stored events, so it needs delivery: durable (a direct subscription keeps nothing to replay)",
        "fieldPath": ".startFrom",
    },
]))]
pub struct Subscription {
    /// The event type observed: a name (`orders.created`), a prefix ending in `.*` (`orders.*`
    /// covers `orders.created` and `orders.eu.created`, not `orders`), or `*` (every type).
    #[schemars(
        regex(pattern = r"^(\*|[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*(\.\*)?)$"),
        length(min = 1, max = 65)
    )]
    pub event: String,
    /// What of the type is observed: `published` (every publish of it: the default), `requests`
    /// (a copy of each request its handler gets) and/or `responses` (the handler's answer, with the
    /// request's id). Named `observe`, not `on`: YAML 1.1 parsers, kubectl's among them, read a
    /// bare `on:` key as the boolean `true`.
    #[serde(default = "default_observe")]
    #[schemars(length(min = 1, max = 3), extend("x-kubernetes-list-type" = "set"))]
    pub observe: Vec<Observe>,
    /// Which events of the type are wanted, by their CloudEvents attributes, in Knative Eventing's
    /// filter dialect; absent: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "filter_schema")]
    pub filter: Option<Filter>,
    /// How the observed events reach this Manager: `direct` (the default: over the sidecars'
    /// connections, held in the receiving pod's memory) or `durable` (kept in JetStream for it).
    #[serde(default, skip_serializing_if = "DeliveryMode::is_direct")]
    pub delivery: DeliveryMode,
    /// Durable subscriptions only: where the subscriber begins when its consumer is first made:
    /// `stored` (the default: everything kept for it since the subscription reached the
    /// publishers, including while it had no pod), `new` (only what is stored from then on) or a
    /// duration back (`10m`: what was stored at most that long before), as EDRI's `from_time`
    /// replays its cache. A restart goes on where it stopped, skipping nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(new|stored|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"))]
    pub start_from: Option<String>,
}

fn default_observe() -> Vec<Observe> {
    vec![Observe::Published]
}

/// What of an event type a subscription observes.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Observe {
    /// Every publish of the type (fire-and-forget events).
    Published,
    /// A copy of each request the type's handler gets.
    Requests,
    /// The handler's answer to each request, with the request's id.
    Responses,
}

impl Observe {
    /// The name as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            Observe::Published => "published",
            Observe::Requests => "requests",
            Observe::Responses => "responses",
        }
    }
}

impl Subscription {
    /// Whether it observes `what`.
    pub fn observes(&self, what: Observe) -> bool {
        self.observe.contains(&what)
    }

    /// Where a durable subscriber begins the first time its consumer is made, from `startFrom`
    /// (absent: [`StartFrom::Stored`], which skips nothing kept for it). Why it is not one, naming
    /// the field, for inputs the API server's pattern never checked.
    pub fn start(&self) -> Result<StartFrom, String> {
        StartFrom::parse(self.start_from.as_deref())
    }
}

/// Where a durable subscriber begins when its consumer is first made (a restart goes on from
/// where the consumer is: nothing kept for it is skipped then).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StartFrom {
    /// Everything its stream holds for it (the default).
    #[default]
    Stored,
    /// Only events stored after its consumer was made.
    New,
    /// Events stored at most this long before its consumer was made.
    Back(std::time::Duration),
}

impl StartFrom {
    /// `startFrom` as written: `new`, `stored` (or absent), or a Go-style duration (`10m`, `1h30m`).
    pub fn parse(value: Option<&str>) -> Result<StartFrom, String> {
        match value {
            None | Some("stored") => Ok(StartFrom::Stored),
            Some("new") => Ok(StartFrom::New),
            Some(d) => d
                .parse::<crate::common::Duration>()
                .map(|d| StartFrom::Back(d.into()))
                .map_err(|e| {
                    format!("startFrom: {d:?} is not new, stored or a duration such as 10m ({e})")
                }),
        }
    }

    /// Whether an event stored at `stored` is skipped by a consumer made at `made`. Both times are
    /// the JetStream server's, kept with the event and the consumer, so every pod and every restart
    /// decides alike.
    pub fn skips(self, stored: std::time::SystemTime, made: std::time::SystemTime) -> bool {
        match self {
            StartFrom::Stored => false,
            StartFrom::New => stored < made,
            StartFrom::Back(d) => made.checked_sub(d).is_some_and(|from| stored < from),
        }
    }
}

/// A CloudEvents attribute filter in Knative Eventing's dialect (its Trigger `filters`): exactly
/// one of the fields is set. Attributes are the CloudEvents context attributes (`type`, `id`,
/// `source`, `subject`, `datacontenttype`) and extensions, by their lower-case names.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Filter {
    /// Each named attribute is present and equals the value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exact: BTreeMap<String, String>,
    /// Each named attribute is present and starts with the value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prefix: BTreeMap<String, String>,
    /// Each named attribute is present and ends with the value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub suffix: BTreeMap<String, String>,
    /// Every one of these filters matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub all: Vec<Filter>,
    /// At least one of these filters matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub any: Vec<Filter>,
    /// This filter does not match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not: Option<Box<Filter>>,
}

impl Filter {
    /// Whether an event with the attributes `attr` gives matches. Knative's semantics: an
    /// attribute the event does not carry matches no `exact`, `prefix` or `suffix` (and so a
    /// `not` of one matches it).
    pub fn matches<'a>(&self, attr: &impl Fn(&str) -> Option<&'a str>) -> bool {
        let each = |m: &BTreeMap<String, String>, test: fn(&str, &str) -> bool| {
            m.iter()
                .all(|(name, want)| attr(name).is_some_and(|have| test(have, want)))
        };
        each(&self.exact, |h, w| h == w)
            && each(&self.prefix, |h, w| h.starts_with(w))
            && each(&self.suffix, |h, w| h.ends_with(w))
            && self.all.iter().all(|f| f.matches(attr))
            && (self.any.is_empty() || self.any.iter().any(|f| f.matches(attr)))
            && self.not.as_ref().is_none_or(|f| !f.matches(attr))
    }

    /// Why the filter cannot work, naming the place (`path`) in it: for inputs that never pass
    /// through the API server's CEL rules (`switchyard up`, `switchyard check`).
    pub fn check(&self, path: &str) -> Result<(), String> {
        self.check_at(path, FILTER_DEPTH)
    }

    fn check_at(&self, path: &str, depth: usize) -> Result<(), String> {
        let set = [
            !self.exact.is_empty(),
            !self.prefix.is_empty(),
            !self.suffix.is_empty(),
            !self.all.is_empty(),
            !self.any.is_empty(),
            self.not.is_some(),
        ];
        if set.iter().filter(|s| **s).count() != 1 {
            return Err(format!(
                "{path}: a filter sets exactly one of exact, prefix, suffix, all, any or not (an empty one would match everything: leave the filter out instead)"
            ));
        }
        let nested = !self.all.is_empty() || !self.any.is_empty() || self.not.is_some();
        if nested && depth == 0 {
            return Err(format!(
                "{path}: filters nest at most {FILTER_DEPTH} levels deep"
            ));
        }
        for (name, m) in [
            ("exact", &self.exact),
            ("prefix", &self.prefix),
            ("suffix", &self.suffix),
        ] {
            if m.len() > FILTER_WIDTH {
                return Err(format!("{path}.{name}: at most {FILTER_WIDTH} attributes"));
            }
            if let Some(bad) = m.keys().find(|k| !is_attribute_name(k)) {
                return Err(format!(
                    "{path}.{name}: {bad:?} is not a CloudEvents attribute name (1 to 20 of a-z and 0-9)"
                ));
            }
        }
        for (name, list) in [("all", &self.all), ("any", &self.any)] {
            if list.len() > FILTER_WIDTH {
                return Err(format!("{path}.{name}: at most {FILTER_WIDTH} filters"));
            }
            for (i, f) in list.iter().enumerate() {
                f.check_at(&format!("{path}.{name}[{i}]"), depth - 1)?;
            }
        }
        if let Some(f) = &self.not {
            f.check_at(&format!("{path}.not"), depth - 1)?;
        }
        Ok(())
    }
}

fn is_attribute_name(s: &str) -> bool {
    (1..=20).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

/// Whether event type `event` is covered by `pattern`: the same name, a prefix `p.*` that `event`
/// extends by at least one segment, or `*`.
pub fn pattern_matches(pattern: &str, event: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_suffix(".*") {
        Some(prefix) => event
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.') && rest.len() > 1),
        None => pattern == event,
    }
}

/// The CRD schema of a [`Filter`]: the recursive type unrolled [`FILTER_DEPTH`] levels deep.
pub fn filter_schema(_: &mut SchemaGenerator) -> Schema {
    let value = filter_level(FILTER_DEPTH);
    Schema::try_from(value).unwrap_or_else(|_| json_schema!({"type": "object"}))
}

fn filter_level(depth: usize) -> serde_json::Value {
    let attrs = |what: &str| {
        serde_json::json!({
            "type": "object",
            "description": format!("Attribute name -> value: each named attribute is present and {what}."),
            "minProperties": 1,
            "maxProperties": FILTER_WIDTH,
            "additionalProperties": {"type": "string", "maxLength": 256},
            "x-kubernetes-validations": [{
                "rule": "self.all(k, k.matches('^[a-z0-9]{1,20}$'))",
                "message": "attribute names are CloudEvents attribute names: 1 to 20 of a-z and 0-9",
            }],
        })
    };
    let mut props = serde_json::Map::new();
    props.insert("exact".into(), attrs("equals the value"));
    props.insert("prefix".into(), attrs("starts with the value"));
    props.insert("suffix".into(), attrs("ends with the value"));
    let mut rule = String::from(
        "(has(self.exact) ? 1 : 0) + (has(self.prefix) ? 1 : 0) + (has(self.suffix) ? 1 : 0)",
    );
    if depth > 0 {
        let inner = filter_level(depth - 1);
        let list = |what: &str| {
            serde_json::json!({
                "type": "array",
                "description": format!("Filters of which {what} match."),
                "minItems": 1,
                "maxItems": FILTER_WIDTH,
                "items": inner.clone(),
            })
        };
        props.insert("all".into(), list("every one must"));
        props.insert("any".into(), list("at least one must"));
        let mut not = inner.clone();
        if let Some(o) = not.as_object_mut() {
            o.insert("description".into(), "A filter that must not match.".into());
        }
        props.insert("not".into(), not);
        rule.push_str(
            " + (has(self.all) ? 1 : 0) + (has(self.any) ? 1 : 0) + (has(self.not) ? 1 : 0)",
        );
    }
    rule.push_str(" == 1");
    serde_json::json!({
        "type": "object",
        "description": "A CloudEvents attribute filter (Knative Eventing's dialect): exactly one of exact, prefix, suffix, all, any or not.",
        "properties": props,
        "x-kubernetes-validations": [{
            "rule": rule,
            "message": "a filter sets exactly one of exact, prefix, suffix, all, any or not (leave an empty filter out: it would match everything)",
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_from_is_parsed_and_skips_only_what_came_before() {
        use std::time::{Duration, SystemTime};
        assert_eq!(StartFrom::parse(None), Ok(StartFrom::Stored));
        assert_eq!(StartFrom::parse(Some("stored")), Ok(StartFrom::Stored));
        assert_eq!(StartFrom::parse(Some("new")), Ok(StartFrom::New));
        assert_eq!(
            StartFrom::parse(Some("1h30m")),
            Ok(StartFrom::Back(Duration::from_secs(5400)))
        );
        let bad = StartFrom::parse(Some("yesterday")).expect_err("not a start");
        assert!(bad.starts_with("startFrom: \"yesterday\""), "{bad}");
        let made = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let before = made - Duration::from_secs(60);
        let after = made + Duration::from_secs(1);
        assert!(!StartFrom::Stored.skips(before, made));
        assert!(StartFrom::New.skips(before, made));
        assert!(!StartFrom::New.skips(after, made));
        let ten = StartFrom::Back(Duration::from_secs(600));
        assert!(!ten.skips(before, made), "within ten minutes before");
        assert!(ten.skips(made - Duration::from_secs(601), made));
    }

    fn attrs<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
    }

    fn filter(json: serde_json::Value) -> Filter {
        serde_json::from_value(json).expect("a filter")
    }

    const EVENT: &[(&str, &str)] = &[
        ("type", "orders.created"),
        ("source", "/shop/router/web"),
        ("region", "eu-west"),
    ];

    #[test]
    fn exact_prefix_and_suffix_test_each_named_attribute() {
        let a = attrs(EVENT);
        assert!(filter(serde_json::json!({"exact": {"type": "orders.created"}})).matches(&a));
        assert!(!filter(serde_json::json!({"exact": {"type": "orders"}})).matches(&a));
        assert!(filter(serde_json::json!({"prefix": {"region": "eu-"}})).matches(&a));
        assert!(!filter(serde_json::json!({"prefix": {"region": "us-"}})).matches(&a));
        assert!(filter(serde_json::json!({"suffix": {"source": "/web"}})).matches(&a));
        assert!(
            !filter(serde_json::json!({"exact": {"type": "orders.created", "region": "us"}}))
                .matches(&a),
            "every attribute named must match"
        );
    }

    #[test]
    fn a_missing_attribute_matches_nothing_and_its_negation_matches() {
        let a = attrs(EVENT);
        assert!(!filter(serde_json::json!({"exact": {"subject": ""}})).matches(&a));
        assert!(!filter(serde_json::json!({"prefix": {"subject": ""}})).matches(&a));
        assert!(filter(serde_json::json!({"not": {"exact": {"subject": "x"}}})).matches(&a));
    }

    #[test]
    fn all_any_and_not_combine() {
        let a = attrs(EVENT);
        let eu = serde_json::json!({"prefix": {"region": "eu"}});
        let us = serde_json::json!({"prefix": {"region": "us"}});
        assert!(filter(serde_json::json!({"any": [us, eu]})).matches(&a));
        assert!(!filter(serde_json::json!({"all": [us, eu]})).matches(&a));
        assert!(filter(serde_json::json!({"not": {"all": [us, eu]}})).matches(&a));
        assert!(!filter(serde_json::json!({"not": eu})).matches(&a));
    }

    #[test]
    fn check_refuses_empty_doubled_too_deep_and_badly_named_filters() {
        let err = |v| filter(v).check("filter").expect_err("refused");
        assert!(err(serde_json::json!({})).contains("exactly one"));
        assert!(
            err(serde_json::json!({"exact": {"type": "a"}, "prefix": {"type": "a"}}))
                .contains("exactly one")
        );
        assert!(
            err(serde_json::json!({"not": {"not": {"not": {"not": {"exact": {"a": "b"}}}}}}))
                .contains("filter.not.not.not: filters nest at most 3")
        );
        assert!(err(serde_json::json!({"exact": {"Type": "a"}})).contains("filter.exact"));
        let three = serde_json::json!({"not": {"not": {"not": {"exact": {"a": "b"}}}}});
        assert_eq!(filter(three).check("filter"), Ok(()));
    }

    #[test]
    fn unknown_filter_keys_are_refused_by_serde() {
        let r: Result<Filter, _> = serde_json::from_value(serde_json::json!({"exactly": {}}));
        assert!(r.is_err());
    }

    #[test]
    fn patterns_match_the_name_a_longer_prefix_or_everything() {
        assert!(pattern_matches("orders.created", "orders.created"));
        assert!(!pattern_matches("orders.created", "orders.created.eu"));
        assert!(pattern_matches("orders.*", "orders.created"));
        assert!(pattern_matches("orders.*", "orders.eu.created"));
        assert!(!pattern_matches("orders.*", "orders"));
        assert!(!pattern_matches("orders.*", "ordersx.created"));
        assert!(pattern_matches("*", "anything.at.all"));
    }

    #[test]
    fn observe_defaults_to_published() {
        let s: Subscription =
            serde_json::from_value(serde_json::json!({"event": "orders.created"})).expect("ok");
        assert_eq!(s.observe, vec![Observe::Published]);
        assert!(s.observes(Observe::Published) && !s.observes(Observe::Responses));
    }
}
