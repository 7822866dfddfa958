//! Reading paths out of Rust source text: comments and test-only code dropped, `use` trees
//! expanded, inline `crate::`/`self::`/`super::` paths collected, each made absolute.

use std::collections::BTreeSet;

/// A `mod name;` declaration of a file (never one under `#[cfg(test)]`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Child {
    pub(crate) name: String,
    /// Its `#[path = "..."]`, if given.
    pub(crate) path_attr: Option<String>,
}

/// The code of a file without comments and without test-only items: an item right after
/// `#[cfg(test)]` (a `mod` block, a `use`, a `mod x;`) is left out, to its closing brace or
/// semicolon.
pub(crate) fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        if t.starts_with("#[cfg(test)]") {
            skip_item(&mut lines);
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Consumes the lines of the next item: up to its `;` when it has no block, else to the line
/// where its braces balance (braces inside strings are rare enough in item heads to ignore).
fn skip_item<'a>(lines: &mut std::iter::Peekable<impl Iterator<Item = &'a str>>) {
    let mut depth = 0i64;
    let mut opened = false;
    for line in lines.by_ref() {
        let t = line.trim_start();
        if t.starts_with("//") || t.starts_with("#[") {
            continue;
        }
        for ch in line.chars() {
            match ch {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth -= 1,
                _ => {}
            }
        }
        if (opened && depth <= 0) || (!opened && line.trim_end().ends_with(';')) {
            return;
        }
    }
}

/// The `mod name;` declarations of `code` (already without its test-only items), with a
/// `#[path]` on the line before, if any.
pub(crate) fn child_modules(code: &str) -> Vec<Child> {
    let mut out = Vec::new();
    let mut path_attr = None;
    for line in code.lines().map(str::trim) {
        if let Some(p) = line
            .strip_prefix("#[path = \"")
            .and_then(|r| r.strip_suffix("\"]"))
        {
            path_attr = Some(p.to_owned());
            continue;
        }
        let decl = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub(super) "))
            .or_else(|| line.strip_prefix("pub "))
            .unwrap_or(line);
        if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            out.push(Child {
                name: name.trim().to_owned(),
                path_attr: path_attr.take(),
            });
        } else if !line.starts_with("#[") {
            path_attr = None;
        }
    }
    out
}

/// `a::{b, c::{d, e as f}, self}` -> `a::b`, `a::c::d`, `a::c::e`, `a`.
pub(crate) fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        return vec![path.to_owned()];
    };
    let prefix = tree[..open].trim_end_matches("::").trim();
    let inner = tree[open + 1..].trim_end().trim_end_matches('}');
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    let mut out = Vec::new();
    for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        for sub in expand(item) {
            if sub == "self" {
                out.push(prefix.to_owned());
            } else if prefix.is_empty() {
                out.push(sub);
            } else {
                out.push(format!("{prefix}::{sub}"));
            }
        }
    }
    out
}

/// Every path a file's code names: its `use` trees, expanded, and inline `crate::`, `self::` and
/// `super::` paths.
pub(crate) fn named_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = rest[..i].chars().last();
        let after = &rest[i + 4..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = after.find(';') else { break };
        out.extend(expand(&after[..end]));
    }
    for anchor in ["crate::", "super::", "self::"] {
        let mut at = 0;
        while let Some(i) = code[at..].find(anchor) {
            let start = at + i;
            at = start + anchor.len();
            let before = code[..start].chars().last();
            // `$crate::`, `my_crate::`, and the `super::` inside `super::super::` (read whole
            // from its first `super`) are not paths of their own.
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
                continue;
            }
            let path: String = code[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(path.trim_end_matches(':').to_owned());
        }
    }
    out
}

/// `path` as seen from `module` (a file whose child modules are `children`), as an absolute module
/// path; `None` for paths outside the crate.
pub(crate) fn absolute(
    path: &str,
    module: &[String],
    children: &BTreeSet<String>,
) -> Option<Vec<String>> {
    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let first = *segs.first()?;
    let (mut base, mut rest): (Vec<String>, &[&str]) = match first {
        "crate" => (Vec::new(), &segs[1..]),
        "self" => (module.to_vec(), &segs[1..]),
        "super" => (module.to_vec(), &segs[..]),
        _ if children.contains(first) => (module.to_vec(), &segs[..]),
        _ => return None,
    };
    while rest.first() == Some(&"super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().map(|s| s.to_string()));
    Some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_trees_expand() {
        assert_eq!(
            expand("crate::a::{b, c::{d, e as f}, self}"),
            [
                "crate::a::b",
                "crate::a::c::d",
                "crate::a::c::e",
                "crate::a"
            ]
        );
    }

    #[test]
    fn comments_and_test_only_items_do_not_count() {
        let code = code_of(
            "// crate::hidden::X\nuse crate::shown::Y;\n#[cfg(test)]\nuse crate::t1;\n\
             #[cfg(test)]\nmod tests {\n    fn f() { crate::t2::f(); }\n}\n\
             #[cfg(test)]\nmod more;\nfn g() { crate::after::g(); }\n",
        );
        assert_eq!(
            named_paths(&code),
            ["crate::shown::Y", "crate::shown::Y", "crate::after::g"]
        );
        assert!(child_modules(&code).is_empty(), "{code}");
    }

    #[test]
    fn super_chains_and_macro_paths_are_read_once() {
        let code = "fn f() { super::super::x::f(); $crate::m!(); other_crate::y(); }\n";
        assert_eq!(named_paths(code), ["super::super::x::f"]);
    }

    #[test]
    fn child_modules_with_a_path_attribute() {
        let code = "pub mod a;\n#[path = \"x/b.rs\"]\nmod b;\npub(crate) mod c { }\n";
        assert_eq!(
            child_modules(code),
            [
                Child {
                    name: "a".into(),
                    path_attr: None
                },
                Child {
                    name: "b".into(),
                    path_attr: Some("x/b.rs".into())
                },
            ]
        );
    }

    #[test]
    fn paths_are_made_absolute() {
        let m = vec!["a".to_owned(), "b".to_owned()];
        let kids = BTreeSet::from(["c".to_owned()]);
        assert_eq!(
            absolute("super::x::Y", &m, &kids),
            Some(vec!["a".into(), "x".into(), "Y".into()])
        );
        assert_eq!(
            absolute("self::c::Z", &m, &kids),
            Some(vec!["a".into(), "b".into(), "c".into(), "Z".into()])
        );
        assert_eq!(
            absolute("c::Z", &m, &kids),
            Some(vec!["a".into(), "b".into(), "c".into(), "Z".into()])
        );
        assert_eq!(absolute("crate::q", &m, &kids), Some(vec!["q".into()]));
        assert_eq!(absolute("std::sync::Arc", &m, &kids), None);
    }
}
