//! Where a server process's logs and traces go: `tracing` events to stderr (stdout
//! carries only the banner scripts and tests read), filtered by `IDEM_LOG` (an
//! `EnvFilter`, e.g. `info,idem_broker::replication=debug`) and by `default_filter`
//! without it; and, when an OTLP endpoint is given, spans to that collector under a
//! filter of their own (`IDEM_TRACES`, see [`crate::traces`]).

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::traces::{self, TracesError, DEFAULT_TRACES_FILTER};

/// Installs the process's subscriber, logs only; call once, first thing in `main`.
pub fn init(default_filter: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(log_filter(default_filter))
        .with_writer(std::io::stderr)
        .init();
}

fn log_filter(default_filter: &str) -> EnvFilter {
    EnvFilter::try_from_env("IDEM_LOG").unwrap_or_else(|_| default_filter.into())
}

/// The span exporter of a process that exports traces; [`Traces::shutdown`] sends
/// what is still buffered.
pub struct Traces {
    provider: Option<SdkTracerProvider>,
}

impl Traces {
    /// Sends the spans still buffered and stops exporting; call once serving ended.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        // The SDK waits for its export task synchronously: not on a runtime worker.
        let stopped = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = stopped {
            tracing::warn!(error = %e, "the last spans could not be exported");
        }
    }
}

/// [`init`], and when `otlp_endpoint` is set, spans of `service` exported there. Call
/// once, from within the Tokio runtime.
pub fn init_with_traces(
    default_filter: &str,
    otlp_endpoint: Option<&str>,
    service: &'static str,
) -> Result<Traces, TracesError> {
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(log_filter(default_filter));
    let Some(endpoint) = otlp_endpoint else {
        tracing_subscriber::registry().with(logs).init();
        return Ok(Traces { provider: None });
    };
    let provider = traces::otlp_provider(endpoint, service)?;
    let spans = tracing_opentelemetry::layer()
        .with_tracer(traces::tracer(&provider))
        .with_filter(
            EnvFilter::try_from_env("IDEM_TRACES").unwrap_or_else(|_| DEFAULT_TRACES_FILTER.into()),
        );
    tracing_subscriber::registry().with(logs).with(spans).init();
    tracing::info!(endpoint, "exporting traces over OTLP");
    Ok(Traces {
        provider: Some(provider),
    })
}
