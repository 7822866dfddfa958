//! The mesh's TLS handshake counters, as `benches/run` reads them from the sidecars' admin `/metrics`
//! (`switchyard_mesh_handshakes_total{side,result}`) before and after the mTLS `/noop` runs: frame
//! connections live per pod pair, so the load itself should add none. Pure: Prometheus text in, counts out.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The counter every sidecar exports (`sidecar/src/metrics/mesh.rs`).
pub const HANDSHAKES: &str = "switchyard_mesh_handshakes_total";

/// Handshakes of every sidecar of one system at one moment, summed over the sidecars, by `side result`
/// (`client ok`, `server ok`, `client failed`, ...).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Handshakes {
    /// Count by `side result`.
    pub by: BTreeMap<String, f64>,
    /// How many sidecars' `/metrics` were read (the runner writes a `# sidecar` line before each).
    pub sidecars: usize,
}

impl Handshakes {
    /// Every handshake, whatever its side and result.
    pub fn total(&self) -> f64 {
        // A fold from +0, not `sum()`: an empty f64 sum is -0, which prints as "-0".
        self.by.values().fold(0.0, |a, b| a + b)
    }

    /// Successful handshakes.
    pub fn ok(&self) -> f64 {
        self.by
            .iter()
            .filter(|(k, _)| k.ends_with(" ok"))
            .fold(0.0, |a, (_, b)| a + b)
    }
}

/// The value of label `name` in a Prometheus label set such as `side="client",result="ok"`.
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == name).then(|| v.trim().trim_matches('"'))
    })
}

/// Sums the handshake counter over the `/metrics` texts of several sidecars, concatenated; each sidecar's
/// text starts with a `# sidecar ...` line, which is how they are counted. Other metrics, comments and
/// lines that do not parse are skipped (a sidecar that exports no handshake yet has none).
pub fn parse(text: &str) -> Handshakes {
    let mut h = Handshakes::default();
    for line in text.lines().map(str::trim) {
        if line.starts_with("# sidecar") {
            h.sidecars += 1;
            continue;
        }
        let Some(rest) = line.strip_prefix(HANDSHAKES) else {
            continue;
        };
        let Some((labels, value)) = rest
            .strip_prefix('{')
            .and_then(|r| r.split_once('}'))
            .map(|(l, v)| (l, v.trim()))
        else {
            continue;
        };
        // The value, then an optional timestamp or exemplar.
        let Some(value) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        let side = label(labels, "side").unwrap_or("?");
        let result = label(labels, "result").unwrap_or("?");
        *h.by.entry(format!("{side} {result}")).or_default() += value;
    }
    h
}

/// What a load added between two readings of the same sidecars.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Added {
    /// Successful handshakes before the load (the connections the sidecars made at start).
    pub before_ok: f64,
    /// Every handshake the load added, whatever its result.
    pub added: f64,
    /// Of those, the ones that failed or timed out.
    pub added_failed: f64,
}

/// The handshakes between `before` and `after`; `None` when the two did not read the same number of
/// sidecars (one did not answer: the difference would count it, not the load).
pub fn added(before: &Handshakes, after: &Handshakes) -> Option<Added> {
    if before.sidecars == 0 || before.sidecars != after.sidecars {
        return None;
    }
    let added = after.total() - before.total();
    let added_ok = after.ok() - before.ok();
    Some(Added {
        before_ok: before.ok(),
        added,
        added_failed: added - added_ok,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTER: &str = "# sidecar router bench 127.0.0.1:4001
# HELP switchyard_mesh_handshakes TLS handshakes of frame connections, by side and result
# TYPE switchyard_mesh_handshakes counter
switchyard_mesh_handshakes_total{side=\"client\",result=\"ok\"} 1
switchyard_requests_total{event=\"noop\"} 90000
";
    const MANAGER: &str = "# sidecar manager sidecar handlers 127.0.0.1:4002
switchyard_mesh_handshakes_total{side=\"server\",result=\"ok\"} 2
switchyard_mesh_handshakes_total{result=\"ok\",side=\"client\"} 1
switchyard_mesh_handshakes_total{side=\"server\",result=\"failed\"} 1 1700000000000
switchyard_mesh_handshakes_total{side=\"server\",result=\"ok\"} not-a-number
";

    #[test]
    fn sums_the_counter_over_sidecars_by_side_and_result() {
        let h = parse(&format!("{ROUTER}{MANAGER}"));
        assert_eq!(h.sidecars, 2);
        assert_eq!(h.by.get("client ok"), Some(&2.0), "router 1 + manager 1");
        assert_eq!(h.by.get("server ok"), Some(&2.0), "the bad line is skipped");
        assert_eq!(h.by.get("server failed"), Some(&1.0), "timestamp ignored");
        assert_eq!((h.total(), h.ok()), (5.0, 4.0));
    }

    #[test]
    fn a_sidecar_without_handshakes_counts_none() {
        let h = parse("# sidecar router bench 127.0.0.1:1\nswitchyard_requests_total 5\n");
        assert_eq!((h.sidecars, h.total()), (1, 0.0));
    }

    #[test]
    fn added_is_the_difference_of_the_same_sidecars() {
        let before = parse(&format!("{ROUTER}{MANAGER}"));
        let after = parse(&format!(
            "{ROUTER}{MANAGER}switchyard_mesh_handshakes_total{{side=\"client\",result=\"ok\"}} 3\n\
             switchyard_mesh_handshakes_total{{side=\"client\",result=\"timeout\"}} 1\n"
        ));
        let a = added(&before, &after).expect("same sidecars");
        assert_eq!(a.before_ok, 4.0);
        assert_eq!((a.added, a.added_failed), (4.0, 1.0));
        assert_eq!(added(&before, &before).map(|a| a.added), Some(0.0));
        let one = parse(ROUTER);
        assert_eq!(
            added(&one, &before),
            None,
            "a sidecar missing in one reading"
        );
        assert_eq!(added(&Handshakes::default(), &Handshakes::default()), None);
    }
}
