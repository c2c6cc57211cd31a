//! A gRPC service installed after the server started: until then every call is
//! answered UNAVAILABLE (retriable) while the health and reflection services already
//! answer. A broker serves health while it loads its logs, before the service that
//! needs them exists.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tower::ServiceExt;

/// `S` once [`Deferred::install`] gave it; UNAVAILABLE before.
#[derive(Debug)]
pub struct Deferred<S> {
    slot: Arc<OnceLock<S>>,
}

impl<S> Clone for Deferred<S> {
    fn clone(&self) -> Self {
        Deferred {
            slot: self.slot.clone(),
        }
    }
}

impl<S> Default for Deferred<S> {
    fn default() -> Self {
        Deferred {
            slot: Arc::new(OnceLock::new()),
        }
    }
}

impl<S> Deferred<S> {
    pub fn new() -> Deferred<S> {
        Deferred::default()
    }

    /// Starts answering with `service`; a second install is ignored (the first stays).
    pub fn install(&self, service: S) {
        if self.slot.set(service).is_err() {
            tracing::warn!("a deferred service was installed twice; keeping the first");
        }
    }
}

impl<S: NamedService> NamedService for Deferred<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<http::Request<Body>> for Deferred<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Readiness is the installed service's, checked per call by `oneshot`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        match self.slot.get() {
            Some(service) => Box::pin(service.clone().oneshot(request)),
            None => {
                let status = tonic::Status::unavailable("the server is loading its state");
                Box::pin(std::future::ready(Ok(status.into_http())))
            }
        }
    }
}
