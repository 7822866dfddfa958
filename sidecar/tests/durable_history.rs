//! The history checker of durable delivery (`history/`): its unit tests, and a run with real
//! processes under faults whose recorded history must pass every check (docs/delivery.md,
//! "Checking the promise under faults").

#![allow(clippy::unwrap_used)]

mod common;
mod history;
