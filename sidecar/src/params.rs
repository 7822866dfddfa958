//! Typed request parameters: percent-decoding and parsing path and query values into JSON.
//!
//! Pure. A value that does not parse as its declared type is reported with the parameter's name.

use serde_json::{Map, Value};
use switchyard_crds::router::ParamType;

/// A parameter whose value does not fit its declared type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadParam {
    /// Parameter name.
    pub(crate) name: String,
    /// What was expected, for the problem detail.
    pub(crate) expected: &'static str,
}

/// Decodes `%XX` escapes (and `+` as space when `plus_is_space`, as in query strings).
/// `None` when an escape is malformed or the result is not UTF-8.
pub(crate) fn percent_decode(raw: &str, plus_is_space: bool) -> Option<String> {
    if !raw
        .bytes()
        .any(|b| b == b'%' || (plus_is_space && b == b'+'))
    {
        return Some(raw.to_owned());
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hi = hex_val(*bytes.get(i + 1)?)?;
                let lo = hex_val(*bytes.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Parses one decoded value as `ty`.
pub(crate) fn typed(name: &str, value: &str, ty: ParamType) -> Result<Value, BadParam> {
    let bad = |expected| BadParam {
        name: name.to_owned(),
        expected,
    };
    match ty {
        ParamType::String => {
            if value.is_empty() {
                Err(bad("a non-empty string"))
            } else {
                Ok(Value::String(value.to_owned()))
            }
        }
        ParamType::Integer => value
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| bad("an integer")),
        ParamType::Number => value
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| bad("a number")),
        ParamType::Boolean => match value {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(bad("true or false")),
        },
        ParamType::Uuid => {
            if is_uuid(value) {
                Ok(Value::String(value.to_ascii_lowercase()))
            } else {
                Err(bad("a UUID"))
            }
        }
    }
}

fn is_uuid(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Adds the query string's parameters to `out`, typed where `types` declares them, strings otherwise.
/// Names already in `out` (path parameters) win. At most `max` parameters are taken.
pub(crate) fn add_query(
    query: &str,
    types: &dyn Fn(&str) -> Option<ParamType>,
    out: &mut Map<String, Value>,
    max: usize,
) -> Result<(), BadParam> {
    for (n, pair) in query.split('&').filter(|p| !p.is_empty()).enumerate() {
        if n >= max {
            return Err(BadParam {
                name: "query".into(),
                expected: "at most 64 query parameters",
            });
        }
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let bad_escape = |name: &str| BadParam {
            name: name.to_owned(),
            expected: "valid percent-encoded UTF-8",
        };
        let name = percent_decode(raw_name, true).ok_or_else(|| bad_escape(raw_name))?;
        let value = percent_decode(raw_value, true).ok_or_else(|| bad_escape(&name))?;
        if out.contains_key(&name) {
            continue;
        }
        let v = match types(&name) {
            Some(ty) => typed(&name, &value, ty)?,
            None => Value::String(value),
        };
        out.insert(name, v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_parse_or_name_the_parameter() {
        assert_eq!(typed("id", "42", ParamType::Integer), Ok(Value::from(42)));
        assert_eq!(typed("id", "-7", ParamType::Integer), Ok(Value::from(-7)));
        assert_eq!(
            typed("id", "x", ParamType::Integer),
            Err(BadParam {
                name: "id".into(),
                expected: "an integer"
            })
        );
        assert_eq!(
            typed("p", "1.5", ParamType::Number),
            Ok(serde_json::json!(1.5))
        );
        assert!(typed("p", "NaN", ParamType::Number).is_err());
        assert_eq!(
            typed("b", "true", ParamType::Boolean),
            Ok(Value::Bool(true))
        );
        assert!(typed("b", "yes", ParamType::Boolean).is_err());
        assert_eq!(
            typed("u", "0AF76519-16CD-43DD-8448-EB211C80319C", ParamType::Uuid),
            Ok(Value::from("0af76519-16cd-43dd-8448-eb211c80319c"))
        );
        assert!(typed("u", "0af76519", ParamType::Uuid).is_err());
        assert!(typed("s", "", ParamType::String).is_err());
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b", false).as_deref(), Some("a b"));
        assert_eq!(percent_decode("a+b", true).as_deref(), Some("a b"));
        assert_eq!(percent_decode("a+b", false).as_deref(), Some("a+b"));
        assert_eq!(percent_decode("%C3%A9", false).as_deref(), Some("é"));
        assert_eq!(percent_decode("%zz", false), None);
        assert_eq!(percent_decode("%", false), None);
        assert_eq!(percent_decode("%ff", false), None);
    }

    #[test]
    fn query_is_typed_and_path_wins() {
        let mut out = Map::new();
        out.insert("id".into(), Value::from(1));
        let types = |n: &str| (n == "limit").then_some(ParamType::Integer);
        add_query("limit=10&q=a+b&id=9&flag", &types, &mut out, 64).expect("ok");
        assert_eq!(
            Value::Object(out),
            serde_json::json!({"id": 1, "limit": 10, "q": "a b", "flag": ""})
        );
        let mut out = Map::new();
        let err = add_query("limit=ten", &types, &mut out, 64).expect_err("typed");
        assert_eq!(err.name, "limit");
    }
}
