//! The Prometheus endpoint of a server (`--metrics-listen ADDR`): every metric the
//! process records through the `metrics` facade, rendered in Prometheus' text format at
//! `http://ADDR/metrics` by `metrics-exporter-prometheus`'s own listener. Latency
//! histograms (every name ending in `_seconds`) have explicit buckets, not summaries:
//! buckets aggregate across brokers, quantiles do not. docs/operations.md lists the
//! metrics and what to alert on.

use std::net::SocketAddr;

use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use metrics_util::MetricKindMask;

/// Buckets of every `_seconds` histogram: 100 µs (an in-memory RPC) to 30 s (the longest
/// long-poll a request may ask for).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// How long a gauge nobody set stays exported. Every gauge is set again by a duty at
/// least this often while what it measures exists (per partition, per group and
/// topic); one whose partition was deleted or whose group went away is dropped after
/// this instead of reporting its last value forever. Counters and histograms stay.
pub const GAUGE_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on {addr}: {reason}")]
pub struct MetricsError {
    pub addr: SocketAddr,
    pub reason: String,
}

/// Installs the process-wide recorder and serves it on `addr`. Call once per process,
/// from within the Tokio runtime, before anything is recorded (records made before are
/// lost). A second call fails: a process has one recorder.
pub fn serve(addr: SocketAddr) -> Result<(), MetricsError> {
    let error = |reason: String| MetricsError { addr, reason };
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
        .map_err(|e| error(e.to_string()))?
        .idle_timeout(MetricKindMask::GAUGE, Some(GAUGE_IDLE_TIMEOUT))
        .install()
        .map_err(|e| error(e.to_string()))
}
