//! Switchyard's benchmarks: the load generator's drivers and report, the in-process routing loop the
//! criterion benches time, and the pure check of a run's results against the targets of issue 5.

#![forbid(unsafe_code)]

pub mod load;
pub mod procs;
pub mod report;
pub mod routing;
pub mod summary;
pub mod targets;
