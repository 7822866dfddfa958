//! The control plane: every operator replica (leader or not) serves the `switchyard.v1.ControlPlane`
//! gRPC API. Router sidecars subscribe to their Router's routing table (`WatchRoutes`, served from
//! each replica's own caches); sidecars stream load reports back (`ReportLoad`) and routers holding
//! requests for an event type scaled to zero ask for a pod (`Activate`): those two feed the leader's
//! autoscaler, so a standby forwards them to the leader (`forward`).
//!
//! `index` is the pure core (Routers, Managers, Pods -> routing tables, one object at a time, with
//! `table` as its from-scratch reference); `delta` is one table as versions and deltas; `hub` holds
//! every Router's table and its watchers; `observe` feeds the index from the watches and shares the
//! Router and Manager caches; `server` is the tonic shell; `caller` is where a call's origin is read.

pub mod activation;
pub mod caller;
pub mod delta;
pub mod forward;
pub mod hub;
pub mod index;
pub mod load;
pub mod observe;
pub mod server;
pub mod table;

use crate::leader::view::LeaderView;
use crate::metrics::Metrics;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::control::v1::control_plane_server::ControlPlaneServer;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

/// Serves the control plane on `listener` until `shutdown` resolves, then ends every stream. Load
/// reports and activations go into `loads` (which the autoscaler reads) while `leader` says this
/// replica leads, and to the leader otherwise.
pub async fn serve(
    observer: observe::Observer,
    listener: TcpListener,
    loads: Arc<load::LoadBook>,
    leader: Arc<LeaderView>,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let hub = Arc::new(Hub::default());
    let service = server::Service {
        hub: hub.clone(),
        loads: loads.clone(),
        metrics: metrics.clone(),
        forward: forward::Forwarder::start(leader.clone(), metrics.clone()),
        leader,
    };
    let observer = tokio::spawn(observer.run(hub.clone(), metrics));
    let closing = {
        let hub = hub.clone();
        let loads = loads.clone();
        async move {
            shutdown.await;
            loads.close();
            // Streams never end by themselves; without this the graceful shutdown would wait forever.
            hub.close();
        }
    };
    let result = tonic::transport::Server::builder()
        // Finds sidecars that vanished without closing their stream (node loss, partitions).
        .http2_keepalive_interval(Some(Duration::from_secs(20)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .add_service(ControlPlaneServer::new(service))
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), closing)
        .await;
    observer.abort();
    result
}

pub use hub::Hub;
