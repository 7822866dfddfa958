//! Follows the operator's control plane: subscribes to this Router's routing table (a whole table,
//! then deltas, [`table::Held`]), applies each resulting table as it comes, and on failure or on a
//! gap in the deltas reconnects with backoff (which resyncs: a new stream starts whole) while the
//! last table keeps serving.

use super::Upstream;
use super::table;
use crate::backoff;
use crate::net::control_plane::ControlPlane;
use std::sync::Arc;
use std::time::Instant;
use switchyard_protocol::control::v1::WatchRoutesRequest;
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use tonic::transport::Channel;

/// Largest routing table accepted (thousands of endpoints fit easily).
const MAX_TABLE: usize = table::MAX_TABLE;

/// Follows the control plane `cp` for `upstream` forever (the task is dropped at shutdown).
pub(crate) async fn run(cp: ControlPlane, upstream: Arc<Upstream>, pod: String) {
    let url = cp.url();
    let (name, namespace) = {
        let (n, ns) = upstream.identity();
        (n.to_owned(), ns.to_owned())
    };
    let mut retry = backoff::StreamRetry::control_plane();
    loop {
        let started = Instant::now();
        let ended = watch(&cp, &upstream, &name, &namespace, &pod).await;
        upstream.set_connected(false);
        let next = retry.ended(started.elapsed(), fastrand::f64());
        // The first failure of a series is worth a warning; repeats of it are not.
        if next.first {
            tracing::warn!(control_plane = %url, reason = %ended, "routing-table stream ended; serving the last table and reconnecting");
        } else {
            tracing::debug!(control_plane = %url, reason = %ended, "routing-table stream still down");
        }
        tokio::time::sleep(next.wait).await;
    }
}

/// One subscription, until it fails; returns why it ended.
async fn watch(
    cp: &ControlPlane,
    upstream: &Upstream,
    name: &str,
    namespace: &str,
    pod: &str,
) -> String {
    let channel: Channel = match cp.connect().await {
        Ok(c) => c,
        Err(e) => return format!("cannot connect: {e}"),
    };
    let mut client = ControlPlaneClient::new(channel).max_decoding_message_size(MAX_TABLE);
    let request = WatchRoutesRequest {
        router: name.to_owned(),
        namespace: namespace.to_owned(),
        pod: pod.to_owned(),
        deltas: true,
        parts: true,
    };
    let mut stream = match client.watch_routes(request).await {
        Ok(r) => r.into_inner(),
        Err(s) => return format!("{:?}: {}", s.code(), s.message()),
    };
    upstream.set_connected(true);
    // Versions count per stream: a new stream always starts from nothing.
    let mut held = table::Held::default();
    loop {
        match stream.message().await {
            Ok(Some(msg)) => match held.apply(msg) {
                Ok(Some(table)) => upstream.apply(&table),
                // More parts of a whole table to come: routing keeps the table it has.
                Ok(None) => {}
                Err(gap) => return gap.to_string(),
            },
            Ok(None) => return "the operator closed the stream".into(),
            Err(s) => return format!("{:?}: {}", s.code(), s.message()),
        }
    }
}
