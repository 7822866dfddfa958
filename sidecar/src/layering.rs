//! The sidecar's layering, held true: every `use` and every `crate::`/`self::`/`super::` path of
//! the files `lib.rs` reaches is read (by `switchyard-layering`), and each file's imports must point
//! down the declared stack, never up, never sideways into a sibling room. That no files import each
//! other in a circle is checked for every crate of the workspace (`layering/tests/no_circles.rs`).
//!
//! The stack is declared below as floors. A new top-level module fails this test until it is given a
//! floor: deciding where a room sits is part of adding it.

use std::collections::BTreeSet;
use std::path::Path;
use switchyard_layering::{Crate, Graph, show};

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

fn graph() -> Graph {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    Crate::read(&lib)
        .unwrap_or_else(|e| panic!("reading the sidecar's modules: {e}"))
        .graph()
}

fn room(module: &[String]) -> &str {
    module.first().map_or("lib", String::as_str)
}

fn floor(room: &str) -> Option<u8> {
    FLOORS.iter().find(|(r, _)| *r == room).map(|(_, f)| *f)
}

#[test]
fn every_room_has_a_floor_and_imports_only_rooms_below_it() {
    let g = graph();
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
fn the_reader_sees_the_imports_it_must_judge() {
    // A test of the checks above: it must find real arrows, or the two tests would pass vacuously.
    let g = graph();
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
