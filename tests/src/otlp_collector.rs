//! An OTLP/gRPC trace receiver for tests: the protocol's own generated service
//! (`opentelemetry-proto`), listening on a free local port, keeping every span the
//! servers export so a test can look up a trace as an operator's collector would.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use tokio_util::sync::CancellationToken;

/// One exported span, with ids as lowercase hex (as in `traceparent`).
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The exporting process's `service.name`.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// Every attribute, its value rendered as text.
    pub attributes: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
            (kv.key.clone(), text(value))
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = Vec::new();
        for resource_spans in request.into_inner().resource_spans {
            let resource = resource_spans
                .resource
                .map(|r| attributes(&r.attributes))
                .unwrap_or_default();
            let service = resource.get("service.name").cloned().unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    received.push(ReceivedSpan {
                        service: service.clone(),
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        attributes: attributes(&span.attributes),
                    });
                }
            }
        }
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(received);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A running collector; stops when dropped.
pub struct OtlpCollector {
    address: SocketAddr,
    receiver: Receiver,
    stop: CancellationToken,
}

impl OtlpCollector {
    /// Listens on a free port of 127.0.0.1, on a thread and runtime of its own: a test
    /// that blocks its own runtime (waiting for a process to exit) must not stall the
    /// exports of the processes it waits for.
    pub fn start() -> OtlpCollector {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the collector");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let address = listener.local_addr().expect("collector address");
        let receiver = Receiver::default();
        let stop = CancellationToken::new();
        let serving = (receiver.clone(), stop.clone());
        std::thread::spawn(move || {
            let (receiver, stop) = serving;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the collector's runtime");
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("a Tokio listener");
                let served = tonic::transport::Server::builder()
                    .add_service(TraceServiceServer::new(receiver))
                    .serve_with_incoming_shutdown(
                        tokio_stream::wrappers::TcpListenerStream::new(listener),
                        stop.cancelled_owned(),
                    )
                    .await;
                if let Err(e) = served {
                    eprintln!("the OTLP collector stopped: {e}");
                }
            });
        });
        OtlpCollector {
            address,
            receiver,
            stop,
        }
    }

    /// What servers pass as `--otlp-endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.receiver
            .spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for OtlpCollector {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
