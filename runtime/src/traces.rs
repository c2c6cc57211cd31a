//! Traces (issue 29): the process's `tracing` spans exported over OTLP/gRPC to a
//! collector when `--otlp-endpoint` names one, and the W3C trace context (`traceparent`)
//! read from a request's headers so an RPC's span continues its caller's trace, and
//! written into the headers of a node's own calls to other nodes (replica fetches;
//! the coordinator's through the SDK's channel) so one trace crosses the cluster.
//!
//! Which spans: every RPC (`grpc_server.rs`, named by its path) and the internal steps
//! at DEBUG level (append, fsync, replicate, marker round; docs/operations.md lists
//! them and their fields). Only the exporter's filter enables those DEBUG spans
//! (`IDEM_TRACES`, default [`DEFAULT_TRACES_FILTER`]), so without an endpoint they cost
//! nothing and the log filter (`IDEM_LOG`) stays what it was.

use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::runtime;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{BatchConfigBuilder, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The spans exported unless `IDEM_TRACES` says otherwise: RPCs, and idem's internal
/// steps.
pub const DEFAULT_TRACES_FILTER: &str =
    "info,idem_broker=debug,idem_coordinator=debug,idem_runtime=debug";

/// How long finished spans wait to be sent together: short, so a trace can be looked
/// up seconds after the request; one small export a second costs nothing measurable.
const EXPORT_EVERY: Duration = Duration::from_secs(1);

/// Longest one export may take: a stopping process sends its last spans and must not
/// wait long for a collector that is gone (the exporter's default is 10 s).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
#[error("cannot export traces to {endpoint}: {reason}")]
pub struct TracesError {
    pub endpoint: String,
    pub reason: String,
}

/// The export pipeline: finished spans are batched on the Tokio runtime and sent to
/// `endpoint` (`http://host:4317`). Call from within the runtime.
pub fn otlp_provider(
    endpoint: &str,
    service: &'static str,
) -> Result<SdkTracerProvider, TracesError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| TracesError {
            endpoint: endpoint.to_string(),
            reason: e.to_string(),
        })?;
    let batches = BatchSpanProcessor::builder(exporter, runtime::Tokio)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(EXPORT_EVERY)
                .build(),
        )
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(batches)
        .with_resource(Resource::builder().with_service_name(service).build())
        .build())
}

/// The tracer spans are exported through.
pub fn tracer(provider: &SdkTracerProvider) -> opentelemetry_sdk::trace::SdkTracer {
    provider.tracer("idem")
}

/// Makes `span` a child of the trace the caller sent in `headers` (W3C `traceparent`,
/// `tracestate`), if it sent one; otherwise `span` starts a trace of its own.
pub fn continue_remote_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    if headers.get("traceparent").is_none() {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    // An error only says the span is disabled (no exporter): nothing to continue.
    let _ = span.set_parent(parent);
}

/// Writes the current span's trace context into `headers` (W3C `traceparent`,
/// `tracestate`), so the node called continues this trace; nothing when there is no
/// span being exported (no `--otlp-endpoint`, or a span the filter left out).
pub fn inject_current(headers: &mut http::HeaderMap) {
    let context = tracing::Span::current().context();
    if !context.span().span_context().is_valid() {
        return;
    }
    TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt;

    #[test]
    fn given_a_traceparent_header_then_it_is_read_as_the_remote_parent() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
        );
        let parent = TraceContextPropagator::new().extract(&HeaderExtractor(&headers));
        let span = parent.span();
        let context = span.span_context();
        assert!(context.is_remote());
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
    }

    #[test]
    fn given_a_malformed_traceparent_then_no_parent_is_taken() {
        let mut headers = http::HeaderMap::new();
        headers.insert("traceparent", http::HeaderValue::from_static("00-zz-00-01"));
        let parent = TraceContextPropagator::new().extract(&HeaderExtractor(&headers));
        assert!(!parent.span().span_context().is_valid());
    }
}
