//! A test OTLP receiver: the OTLP/gRPC TraceService on loopback, keeping every span it is sent.

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_stream::wrappers::TcpListenerStream;

/// `Span.kind` values of OTLP.
pub const INTERNAL: i32 = 1;
pub const SERVER: i32 = 2;
pub const CLIENT: i32 = 3;
/// `Status.code` value for errors.
pub const STATUS_ERROR: i32 = 2;

/// A received span, flattened for assertions.
#[derive(Clone, Debug)]
pub struct GotSpan {
    pub service: String,
    /// The resource attributes of the exporting process.
    pub resource: HashMap<String, String>,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent: String,
    /// The W3C tracestate of the span's context (OTLP `trace_state`), empty when none.
    pub trace_state: String,
    pub name: String,
    pub kind: i32,
    pub attrs: HashMap<String, String>,
    pub status: i32,
    pub events: Vec<String>,
    /// Each event's name with its attributes' keys.
    pub event_attrs: Vec<(String, Vec<String>)>,
}

impl GotSpan {
    pub fn attr(&self, key: &str) -> &str {
        self.attrs.get(key).map(String::as_str).unwrap_or("")
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

fn flat(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Any::StringValue(s)) => s.clone(),
                Some(Any::IntValue(i)) => i.to_string(),
                Some(Any::BoolValue(b)) => b.to_string(),
                Some(Any::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

#[derive(Clone, Default)]
struct Store(Arc<Mutex<Vec<GotSpan>>>);

#[tonic::async_trait]
impl TraceService for Store {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut got = Vec::new();
        for rs in request.into_inner().resource_spans {
            let resource = rs.resource.map(|r| flat(&r.attributes)).unwrap_or_default();
            let service = resource.get("service.name").cloned().unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    got.push(GotSpan {
                        service: service.clone(),
                        resource: resource.clone(),
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent: hex(&s.parent_span_id),
                        trace_state: s.trace_state,
                        name: s.name,
                        kind: s.kind,
                        attrs: flat(&s.attributes),
                        status: s.status.map_or(0, |st| st.code),
                        events: s.events.iter().map(|e| e.name.clone()).collect(),
                        event_attrs: s
                            .events
                            .into_iter()
                            .map(|e| (e.name, e.attributes.into_iter().map(|kv| kv.key).collect()))
                            .collect(),
                    });
                }
            }
        }
        self.0.lock().unwrap().extend(got);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// The receiver; stops when dropped.
pub struct Receiver {
    pub port: u16,
    store: Store,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let store = Store::default();
        let svc = TraceServiceServer::new(store.clone());
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await;
        });
        Receiver { port, store, task }
    }

    /// The `otlpEndpoint` to configure.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<GotSpan> {
        self.store.0.lock().unwrap().clone()
    }

    /// Spans of `trace_id`, once at least `n` have arrived (export is batched).
    pub async fn trace(&self, trace_id: &str, n: usize) -> Vec<GotSpan> {
        super::poll(
            Duration::from_secs(30),
            "spans at the OTLP receiver",
            || async {
                let spans: Vec<GotSpan> = self
                    .spans()
                    .into_iter()
                    .filter(|s| s.trace_id == trace_id)
                    .collect();
                (spans.len() >= n).then_some(spans)
            },
        )
        .await
    }
}

impl Drop for Receiver {
    /// Stops it; and unless the test failed already, fails it when a sidecar sent a span the span
    /// catalog (`switchyard_sidecar::spans`, from which docs/reference/spans.md is written) does
    /// not list, or one with a kind, attribute or event it does not list.
    fn drop(&mut self) {
        self.task.abort();
        if std::thread::panicking() {
            return;
        }
        let spans = self.spans();
        let mut wrong: Vec<String> = spans
            .iter()
            // A sidecar's spans: its resource names its role (the apps' own spans are theirs).
            .filter(|s| s.resource.contains_key("switchyard.role"))
            .filter_map(|s| {
                let attrs: Vec<&str> = s.attrs.keys().map(String::as_str).collect();
                let events: Vec<(&str, Vec<&str>)> = s
                    .event_attrs
                    .iter()
                    .map(|(e, a)| (e.as_str(), a.iter().map(String::as_str).collect()))
                    .collect();
                switchyard_sidecar::spans::check(&s.name, s.kind, &attrs, &events)
                    .err()
                    .map(|e| e.to_string())
            })
            .collect();
        wrong.sort();
        wrong.dedup();
        assert!(
            wrong.is_empty(),
            "spans the catalog (sidecar/src/otel/catalog.rs) does not describe:\n{}",
            wrong.join("\n")
        );
    }
}
