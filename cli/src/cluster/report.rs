//! The outcome of `switchyard check` against a cluster: named checks, each pass, warn or fail with
//! what was found and, when it is not a pass, a hint of what to do. Pure: printing as text or JSON.

use serde::Serialize;

/// How a check came out. A failure makes the command exit non-zero; a warning does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One named check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable name, e.g. `kubernetes-version` (scripts key on it).
    pub name: &'static str,
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// What to do about a warning or failure; absent on a pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Check {
    pub fn pass(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Pass,
            detail: detail.into(),
            hint: None,
        }
    }

    pub fn warn(name: &'static str, detail: impl Into<String>, hint: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Warn,
            detail: detail.into(),
            hint: Some(hint.into()),
        }
    }

    pub fn fail(name: &'static str, detail: impl Into<String>, hint: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Fail,
            detail: detail.into(),
            hint: Some(hint.into()),
        }
    }
}

/// Which checks ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Before install: can this cluster take Switchyard.
    Pre,
    /// After install: is the installed Switchyard healthy.
    Post,
}

/// Every check of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub phase: Phase,
    /// The kubeconfig context the checks ran against, when one was named there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    pub checks: Vec<Check>,
    pub summary: Summary,
}

/// Counts per status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
}

impl Report {
    pub fn new(phase: Phase, context: Option<String>, checks: Vec<Check>) -> Report {
        let mut summary = Summary::default();
        for c in &checks {
            match c.status {
                Status::Pass => summary.pass += 1,
                Status::Warn => summary.warn += 1,
                Status::Fail => summary.fail += 1,
            }
        }
        Report {
            phase,
            context,
            checks,
            summary,
        }
    }

    /// Whether any check failed (the command then exits 1).
    pub fn failed(&self) -> bool {
        self.summary.fail > 0
    }

    /// One line per check, its hint indented below it, then the counts.
    pub fn text(&self) -> String {
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        let mut out = String::new();
        for c in &self.checks {
            out.push_str(&format!(
                "[{}] {:width$}  {}\n",
                c.status.label(),
                c.name,
                c.detail
            ));
            if let Some(h) = &c.hint {
                out.push_str(&format!("       {:width$}  hint: {h}\n", ""));
            }
        }
        let what = match self.phase {
            Phase::Pre => "pre-install",
            Phase::Post => "post-install",
        };
        let s = self.summary;
        out.push_str(&format!(
            "{what} checks: {} passed, {} warned, {} failed\n",
            s.pass, s.warn, s.fail
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report::new(
            Phase::Post,
            Some("kind-e2e".into()),
            vec![
                Check::pass("crds", "both present"),
                Check::warn("mesh-ca", "expires in 10 days", "rotate it"),
                Check::fail("operator-ready", "0 of 0 ready", "scale it up"),
            ],
        )
    }

    #[test]
    fn a_failure_fails_the_run_and_a_warning_does_not() {
        let r = report();
        assert!(r.failed());
        assert_eq!(
            r.summary,
            Summary {
                pass: 1,
                warn: 1,
                fail: 1
            }
        );
        let only_warned = Report::new(
            Phase::Pre,
            None,
            vec![Check::warn("pod-security", "x", "y")],
        );
        assert!(!only_warned.failed());
    }

    #[test]
    fn json_names_each_check_with_its_status_and_hint() {
        let v = serde_json::to_value(report()).expect("json");
        assert_eq!(v["phase"], "post");
        assert_eq!(v["context"], "kind-e2e");
        assert_eq!(v["checks"][0]["name"], "crds");
        assert_eq!(v["checks"][0]["status"], "pass");
        assert!(v["checks"][0].get("hint").is_none(), "a pass has no hint");
        assert_eq!(v["checks"][2]["status"], "fail");
        assert_eq!(v["checks"][2]["hint"], "scale it up");
        assert_eq!(v["summary"]["fail"], 1);
    }

    #[test]
    fn text_puts_the_hint_under_its_check() {
        let t = report().text();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "[pass] crds            both present");
        assert!(lines[2].ends_with("hint: rotate it"), "{t}");
        assert_eq!(lines[3], "[FAIL] operator-ready  0 of 0 ready", "{t}");
        assert!(lines[4].ends_with("hint: scale it up"), "{t}");
        assert_eq!(lines.len(), 6, "{t}");
        assert_eq!(
            lines.last().copied(),
            Some("post-install checks: 1 passed, 1 warned, 1 failed")
        );
    }
}
