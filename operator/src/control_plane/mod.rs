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
//! With mesh TLS the control plane is TLS only, with the operator's certificate, and a client
//! without a mesh certificate fails the handshake. The `Identity` service, where a sidecar without
//! a certificate gets one, listens on a port of its own (client certificates optional there, and
//! nothing but `Certify` served): one rustls config cannot require a certificate for some calls and
//! not for others, since the handshake ends before the request names its call. Both listeners cap
//! their connections (`conn`), in all and per source IP, and close idle ones.

pub(crate) mod activation;
pub(crate) mod caller;
pub(crate) mod delta;
pub(crate) mod directory;
#[cfg(test)]
mod fixtures;
pub(crate) mod forward;
pub(crate) mod hub;
pub(crate) mod index;
pub(crate) mod load;
pub(crate) mod observe;
pub(crate) mod server;
pub(crate) mod table;
mod transport;

use crate::leader::view::LeaderView;
use crate::metrics::Metrics;
use futures::{FutureExt, StreamExt};
use std::future::Future;
use std::sync::Arc;
use switchyard_identity::connect::MeshConnector;
use switchyard_identity::limit::{ConnLimiter, Limits};
use switchyard_identity::service::IdentityService;
use switchyard_protocol::control::v1::control_plane_server::ControlPlaneServer;
use switchyard_protocol::control::v1::identity_server::IdentityServer;
use tokio::net::TcpListener;
use tonic::service::Routes;

/// What the control plane needs to serve mesh TLS.
pub(crate) struct MeshServing {
    /// The control plane's TLS: the operator's certificate, client certificates required.
    pub config: rustls::ServerConfig,
    /// The Identity listener's TLS: client certificates optional (a sidecar's first `Certify` has
    /// none), checked when sent.
    pub identity_config: rustls::ServerConfig,
    /// Where the Identity service listens.
    pub identity_listener: TcpListener,
    /// How a standby dials the leader (the operator's certificate presented).
    pub forward: MeshConnector,
    /// The Identity service.
    pub identity: IdentityService<crate::identity::review::KubeAuthenticator>,
}

/// Serves the control plane on `listener` until `shutdown` resolves, then ends every stream. Load
/// reports and activations go into `loads` (which the autoscaler reads) while `leader` says this
/// replica leads, and to the leader otherwise. With `mesh`, over TLS with the Identity service
/// beside it; without, plain h2c and callers unchecked.
pub(crate) async fn serve(
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
    let limiter = ConnLimiter::new(crate::conn::CONTROL_PLANE);
    let refused = |listener: &'static str, metrics: &Arc<Metrics>| {
        let metrics = metrics.clone();
        move |reason: &'static str| metrics.connection_refused(listener, reason)
    };
    match mesh {
        None => {
            let incoming = transport::plain(listener, limiter, refused("control_plane", &metrics));
            let idle = refused("control_plane", &metrics);
            transport::serve(
                incoming,
                Routes::new(control),
                crate::conn::CONTROL_PLANE.idle_timeout,
                move || idle("idle"),
                closing,
            )
            .await;
        }
        Some(m) => {
            let closing = closing.shared();
            // A plain-TCP client, a client without a mesh certificate, another CA's certificate
            // or a stalled handshake never reaches a handler: counted here.
            let on_refused = {
                let (conn, metrics) = (refused("control_plane", &metrics), metrics.clone());
                move |reason: &'static str| {
                    if reason == "handshake" {
                        metrics.control_plane_refused("handshake");
                    }
                    conn(reason);
                }
            };
            let control_plane = tls_serve(
                listener,
                m.config,
                crate::conn::CONTROL_PLANE,
                Routes::new(control),
                on_refused,
                closing.clone(),
            );
            let identity = tls_serve(
                m.identity_listener,
                m.identity_config,
                crate::conn::IDENTITY,
                Routes::new(
                    IdentityServer::new(m.identity)
                        .max_decoding_message_size(switchyard_identity::service::MAX_MESSAGE),
                ),
                refused("identity", &metrics),
                closing,
            );
            tokio::join!(control_plane, identity);
        }
    }
    observer.abort();
}

/// Serves `routes` over TLS with `config` on `listener`, under `limits`, until `shutdown`.
async fn tls_serve(
    listener: TcpListener,
    config: rustls::ServerConfig,
    limits: Limits,
    routes: Routes,
    on_refused: impl Fn(&'static str) + Clone + Send + Sync + 'static,
    shutdown: impl Future<Output = ()>,
) {
    let incoming = switchyard_identity::incoming::incoming_limited(
        listener,
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        ConnLimiter::new(limits),
        on_refused.clone(),
    )
    .map(|accepted| {
        accepted.map(|conn| {
            let info = conn.info().clone();
            (conn, info, None)
        })
    });
    let on_idle = move || on_refused("idle");
    transport::serve(incoming, routes, limits.idle_timeout, on_idle, shutdown).await;
}

pub(crate) use hub::Hub;
