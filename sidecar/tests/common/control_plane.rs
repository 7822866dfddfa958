//! A fake operator control plane in the test process: every `WatchRoutes` subscriber gets the
//! table a watch channel holds, then each new one (whole tables); `Activate` calls are forwarded to
//! the test with the time they arrived; load reports are read and counted.

use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Instant;
use switchyard_protocol::control::v1::control_plane_server::{ControlPlane, ControlPlaneServer};
use switchyard_protocol::control::v1::{
    ActivateAck, ActivateRequest, LoadAck, LoadReport, RoutingTable, WatchRoutesRequest,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status, Streaming};

struct Fake {
    tables: watch::Receiver<RoutingTable>,
    activations: mpsc::UnboundedSender<(Instant, ActivateRequest)>,
}

type Tables = Pin<Box<dyn tokio_stream::Stream<Item = Result<RoutingTable, Status>> + Send>>;

#[tonic::async_trait]
impl ControlPlane for Fake {
    type WatchRoutesStream = Tables;

    async fn watch_routes(
        &self,
        _r: Request<WatchRoutesRequest>,
    ) -> Result<Response<Tables>, Status> {
        // The current table first, then each new one.
        let s =
            futures::stream::unfold((self.tables.clone(), true), |(mut rx, first)| async move {
                if !first && rx.changed().await.is_err() {
                    return None;
                }
                let t = rx.borrow_and_update().clone();
                Some((Ok(t), (rx, false)))
            });
        Ok(Response::new(Box::pin(s)))
    }

    async fn report_load(
        &self,
        r: Request<Streaming<LoadReport>>,
    ) -> Result<Response<LoadAck>, Status> {
        let mut s = r.into_inner();
        let mut received = 0;
        while let Ok(Some(_)) = s.message().await {
            received += 1;
        }
        Ok(Response::new(LoadAck { received }))
    }

    async fn activate(&self, r: Request<ActivateRequest>) -> Result<Response<ActivateAck>, Status> {
        let _ = self.activations.send((Instant::now(), r.into_inner()));
        Ok(Response::new(ActivateAck {}))
    }
}

/// A running fake control plane.
pub struct FakeControlPlane {
    /// Where it listens (h2c).
    pub addr: SocketAddr,
    /// Send a table to every subscriber.
    pub tables: watch::Sender<RoutingTable>,
    /// The `Activate` calls, with when they arrived.
    pub activations: mpsc::UnboundedReceiver<(Instant, ActivateRequest)>,
}

impl FakeControlPlane {
    /// Serves `first` to subscribers on a loopback port, until the test process ends.
    pub async fn start(first: RoutingTable) -> FakeControlPlane {
        let (tables, rx) = watch::channel(first);
        let (act_tx, activations) = mpsc::unbounded_channel();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(ControlPlaneServer::new(Fake {
                    tables: rx,
                    activations: act_tx,
                }))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        FakeControlPlane {
            addr,
            tables,
            activations,
        }
    }

    /// `http://addr`, for `--control-plane` / `SWITCHYARD_CONTROL_PLANE`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}
