//! Push filters: `[{field, op, value}]` checked against a pushed event's JSON payload.
//!
//! Pure. A filter is validated once, at subscribe time, so matching a push never fails: every
//! condition must hold (AND). A condition on a field the payload does not have never holds, for any
//! op (`ne` included), so a filter never matches events of another shape by accident.

use serde_json::Value;
use std::cmp::Ordering;

/// Most conditions in one filter.
pub(crate) const MAX_CONDITIONS: usize = 16;
/// Most values in an `in` list.
pub(crate) const MAX_IN_VALUES: usize = 64;
/// Most segments of a dotted field path.
pub(crate) const MAX_PATH_SEGMENTS: usize = 8;

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Equal (numbers by value: `1` equals `1.0`).
    Eq,
    /// Not equal.
    Ne,
    /// Equal to one of a list.
    In,
    /// Greater than (numbers, or strings by code point).
    Gt,
    /// Greater than or equal.
    Gte,
    /// Less than.
    Lt,
    /// Less than or equal.
    Lte,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "eq" => Op::Eq,
            "ne" => Op::Ne,
            "in" => Op::In,
            "gt" => Op::Gt,
            "gte" => Op::Gte,
            "lt" => Op::Lt,
            "lte" => Op::Lte,
            _ => return None,
        })
    }
}

/// One checked condition.
#[derive(Clone, Debug, PartialEq)]
struct Condition {
    path: Vec<String>,
    op: Op,
    value: Value,
}

/// A validated filter; the empty filter matches every event.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Filter {
    conditions: Vec<Condition>,
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A `filters` value that cannot be used; the message names the entry and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct FilterError(String);

impl Filter {
    /// Checks a `filters` value (absent is the empty filter); the error names the entry and field.
    pub(crate) fn parse(filters: Option<&Value>) -> Result<Filter, FilterError> {
        let list = match filters {
            None | Some(Value::Null) => return Ok(Filter::default()),
            Some(Value::Array(list)) => list,
            Some(other) => {
                return Err(FilterError(format!(
                    "`filters` must be an array of {{field, op, value}}, not {}",
                    type_name(other)
                )));
            }
        };
        if list.len() > MAX_CONDITIONS {
            return Err(FilterError(format!(
                "`filters` has {} entries; at most {MAX_CONDITIONS} are allowed",
                list.len()
            )));
        }
        let conditions = list
            .iter()
            .enumerate()
            .map(|(i, f)| parse_condition(f).map_err(|e| FilterError(format!("filters[{i}]{e}"))))
            .collect::<Result<_, _>>()?;
        Ok(Filter { conditions })
    }

    /// Whether the payload satisfies every condition.
    pub(crate) fn matches(&self, payload: &Value) -> bool {
        self.conditions.iter().all(|c| c.holds(payload))
    }

    /// Whether the filter has no condition.
    pub(crate) fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }
}

/// One condition, or what is wrong with it as a suffix of its `filters[i]` (`.op: unknown op ...`).
fn parse_condition(f: &Value) -> Result<Condition, String> {
    let Value::Object(obj) = f else {
        return Err(format!(
            ": must be an object {{field, op, value}}, not {}",
            type_name(f)
        ));
    };
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "field" | "op" | "value"))
    {
        return Err(format!(": unknown member `{k}`; use field, op, value"));
    }
    let field = match obj.get("field") {
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(format!(
                ".field: must be a string (a dotted path), not {}",
                type_name(other)
            ));
        }
        None => return Err(".field is required".to_owned()),
    };
    let path: Vec<String> = field.split('.').map(str::to_owned).collect();
    if path.iter().any(String::is_empty) {
        return Err(format!(
            ".field: {field:?} is not a dotted path like `price` or `order.total`"
        ));
    }
    if path.len() > MAX_PATH_SEGMENTS {
        return Err(format!(
            ".field: {field:?} has more than {MAX_PATH_SEGMENTS} segments"
        ));
    }
    let op = match obj.get("op") {
        Some(Value::String(s)) => Op::parse(s).ok_or_else(|| {
            format!(".op: unknown op {s:?}; use one of eq, ne, in, gt, gte, lt, lte")
        })?,
        Some(other) => return Err(format!(".op: must be a string, not {}", type_name(other))),
        None => return Err(".op is required".to_owned()),
    };
    let Some(value) = obj.get("value") else {
        return Err(".value is required".to_owned());
    };
    check_value(op, value)?;
    Ok(Condition {
        path,
        op,
        value: value.clone(),
    })
}

/// Whether `value` fits `op`: a scalar to compare with, 1 to [`MAX_IN_VALUES`] scalars for
/// `in`, a number or a string to order by; else what is wrong, as a suffix of its `filters[i]`.
fn check_value(op: Op, value: &Value) -> Result<(), String> {
    match op {
        Op::Eq | Op::Ne if !is_scalar(value) => {
            return Err(format!(
                ".value: `{}` compares with a string, number, boolean or null, not {}",
                op_name(op),
                type_name(value)
            ));
        }
        Op::In => {
            let Value::Array(items) = value else {
                return Err(format!(
                    ".value: `in` needs an array of values, not {}",
                    type_name(value)
                ));
            };
            if items.is_empty() || items.len() > MAX_IN_VALUES {
                return Err(format!(
                    ".value: `in` needs 1 to {MAX_IN_VALUES} values, not {}",
                    items.len()
                ));
            }
            if let Some((j, bad)) = items.iter().enumerate().find(|(_, v)| !is_scalar(v)) {
                return Err(format!(
                    ".value[{j}]: `in` values are strings, numbers, booleans or null, not {}",
                    type_name(bad)
                ));
            }
        }
        Op::Gt | Op::Gte | Op::Lt | Op::Lte
            if !matches!(value, Value::Number(_) | Value::String(_)) =>
        {
            return Err(format!(
                ".value: `{}` compares with a number or a string, not {}",
                op_name(op),
                type_name(value)
            ));
        }
        _ => {}
    }
    Ok(())
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Eq => "eq",
        Op::Ne => "ne",
        Op::In => "in",
        Op::Gt => "gt",
        Op::Gte => "gte",
        Op::Lt => "lt",
        Op::Lte => "lte",
    }
}

/// The value at a dotted path; a numeric segment also indexes an array.
fn lookup<'a>(payload: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(payload, |v, seg| match v {
        Value::Object(m) => m.get(seg),
        Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// Equality with numbers compared by value, so `1` and `1.0` are equal.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        _ => a == b,
    }
}

/// Order of two numbers or two strings; other pairs have none.
fn order(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

impl Condition {
    fn holds(&self, payload: &Value) -> bool {
        let Some(actual) = lookup(payload, &self.path) else {
            return false;
        };
        match self.op {
            Op::Eq => equal(actual, &self.value),
            Op::Ne => !equal(actual, &self.value),
            Op::In => match &self.value {
                Value::Array(items) => items.iter().any(|v| equal(actual, v)),
                _ => false,
            },
            Op::Gt => order(actual, &self.value) == Some(Ordering::Greater),
            Op::Gte => matches!(
                order(actual, &self.value),
                Some(Ordering::Greater | Ordering::Equal)
            ),
            Op::Lt => order(actual, &self.value) == Some(Ordering::Less),
            Op::Lte => matches!(
                order(actual, &self.value),
                Some(Ordering::Less | Ordering::Equal)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filter(v: Value) -> Filter {
        Filter::parse(Some(&v)).expect("valid filter")
    }

    fn one(field: &str, op: &str, value: Value) -> Filter {
        filter(json!([{"field": field, "op": op, "value": value}]))
    }

    fn err(v: Value) -> String {
        Filter::parse(Some(&v))
            .expect_err("invalid filter")
            .to_string()
    }

    #[test]
    fn empty_or_absent_matches_everything() {
        assert!(Filter::parse(None).expect("none").matches(&json!(3)));
        assert!(filter(json!([])).matches(&json!({"a": 1})));
        assert!(Filter::parse(Some(&Value::Null)).expect("null").is_empty());
    }

    #[test]
    fn eq_and_ne() {
        let p = json!({"sym": "ACME", "price": 3, "live": true, "note": null});
        assert!(one("sym", "eq", json!("ACME")).matches(&p));
        assert!(!one("sym", "eq", json!("acme")).matches(&p));
        assert!(one("price", "eq", json!(3.0)).matches(&p));
        assert!(one("live", "eq", json!(true)).matches(&p));
        assert!(one("note", "eq", Value::Null).matches(&p));
        assert!(!one("price", "eq", json!("3")).matches(&p));
        assert!(one("sym", "ne", json!("XYZ")).matches(&p));
        assert!(!one("sym", "ne", json!("ACME")).matches(&p));
        assert!(one("price", "ne", json!("3")).matches(&p));
    }

    #[test]
    fn missing_fields_never_match_even_ne() {
        let p = json!({"a": 1});
        for op in ["eq", "ne", "gt", "gte", "lt", "lte"] {
            assert!(!one("b", op, json!(1)).matches(&p), "{op}");
        }
        assert!(!one("b", "in", json!([1])).matches(&p));
        assert!(!one("a.b", "eq", json!(1)).matches(&p));
        assert!(!one("a", "eq", json!(1)).matches(&json!("not an object")));
    }

    #[test]
    fn in_lists() {
        let f = one("sym", "in", json!(["ACME", "XYZ", 7]));
        assert!(f.matches(&json!({"sym": "XYZ"})));
        assert!(f.matches(&json!({"sym": 7.0})));
        assert!(!f.matches(&json!({"sym": "Q"})));
    }

    #[test]
    fn ordering_numbers_and_strings() {
        let p = json!({"price": 10, "day": "2026-11-29", "big": 18446744073709551615u64});
        assert!(one("price", "gt", json!(9.5)).matches(&p));
        assert!(!one("price", "gt", json!(10)).matches(&p));
        assert!(one("price", "gte", json!(10)).matches(&p));
        assert!(one("price", "lt", json!(11)).matches(&p));
        assert!(!one("price", "lt", json!(10)).matches(&p));
        assert!(one("price", "lte", json!(10)).matches(&p));
        assert!(!one("price", "lte", json!(-1)).matches(&p));
        assert!(one("day", "gte", json!("2026-11-01")).matches(&p));
        assert!(!one("day", "lt", json!("2026-01-01")).matches(&p));
        assert!(one("big", "gt", json!(1)).matches(&p));
        // Mixed types have no order: never a match.
        assert!(!one("price", "gt", json!("1")).matches(&p));
        assert!(!one("day", "lt", json!(5)).matches(&p));
    }

    #[test]
    fn dotted_paths_reach_nested_objects_and_arrays() {
        let p = json!({"order": {"total": 120, "lines": [{"sku": "a"}, {"sku": "b"}]}});
        assert!(one("order.total", "gte", json!(100)).matches(&p));
        assert!(one("order.lines.1.sku", "eq", json!("b")).matches(&p));
        assert!(!one("order.lines.9.sku", "eq", json!("b")).matches(&p));
        assert!(!one("order.lines.x", "eq", json!("b")).matches(&p));
    }

    #[test]
    fn every_condition_must_hold() {
        let f = filter(json!([
            {"field": "sym", "op": "eq", "value": "ACME"},
            {"field": "price", "op": "gt", "value": 5},
        ]));
        assert!(f.matches(&json!({"sym": "ACME", "price": 6})));
        assert!(!f.matches(&json!({"sym": "ACME", "price": 5})));
        assert!(!f.matches(&json!({"sym": "XYZ", "price": 6})));
    }

    #[test]
    fn bad_filters_name_the_entry_and_the_problem() {
        assert!(err(json!({"field": "a"})).contains("`filters` must be an array"));
        assert_eq!(
            err(json!([{"field": "a", "op": "eq", "value": 1}, "x"])),
            "filters[1]: must be an object {field, op, value}, not a string"
        );
        assert_eq!(
            err(json!([{"field": "a", "op": "gtx", "value": 1}])),
            "filters[0].op: unknown op \"gtx\"; use one of eq, ne, in, gt, gte, lt, lte"
        );
        assert!(err(json!([{"field": "a", "value": 1}])).contains("filters[0].op is required"));
        assert!(err(json!([{"op": "eq", "value": 1}])).contains("filters[0].field is required"));
        assert!(err(json!([{"field": "a", "op": "eq"}])).contains("filters[0].value is required"));
        assert!(err(json!([{"field": 3, "op": "eq", "value": 1}])).contains(".field: must be"));
        assert!(err(json!([{"field": "a..b", "op": "eq", "value": 1}])).contains("dotted path"));
        assert!(
            err(json!([{"field": "a.b.c.d.e.f.g.h.i", "op": "eq", "value": 1}]))
                .contains("more than 8 segments")
        );
        assert!(
            err(json!([{"field": "a", "op": "eq", "value": 1, "x": 2}]))
                .contains("unknown member `x`")
        );
        assert_eq!(
            err(json!([{"field": "a", "op": "gt", "value": true}])),
            "filters[0].value: `gt` compares with a number or a string, not a boolean"
        );
        assert!(err(json!([{"field": "a", "op": "lte", "value": null}])).contains("`lte`"));
        assert!(err(json!([{"field": "a", "op": "eq", "value": [1]}])).contains("not an array"));
        assert!(err(json!([{"field": "a", "op": "in", "value": 1}])).contains("needs an array"));
        assert!(err(json!([{"field": "a", "op": "in", "value": []}])).contains("1 to 64"));
        assert!(
            err(json!([{"field": "a", "op": "in", "value": [1, {"b": 2}]}]))
                .starts_with("filters[0].value[1]:")
        );
        let many: Vec<Value> = (0..17)
            .map(|_| json!({"field": "a", "op": "eq", "value": 1}))
            .collect();
        assert!(err(Value::Array(many)).contains("at most 16"));
    }
}
