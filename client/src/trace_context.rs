//! W3C trace context carried in record headers (feature `otel`): a record sent from
//! within a traced span carries that span's `traceparent` (and `tracestate`), and a
//! consumer reads it back ([`crate::ConsumerRecord::trace_context`]) to continue the
//! trace where the record is processed: a record followed from producer to consumer.
//!
//! The span's context comes from `tracing` through `tracing-opentelemetry`: the
//! application installs the OpenTelemetry layer (as it does to export its own spans);
//! without it, or outside any span, nothing is added. A record that already has a
//! `traceparent` header keeps it (a pipeline forwarding a record's own context).

use bytes::Bytes;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The header holding a record's W3C trace parent.
pub const TRACEPARENT: &str = "traceparent";

struct HeadersOut<'a>(&'a mut Vec<(String, Bytes)>);

impl Injector for HeadersOut<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_string(), Bytes::from(value)));
    }
}

struct HeadersIn<'a>(&'a [(String, Bytes)]);

impl Extractor for HeadersIn<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        // The last one wins, as for any header read by key.
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_str()).collect()
    }
}

/// Adds the current span's trace context to `headers`, unless they already carry one
/// or there is no valid context to add (no span, or no OpenTelemetry layer).
pub(crate) fn inject_current(headers: &mut Vec<(String, Bytes)>) {
    if headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case(TRACEPARENT))
    {
        return;
    }
    let context = tracing::Span::current().context();
    if !context.span().span_context().is_valid() {
        return;
    }
    TraceContextPropagator::new().inject_context(&context, &mut HeadersOut(headers));
}

/// Writes the current span's trace context into an RPC's `headers`, so the node called
/// continues this trace; nothing outside an exported span.
pub(crate) fn inject_rpc(headers: &mut tonic::codegen::http::HeaderMap) {
    let context = tracing::Span::current().context();
    if !context.span().span_context().is_valid() {
        return;
    }
    TraceContextPropagator::new()
        .inject_context(&context, &mut opentelemetry_http::HeaderInjector(headers));
}

/// The trace context `headers` carry, if they carry a valid one.
pub(crate) fn extract(headers: &[(String, Bytes)]) -> Option<opentelemetry::Context> {
    let context = TraceContextPropagator::new().extract(&HeadersIn(headers));
    context.span().span_context().is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;

    fn traced<T>(run: impl FnOnce() -> T) -> T {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, run)
    }

    #[test]
    fn given_a_traced_span_then_the_headers_carry_its_context_and_read_back_to_it() {
        traced(|| {
            let span = tracing::info_span!("send");
            let _entered = span.enter();
            let expected = span.context().span().span_context().clone();
            assert!(expected.is_valid());
            let mut headers = vec![("app".to_string(), Bytes::from_static(b"x"))];
            inject_current(&mut headers);
            let traceparent = headers
                .iter()
                .find(|(k, _)| k == TRACEPARENT)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                .expect("a traceparent header");
            assert_eq!(
                traceparent,
                format!("00-{}-{}-01", expected.trace_id(), expected.span_id())
            );
            let read = extract(&headers).expect("a context");
            let read = read.span().span_context().clone();
            assert_eq!(
                (read.trace_id(), read.span_id()),
                (expected.trace_id(), expected.span_id())
            );
            assert!(read.is_remote());
        });
    }

    #[test]
    fn given_a_traceparent_already_then_it_is_kept() {
        traced(|| {
            let span = tracing::info_span!("forward");
            let _entered = span.enter();
            let upstream = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let mut headers = vec![(
                TRACEPARENT.to_string(),
                Bytes::from_static(upstream.as_bytes()),
            )];
            inject_current(&mut headers);
            assert_eq!(headers.len(), 1);
            assert_eq!(headers[0].1, upstream.as_bytes());
        });
    }

    #[test]
    fn given_no_span_or_no_header_then_nothing_is_added_or_read() {
        let mut headers = Vec::new();
        inject_current(&mut headers);
        assert!(headers.is_empty(), "outside any traced span");
        assert!(extract(&headers).is_none());
        let malformed = vec![(TRACEPARENT.to_string(), Bytes::from_static(b"00-zz-01"))];
        assert!(extract(&malformed).is_none());
    }
}
