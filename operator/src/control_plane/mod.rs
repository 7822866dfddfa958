//! The control plane: every operator replica (leader or not) serves the `switchyard.v1.ControlPlane`
//! gRPC API. Router sidecars subscribe to their Router's routing table (`WatchRoutes`, served from
//! each replica's own caches); sidecars stream load reports back (`ReportLoad`) and routers holding
//! requests for an event type scaled to zero ask for a pod (`Activate`): those two feed the leader's
//! autoscaler, so a standby forwards them to the leader (`forward`).
//!
//! `index` is the pure core (Routers, Managers, Pods -> routing tables, one object at a time, with
//! `table` as its from-scratch reference); `delta` is one table as versions and deltas; `hub` holds
//! every Router's table and its watchers; `observe` feeds the index from the watches and shares the
//! Router and Manager caches; `server` is the tonic shell and `transport` the h2 server under it;
//! `caller` is where a call's origin is read and what it may ask is decided (pure), from
//! `directory` (who is who).
//!
//! With mesh TLS the server is TLS only, with the operator's certificate, and serves the
//! `Identity` service next to the control plane: a sidecar without a certificate may only ask for
//! one; everything else needs the certificate it got.

pub mod activation;
pub mod caller;
pub mod delta;
pub mod directory;
#[cfg(test)]
mod fixtures;
pub mod forward;
pub mod hub;
pub mod index;
pub mod load;
pub mod observe;
pub mod server;
pub mod table;
mod transport;

use crate::leader::view::LeaderView;
use crate::metrics::Metrics;
use futures::StreamExt;
use std::future::Future;
use std::sync::Arc;
use switchyard_identity::connect::MeshConnector;
use switchyard_identity::service::IdentityService;
use switchyard_protocol::control::v1::control_plane_server::ControlPlaneServer;
use switchyard_protocol::control::v1::identity_server::IdentityServer;
use tokio::net::TcpListener;
use tonic::service::Routes;

/// What the control plane needs to serve mesh TLS.
pub struct MeshServing {
    /// TLS with the operator's certificate (client certificates optional, checked when sent).
    pub config: rustls::ServerConfig,
    /// How a standby dials the leader (the operator's certificate presented).
    pub forward: MeshConnector,
    /// The Identity service.
    pub identity: IdentityService<crate::identity::review::KubeAuthenticator>,
}

/// Serves the control plane on `listener` until `shutdown` resolves, then ends every stream. Load
/// reports and activations go into `loads` (which the autoscaler reads) while `leader` says this
/// replica leads, and to the leader otherwise. With `mesh`, over TLS with the Identity service
/// beside it; without, plain h2c and callers unchecked.
pub async fn serve(
    observer: observe::Observer,
    listener: TcpListener,
    loads: Arc<load::LoadBook>,
    leader: Arc<LeaderView>,
    metrics: Arc<Metrics>,
    mesh: Option<MeshServing>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let hub = Arc::new(Hub::default());
    let directory = Arc::new(directory::Current::default());
    let service = server::Service {
        hub: hub.clone(),
        loads: loads.clone(),
        metrics: metrics.clone(),
        forward: forward::Forwarder::start(
            leader.clone(),
            metrics.clone(),
            mesh.as_ref().map(|m| m.forward.clone()),
        ),
        leader,
        directory: directory.clone(),
        mesh: mesh.is_some(),
    };
    let observer = tokio::spawn(observer.run(hub.clone(), directory, metrics.clone()));
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
    let control = ControlPlaneServer::new(service).max_decoding_message_size(caller::MAX_MESSAGE);
    match mesh {
        None => transport::serve(transport::plain(listener), Routes::new(control), closing).await,
        Some(m) => {
            // A plain-TCP client, another CA's certificate or a stalled handshake never reaches
            // a handler: counted here.
            let incoming = switchyard_identity::incoming::incoming(
                listener,
                tokio_rustls::TlsAcceptor::from(Arc::new(m.config)),
                move || metrics.control_plane_refused("handshake"),
            )
            .map(|accepted| {
                accepted.map(|conn| {
                    let info = conn.info().clone();
                    (conn, info)
                })
            });
            let routes = Routes::new(control).add_service(
                IdentityServer::new(m.identity)
                    .max_decoding_message_size(switchyard_identity::service::MAX_MESSAGE),
            );
            transport::serve(incoming, routes, closing).await;
        }
    }
    observer.abort();
}

pub use hub::Hub;
