//! Load reports for the operator's autoscaler: per event type, atomics counted on the request path
//! (`meter`), turned into a report once a second (`report`, pure) and pushed to the control plane
//! (`push`). Nothing is counted unless `--control-plane` is set.

pub(crate) mod meter;
pub(crate) mod push;
pub(crate) mod report;

pub(crate) use meter::{LoadMeters, Underway, Waiting};
