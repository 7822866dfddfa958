//! Switchyard's benchmarks: the load generator's drivers and report, the in-process routing loop the
//! criterion benches time, and the pure check of a run's results against the targets of issues 5, 12
//! and 14.

#![forbid(unsafe_code)]

pub mod bare;
mod check;
pub mod cost;
pub mod fanout;
pub mod lapin;
pub mod load;
pub mod mesh;
pub mod plateau;
pub mod plots;
pub mod procs;
pub mod reaction;
pub mod report;
pub mod results;
pub mod rounds;
pub mod routing;
pub mod streams;
pub mod summary;
pub mod targets;
