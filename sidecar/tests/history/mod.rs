//! A Jepsen-style history checker for durable delivery: `record` is what a run writes down, `check`
//! what it must satisfy (both pure); `cluster`, `pods` and `run` are the real processes and the
//! faults that produce a history.

pub mod check;
#[cfg(test)]
mod check_tests;
mod cluster;
mod pods;
pub mod record;
pub mod run;
