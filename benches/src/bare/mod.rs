//! Baseline servers (`switchyard-bare`): what each protocol costs with nothing in between.

pub mod grpc;
pub mod http;
pub mod ws;
