//! The targets of issues 5, 12, 13, 14 and 36 that one run checks, as pure functions of the run's results: one line
//! each, pass, fail, or not measured (a peer or step that did not run, or two runs that different load
//! generators drove, which no ratio may compare).

pub use crate::check::Check;
use crate::cost::PairCost;
use crate::fanout;
use crate::mesh::{self, Added};
use crate::plateau;
use crate::results::{Results, ratio, rps_vs};
use crate::streams::StreamBars;

fn at_least(name: &str, value: Option<f64>, min: f64) -> Check {
    Check {
        name: name.to_owned(),
        value,
        target: format!(">= {min}"),
        pass: value.map(|v| v >= min),
    }
}

fn at_most(name: &str, value: Option<f64>, max: f64) -> Check {
    at_most_said(name, value, max, &format!("<= {max}"))
}

/// [`at_most`] with the bound written as given (`<= 1/3` rather than `<= 0.3333333333333333`).
fn at_most_said(name: &str, value: Option<f64>, max: f64, said: &str) -> Check {
    Check {
        name: name.to_owned(),
        value,
        target: said.to_owned(),
        pass: value.map(|v| v <= max),
    }
}

/// req/s of `(section, system, variant)` over another's, at concurrency `c` (any when `None`); `None` also when
/// different generators drove the two.
pub fn rps_ratio(
    r: &Results,
    section: &str,
    a: (&str, Option<&str>),
    b: (&str, Option<&str>),
    c: Option<usize>,
) -> Option<f64> {
    let x = r.find(section, a.0, a.1, c)?;
    let y = r.find(section, b.0, b.1, c)?;
    rps_vs(x, y)
}

/// p50 at c=1 of `system` in `/noop` and of bare hyper, when one generator drove both.
fn p50s_at_1(r: &Results, system: &str) -> Option<(f64, f64)> {
    let s = r.find("noop", system, None, Some(1))?;
    let b = r.find("noop", "bare", None, Some(1))?;
    (s.generator == b.generator).then_some((s.p50_us, b.p50_us))
}

/// Switchyard's added p50 at c=1 (over bare hyper) as a share of Dapr's, when Dapr adds something.
fn added_p50_vs_dapr(r: &Results) -> Option<f64> {
    let (sy, bare) = p50s_at_1(r, "switchyard")?;
    let (dapr, _) = p50s_at_1(r, "dapr")?;
    let dapr_added = dapr - bare;
    (dapr_added > 0.0).then(|| (sy - bare) / dapr_added)
}

/// The mTLS system's (`switchyard`) p50 at c=1 minus the plaintext one's (`switchyard up --plaintext`),
/// when one generator drove both: what mesh mTLS adds to a request's latency.
pub fn mtls_added_p50(r: &Results) -> Option<f64> {
    let tls = r.find("noop", "switchyard", None, Some(1))?;
    let plain = r.find("noop", "plaintext", None, Some(1))?;
    (tls.generator == plain.generator).then_some(tls.p50_us - plain.p50_us)
}

/// The mesh handshakes the mTLS system's `/noop` runs added, from the counters read before and after them.
pub fn mtls_load_handshakes(r: &Results) -> Option<Added> {
    mesh::added(
        r.handshakes.get("noop_switchyard_before")?,
        r.handshakes.get("noop_switchyard_after")?,
    )
}

/// Highest of the present values.
fn max_of(xs: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    xs.flatten().reduce(f64::max)
}

/// Whether every sidecar's RSS levelled off in the series `name`: 1 when all did, 0 when one did not.
fn levelled(r: &Results, name: &str) -> Option<f64> {
    let series = r.samples.get(name)?;
    let mut pids: Vec<u32> = series
        .iter()
        .filter(|s| s.cmd.starts_with("switchyard-sidecar"))
        .map(|s| s.pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    if pids.is_empty() {
        return None;
    }
    let mut all = true;
    for pid in pids {
        let rss: Vec<f64> = series
            .iter()
            .filter(|s| s.pid == pid)
            .map(|s| s.rss_mb)
            .collect();
        match plateau::judge(&rss).and_then(|p| p.levelled) {
            Some(true) => {}
            Some(false) => all = false,
            None => return None,
        }
    }
    Some(if all { 1.0 } else { 0.0 })
}

/// Every target line of issue 5 item 5, the memory plateau of its item 3, the `/noop` bars of issue 14
/// (against bare hyper and Dapr's service invocation), the relay anchor's of issue 41 (a pair of
/// HAProxy relays with mTLS between them, at `/noop` c=32 and 1 MB answers), and the mTLS cost of issue 12 (against the same
/// path in plaintext). The streaming bars come from the section's printed lines: [`streaming`].
pub fn evaluate(r: &Results, cost: &PairCost) -> Vec<Check> {
    let handshakes = mtls_load_handshakes(r);
    let fire = r.find("frames", "switchyard", Some("fire"), None);
    let frames_rate = fire.map(|f| f.rps);
    let frames_lost = fire.and_then(|f| f.extra.get("lost").copied());
    let core = max_of(r.section("core").map(|s| Some(s.rps)));
    let durable = r.find("durable", "switchyard", Some("durable"), Some(32));
    vec![
        at_least(
            "/noop c=32: Switchyard / bare hyper req/s",
            rps_ratio(r, "noop", ("switchyard", None), ("bare", None), Some(32)),
            0.35,
        ),
        at_least(
            "/noop c=32: Switchyard, app on a Unix socket / bare hyper req/s",
            rps_ratio(r, "noop", ("unix", None), ("bare", None), Some(32)),
            0.35,
        ),
        at_least(
            "/noop c=32: Switchyard / HAProxy mTLS relay pair req/s",
            rps_ratio(r, "noop", ("switchyard", None), ("haproxy", None), Some(32)),
            1.5,
        ),
        at_least(
            "/noop c=32: Switchyard / Dapr service invocation req/s",
            rps_ratio(r, "noop", ("switchyard", None), ("dapr", None), Some(32)),
            3.0,
        ),
        at_most(
            "/noop c=1: Switchyard p50 / bare hyper p50",
            p50s_at_1(r, "switchyard").and_then(|(s, b)| ratio(s, b)),
            4.0,
        ),
        at_most(
            "/noop c=1: Switchyard, app on a Unix socket, p50 / bare hyper p50",
            p50s_at_1(r, "unix").and_then(|(s, b)| ratio(s, b)),
            4.0,
        ),
        at_most_said(
            "/noop c=1: Switchyard added p50 / Dapr added p50 (over bare hyper)",
            added_p50_vs_dapr(r),
            1.0 / 3.0,
            "<= 1/3",
        ),
        at_least(
            "/noop c=32: Switchyard mTLS / plaintext req/s",
            rps_ratio(
                r,
                "noop",
                ("switchyard", None),
                ("plaintext", None),
                Some(32),
            ),
            0.9,
        ),
        at_most(
            "/noop c=1: mTLS added p50 over plaintext (µs)",
            mtls_added_p50(r),
            20.0,
        ),
        Check {
            name: "mTLS: frame handshakes the /noop load added (one per pod pair, at start)"
                .to_owned(),
            value: handshakes.as_ref().map(|h| h.added),
            target: "= 0 (and > 0 before it: mTLS on)".to_owned(),
            pass: handshakes.map(|h| h.added == 0.0 && h.before_ok > 0.0),
        },
        at_least(
            "/noop c=32: Switchyard / EDRI req/s",
            rps_ratio(r, "noop", ("switchyard", None), ("edri", None), Some(32)),
            30.0,
        ),
        at_most(
            "/noop c=1: added p50 over bare hyper (µs)",
            cost.added_p50_us,
            150.0,
        ),
        at_least(
            "WebSocket: Switchyard / raw tungstenite echo msg/s",
            rps_ratio(
                r,
                "protocols",
                ("switchyard", Some("ws")),
                ("raw", Some("ws")),
                None,
            ),
            0.5,
        ),
        at_least(
            "gRPC unary: Switchyard / raw tonic calls/s",
            rps_ratio(
                r,
                "protocols",
                ("switchyard", Some("grpc")),
                ("raw", Some("grpc")),
                None,
            ),
            0.5,
        ),
        at_least(
            "gRPC streaming: Switchyard / raw tonic msg/s",
            rps_ratio(
                r,
                "protocols",
                ("switchyard", Some("grpc-stream")),
                ("raw", Some("grpc-stream")),
                None,
            ),
            0.5,
        ),
        at_least(
            "1 MB responses: Switchyard / bare hyper req/s",
            rps_ratio(
                r,
                "payload",
                ("switchyard", Some("1MB")),
                ("bare", Some("1MB")),
                None,
            ),
            0.5,
        ),
        at_least(
            "1 MB responses: Switchyard / HAProxy mTLS relay pair req/s",
            rps_ratio(
                r,
                "payload",
                ("switchyard", Some("1MB")),
                ("haproxy", Some("1MB")),
                None,
            ),
            1.2,
        ),
        at_most(
            "Sidecar RSS idle, largest sidecar (MiB)",
            max_of(cost.sidecars.iter().map(|s| s.rss_idle_mb)),
            15.0,
        ),
        at_most(
            "Sidecar RSS at c=128, largest sidecar (MiB)",
            max_of(cost.sidecars.iter().map(|s| s.rss_c128_mb)),
            40.0,
        ),
        Check {
            name: "Inter-sidecar frames: fire-and-forget msg/s with zero loss".to_owned(),
            value: frames_rate,
            target: ">= 300000, lost = 0".to_owned(),
            pass: frames_rate
                .zip(frames_lost)
                .map(|(rate, lost)| rate >= 300_000.0 && lost == 0.0),
        },
        at_least("Core routing events/s (in process)", core, 1_000_000.0),
        at_least(
            "Durable publish c=32 (local API, 202 after the PubAck): events/s",
            durable.map(|d| d.rps),
            20_000.0,
        ),
        at_most(
            "Durable publish c=32: p99 (ms)",
            durable.map(|d| d.p99_us / 1000.0),
            5.0,
        ),
        // Issue 37: JetStream behind the mesh's identity (TLS, a NATS user per Manager) against the
        // same publish to a server without them, in the same rounds.
        at_least(
            "Durable publish c=32: with NATS TLS and users / without",
            rps_ratio(
                r,
                "durable",
                ("switchyard", Some("durable")),
                ("switchyard", Some("durable-plaintext")),
                Some(32),
            ),
            0.9,
        ),
        // Issue 36: fan-out, deliveries counted where they landed (the subscribers' sidecars).
        at_least(
            "Fan-out c=32, direct: deliveries/s to 4 subscribers / to 1",
            fanout::efficiency(r, "direct"),
            0.8,
        ),
        at_least(
            "Fan-out c=32, durable: deliveries/s to 4 subscribers / to 1",
            fanout::efficiency(r, "durable"),
            0.6,
        ),
        at_least(
            "Fan-out to 4 subscribers c=32: Switchyard (direct) / EDRI deliveries/s",
            fanout::vs_edri(r),
            30.0,
        ),
        at_most(
            "GET /noop c=32 with a stopped requests/responses observer: p99 / p99 without observers",
            fanout::stopped_observer_p99(r),
            1.1,
        ),
        at_least(
            "Memory levels off under sustained load (1 = every sidecar)",
            levelled(r, "plateau_sustained"),
            1.0,
        ),
        at_least(
            "Memory levels off under connection churn (1 = every sidecar)",
            levelled(r, "plateau_churn"),
            1.0,
        ),
    ]
}

/// Issue 14's streaming bars, from what the `streams` section's tests printed.
pub fn streaming(s: &StreamBars) -> Vec<Check> {
    vec![
        at_most(
            "SSE: first of 10,000 events from the app, at the client (ms)",
            s.first_sse_ms,
            5.0,
        ),
        at_most(
            "1 GiB download: largest sidecar RSS throughout (MiB)",
            s.download_rss_mib,
            32.0,
        ),
        at_most(
            "1 GiB upload: largest sidecar RSS throughout (MiB)",
            s.upload_rss_mib,
            32.0,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost;
    use crate::procs::Sample;
    use crate::results::run;

    fn named<'a>(checks: &'a [Check], prefix: &str) -> &'a Check {
        checks
            .iter()
            .find(|c| c.name.starts_with(prefix))
            .unwrap_or_else(|| panic!("no check {prefix}"))
    }

    #[test]
    fn checks_pass_and_fail_on_the_bounds() {
        let mut r = Results::default();
        let mut sy1 = run("noop", "switchyard", None, 1, 5_000.0);
        sy1.p50_us = 300.0;
        r.runs = vec![
            run("noop", "bare", None, 32, 100_000.0),
            run("noop", "switchyard", None, 32, 40_000.0),
            run("noop", "unix", None, 32, 30_000.0),
            run("noop", "edri", None, 32, 1_000.0),
            run("noop", "bare", None, 1, 20_000.0),
            sy1,
            run("protocols", "switchyard", Some("ws"), 32, 30_000.0),
            run("protocols", "raw", Some("ws"), 32, 100_000.0),
            run("payload", "switchyard", Some("1MB"), 8, 600.0),
            run("payload", "bare", Some("1MB"), 8, 1_000.0),
            run("payload", "haproxy", Some("1MB"), 8, 550.0),
            run("noop", "haproxy", None, 32, 30_000.0),
            run("core", "switchyard", Some("256"), 256, 1_500_000.0),
        ];
        let mut fire = run("frames", "switchyard", Some("fire"), 1, 400_000.0);
        fire.extra.insert("lost".into(), 0.0);
        r.runs.push(fire);
        let climb: Vec<Sample> = (0..12)
            .map(|i| Sample {
                t_s: f64::from(i),
                pid: 1,
                cmd: "switchyard-sidecar router".into(),
                rss_mb: 10.0 + 3.0 * f64::from(i),
            })
            .collect();
        r.samples.insert("plateau_churn".into(), climb);
        let mut dapr1 = run("noop", "dapr", None, 1, 1_000.0);
        dapr1.p50_us = 900.0;
        r.runs.push(dapr1);
        r.runs.push(run("noop", "dapr", None, 32, 10_000.0));
        let c = evaluate(&r, &cost::pair_cost(&r));
        assert_eq!(named(&c, "/noop c=32: Switchyard / bare").pass, Some(true));
        let relay = named(&c, "/noop c=32: Switchyard / HAProxy");
        assert_eq!(relay.value.map(|v| (v * 100.0).round()), Some(133.0));
        assert_eq!(relay.pass, Some(false), "1.33 < 1.5");
        let large = named(&c, "1 MB responses: Switchyard / HAProxy");
        assert_eq!(large.value.map(|v| (v * 100.0).round()), Some(109.0));
        assert_eq!(large.pass, Some(false), "1.09 < 1.2");
        let unix = named(&c, "/noop c=32: Switchyard, app on a Unix socket / bare");
        assert_eq!((unix.value, unix.pass), (Some(0.3), Some(false)));
        assert_eq!(
            named(&c, "/noop c=1: Switchyard, app on a Unix socket, p50").pass,
            None,
            "no c=1 run of it"
        );
        assert_eq!(
            named(&c, "/noop c=32: Switchyard / Dapr").value,
            Some(4.0),
            "40k against 10k"
        );
        assert_eq!(
            named(&c, "/noop c=1: Switchyard p50 / bare").pass,
            Some(true),
            "300 µs is 3x 100 µs"
        );
        let added = named(&c, "/noop c=1: Switchyard added p50 / Dapr");
        assert_eq!(added.value, Some(0.25), "200 µs added against Dapr's 800");
        assert_eq!((added.pass, added.target.as_str()), (Some(true), "<= 1/3"));
        assert_eq!(named(&c, "/noop c=32: Switchyard / EDRI").pass, Some(true));
        assert_eq!(
            named(&c, "/noop c=1: added p50").pass,
            Some(false),
            "200 µs added is over 150"
        );
        assert_eq!(named(&c, "WebSocket").pass, Some(false), "30 % of raw");
        assert_eq!(named(&c, "gRPC unary").pass, None, "not measured");
        assert_eq!(named(&c, "1 MB").pass, Some(true));
        assert_eq!(named(&c, "Inter-sidecar").pass, Some(true));
        assert_eq!(named(&c, "Core").pass, Some(true));
        assert_eq!(
            named(&c, "Memory levels off under connection").pass,
            Some(false)
        );
        assert_eq!(named(&c, "Memory levels off under sustained").pass, None);
    }

    /// A run with the mTLS and the plaintext system at c=1 and c=32, and handshake readings around the load.
    fn mtls_run(rps_32: (f64, f64), p50_1: (f64, f64), handshakes: (&str, &str)) -> Results {
        let at = |sys: &str, c: usize, rps: f64, p50: f64| {
            let mut s = run("noop", sys, None, c, rps);
            s.p50_us = p50;
            s
        };
        let mut r = Results {
            runs: vec![
                at("switchyard", 1, 8_000.0, p50_1.0),
                at("plaintext", 1, 9_000.0, p50_1.1),
                at("switchyard", 32, rps_32.0, 900.0),
                at("plaintext", 32, rps_32.1, 800.0),
            ],
            ..Results::default()
        };
        r.handshakes
            .insert("noop_switchyard_before".into(), mesh::parse(handshakes.0));
        r.handshakes
            .insert("noop_switchyard_after".into(), mesh::parse(handshakes.1));
        r
    }

    const AT_START: &str = "# sidecar router\nswitchyard_mesh_handshakes_total{side=\"client\",result=\"ok\"} 2\n\
                            # sidecar manager\nswitchyard_mesh_handshakes_total{side=\"server\",result=\"ok\"} 2\n";

    #[test]
    fn mtls_costs_are_taken_against_plaintext() {
        let r = mtls_run((9_200.0, 10_000.0), (115.0, 100.0), (AT_START, AT_START));
        let c = evaluate(&r, &cost::pair_cost(&r));
        let ratio = named(&c, "/noop c=32: Switchyard mTLS / plaintext");
        assert_eq!((ratio.value, ratio.pass), (Some(0.92), Some(true)));
        let added = named(&c, "/noop c=1: mTLS added p50");
        assert_eq!((added.value, added.pass), (Some(15.0), Some(true)));
        let hs = named(&c, "mTLS: frame handshakes");
        assert_eq!((hs.value, hs.pass), (Some(0.0), Some(true)));

        let r = mtls_run((8_500.0, 10_000.0), (130.0, 100.0), (AT_START, AT_START));
        let c = evaluate(&r, &cost::pair_cost(&r));
        assert_eq!(
            named(&c, "/noop c=32: Switchyard mTLS").pass,
            Some(false),
            "85 %"
        );
        assert_eq!(
            named(&c, "/noop c=1: mTLS added p50").pass,
            Some(false),
            "30 µs added"
        );
    }

    #[test]
    fn handshakes_during_the_load_or_none_at_all_fail() {
        // The router made 32 more connections during the load (one per request would be thousands).
        let later = AT_START.replace("} 2\n#", "} 34\n#");
        let r = mtls_run((1.0, 1.0), (1.0, 1.0), (AT_START, &later));
        let c = evaluate(&r, &cost::pair_cost(&r));
        let hs = named(&c, "mTLS: frame handshakes");
        assert_eq!((hs.value, hs.pass), (Some(32.0), Some(false)));

        let none = "# sidecar router\n# sidecar manager\n";
        let r = mtls_run((1.0, 1.0), (1.0, 1.0), (none, none));
        let c = evaluate(&r, &cost::pair_cost(&r));
        let hs = named(&c, "mTLS: frame handshakes");
        assert_eq!(
            (hs.value, hs.pass),
            (Some(0.0), Some(false)),
            "no handshake at all: the mesh was not on mTLS"
        );
    }

    #[test]
    fn mtls_latency_is_not_compared_across_generators() {
        let mut r = mtls_run((1.0, 1.0), (115.0, 100.0), (AT_START, AT_START));
        r.runs[0].generator = Some("wrk 4.1.0 -t1".into());
        let c = evaluate(&r, &cost::pair_cost(&r));
        assert_eq!(named(&c, "/noop c=1: mTLS added p50").pass, None);
    }

    #[test]
    fn lost_frames_fail_even_when_fast() {
        let mut r = Results::default();
        let mut fire = run("frames", "switchyard", Some("fire"), 1, 900_000.0);
        fire.extra.insert("lost".into(), 3.0);
        r.runs.push(fire);
        let c = evaluate(&r, &cost::pair_cost(&r));
        assert_eq!(named(&c, "Inter-sidecar").pass, Some(false));
    }

    #[test]
    fn runs_of_different_generators_are_not_compared() {
        let mut r = Results::default();
        let mut sy = run("noop", "switchyard", None, 32, 40_000.0);
        sy.generator = Some("wrk 4.1.0 -t1".into());
        let mut bare = run("noop", "bare", None, 32, 100_000.0);
        bare.generator = Some("switchyard-load -t1".into());
        r.runs = vec![sy, bare];
        let c = evaluate(&r, &cost::pair_cost(&r));
        assert_eq!(named(&c, "/noop c=32: Switchyard / bare").pass, None);
    }

    #[test]
    fn the_durable_publish_bars_read_its_c32_run() {
        let mut ok = run("durable", "switchyard", Some("durable"), 32, 25_000.0);
        ok.p99_us = 4_000.0;
        let mut slow = run("durable", "switchyard", Some("durable"), 32, 25_000.0);
        slow.p99_us = 7_000.0;
        for (r, rate, p99) in [
            (ok, Some(true), Some(true)),
            (slow, Some(true), Some(false)),
        ] {
            let res = Results {
                runs: vec![r],
                ..Results::default()
            };
            let checks = evaluate(&res, &cost::PairCost::default());
            assert_eq!(named(&checks, "Durable publish c=32 (local").pass, rate);
            assert_eq!(named(&checks, "Durable publish c=32: p99").pass, p99);
        }
        let none = evaluate(&Results::default(), &cost::PairCost::default());
        assert_eq!(named(&none, "Durable publish c=32: p99").pass, None);
    }

    #[test]
    fn missing_runs_are_reported_as_not_measured() {
        let c = evaluate(&Results::default(), &PairCost::default());
        assert!(c.iter().all(|c| c.pass.is_none() && c.value.is_none()));
    }

    #[test]
    fn the_streaming_bars_hold_on_their_bounds_and_are_not_measured_without_lines() {
        let at = |sse, mib| StreamBars {
            first_sse_ms: Some(sse),
            download_rss_mib: Some(mib),
            upload_rss_mib: Some(mib),
        };
        assert!(
            streaming(&at(5.0, 32.0))
                .iter()
                .all(|c| c.pass == Some(true))
        );
        let over = streaming(&at(5.1, 32.5));
        assert!(over.iter().all(|c| c.pass == Some(false)));
        assert!(
            streaming(&StreamBars::default())
                .iter()
                .all(|c| c.pass.is_none() && c.value.is_none())
        );
    }
}
