//! The quickstart's handler app: receives CloudEvents from a manager sidecar (HTTP binary mode, or the gRPC
//! `Handler` service with `--protocol grpc`) and answers by event type (`noop`, `echo`, `burn`, `bytes`, `relay`). Kept on bare hyper so its own cost stays out of the way when it is used to
//! measure the mesh.

mod answer;
mod burn;
pub mod grpc;
mod handler;
pub mod listener;
pub mod otel;
mod problem;
mod relay;
pub mod server;
mod sized;
pub mod trace;

pub use burn::{DEFAULT_BURN_MS, MAX_BURN_MS};
pub use handler::{Handlers, MAX_BODY_BYTES};
pub use relay::LOCAL_API_ENV;
pub use server::serve;
pub use sized::{DEFAULT_BYTES, MAX_BYTES};
