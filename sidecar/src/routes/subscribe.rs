//! Who may subscribe to the pushes of which event type (`listeners.websocket.subscribe`): rules
//! compiled once, checked in order; the first whose event types cover the subscription decides,
//! by the scopes and claims of the session's token.
//!
//! Pure. Without rules every subscription is allowed (as before the rules existed); with rules, a
//! type no rule covers is refused. A refusal says which event type and what the token lacks,
//! never what the token holds.

use super::RouteError;
use serde_json::{Map, Value};
use switchyard_crds::event_type::EventType;
use switchyard_crds::router::SubscribeRule;

/// Which event types a rule covers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Events {
    /// Every type (`*`).
    All,
    /// One type.
    Exact(String),
    /// Types under a prefix (`prices.*`: the prefix is `prices.`).
    Under(String),
}

impl Events {
    fn covers(&self, event: &str) -> bool {
        match self {
            Events::All => true,
            Events::Exact(e) => e == event,
            Events::Under(prefix) => event.starts_with(prefix.as_str()),
        }
    }

    fn parse(text: &str) -> Result<Events, String> {
        if text == "*" {
            return Ok(Events::All);
        }
        let (name, under) = match text.strip_suffix(".*") {
            Some(name) => (name, true),
            None => (text, false),
        };
        EventType::check(name).map_err(|e| {
            format!("{e}; an entry is an event type, a prefix ending in `.*`, or `*`")
        })?;
        Ok(if under {
            Events::Under(format!("{name}."))
        } else {
            Events::Exact(name.to_owned())
        })
    }
}

/// One compiled rule.
#[derive(Debug, Clone)]
struct Rule {
    events: Vec<Events>,
    scopes: Vec<String>,
    claims: Vec<(String, String)>,
}

/// Why a session may not subscribe to an event type (sent to the client; never names what the
/// token holds).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// No rule covers the type.
    #[error("subscribing to {event} is not allowed on this endpoint")]
    NotCovered {
        /// The event type asked for.
        event: String,
    },
    /// The deciding rule asks for a scope the token does not grant.
    #[error("subscribing to {event} needs the scope `{scope}`, which the token does not grant")]
    NoScope {
        /// The event type asked for.
        event: String,
        /// The scope missing.
        scope: String,
    },
    /// The deciding rule asks for a claim value the token does not hold.
    #[error(
        "subscribing to {event} needs the claim `{name}` to be `{value}`, which the token does not hold"
    )]
    NoClaim {
        /// The event type asked for.
        event: String,
        /// The claim.
        name: String,
        /// The value it must have.
        value: String,
    },
}

/// The compiled rules of the WebSocket endpoint.
#[derive(Debug, Clone)]
pub(crate) struct SubscribePolicy {
    rules: Vec<Rule>,
}

/// Largest number of rules, entries, scopes and claims (the CRD's bounds, for configs that never
/// pass through the API server).
const MAX_RULES: usize = 64;
const MAX_EVENTS: usize = 64;
const MAX_SCOPES: usize = 16;
const MAX_CLAIMS: usize = 16;
const MAX_TEXT: usize = 256;

impl SubscribePolicy {
    /// Compiles `rules` (the spec's `listeners.websocket.subscribe`); errors name the field.
    pub(crate) fn build(rules: &[SubscribeRule]) -> Result<SubscribePolicy, RouteError> {
        let at = |i: usize, sub: &str| format!("spec.listeners.websocket.subscribe[{i}]{sub}");
        if rules.len() > MAX_RULES {
            return Err(RouteError {
                field: "spec.listeners.websocket.subscribe".into(),
                message: format!("{} rules; at most {MAX_RULES}", rules.len()),
            });
        }
        let mut out = Vec::with_capacity(rules.len());
        for (i, r) in rules.iter().enumerate() {
            if r.events.is_empty() || r.events.len() > MAX_EVENTS {
                return Err(RouteError {
                    field: at(i, ".events"),
                    message: format!("needs 1 to {MAX_EVENTS} event types"),
                });
            }
            let events = r
                .events
                .iter()
                .enumerate()
                .map(|(j, e)| {
                    Events::parse(e).map_err(|message| RouteError {
                        field: at(i, &format!(".events[{j}]")),
                        message,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if r.scopes.len() > MAX_SCOPES {
                return Err(RouteError {
                    field: at(i, ".scopes"),
                    message: format!("{} scopes; at most {MAX_SCOPES}", r.scopes.len()),
                });
            }
            for (j, s) in r.scopes.iter().enumerate() {
                // RFC 6749 scope-token: printable ASCII without space, `"` or `\`.
                let ok = !s.is_empty()
                    && s.len() <= MAX_TEXT
                    && s.bytes().all(|b| {
                        b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b)
                    });
                if !ok {
                    return Err(RouteError {
                        field: at(i, &format!(".scopes[{j}]")),
                        message: format!(
                            "{s:?} is not a scope (1 to {MAX_TEXT} printable ASCII characters, no space, quote or backslash)"
                        ),
                    });
                }
            }
            if r.claims.len() > MAX_CLAIMS {
                return Err(RouteError {
                    field: at(i, ".claims"),
                    message: format!("{} claims; at most {MAX_CLAIMS}", r.claims.len()),
                });
            }
            for (name, value) in &r.claims {
                if name.is_empty() || name.len() > MAX_TEXT || value.len() > MAX_TEXT {
                    return Err(RouteError {
                        field: at(i, &format!(".claims.{name}")),
                        message: format!(
                            "a claim name is 1 to {MAX_TEXT} bytes and its value at most {MAX_TEXT}"
                        ),
                    });
                }
            }
            out.push(Rule {
                events,
                scopes: r.scopes.clone(),
                claims: r
                    .claims
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            });
        }
        Ok(SubscribePolicy { rules: out })
    }

    /// Whether any rule asks something of the token (and so needs JWT auth).
    pub(crate) fn needs_token(&self) -> bool {
        self.rules
            .iter()
            .any(|r| !r.scopes.is_empty() || !r.claims.is_empty())
    }

    /// Allows a subscription to `event` for a session with `claims` (`None`: no token), or says
    /// why not.
    pub(crate) fn decide(
        &self,
        event: &str,
        claims: Option<&Map<String, Value>>,
    ) -> Result<(), Refusal> {
        let Some(rule) = self
            .rules
            .iter()
            .find(|r| r.events.iter().any(|e| e.covers(event)))
        else {
            return Err(Refusal::NotCovered {
                event: event.to_owned(),
            });
        };
        let empty = Map::new();
        let claims = claims.unwrap_or(&empty);
        if let Some(scope) = rule.scopes.iter().find(|s| !has_scope(claims, s)) {
            return Err(Refusal::NoScope {
                event: event.to_owned(),
                scope: scope.clone(),
            });
        }
        if let Some((name, value)) = rule
            .claims
            .iter()
            .find(|(name, value)| !claim_holds(claims, name, value))
        {
            return Err(Refusal::NoClaim {
                event: event.to_owned(),
                name: name.clone(),
                value: value.clone(),
            });
        }
        Ok(())
    }
}

/// Whether `scope` is among the token's scopes: `scope` (a space-separated string, RFC 8693) or
/// `scp` (an array, or a space-separated string as some issuers write it).
fn has_scope(claims: &Map<String, Value>, scope: &str) -> bool {
    ["scope", "scp"].iter().any(|name| match claims.get(*name) {
        Some(Value::String(s)) => s.split_whitespace().any(|t| t == scope),
        Some(Value::Array(a)) => a.iter().any(|v| v.as_str() == Some(scope)),
        _ => false,
    })
}

/// The claim `name`: a top-level claim of that name, else (a name with dots) the path into
/// nested objects.
fn claim<'a>(claims: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    if let Some(v) = claims.get(name) {
        return Some(v);
    }
    let mut parts = name.split('.');
    let mut v = claims.get(parts.next()?)?;
    for p in parts {
        v = v.as_object()?.get(p)?;
    }
    Some(v)
}

/// Whether the claim holds `want`: a string equal to it, an array with an element that does, or a
/// number or boolean written that way.
fn claim_holds(claims: &Map<String, Value>, name: &str, want: &str) -> bool {
    fn equals(v: &Value, want: &str) -> bool {
        match v {
            Value::String(s) => s == want,
            Value::Bool(b) => (if *b { "true" } else { "false" }) == want,
            Value::Number(n) => n.to_string() == want,
            _ => false,
        }
    }
    match claim(claims, name) {
        Some(Value::Array(a)) => a.iter().any(|v| equals(v, want)),
        Some(v) => equals(v, want),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(rules: Value) -> SubscribePolicy {
        let rules: Vec<SubscribeRule> = serde_json::from_value(rules).expect("rules");
        SubscribePolicy::build(&rules).expect("policy")
    }

    fn claims(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("an object"),
        }
    }

    #[test]
    fn the_first_rule_that_covers_the_type_decides() {
        let p = policy(json!([
            {"events": ["prices.*"], "scopes": ["prices:read"]},
            {"events": ["news", "weather.*"]},
            {"events": ["*"], "claims": {"tier": "gold"}},
        ]));
        assert!(p.needs_token());
        let reader = claims(json!({"scope": "openid prices:read"}));
        let nobody = claims(json!({}));
        assert_eq!(p.decide("prices.tick", Some(&reader)), Ok(()));
        assert_eq!(p.decide("prices.eu.tick", Some(&reader)), Ok(()));
        assert_eq!(
            p.decide("prices.tick", Some(&nobody)).map_err(|e| e.to_string()),
            Err("subscribing to prices.tick needs the scope `prices:read`, which the token does not grant".into())
        );
        // `prices.*` does not cover `prices` itself: it falls through to `*`.
        assert_eq!(
            p.decide("prices", Some(&reader)).map_err(|e| e.to_string()),
            Err("subscribing to prices needs the claim `tier` to be `gold`, which the token does not hold".into())
        );
        assert_eq!(p.decide("news", None), Ok(()));
        assert_eq!(p.decide("weather.rain", Some(&nobody)), Ok(()));
        assert_eq!(
            p.decide("orders", Some(&claims(json!({"tier": "gold"})))),
            Ok(())
        );
    }

    #[test]
    fn a_type_no_rule_covers_is_refused() {
        let p = policy(json!([{"events": ["news"]}]));
        assert!(!p.needs_token());
        assert_eq!(
            p.decide("prices.tick", None).map_err(|e| e.to_string()),
            Err("subscribing to prices.tick is not allowed on this endpoint".into())
        );
        let none = policy(json!([]));
        assert!(none.decide("news", None).is_err());
    }

    #[test]
    fn scopes_and_claims_take_the_shapes_issuers_use() {
        let s = |v: Value| has_scope(&claims(v), "a:b");
        assert!(s(json!({"scope": "x a:b"})));
        assert!(s(json!({"scp": ["x", "a:b"]})));
        assert!(s(json!({"scp": "a:b"})));
        assert!(!s(json!({"scope": "a:bc"})));
        assert!(!s(json!({"scope": ["a:bc"]})));
        assert!(!s(json!({"scopes": "a:b"})));

        let c = |v: Value, name: &str, want: &str| claim_holds(&claims(v), name, want);
        assert!(c(json!({"roles": ["trader", "viewer"]}), "roles", "trader"));
        assert!(c(
            json!({"realm_access": {"roles": ["trader"]}}),
            "realm_access.roles",
            "trader"
        ));
        assert!(c(
            json!({"https://example.com/roles": ["a"]}),
            "https://example.com/roles",
            "a"
        ));
        assert!(c(json!({"admin": true}), "admin", "true"));
        assert!(c(json!({"level": 3}), "level", "3"));
        assert!(!c(json!({"level": 3}), "level", "4"));
        assert!(!c(json!({"a": {"b": 1}}), "a", "1"));
        assert!(!c(json!({"a": {"b": 1}}), "a.c", "1"));
        assert!(!c(json!({}), "tier", "gold"));
    }

    #[test]
    fn bad_rules_name_the_field() {
        let err = |rules: Value| {
            let rules: Vec<SubscribeRule> = serde_json::from_value(rules).expect("rules");
            let e = SubscribePolicy::build(&rules).expect_err("refused");
            format!("{}: {}", e.field, e.message)
        };
        let e = err(json!([{"events": []}]));
        assert!(
            e.starts_with("spec.listeners.websocket.subscribe[0].events: "),
            "{e}"
        );
        let e = err(json!([{"events": ["news"]}, {"events": ["news", "Prices.*"]}]));
        assert!(
            e.starts_with("spec.listeners.websocket.subscribe[1].events[1]: "),
            "{e}"
        );
        assert!(e.contains("`.*`"), "{e}");
        let e = err(json!([{"events": ["*.tick"]}]));
        assert!(e.contains("events[0]"), "{e}");
        let e = err(json!([{"events": ["a"], "scopes": ["has space"]}]));
        assert!(
            e.starts_with("spec.listeners.websocket.subscribe[0].scopes[0]: "),
            "{e}"
        );
        let e = err(json!([{"events": ["a"], "claims": {"": "x"}}]));
        assert!(e.contains("claims."), "{e}");
    }
}
