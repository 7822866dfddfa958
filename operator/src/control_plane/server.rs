//! The tonic service: `WatchRoutes` streams a Router's table from the hub (any replica); `ReportLoad`
//! and `Activate` feed the autoscaler, which runs on the leader only, so a standby forwards them to
//! the leader (`forward`) and only the leader keeps them. Each call is first checked against its
//! caller (`caller`: with mesh TLS, the workload of the client certificate), on the replica it
//! reached, before any forward; refusals are counted by reason.

use super::activation::Activation;
use super::caller::{self, Caller, Refusal};
use super::directory;
use super::forward::Forwarder;
use super::hub::{Hub, SubscribeError};
use super::load::LoadBook;
use super::table::RouterKey;
use crate::leader::view::LeaderView;
use crate::metrics::Metrics;
use futures::Stream;
use prost::Message;
use std::pin::Pin;
use std::sync::Arc;
use switchyard_protocol::control::v1::control_plane_server::ControlPlane;
use switchyard_protocol::control::v1::{
    ActivateAck, ActivateRequest, LoadAck, LoadReport, RoutingTable, WatchRoutesRequest,
};
use tonic::{Request, Response, Status, Streaming};

/// The control-plane gRPC service.
pub(crate) struct Service {
    /// Tables to serve.
    pub hub: Arc<Hub>,
    /// Latest load reports.
    pub loads: Arc<LoadBook>,
    /// Subscriber and table counters.
    pub metrics: Arc<Metrics>,
    /// Who leads: reports and activations are kept only there.
    pub leader: Arc<LeaderView>,
    /// Passes reports and activations on to the leader when this replica does not lead.
    pub forward: Arc<Forwarder>,
    /// Who is who, for the checks.
    pub directory: Arc<directory::Current>,
    /// Whether callers are known by their client certificates (mesh TLS on).
    pub mesh: bool,
}

impl Service {
    /// Who sent `request`.
    fn caller<T>(&self, request: &Request<T>) -> Caller {
        Caller::of(request, self.mesh)
    }

    /// Counts and logs a refusal, and turns it into the caller's status.
    fn refuse(&self, caller: &Caller, call: &'static str, r: Refusal) -> Status {
        self.metrics.control_plane_refused(r.reason);
        tracing::warn!(call, caller = %caller.shown(), reason = r.reason, message = %r.message, "control-plane call refused");
        r.status()
    }

    /// Fails until the directory has been built from synced caches: before that every caller would
    /// look unknown.
    fn synced(&self) -> Result<(), Status> {
        if self.hub.is_synced() {
            Ok(())
        } else {
            Err(Status::unavailable(
                "the control plane has not synced its caches yet; retry shortly",
            ))
        }
    }
}

/// Counts a subscriber for as long as its stream lives.
struct Subscriber(Arc<Metrics>);

impl Subscriber {
    fn new(metrics: Arc<Metrics>) -> Self {
        metrics.subscribers(1);
        Subscriber(metrics)
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.0.subscribers(-1);
    }
}

/// A stream of routing tables.
pub(crate) type TableStream = Pin<Box<dyn Stream<Item = Result<RoutingTable, Status>> + Send>>;

/// Field values longer than this are refused: names are DNS labels, far shorter.
const MAX_NAME: usize = 253;

fn required(value: &str, field: &str) -> Result<String, Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    if value.len() > MAX_NAME {
        return Err(Status::invalid_argument(format!(
            "{field} is longer than {MAX_NAME} characters"
        )));
    }
    Ok(value.to_owned())
}

#[tonic::async_trait]
impl ControlPlane for Service {
    type WatchRoutesStream = TableStream;

    async fn watch_routes(
        &self,
        request: Request<WatchRoutesRequest>,
    ) -> Result<Response<Self::WatchRoutesStream>, Status> {
        let caller = self.caller(&request);
        let req = request.into_inner();
        if self.mesh {
            self.synced()?;
        }
        caller::watch(&caller, &req, &self.directory.get())
            .map_err(|r| self.refuse(&caller, "WatchRoutes", r))?;
        let key = RouterKey {
            namespace: required(&req.namespace, "namespace")?,
            name: required(&req.router, "router")?,
        };
        let sub = self
            .hub
            .subscribe(&key, req.deltas, req.parts)
            .map_err(|e| match e {
                SubscribeError::NotFound { .. } => Status::not_found(e.to_string()),
                SubscribeError::NotSynced | SubscribeError::Closed => {
                    Status::unavailable(e.to_string())
                }
            })?;
        tracing::info!(router = %key.name, namespace = %key.namespace, pod = %req.pod, deltas = req.deltas, parts = req.parts, "routing-table subscriber");
        let guard = Subscriber::new(self.metrics.clone());
        // Pulled: the next message is built only when the transport wants one, from the state as it
        // is then, so a slow stream skips to the latest instead of queueing.
        let stream = futures::stream::unfold((sub, guard), |(mut sub, guard)| async move {
            let table = sub.next().await?;
            guard.0.table_sent(table.encoded_len());
            Some((Ok(table), (sub, guard)))
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn report_load(
        &self,
        request: Request<Streaming<LoadReport>>,
    ) -> Result<Response<LoadAck>, Status> {
        let caller = self.caller(&request);
        self.synced()?;
        let mut stream = request.into_inner();
        let mut received = 0u64;
        // The pod whose stream this is, forgotten when it ends (a forwarded stream carries many pods;
        // theirs age out instead).
        let mut last: Option<(String, String)> = None;
        let outcome = loop {
            let next = tokio::select! {
                m = stream.message() => m,
                () = self.loads.closed() => {
                    break Err(Status::unavailable("the operator is shutting down"));
                }
            };
            match next {
                Ok(Some(mut report)) => {
                    if let Err(s) = required(&report.pod, "pod")
                        .and_then(|_| required(&report.namespace, "namespace"))
                    {
                        break Err(s);
                    }
                    match caller::report(&caller, &mut report, &self.directory.get()) {
                        Err(r) => break Err(self.refuse(&caller, "ReportLoad", r)),
                        Ok(checked) if checked.unknown_events > 0 => {
                            // Dropped, not refused: a pod of the previous spec may still report a
                            // type removed since; it cannot scale anything through it.
                            for _ in 0..checked.unknown_events {
                                self.metrics.control_plane_refused("unknown_event");
                            }
                            tracing::debug!(pod = %report.pod, dropped = checked.unknown_events, "load entries for event types the owner does not have dropped");
                        }
                        Ok(_) => {}
                    }
                    received += 1;
                    self.metrics.load_report();
                    // Decided per report: this replica may become (or stop being) the leader mid-stream.
                    if !self.leader.is_me() {
                        if caller.forwarded {
                            // Two replicas disagree on the leader for a moment: never bounce it back.
                            self.metrics.forward_dropped();
                        } else {
                            self.forward.report(report);
                        }
                        continue;
                    }
                    if !caller.forwarded {
                        last = Some((report.namespace.clone(), report.pod.clone()));
                    }
                    if !self.loads.record(report) {
                        // The book is full and this pod is new: its report is dropped and
                        // counted, not the stream, which may carry other pods' reports too
                        // (a forwarding replica's does).
                        self.metrics.control_plane_refused("load_book_full");
                        continue;
                    }
                }
                Ok(None) => break Ok(()),
                Err(s) => match caller::oversized(&s) {
                    Some(r) => break Err(self.refuse(&caller, "ReportLoad", r)),
                    None => break Err(s),
                },
            }
        };
        if let Some((ns, pod)) = last {
            self.loads.forget(&ns, &pod);
        }
        outcome.map(|()| Response::new(LoadAck { received }))
    }

    async fn activate(
        &self,
        request: Request<ActivateRequest>,
    ) -> Result<Response<ActivateAck>, Status> {
        let caller = self.caller(&request);
        self.synced()?;
        let req = request.into_inner();
        caller::activate(&caller, &req, &self.directory.get())
            .map_err(|r| self.refuse(&caller, "Activate", r))?;
        let activation = Activation {
            namespace: required(&req.namespace, "namespace")?,
            event_type: required(&req.event_type, "event_type")?,
            manager: (!req.manager.is_empty()).then(|| req.manager.clone()),
            held: req.held,
        };
        tracing::info!(router = %req.router, pod = %req.pod, namespace = %activation.namespace, event = %activation.event_type, subscriber = %req.manager, held = req.held, forwarded = caller.forwarded, "activation");
        self.metrics.activation();
        if !self.leader.is_me() {
            if caller.forwarded {
                return Err(Status::unavailable(
                    "this replica does not lead; the router repeats the activation",
                ));
            }
            self.forward
                .activate(req)
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
            return Ok(Response::new(ActivateAck {}));
        }
        if !self
            .loads
            .activations
            .record_at(activation, std::time::Instant::now())
        {
            return Err(Status::resource_exhausted(format!(
                "activations of more than {} event types are pending; retry later",
                super::activation::MAX_KEYS
            )));
        }
        Ok(Response::new(ActivateAck {}))
    }
}
