//! The sidecar's layering, held true: every `use` and every `crate::`/`super::` path in `src/` is
//! read, each file's imports must point down the declared stack (never up, never sideways into a
//! sibling room), and no files import each other in a circle.
//!
//! The stack is declared below as floors. A new top-level module fails this test until it is given a
//! floor: deciding where a room sits is part of adding it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level room and its floor: a room may import only rooms on lower floors.
const FLOORS: &[(&str, u8)] = &[
    // The crate root and the fuzz aid sit above everything they export.
    ("lib", 12),
    ("fuzz_checks", 12),
    ("cli", 11),
    ("roles", 10),
    // The reloader beside the chart's nats-server: a role of its own, on process plumbing only.
    ("nats_reload", 10),
    ("admin", 9),
    // What a config is refused for at start, without I/O (also run by `switchyard check`): the
    // checks of the front doors and middleware below it, without their Secrets and sockets.
    ("start_checks", 9),
    // The front doors (router role) and delivery (manager role): siblings that never import each other.
    ("listener", 8),
    ("manager", 8),
    ("middleware", 7),
    // Broker and routing stage.
    ("dispatch", 6),
    // Routing table and frame connections to managers; beside it, the event store of durable delivery.
    ("upstream", 5),
    ("durable", 5),
    // Spans of every hop (counts its drops in metrics).
    ("otel", 5),
    // Pure cores and process plumbing the stages share.
    ("answer", 4),
    ("edge", 4),
    ("net", 4),
    ("metrics", 4),
    // Live taps of the events (`switchyard tap`): fed by the front doors and delivery, served by admin.
    ("tap", 4),
    ("secrets", 4),
    ("routes", 3),
    ("load", 3),
    ("problem", 3),
    ("timing", 3),
    ("config", 3),
    ("traceparent", 3),
    ("shutdown", 3),
    ("params", 2),
    ("backoff", 2),
    ("hex", 2),
    ("telemetry", 2),
    ("runtime", 2),
    // The container's memory limit, read from its cgroup.
    ("cgroup", 2),
];

/// One source file: its module path and the module paths its code names.
struct Source {
    module: Vec<String>,
    paths: Vec<Vec<String>>,
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        panic!("cannot read {}", dir.display());
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under `src/`: `a/b.rs` and `a/b/mod.rs` are `[a, b]`, `lib.rs` is `[]`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// Code without comments and without the trailing test module (tests may reach anywhere).
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod tests"))
        {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `a::{b, c::{d, e as f}, self}` -> `a::b`, `a::c::d`, `a::c::e`, `a`.
fn expand(tree: &str) -> Vec<String> {
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

/// Every path a file's code names: its `use` trees, expanded, and inline `crate::`/`super::` paths.
fn named_paths(code: &str) -> Vec<String> {
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
    for anchor in ["crate::", "super::"] {
        let mut at = 0;
        while let Some(i) = code[at..].find(anchor) {
            let start = at + i;
            let path: String = code[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(path.trim_end_matches(':').to_owned());
            at = start + anchor.len();
        }
    }
    out
}

/// `path` as seen from `module` (a file whose child modules are `children`), as an absolute module
/// path; `None` for paths outside the crate.
fn absolute(path: &str, module: &[String], children: &BTreeSet<String>) -> Option<Vec<String>> {
    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let first = *segs.first()?;
    let mut base: Vec<String> = match first {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => module.to_vec(),
        _ if children.contains(first) => {
            let mut m = module.to_vec();
            m.push(first.to_owned());
            return Some(
                m.into_iter()
                    .chain(segs[1..].iter().map(|s| s.to_string()))
                    .collect(),
            );
        }
        _ => return None,
    };
    let mut rest = &segs[..];
    if first == "crate" || first == "self" {
        rest = &segs[1..];
    }
    while rest.first() == Some(&"super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().map(|s| s.to_string()));
    Some(base)
}

fn load() -> BTreeMap<Vec<String>, Source> {
    let src = src_dir();
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let mut out = BTreeMap::new();
    for p in paths {
        let rel = p.strip_prefix(&src).unwrap_or(&p).to_owned();
        let name = rel.file_name().map(|n| n.to_string_lossy().into_owned());
        // Test files and the binary are not rooms of the library.
        if matches!(
            name.as_deref(),
            Some("tests.rs" | "layering.rs" | "main.rs")
        ) {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let code = code_of(&text);
        let module = module_of(&rel);
        let children: BTreeSet<String> = code
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l
                    .strip_prefix("pub(crate) ")
                    .or(l.strip_prefix("pub "))
                    .unwrap_or(l);
                l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
            })
            .collect();
        let named = named_paths(&code)
            .iter()
            .filter_map(|n| absolute(n, &module, &children))
            .collect();
        out.insert(
            module.clone(),
            Source {
                module,
                paths: named,
            },
        );
    }
    out
}

/// The file a module path lands in: the longest prefix that is a file.
fn file_of<'a>(
    path: &[String],
    files: &'a BTreeMap<Vec<String>, Source>,
) -> Option<&'a Vec<String>> {
    (1..=path.len())
        .rev()
        .find_map(|k| files.get_key_value(&path[..k]).map(|(key, _)| key))
}

fn show(module: &[String]) -> String {
    if module.is_empty() {
        "lib.rs".to_owned()
    } else {
        module.join("/")
    }
}

/// File -> the files it imports from.
fn graph(files: &BTreeMap<Vec<String>, Source>) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut g = BTreeMap::new();
    for (m, s) in files {
        let to: BTreeSet<Vec<String>> = s
            .paths
            .iter()
            .filter_map(|p| file_of(p, files))
            .filter(|t| *t != m)
            .cloned()
            .collect();
        g.insert(s.module.clone(), to);
    }
    g
}

fn room(module: &[String]) -> &str {
    module.first().map_or("lib", String::as_str)
}

fn floor(room: &str) -> Option<u8> {
    FLOORS.iter().find(|(r, _)| *r == room).map(|(_, f)| *f)
}

/// Strongly connected components of more than one file (Tarjan).
fn circles(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        g: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on: BTreeSet<&'a Vec<String>>,
        next: usize,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Vec<String>) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        let g = s.g;
        for w in g.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(lw));
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn every_room_has_a_floor_and_imports_only_rooms_below_it() {
    let files = load();
    let g = graph(&files);
    let mut problems = Vec::new();
    for m in g.keys() {
        if floor(room(m)).is_none() {
            problems.push(format!(
                "{}: room `{}` has no floor in layering.rs FLOORS; give it one",
                show(m),
                room(m)
            ));
        }
    }
    for (from, tos) in &g {
        for to in tos {
            let (a, b) = (room(from), room(to));
            if a == b {
                continue;
            }
            if let (Some(fa), Some(fb)) = (floor(a), floor(b))
                && fb >= fa
            {
                let how = if fb == fa { "sideways" } else { "up" };
                problems.push(format!(
                    "{} -> {}: `{a}` (floor {fa}) imports `{b}` (floor {fb}), {how} the stack",
                    show(from),
                    show(to)
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let g = graph(&load());
    let found: Vec<String> = circles(&g)
        .iter()
        .map(|c| c.iter().map(|m| show(m)).collect::<Vec<_>>().join(" <-> "))
        .collect();
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_reader_sees_the_imports_it_must_judge() {
    // A test of the checks above: it must find real arrows, or the two tests would pass vacuously.
    let g = graph(&load());
    let has = |from: &str, to: &str| {
        let key = |s: &str| s.split('/').map(str::to_owned).collect::<Vec<_>>();
        g.get(&key(from)).is_some_and(|t| t.contains(&key(to)))
    };
    assert!(
        has("listener/http", "dispatch"),
        "use crate::dispatch::{{..}}"
    );
    assert!(
        has("upstream", "upstream/pool"),
        "pub(crate) use pool::Pool (a child)"
    );
    assert!(has("upstream/follow", "upstream"), "use super::Upstream");
    assert!(
        has("manager/delivery/http", "manager/delivery/app_conns"),
        "super::app_conns"
    );
    assert!(g.values().map(BTreeSet::len).sum::<usize>() > 100);
}

#[test]
fn use_trees_expand_and_comments_do_not_count() {
    assert_eq!(
        expand("crate::a::{b, c::{d, e as f}, self}"),
        [
            "crate::a::b",
            "crate::a::c::d",
            "crate::a::c::e",
            "crate::a"
        ]
    );
    let code = code_of(
        "// crate::hidden::X\nuse crate::shown::Y;\n#[cfg(test)]\nmod tests {\n use crate::t;\n}\n",
    );
    assert_eq!(named_paths(&code), ["crate::shown::Y", "crate::shown::Y"]);
    let m = vec!["a".to_owned(), "b".to_owned()];
    let kids = BTreeSet::from(["c".to_owned()]);
    assert_eq!(
        absolute("super::x::Y", &m, &kids),
        Some(vec!["a".into(), "x".into(), "Y".into()])
    );
    assert_eq!(
        absolute("c::Z", &m, &kids),
        Some(vec!["a".into(), "b".into(), "c".into(), "Z".into()])
    );
    assert_eq!(absolute("std::sync::Arc", &m, &kids), None);
}
