//! An OTLP/gRPC trace receiver in the test process, keeping every span it is sent (flattened), so
//! tests can check what a real process exports.

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
use tokio_stream::wrappers::TcpListenerStream;

/// A received span.
#[derive(Clone, Debug)]
pub struct Span {
    /// The exporting process's resource attributes.
    pub resource: HashMap<String, String>,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// Empty for a root span.
    pub parent: String,
    /// Span name.
    pub name: String,
    /// `Span.kind`, as OTLP numbers it (1 internal, 2 server, 3 client, ...).
    pub kind: i32,
    /// Attributes, values as strings.
    pub attrs: HashMap<String, String>,
    /// `Status.code`: 0 unset, 1 ok, 2 error.
    pub status: i32,
    /// Its events: each name with its attributes' keys.
    pub events: Vec<(String, Vec<String>)>,
}

impl Span {
    /// An attribute, "" when absent.
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
struct Store(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Store {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut got = Vec::new();
        for rs in request.into_inner().resource_spans {
            let resource = rs.resource.map(|r| flat(&r.attributes)).unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    got.push(Span {
                        resource: resource.clone(),
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent: hex(&s.parent_span_id),
                        name: s.name,
                        kind: s.kind,
                        attrs: flat(&s.attributes),
                        status: s.status.map_or(0, |st| st.code),
                        events: s
                            .events
                            .into_iter()
                            .map(|e| (e.name, e.attributes.into_iter().map(|kv| kv.key).collect()))
                            .collect(),
                    });
                }
            }
        }
        self.0
            .lock()
            .map_err(|_| tonic::Status::internal("store poisoned"))?
            .extend(got);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// The receiver, on a free port of 127.0.0.1; stops when dropped.
pub struct Receiver {
    port: u16,
    store: Store,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts serving.
    pub async fn start() -> anyhow::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let store = Store::default();
        let svc = TraceServiceServer::new(store.clone());
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await;
        });
        Ok(Receiver { port, store, task })
    }

    /// `http://127.0.0.1:<port>`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.store.0.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
