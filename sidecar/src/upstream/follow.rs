//! Follows the operator's control plane: subscribes to this Router's routing table (a whole table,
//! then deltas, [`table::Held`]), applies each resulting table as it comes, and on failure or on a
//! gap in the deltas reconnects with backoff (which resyncs: a new stream starts whole) while the
//! last table keeps serving.

use super::Upstream;
use super::table;
use crate::backoff;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_protocol::control::v1::WatchRoutesRequest;
use switchyard_protocol::control::v1::control_plane_client::ControlPlaneClient;
use tonic::transport::{Channel, Endpoint};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest routing table accepted (thousands of endpoints fit easily).
const MAX_TABLE: usize = 8 << 20;

/// An unusable control-plane URL; the message names it and the fix.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EndpointError {
    /// Not `http://` (no TLS client in this build: an https URL would fail on every connect).
    #[error("--control-plane {0:?} must start with http://")]
    NotHttp(String),
    /// Not a URL.
    #[error("--control-plane {url:?} is not a valid URL: {source}")]
    Invalid {
        /// The URL given.
        url: String,
        /// Why it does not parse.
        source: tonic::transport::Error,
    },
}

/// Checks `url` and prepares a lazy channel to it; the error names the problem.
pub(crate) fn endpoint(url: &str) -> Result<Endpoint, EndpointError> {
    if !url.starts_with("http://") {
        return Err(EndpointError::NotHttp(url.to_owned()));
    }
    let ep = Endpoint::from_shared(url.to_owned()).map_err(|source| EndpointError::Invalid {
        url: url.to_owned(),
        source,
    })?;
    Ok(ep
        .connect_timeout(CONNECT_TIMEOUT)
        // Finds a vanished operator (node loss, partition) that never closes the stream.
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true))
}

/// Follows the control plane at `endpoint` for `upstream` forever (the task is dropped at shutdown).
pub(crate) async fn run(endpoint: Endpoint, upstream: Arc<Upstream>, pod: String) {
    let url = endpoint.uri().to_string();
    let (name, namespace) = {
        let (n, ns) = upstream.identity();
        (n.to_owned(), ns.to_owned())
    };
    let mut retry = backoff::StreamRetry::control_plane();
    loop {
        let started = Instant::now();
        let ended = watch(&endpoint, &upstream, &name, &namespace, &pod).await;
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
    endpoint: &Endpoint,
    upstream: &Upstream,
    name: &str,
    namespace: &str,
    pod: &str,
) -> String {
    let channel: Channel = match endpoint.connect().await {
        Ok(c) => c,
        Err(e) => return format!("cannot connect: {e}"),
    };
    let mut client = ControlPlaneClient::new(channel).max_decoding_message_size(MAX_TABLE);
    let request = WatchRoutesRequest {
        router: name.to_owned(),
        namespace: namespace.to_owned(),
        pod: pod.to_owned(),
        deltas: true,
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
                Ok(table) => upstream.apply(&table),
                Err(gap) => return gap.to_string(),
            },
            Ok(None) => return "the operator closed the stream".into(),
            Err(s) => return format!("{:?}: {}", s.code(), s.message()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_need_an_http_scheme() {
        assert!(endpoint("http://switchyard.system.svc:7443").is_ok());
        let e = endpoint("switchyard.system.svc:7443").expect_err("no scheme");
        assert!(e.to_string().contains("http://"), "{e}");
        assert!(endpoint("https://x:1").is_err());
        assert!(endpoint("http://bad host:1").is_err());
    }
}
