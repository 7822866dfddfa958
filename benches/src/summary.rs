//! The human summary of a run (`summary.md`): the target lines first, then one table per section with
//! ratios, then what did not run. Pure.

use crate::cost::PairCost;
use crate::mesh::Handshakes;
use crate::plateau;
use crate::report::Summary;
use crate::results::{Results, ratio, rps_vs};
use crate::targets::{Check, mtls_added_p50, mtls_load_handshakes};
use std::fmt::Write as _;

/// Systems of the `/noop` table in this order; others follow as recorded. `app` is the example app driven
/// directly (the handler both Switchyard and Dapr deliver to), `plaintext` Switchyard's full path with mesh
/// mTLS off (`switchyard up --plaintext`; `switchyard` has it on, the default), `unix` the default path
/// with the app on a Unix socket (`app.transport: unix`), `dapr` two daprd sidecars in front of the app,
/// `haproxy` the relay anchor (two HAProxy relays with mTLS between them in front of bare hyper).
const NOOP_ORDER: [&str; 9] = [
    "bare",
    "haproxy",
    "app",
    "plaintext",
    "switchyard",
    "unix",
    "dapr",
    "edri",
    "fastapi",
];

fn pct(x: Option<f64>) -> String {
    x.map(|v| format!("{:.1} %", 100.0 * v))
        .unwrap_or_else(|| "-".to_owned())
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "-".to_owned())
}

fn verdict(pass: Option<bool>) -> &'static str {
    match pass {
        Some(true) => "PASS",
        Some(false) => "FAIL",
        None => "NOT MEASURED",
    }
}

fn head(out: &mut String, title: &str, cols: &[&str]) {
    let _ = writeln!(out, "\n## {title}\n");
    let _ = writeln!(out, "| {} |", cols.join(" | "));
    let align: Vec<&str> = cols
        .iter()
        .enumerate()
        .map(|(i, _)| if i == 0 { "---" } else { "---:" })
        .collect();
    let _ = writeln!(out, "|{}|", align.join("|"));
}

fn targets(out: &mut String, checks: &[Check]) {
    let _ = writeln!(out, "## Targets (issues 5, 12, 13, 14 and 36)\n");
    let _ = writeln!(out, "| target | measured | bound | verdict |");
    let _ = writeln!(out, "|---|---:|---|---|");
    for c in checks {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            c.name,
            opt(c.value, 3),
            c.target,
            verdict(c.pass)
        );
    }
}

fn noop(out: &mut String, r: &Results) {
    let mut systems: Vec<String> = NOOP_ORDER
        .iter()
        .map(|s| (*s).to_owned())
        .filter(|s| r.systems("noop").contains(s))
        .collect();
    systems.extend(
        r.systems("noop")
            .into_iter()
            .filter(|s| !NOOP_ORDER.contains(&s.as_str())),
    );
    if systems.is_empty() {
        return;
    }
    head(
        out,
        "Throughput and latency: GET /noop",
        &[
            "system", "c", "req/s", "vs bare", "p50 µs", "p90 µs", "p99 µs", "max µs", "errors",
        ],
    );
    for sys in &systems {
        for c in r.concurrencies("noop") {
            let Some(s) = r.find("noop", sys, None, Some(c)) else {
                continue;
            };
            let vs = r
                .find("noop", "bare", None, Some(c))
                .and_then(|b| rps_vs(s, b));
            let _ = writeln!(
                out,
                "| {sys} | {c} | {:.0} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
                s.rps,
                pct(vs),
                s.p50_us,
                s.p90_us,
                s.p99_us,
                s.max_us,
                s.errors
            );
        }
    }
}

/// Which generators drove a section's runs, as a line under its table.
fn generators(out: &mut String, r: &Results, section: &str) {
    let mut seen: Vec<&str> = Vec::new();
    for g in r.section(section).filter_map(|s| s.generator.as_deref()) {
        if !seen.contains(&g) {
            seen.push(g);
        }
    }
    if !seen.is_empty() {
        let _ = writeln!(out, "\nLoad from: {}.", seen.join(", "));
    }
    let rounds = r
        .section(section)
        .filter_map(|s| s.extra.get("rounds"))
        .fold(0.0, |a: f64, b| a.max(*b));
    if rounds > 1.0 {
        let _ = writeln!(
            out,
            "Each figure is the median of {rounds:.0} interleaved rounds (per round: \"Rounds\" below)."
        );
    }
}

/// Both runs, when both exist and one generator drove them.
fn same<'a>(a: Option<&'a Summary>, b: Option<&'a Summary>) -> Option<(&'a Summary, &'a Summary)> {
    match (a, b) {
        (Some(a), Some(b)) if a.generator == b.generator => Some((a, b)),
        _ => None,
    }
}

/// Switchyard's full path next to Dapr's service invocation (client → daprd → daprd → app), the example
/// app alone and bare hyper: the figures of the issue 14 bars.
fn side_by_side(out: &mut String, r: &Results) {
    if r.systems("noop").iter().all(|s| s != "dapr") {
        return;
    }
    let _ = writeln!(
        out,
        "\n## Side by side: Switchyard and Dapr service invocation\n"
    );
    let _ = writeln!(
        out,
        "| system | p50 µs c=1 | added p50 µs over bare | p50 / bare | req/s c=32 | vs bare | Switchyard vs it |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    let bare1 = r.find("noop", "bare", None, Some(1));
    let bare32 = r.find("noop", "bare", None, Some(32));
    let sy32 = r.find("noop", "switchyard", None, Some(32));
    for sys in ["bare", "app", "switchyard", "dapr"] {
        let one = r.find("noop", sys, None, Some(1));
        let many = r.find("noop", sys, None, Some(32));
        if one.is_none() && many.is_none() {
            continue;
        }
        let added = same(one, bare1).map(|(s, b)| s.p50_us - b.p50_us);
        let times = same(one, bare1).and_then(|(s, b)| ratio(s.p50_us, b.p50_us));
        let vs_bare = same(many, bare32).and_then(|(s, b)| rps_vs(s, b));
        let sy_vs = same(sy32, many).and_then(|(s, o)| rps_vs(s, o));
        let _ = writeln!(
            out,
            "| {sys} | {} | {} | {} | {} | {} | {} |",
            opt(one.map(|s| s.p50_us), 0),
            opt(added, 0),
            opt(times, 2),
            opt(many.map(|s| s.rps), 0),
            pct(vs_bare),
            opt(sy_vs, 2)
        );
    }
    if let Some(v) = r.meta.get("dapr").and_then(|v| v.as_str()) {
        let _ = writeln!(out, "\nDapr: {v}.");
    }
}

/// `side result count` pairs of a handshake reading, e.g. `client ok 1, server ok 1`.
fn by_side(h: &Handshakes) -> String {
    if h.by.is_empty() {
        return "none".to_owned();
    }
    h.by.iter()
        .map(|(k, v)| format!("{k} {v:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Switchyard's full path with mesh mTLS (the default) next to the same path in plaintext and bare hyper,
/// and the frame handshakes around the mTLS load: the figures of issue 12's cost bar.
fn mtls(out: &mut String, r: &Results) {
    if r.systems("noop").iter().all(|s| s != "plaintext") {
        return;
    }
    let _ = writeln!(
        out,
        "\n## mTLS cost: Switchyard with mesh mTLS next to plaintext (same run)\n"
    );
    let _ = writeln!(
        out,
        "| system | p50 µs c=1 | added p50 µs over plaintext | req/s c=32 | vs plaintext | vs bare |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    let plain1 = r.find("noop", "plaintext", None, Some(1));
    let plain32 = r.find("noop", "plaintext", None, Some(32));
    let bare32 = r.find("noop", "bare", None, Some(32));
    for (sys, label) in [
        ("bare", "bare hyper"),
        ("plaintext", "Switchyard, plaintext"),
        ("switchyard", "Switchyard, mTLS"),
    ] {
        let one = r.find("noop", sys, None, Some(1));
        let many = r.find("noop", sys, None, Some(32));
        if one.is_none() && many.is_none() {
            continue;
        }
        let added = match sys {
            "switchyard" => mtls_added_p50(r),
            "plaintext" => same(one, plain1).map(|_| 0.0),
            _ => None,
        };
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {} | {} |",
            opt(one.map(|s| s.p50_us), 0),
            opt(added, 0),
            opt(many.map(|s| s.rps), 0),
            pct(same(many, plain32).and_then(|(s, p)| rps_vs(s, p))),
            pct(same(many, bare32).and_then(|(s, b)| rps_vs(s, b))),
        );
    }
    let before = r.handshakes.get("noop_switchyard_before");
    let after = r.handshakes.get("noop_switchyard_after");
    if let (Some(b), Some(a)) = (before, after) {
        let requests: u64 = r
            .section("noop")
            .filter(|s| s.system.as_deref() == Some("switchyard"))
            .map(|s| s.requests)
            .sum();
        let _ = writeln!(
            out,
            "\nFrame handshakes (`switchyard_mesh_handshakes_total`) of the mTLS system's {} sidecars: {:.0} \
             before its `/noop` runs ({}), {:.0} after ({}).",
            b.sidecars,
            b.total(),
            by_side(b),
            a.total(),
            by_side(a),
        );
        match mtls_load_handshakes(r) {
            Some(h) => {
                let _ = writeln!(
                    out,
                    "The runs ({requests} measured requests, warm-ups not counted) added {:.0} ({:.0} failed).",
                    h.added, h.added_failed
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "The two readings are of different sidecars ({} and {}): not compared.",
                    b.sidecars, a.sidecars
                );
            }
        }
    }
    if let Some(p) = r.handshakes.get("noop_plaintext_after") {
        let _ = writeln!(
            out,
            "The plaintext system's {} sidecars after its runs: {:.0} handshakes ({}).",
            p.sidecars,
            p.total(),
            by_side(p)
        );
    }
}

/// `switchyard-load` against wrk on the same bare hyper server: whether the in-repo generator could drive
/// the HTTP sections (it would have to reach 90 % of wrk).
fn generator(out: &mut String, r: &Results) {
    if r.section("generator").next().is_none() {
        return;
    }
    head(
        out,
        "Load generators on bare hyper (same run)",
        &[
            "generator",
            "c",
            "req/s",
            "vs wrk",
            "p50 µs",
            "p99 µs",
            "errors",
        ],
    );
    let wrk = r.find("generator", "bare", Some("wrk"), None);
    for s in r.section("generator") {
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {} | {:.0} | {:.0} | {} |",
            s.generator.as_deref().unwrap_or("?"),
            s.concurrency,
            s.rps,
            pct(wrk.and_then(|w| ratio(s.rps, w.rps))),
            s.p50_us,
            s.p99_us,
            s.errors
        );
    }
}

/// Every round of the interleaved runs, with the ratio to bare hyper of the same round, so the spread the
/// medians hide can be read.
fn rounds(out: &mut String, r: &Results) {
    if r.rounds.is_empty() {
        return;
    }
    head(
        out,
        "Rounds (as measured, before the medians)",
        &[
            "section",
            "system",
            "variant",
            "c",
            "round",
            "req/s",
            "vs bare (generator: vs wrk), same round",
            "p50 µs",
            "p99 µs",
            "errors",
        ],
    );
    for s in &r.rounds {
        // The generator section compares generators: its reference is wrk's run of the same round.
        let generators = s.section.as_deref() == Some("generator");
        let reference = r.rounds.iter().find(|b| {
            b.section == s.section
                && b.system.as_deref() == Some("bare")
                && if generators {
                    b.variant.as_deref() == Some("wrk")
                } else {
                    b.variant == s.variant
                }
                && b.concurrency == s.concurrency
                && b.round == s.round
        });
        let vs = reference.and_then(|b| {
            if generators {
                ratio(s.rps, b.rps)
            } else {
                rps_vs(s, b)
            }
        });
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.0} | {} | {:.0} | {:.0} | {} |",
            s.section.as_deref().unwrap_or("-"),
            s.system.as_deref().unwrap_or("-"),
            s.variant.as_deref().unwrap_or("-"),
            s.concurrency,
            s.round.map(|r| r.to_string()).unwrap_or_default(),
            s.rps,
            pct(vs),
            s.p50_us,
            s.p99_us,
            s.errors
        );
    }
}

/// CPU seconds and peak RSS of every process of each system after its `/noop` runs.
fn noop_procs(out: &mut String, r: &Results) {
    let snaps: Vec<(&String, &Vec<crate::procs::Usage>)> = r
        .procs
        .iter()
        .filter(|(k, _)| k.starts_with("noop_") && !k.ends_with("_idle"))
        .collect();
    if snaps.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nProcesses after the `/noop` runs:\n");
    let _ = writeln!(out, "| system | process | pid | CPU s | peak RSS MiB |");
    let _ = writeln!(out, "|---|---|---:|---:|---:|");
    for (k, list) in snaps {
        for u in list {
            let name = if u.cmd.is_empty() { &u.name } else { &u.cmd };
            let _ = writeln!(
                out,
                "| {} | {name} | {} | {:.1} | {:.1} |",
                k.trim_start_matches("noop_"),
                u.pid,
                u.cpu_s,
                u.peak_rss_mb
            );
        }
    }
}

/// A section whose rows are (system, variant) pairs compared with a reference system of the same variant.
fn compared(
    out: &mut String,
    r: &Results,
    section: &str,
    title: &str,
    reference: &str,
    unit: &str,
) {
    if r.section(section).next().is_none() {
        return;
    }
    let vs = format!("vs {reference}");
    head(
        out,
        title,
        &[
            "variant", "system", "c", unit, &vs, "p50 µs", "p99 µs", "errors",
        ],
    );
    for v in r.variants(section) {
        for sys in r.systems(section) {
            let Some(s) = r.find(section, &sys, Some(&v), None) else {
                continue;
            };
            let base = r
                .find(section, reference, Some(&v), None)
                .and_then(|b| rps_vs(s, b));
            let _ = writeln!(
                out,
                "| {v} | {sys} | {} | {:.0} | {} | {:.0} | {:.0} | {} |",
                s.concurrency,
                s.rps,
                pct(base),
                s.p50_us,
                s.p99_us,
                s.errors
            );
        }
    }
}

/// A section of one system whose variants are compared with the first one.
fn against_first(out: &mut String, r: &Results, section: &str, title: &str, what: &str) {
    let variants = r.variants(section);
    let Some(first) = variants.first() else {
        return;
    };
    let base = r.find(section, "switchyard", Some(first), None);
    let vs = format!("vs {what}={first}");
    head(
        out,
        title,
        &[what, "c", "req/s", &vs, "p50 µs", "p99 µs", "errors"],
    );
    for v in &variants {
        let Some(s) = r.find(section, "switchyard", Some(v), None) else {
            continue;
        };
        let _ = writeln!(
            out,
            "| {v} | {} | {:.0} | {} | {:.0} | {:.0} | {} |",
            s.concurrency,
            s.rps,
            pct(base.and_then(|b| rps_vs(s, b))),
            s.p50_us,
            s.p99_us,
            s.errors
        );
    }
}

/// Publishes through a manager sidecar's local API, in memory and durable, next to a bare JetStream
/// publisher on the same nats-server; the ratio to in-memory only between runs of one generator.
fn durable(out: &mut String, r: &Results) {
    if r.section("durable").next().is_none() {
        return;
    }
    head(
        out,
        "Publish: in memory, durable (JetStream), bare JetStream",
        &[
            "publish",
            "generator",
            "c",
            "events/s",
            "vs in-memory",
            "p50 µs",
            "p99 µs",
            "errors",
        ],
    );
    let memory = r.find("durable", "switchyard", Some("memory"), None);
    for sys in r.systems("durable") {
        for v in r.variants("durable") {
            let Some(s) = r.find("durable", &sys, Some(&v), None) else {
                continue;
            };
            let _ = writeln!(
                out,
                "| {sys} {v} | {} | {} | {:.0} | {} | {:.0} | {:.0} | {} |",
                s.generator.as_deref().unwrap_or("-"),
                s.concurrency,
                s.rps,
                pct(memory.and_then(|m| rps_vs(s, m))),
                s.p50_us,
                s.p99_us,
                s.errors
            );
        }
    }
}

/// Fan-out: publishes/s at the publisher, deliveries/s where they landed, and each run's efficiency against
/// its one-subscriber run; then the handler path with and without a stopped observer.
fn fanout(out: &mut String, r: &Results) {
    use crate::fanout::{SECTION, deliveries_per_s};
    if r.section(SECTION).next().is_none() {
        return;
    }
    head(
        out,
        "Fan-out: deliveries counted at the subscribers",
        &[
            "run",
            "generator",
            "c",
            "publishes/s",
            "deliveries/s",
            "vs 1 subscriber",
            "publish p99 µs",
            "lost",
            "errors",
        ],
    );
    for s in r.section(SECTION).filter(|s| deliveries_per_s(s).is_some()) {
        let (sys, v) = (
            s.system.as_deref().unwrap_or("-"),
            s.variant.as_deref().unwrap_or("-"),
        );
        let one = v
            .strip_suffix("-4")
            .and_then(|mode| r.find(SECTION, sys, Some(&format!("{mode}-1")), None))
            .filter(|o| o.generator == s.generator)
            .and_then(deliveries_per_s);
        let _ = writeln!(
            out,
            "| {sys} {v} | {} | {} | {:.0} | {} | {} | {:.0} | {} | {} |",
            s.generator.as_deref().unwrap_or("-"),
            s.concurrency,
            s.rps,
            opt(deliveries_per_s(s), 0),
            pct(one.zip(deliveries_per_s(s)).and_then(|(o, d)| ratio(d, o))),
            s.p99_us,
            opt(s.extra.get("lost").copied(), 0),
            s.errors
        );
    }
    let observed: Vec<&Summary> = r
        .section(SECTION)
        .filter(|s| deliveries_per_s(s).is_none())
        .collect();
    if observed.is_empty() {
        return;
    }
    head(
        out,
        "Handler path (GET /noop) with a stopped observer",
        &[
            "run",
            "generator",
            "c",
            "req/s",
            "p50 µs",
            "p99 µs",
            "errors",
        ],
    );
    for s in observed {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {} |",
            s.variant.as_deref().unwrap_or("-"),
            s.generator.as_deref().unwrap_or("-"),
            s.concurrency,
            s.rps,
            s.p50_us,
            s.p99_us,
            s.errors
        );
    }
}

fn pair(out: &mut String, cost: &PairCost) {
    if cost.added_p50_us.is_none() && cost.sidecars.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n## Sidecar pair cost\n");
    let _ = writeln!(
        out,
        "Added latency over bare hyper at c=1: p50 {} µs, p99 {} µs.\n",
        opt(cost.added_p50_us, 0),
        opt(cost.added_p99_us, 0)
    );
    let _ = writeln!(
        out,
        "| process | pid | CPU s / 1k requests | RSS idle MiB | RSS at c=128 MiB |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    for s in &cost.sidecars {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            s.cmd,
            s.pid,
            opt(s.cpu_s_per_1k, 3),
            opt(s.rss_idle_mb, 1),
            opt(s.rss_c128_mb, 1)
        );
    }
}

fn frames(out: &mut String, r: &Results) {
    let fire = r.find("frames", "switchyard", Some("fire"), None);
    let rtt = r.find("frames", "switchyard", Some("rtt"), None);
    if fire.is_none() && rtt.is_none() && r.lapinbeam.is_none() {
        return;
    }
    let l = r.lapinbeam.clone().unwrap_or_default();
    head(
        out,
        "Inter-sidecar frames (loopback, two processes)",
        &["figure", "Switchyard", "lapinbeam"],
    );
    let lost = fire.and_then(|f| f.extra.get("lost").copied());
    let sent = fire.and_then(|f| f.extra.get("sent").copied());
    let _ = writeln!(
        out,
        "| fire-and-forget delivered msg/s | {} | {} (cross-process, best offered rate) |",
        opt(fire.map(|f| f.rps), 0),
        opt(l.xproc_delivered_per_s, 0)
    );
    let _ = writeln!(
        out,
        "| lost | {} of {} | {} |",
        opt(lost, 0),
        opt(sent, 0),
        opt(l.xproc_lost, 0)
    );
    let _ = writeln!(
        out,
        "| request/ack RTT p50 ms | {} | {} (remote RTT; send+ack {}) |",
        opt(rtt.map(|s| s.p50_us / 1000.0), 3),
        opt(l.rtt_p50_ms, 3),
        opt(l.xproc_ack_p50_ms, 3)
    );
    let _ = writeln!(
        out,
        "| request/ack RTT p99 ms | {} | {} (remote RTT; send+ack {}) |",
        opt(rtt.map(|s| s.p99_us / 1000.0), 3),
        opt(l.rtt_p99_ms, 3),
        opt(l.xproc_ack_p99_ms, 3)
    );
    let _ = writeln!(
        out,
        "| round trips/s (one in flight) | {} | - |",
        opt(rtt.map(|s| s.rps), 0)
    );
}

fn plateaus(out: &mut String, r: &Results) {
    let names: Vec<&String> = r
        .samples
        .keys()
        .filter(|k| k.starts_with("plateau_"))
        .collect();
    if names.is_empty() {
        return;
    }
    head(
        out,
        "Memory plateau (RSS each second)",
        &[
            "load",
            "process",
            "pid",
            "samples",
            "first MiB",
            "last MiB",
            "max MiB",
            "late growth MiB",
            "levelled off",
        ],
    );
    for name in names {
        let series = &r.samples[name];
        let mut pids: Vec<(u32, String)> = Vec::new();
        for s in series {
            if !pids.iter().any(|(p, _)| *p == s.pid) {
                pids.push((s.pid, s.cmd.clone()));
            }
        }
        for (pid, cmd) in pids {
            let rss: Vec<f64> = series
                .iter()
                .filter(|s| s.pid == pid)
                .map(|s| s.rss_mb)
                .collect();
            let Some(p) = plateau::judge(&rss) else {
                continue;
            };
            let levelled = match p.levelled {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "too short",
            };
            let _ = writeln!(
                out,
                "| {} | {cmd} | {pid} | {} | {:.1} | {:.1} | {:.1} | {:+.1} | {levelled} |",
                name.trim_start_matches("plateau_"),
                p.samples,
                p.first_mb,
                p.last_mb,
                p.max_mb,
                p.late_growth_mb
            );
        }
    }
}

fn core(out: &mut String, r: &Results) {
    if r.section("core").next().is_none() {
        return;
    }
    head(
        out,
        "Core routing in process",
        &["events in flight", "events/s", "errors"],
    );
    for s in r.section("core") {
        let _ = writeln!(out, "| {} | {:.0} | {} |", s.concurrency, s.rps, s.errors);
    }
}

/// Lines of a profile shown in the summary; the whole profile stays in `profiles/`.
const PROFILE_LINES: usize = 25;

fn profiles(out: &mut String, r: &Results) {
    for (name, text) in &r.profiles {
        let _ = writeln!(
            out,
            "\n## Where the CPU goes: {name} (perf, self time, top {PROFILE_LINES})\n"
        );
        let _ = writeln!(out, "```");
        for line in text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .take(PROFILE_LINES)
        {
            let _ = writeln!(out, "{}", line.trim_end());
        }
        let _ = writeln!(out, "```");
    }
}

/// Renders the summary.
pub fn render(r: &Results, checks: &[Check], cost: &PairCost) -> String {
    let mut out = String::from("# Benchmark run\n\n");
    if let Some(m) = r.meta.as_object() {
        let line: Vec<String> = m
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(s) => format!("{k}: {s}"),
                None => format!("{k}: {v}"),
            })
            .collect();
        let _ = writeln!(out, "{}\n", line.join(" · "));
    }
    targets(&mut out, checks);
    generator(&mut out, r);
    noop(&mut out, r);
    generators(&mut out, r, "noop");
    noop_procs(&mut out, r);
    side_by_side(&mut out, r);
    mtls(&mut out, r);
    compared(
        &mut out,
        r,
        "protocols",
        "WebSocket vs REST vs gRPC (Switchyard next to raw servers)",
        "raw",
        "msg/s",
    );
    compared(
        &mut out,
        r,
        "payload",
        "Payload size (response bytes)",
        "bare",
        "req/s",
    );
    against_first(
        &mut out,
        r,
        "scaling",
        "Manager scaling (burn, ~2 ms CPU per event)",
        "replicas",
    );
    against_first(
        &mut out,
        r,
        "middleware",
        "Middleware overhead (pass-through layers)",
        "layers",
    );
    durable(&mut out, r);
    fanout(&mut out, r);
    pair(&mut out, cost);
    frames(&mut out, r);
    plateaus(&mut out, r);
    core(&mut out, r);
    crate::reaction::table(&mut out, r.reaction.as_ref());
    rounds(&mut out, r);
    profiles(&mut out, r);
    if !r.missing.is_empty() {
        let _ = writeln!(out, "\n## Not measured in this run\n");
        for m in &r.missing {
            let _ = writeln!(out, "- {m}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::pair_cost;
    use crate::results::run;
    use crate::targets::evaluate;

    #[test]
    fn tables_have_a_row_per_run_with_ratios_and_the_verdicts() {
        let r = Results {
            runs: vec![
                run("noop", "switchyard", None, 32, 25_000.0),
                run("noop", "bare", None, 32, 100_000.0),
                run("payload", "bare", Some("1MB"), 8, 1_000.0),
                run("payload", "switchyard", Some("1MB"), 8, 400.0),
                run("scaling", "switchyard", Some("1"), 32, 400.0),
                run("scaling", "switchyard", Some("2"), 32, 700.0),
            ],
            missing: vec!["noop edri: did not start".into()],
            profiles: [(
                "noop_c32".to_owned(),
                "    12.50%  4242:switchyard-side  [.] tokio::runtime::park\n".to_owned(),
            )]
            .into(),
            ..Results::default()
        };
        let cost = pair_cost(&r);
        let text = render(&r, &evaluate(&r, &cost), &cost);
        let bare = text.find("| bare | 32").expect("bare row");
        let sy = text.find("| switchyard | 32").expect("switchyard row");
        assert!(bare < sy, "bare hyper comes first");
        assert!(text.contains("| 25.0 % |"), "{text}");
        assert!(
            text.contains("| 1MB | switchyard | 8 | 400 | 40.0 % |"),
            "{text}"
        );
        assert!(text.contains("| 2 | 32 | 700 | 175.0 % |"), "{text}");
        assert!(
            text.contains("| /noop c=32: Switchyard / bare hyper req/s | 0.250 | >= 0.35 | FAIL |")
        );
        assert!(
            text.contains("| /noop c=32: Switchyard / EDRI req/s | - | >= 30 | NOT MEASURED |")
        );
        assert!(text.contains("- noop edri: did not start"));
        assert!(!text.contains("Memory plateau"), "no samples, no table");
        assert!(text.contains("## Where the CPU goes: noop_c32"));
        assert!(text.contains("12.50%  4242:switchyard-side  [.] tokio::runtime::park"));
        assert!(!text.contains("Side by side"), "no Dapr runs, no table");
    }

    #[test]
    fn dapr_side_by_side_and_rounds_with_same_round_ratios() {
        let at = |sys: &str, c: usize, rps: f64, p50: f64, round: Option<u32>| {
            let mut s = run("noop", sys, None, c, rps);
            s.p50_us = p50;
            s.round = round;
            s.generator = Some("wrk 4.1.0 -t1".into());
            s
        };
        let measured = vec![
            at("bare", 1, 20_000.0, 40.0, Some(1)),
            at("switchyard", 1, 5_000.0, 160.0, Some(1)),
            at("dapr", 1, 1_000.0, 700.0, Some(1)),
            at("bare", 32, 100_000.0, 300.0, Some(1)),
            at("switchyard", 32, 30_000.0, 900.0, Some(1)),
            at("dapr", 32, 6_000.0, 5000.0, Some(1)),
            at("bare", 32, 80_000.0, 300.0, Some(2)),
            at("switchyard", 32, 40_000.0, 900.0, Some(2)),
            at("dapr", 32, 8_000.0, 5000.0, Some(2)),
        ];
        let r = Results {
            runs: crate::rounds::fold(&measured),
            rounds: measured,
            ..Results::default()
        };
        let cost = pair_cost(&r);
        let text = render(&r, &evaluate(&r, &cost), &cost);
        assert!(
            text.contains("| dapr | 700 | 660 | 17.50 | 7000 | 7.8 % | 5.00 |"),
            "{text}"
        );
        assert!(
            text.contains("| switchyard | 160 | 120 | 4.00 | 35000 | 38.9 % | 1.00 |"),
            "{text}"
        );
        assert!(
            text.contains("| noop | switchyard | - | 32 | 2 | 40000 | 50.0 % |"),
            "{text}"
        );
        assert!(text.contains("Load from: wrk 4.1.0 -t1."), "{text}");
        assert!(text.contains("median of 2 interleaved rounds"), "{text}");
    }

    #[test]
    fn mtls_next_to_plaintext_with_the_handshakes_around_the_load() {
        let at = |sys: &str, c: usize, rps: f64, p50: f64| {
            let mut s = run("noop", sys, None, c, rps);
            s.p50_us = p50;
            s
        };
        let reading = |client_ok: u32| {
            crate::mesh::parse(&format!(
                "# sidecar router\nswitchyard_mesh_handshakes_total{{side=\"client\",result=\"ok\"}} {client_ok}\n\
                 # sidecar manager\nswitchyard_mesh_handshakes_total{{side=\"server\",result=\"ok\"}} 1\n"
            ))
        };
        let mut r = Results {
            runs: vec![
                at("bare", 1, 20_000.0, 40.0),
                at("plaintext", 1, 6_000.0, 150.0),
                at("switchyard", 1, 5_800.0, 162.0),
                at("bare", 32, 100_000.0, 300.0),
                at("plaintext", 32, 30_000.0, 900.0),
                at("switchyard", 32, 28_500.0, 950.0),
            ],
            ..Results::default()
        };
        r.handshakes
            .insert("noop_switchyard_before".into(), reading(1));
        r.handshakes
            .insert("noop_switchyard_after".into(), reading(1));
        r.handshakes.insert(
            "noop_plaintext_after".into(),
            crate::mesh::parse("# sidecar router\n# sidecar manager\n"),
        );
        let cost = pair_cost(&r);
        let text = render(&r, &evaluate(&r, &cost), &cost);
        let plain = text.find("| plaintext | 32").expect("plaintext row");
        let tls = text.find("| switchyard | 32").expect("switchyard row");
        assert!(
            plain < tls,
            "plaintext comes before mTLS in the /noop table"
        );
        assert!(
            text.contains("| Switchyard, mTLS | 162 | 12 | 28500 | 95.0 % | 28.5 % |"),
            "{text}"
        );
        assert!(
            text.contains("| Switchyard, plaintext | 150 | 0 | 30000 | 100.0 % | 30.0 % |"),
            "{text}"
        );
        assert!(
            text.contains(
                "| /noop c=32: Switchyard mTLS / plaintext req/s | 0.950 | >= 0.9 | PASS |"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "2 sidecars: 2 before its `/noop` runs (client ok 1, server ok 1), 2 after"
            ),
            "{text}"
        );
        assert!(
            text.contains("(34300 measured requests, warm-ups not counted) added 0 (0 failed)"),
            "{text}"
        );
        assert!(
            text.contains("plaintext system's 2 sidecars after its runs: 0 handshakes (none)"),
            "{text}"
        );
    }
}
