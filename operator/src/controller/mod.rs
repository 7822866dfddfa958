//! The controllers: one per custom resource, run together while this replica leads.

pub mod events;
pub mod manager;
pub mod router;

use crate::context::Context;
use std::future::Future;
use std::sync::Arc;

/// Runs both controllers until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    futures::join!(
        router::run(ctx.clone(), shutdown.clone()),
        manager::run(ctx, shutdown)
    );
}
