//! Where a field is in the YAML text, so an error that names a field path (`spec.workers.maxInflight`)
//! also names its line. Read only when there is an error to place: the documents are parsed a second
//! time into a tree of keys with their lines, holding no values.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;
use std::fmt;

/// One document's keys and list items, each with the line it starts on.
pub struct Document(Spanned<Node>);

enum Node {
    Leaf,
    List(Vec<Spanned<Node>>),
    Map(Vec<(Spanned<Key>, Spanned<Node>)>),
}

/// A mapping key as text (YAML keys may be numbers or booleans).
struct Key(String);

/// Every document of `text`, in order; `None` when the text is not YAML (its parse error has a line).
pub fn documents(text: &str) -> Option<Vec<Document>> {
    serde_saphyr::from_multiple::<Spanned<Node>>(text)
        .ok()
        .map(|docs| docs.into_iter().map(Document).collect())
}

impl Document {
    /// The 1-based line of `path` (dotted, `[i]` for list items, as [`crate::strict::Problem`]
    /// names fields); for a field that is missing, the line of the nearest field above it that is
    /// there. `None` when the parser knew no location.
    pub fn line(&self, path: &str) -> Option<usize> {
        let mut node = &self.0;
        let mut line = node.referenced.line();
        let mut rest = path;
        loop {
            rest = rest.strip_prefix('.').unwrap_or(rest);
            if rest.is_empty() {
                break;
            }
            let next = match &node.value {
                Node::List(items) => list_item(items, rest),
                Node::Map(entries) => map_entry(entries, rest),
                Node::Leaf => None,
            };
            let Some((at, child, after)) = next else {
                break;
            };
            line = at;
            node = child;
            rest = after;
        }
        usize::try_from(line).ok().filter(|l| *l > 0)
    }
}

/// `[i]` at the start of `rest`: the item's line, the item, and what follows.
fn list_item<'a, 'p>(
    items: &'a [Spanned<Node>],
    rest: &'p str,
) -> Option<(u64, &'a Spanned<Node>, &'p str)> {
    let (index, after) = rest.strip_prefix('[')?.split_once(']')?;
    let item = items.get(index.parse::<usize>().ok()?)?;
    Some((item.referenced.line(), item, after))
}

/// The key that `rest` starts with (the longest, as keys such as label names may hold dots): the
/// key's line, its value, and what follows.
fn map_entry<'a, 'p>(
    entries: &'a [(Spanned<Key>, Spanned<Node>)],
    rest: &'p str,
) -> Option<(u64, &'a Spanned<Node>, &'p str)> {
    entries
        .iter()
        .filter_map(|(k, v)| {
            let after = rest.strip_prefix(k.value.0.as_str())?;
            (after.is_empty() || after.starts_with(['.', '['])).then_some((k, v, after))
        })
        .max_by_key(|(k, _, _)| k.value.0.len())
        .map(|(k, v, after)| (k.referenced.line(), v, after))
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Leaf)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Node::Map(entries))
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KeyVisitor)
    }
}

struct KeyVisitor;

impl Visitor<'_> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Key, E> {
        Ok(Key(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Key, E> {
        Ok(Key(v.to_string()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Key, E> {
        Ok(Key(v.to_string()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Key, E> {
        Ok(Key(v.to_string()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(Key(v.to_owned()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Key, E> {
        Ok(Key("null".to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
apiVersion: switchyard.dev/v1alpha1
kind: Manager
metadata:
  name: m
  labels:
    app.kubernetes.io/name: x
spec:
  events: [a, b]
  routes:
    - event: a
      http: {method: POST, path: /a}
    - event: b
      http:
        method: POST
  workers:
    maxInflight: 64
---
kind: Router
spec:
  listeners: {}
";

    fn doc(i: usize) -> Document {
        documents(TEXT)
            .expect("YAML")
            .into_iter()
            .nth(i)
            .expect("document")
    }

    #[test]
    fn fields_are_placed_on_their_key_s_line() {
        let d = doc(0);
        assert_eq!(d.line("spec.workers.maxInflight"), Some(16));
        assert_eq!(d.line("spec.workers"), Some(15));
        assert_eq!(d.line("kind"), Some(2));
    }

    #[test]
    fn list_items_and_keys_with_dots_are_followed() {
        let d = doc(0);
        assert_eq!(d.line("spec.routes[1].http.method"), Some(14));
        assert_eq!(d.line("spec.routes[0].http.path"), Some(11));
        assert_eq!(d.line("spec.events[1]"), Some(8));
        assert_eq!(d.line("metadata.labels.app.kubernetes.io/name"), Some(6));
    }

    #[test]
    fn a_missing_field_is_placed_at_the_nearest_one_there() {
        let d = doc(0);
        assert_eq!(d.line("spec.workers.queueCapacity"), Some(15));
        assert_eq!(d.line("spec.routes[7]"), Some(9));
        assert_eq!(doc(1).line("spec.listeners.http"), Some(20));
        assert_eq!(doc(1).line("spec"), Some(19));
    }
}
