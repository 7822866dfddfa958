//! A Jepsen-style history checker for durable delivery: `record` is what a run writes down, `check`
//! what it must satisfy (both pure), `cluster` and `run` the real processes and the faults that
//! produce a history.

pub mod check;
#[cfg(test)]
mod check_tests;
pub mod record;
