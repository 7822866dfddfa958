//! The sidecar pair's cost next to bare hyper: added latency at c=1, CPU seconds per 1k requests and RSS
//! idle and at c=128 per sidecar process. Pure, from what the run recorded.

use crate::procs::Usage;
use crate::results::Results;
use serde::{Deserialize, Serialize};

/// One sidecar process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sidecar {
    /// Process id in the run.
    pub pid: u32,
    /// `switchyard-sidecar router` or `switchyard-sidecar manager`.
    pub cmd: String,
    /// CPU seconds per 1000 requests of the dedicated CPU run (`pair_before` .. `pair_after`).
    pub cpu_s_per_1k: Option<f64>,
    /// RSS right after start, before any load, MiB.
    pub rss_idle_mb: Option<f64>,
    /// Highest RSS sampled during the `/noop` c=128 run, MiB.
    pub rss_c128_mb: Option<f64>,
}

/// The pair's cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PairCost {
    /// Switchyard's p50 minus bare hyper's at c=1, µs.
    pub added_p50_us: Option<f64>,
    /// Same for p99.
    pub added_p99_us: Option<f64>,
    /// Per sidecar process.
    pub sidecars: Vec<Sidecar>,
}

fn sidecars(list: Option<&Vec<Usage>>) -> Vec<&Usage> {
    list.map(|l| l.iter().filter(|u| u.is_sidecar()).collect())
        .unwrap_or_default()
}

/// Computes the pair's cost from the `noop` and `pair` sections.
pub fn pair_cost(r: &Results) -> PairCost {
    let sy = r.find("noop", "switchyard", None, Some(1));
    let bare = r.find("noop", "bare", None, Some(1));
    let (added_p50_us, added_p99_us) = match (sy, bare) {
        // Only latencies one generator measured are subtracted.
        (Some(s), Some(b)) if s.generator == b.generator => {
            (Some(s.p50_us - b.p50_us), Some(s.p99_us - b.p99_us))
        }
        _ => (None, None),
    };
    let requests = r
        .find("pair", "switchyard", Some("cpu"), None)
        .map(|s| s.requests)
        .filter(|n| *n > 0);
    let before = sidecars(r.procs.get("pair_before"));
    let after = sidecars(r.procs.get("pair_after"));
    let idle = sidecars(r.procs.get("noop_switchyard_idle"));
    let c128 = r.samples.get("pair_c128");
    // Every sidecar seen anywhere, by pid (the CPU run and the /noop runs use one `switchyard up`).
    let mut all: Vec<(u32, String)> = Vec::new();
    for u in idle.iter().chain(after.iter()) {
        if !all.iter().any(|(p, _)| *p == u.pid) {
            all.push((u.pid, u.cmd.clone()));
        }
    }
    let sidecars = all
        .into_iter()
        .map(|(pid, cmd)| {
            let cpu = |list: &[&Usage]| list.iter().find(|u| u.pid == pid).map(|u| u.cpu_s);
            let cpu_s_per_1k = match (cpu(&before), cpu(&after), requests) {
                (Some(b), Some(a), Some(n)) => Some((a - b) * 1000.0 / n as f64),
                _ => None,
            };
            let rss_c128_mb = c128.and_then(|s| {
                s.iter()
                    .filter(|x| x.pid == pid)
                    .map(|x| x.rss_mb)
                    .reduce(f64::max)
            });
            Sidecar {
                pid,
                cmd,
                cpu_s_per_1k,
                rss_idle_mb: idle.iter().find(|u| u.pid == pid).map(|u| u.rss_mb),
                rss_c128_mb,
            }
        })
        .collect();
    PairCost {
        added_p50_us,
        added_p99_us,
        sidecars,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procs::Sample;
    use crate::results::run;

    fn usage(pid: u32, cmd: &str, cpu_s: f64, rss_mb: f64) -> Usage {
        Usage {
            pid,
            name: "x".into(),
            cpu_s,
            peak_rss_mb: rss_mb,
            rss_mb,
            cmd: cmd.into(),
        }
    }

    #[test]
    fn adds_latency_cpu_and_memory_per_sidecar() {
        let mut r = Results::default();
        let mut sy = run("noop", "switchyard", None, 1, 1.0);
        sy.p50_us = 240.0;
        sy.p99_us = 500.0;
        r.runs = vec![run("noop", "bare", None, 1, 1.0), sy];
        let mut cpu = run("pair", "switchyard", Some("cpu"), 32, 1.0);
        cpu.requests = 20_000;
        r.runs.push(cpu);
        let router = "switchyard-sidecar router";
        r.procs.insert(
            "noop_switchyard_idle".into(),
            vec![
                usage(7, router, 0.1, 9.0),
                usage(8, "switchyard-example-app", 0.0, 3.0),
            ],
        );
        r.procs
            .insert("pair_before".into(), vec![usage(7, router, 1.0, 12.0)]);
        r.procs
            .insert("pair_after".into(), vec![usage(7, router, 3.0, 12.0)]);
        r.samples.insert(
            "pair_c128".into(),
            vec![
                Sample {
                    t_s: 0.0,
                    pid: 7,
                    cmd: router.into(),
                    rss_mb: 20.0,
                },
                Sample {
                    t_s: 1.0,
                    pid: 7,
                    cmd: router.into(),
                    rss_mb: 22.0,
                },
            ],
        );
        let c = pair_cost(&r);
        assert_eq!(c.added_p50_us, Some(140.0));
        assert_eq!(c.added_p99_us, Some(300.0));
        assert_eq!(c.sidecars.len(), 1, "the app is not a sidecar");
        let s = &c.sidecars[0];
        assert_eq!(s.cpu_s_per_1k, Some(0.1));
        assert_eq!(s.rss_idle_mb, Some(9.0));
        assert_eq!(s.rss_c128_mb, Some(22.0));
    }

    #[test]
    fn nothing_recorded_is_nothing_claimed() {
        assert_eq!(pair_cost(&Results::default()), PairCost::default());
    }
}
