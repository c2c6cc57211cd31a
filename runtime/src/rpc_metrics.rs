//! Per-RPC metrics of every idem server, as a tower layer around the gRPC routes:
//!
//! - `idem_rpc_requests_total{rpc}`: RPCs answered;
//! - `idem_rpc_failures_total{rpc, status}`: RPCs answered with a gRPC status other than
//!   OK (UNAVAILABLE while a broker has lost its lease, a request too large, a timeout);
//!   refusals travel in response bodies as error codes and are counted where they are
//!   decided (`idem_refusals_total`), not here;
//! - `idem_rpc_duration_seconds{rpc}`: time to the response headers (a fetch
//!   long-poll's wait included).
//!
//! `rpc` is the method name (`Produce`, `Fetch`, `EndTxn`): a fixed, small set.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tower::{Layer, Service};

/// The layer [`crate::grpc_server`] puts in front of every server's routes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RpcMetricsLayer;

impl<S> Layer<S> for RpcMetricsLayer {
    type Service = RpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RpcMetrics { inner }
    }
}

#[derive(Debug, Clone)]
pub struct RpcMetrics<S> {
    inner: S,
}

/// The method of a gRPC path (`/idem.v1.Broker/Produce` → `Produce`).
fn rpc_name(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

impl<S, B, R> Service<http::Request<B>> for RpcMetrics<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let rpc = rpc_name(request.uri().path());
        let started = Instant::now();
        let answered = self.inner.call(request);
        Box::pin(async move {
            let response = answered.await;
            metrics::histogram!("idem_rpc_duration_seconds", "rpc" => rpc.clone())
                .record(started.elapsed().as_secs_f64());
            metrics::counter!("idem_rpc_requests_total", "rpc" => rpc.clone()).increment(1);
            // A status other than OK in the headers is a "trailers-only" answer: what
            // tonic sends for an RPC that returned an error.
            let status = match &response {
                Ok(r) => r
                    .headers()
                    .get("grpc-status")
                    .and_then(|s| s.to_str().ok())
                    .filter(|s| *s != "0")
                    .map(str::to_string),
                Err(_) => Some("transport".to_string()),
            };
            if let Some(status) = status {
                metrics::counter!("idem_rpc_failures_total", "rpc" => rpc, "status" => status)
                    .increment(1);
            }
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rpc_is_the_last_segment_of_the_path() {
        assert_eq!(rpc_name("/idem.v1.Broker/Produce"), "Produce");
        assert_eq!(
            rpc_name("/grpc.health.v1.Health/Check"),
            "Check".to_string()
        );
        assert_eq!(rpc_name("odd"), "odd");
    }
}
