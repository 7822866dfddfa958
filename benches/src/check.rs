//! One line of a run's targets, shared by the sections that judge their own figures (`targets`,
//! `reaction`) and the report that prints them.

use serde::{Deserialize, Serialize};

/// One target line: the measured value, the bound, and whether it holds (`None`: not measured).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// What is checked, e.g. `/noop c=32: Switchyard / bare hyper req/s`.
    pub name: String,
    /// The measured ratio, duration, size or rate.
    pub value: Option<f64>,
    /// The bound, in words, e.g. `>= 0.35`.
    pub target: String,
    /// Pass, fail, or not measured.
    pub pass: Option<bool>,
}
