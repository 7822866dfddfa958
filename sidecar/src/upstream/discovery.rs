//! Where a Manager's pods are: the static table of local mode, or the Service's DNS name, re-resolved
//! periodically. With `--control-plane` the operator's streamed table replaces these pools.

use super::pool::Pool;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// How often a Service name is resolved again.
const REFRESH: Duration = Duration::from_secs(5);
/// Retry sooner after a failed lookup.
const RETRY: Duration = Duration::from_secs(1);
/// Most endpoints taken from one lookup.
const MAX_ENDPOINTS: usize = 1024;

/// Where a pool's endpoints come from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Source {
    /// A fixed list of `host:port`.
    Static(Vec<String>),
    /// `<service>.<namespace>.svc:<port>`, resolved every few seconds.
    Dns(String),
}

/// Starts keeping `pool` filled from `source`.
pub(super) fn start(pool: Arc<Pool>, source: Source) {
    match source {
        Source::Static(list) => pool.update(list.into_iter().collect()),
        Source::Dns(name) => {
            tokio::spawn(async move {
                // Ends once the pool leaves the routing table (a control-plane table replaced it).
                while !pool.is_retired() {
                    let wait = match tokio::net::lookup_host(name.as_str()).await {
                        Ok(addrs) if !pool.is_retired() => {
                            let set: BTreeSet<String> =
                                addrs.take(MAX_ENDPOINTS).map(|a| a.to_string()).collect();
                            pool.update(set);
                            REFRESH
                        }
                        Ok(_) => break,
                        Err(e) => {
                            tracing::debug!(name, error = %e, "endpoint lookup failed; keeping the last endpoints");
                            RETRY
                        }
                    };
                    tokio::time::sleep(wait).await;
                }
            });
        }
    }
}
