//! How every idem server serves gRPC: a listener with Nagle's algorithm off, the
//! standard health service (fed by [`Health`]) and reflection beside the server's own
//! services, and the layers every RPC passes through: a tracing span named by the RPC
//! path, a request timeout and a concurrency limit. A stop lets in-flight requests
//! finish within a grace period, then drops the connections still open. With TLS
//! ([`GrpcListener::with_tls`]) every listener of the server accepts TLS only, and the
//! certificate is reloaded on SIGHUP (see [`crate::tls`]).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic::transport::server::TcpIncoming;

use crate::authn::AuthnLayer;
use crate::connection_limit::{
    ConnectionLimiter, ConnectionLimits, DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION,
};
use crate::health::Health;
use crate::listeners::BoundListeners;
use crate::rpc_metrics::RpcMetricsLayer;
use crate::tls::reload::reload_on_sighup;
use crate::tls::ServerTls;
use crate::traces;

/// What every idem gRPC server is configured with.
#[derive(Debug, Clone, Copy)]
pub struct GrpcSettings {
    /// Longest one RPC may run. Above the longest wait a request may ask for (a fetch
    /// long-poll and an acks=all produce both wait at most 30 s).
    pub request_timeout: Duration,
    /// RPCs served at once by the whole server; more wait their turn. High, because
    /// long-polling fetches and replica fetches each hold one for up to their wait.
    pub concurrency_limit: usize,
    /// How long a stopping server lets in-flight requests finish.
    pub grace: Duration,
    /// Connections held at once, in all and per client address (0: no limit).
    pub connections: ConnectionLimits,
    /// RPCs one connection may have served at once; more wait their turn, so one
    /// client cannot take the whole server's concurrency (0: no limit). A gRPC channel
    /// multiplexes every call of a client over one connection: an idempotent producer
    /// has up to 5 produces in flight per partition.
    pub max_in_flight_per_connection: usize,
}

impl Default for GrpcSettings {
    fn default() -> Self {
        GrpcSettings {
            request_timeout: Duration::from_secs(60),
            concurrency_limit: 10_000,
            grace: Duration::from_secs(2),
            connections: ConnectionLimits::default(),
            max_in_flight_per_connection: DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GrpcServerError {
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("reflection service: {0}")]
    Reflection(String),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("gRPC server task: {0}")]
    Task(String),
    #[error("cannot listen for SIGHUP (TLS reload): {0}")]
    Signal(std::io::Error),
}

/// The accepted connections of `listener`, each with Nagle's algorithm off. Tonic's
/// `Server::tcp_nodelay` applies only to listeners it binds itself, not to a stream of
/// connections handed in; with Nagle on, a response split over several writes waits
/// for the client's delayed ACK (about 40 ms a round trip on Linux).
pub fn accept_without_nagle(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// A bound listen address (port 0 picks a free port) and, optionally, a second one for
/// the external listener (see [`crate::listeners`]), not yet serving. Both serve the
/// same services; a request tells which one it came through by its local address.
#[derive(Debug)]
pub struct GrpcListener {
    listener: TcpListener,
    local_addr: SocketAddr,
    external: Option<(TcpListener, SocketAddr)>,
    authn: AuthnLayer,
    tls: Option<ServerTls>,
}

impl GrpcListener {
    pub async fn bind(addr: SocketAddr) -> Result<GrpcListener, GrpcServerError> {
        let (listener, local_addr) = bind_one(addr).await?;
        Ok(GrpcListener {
            listener,
            local_addr,
            external: None,
            authn: AuthnLayer::default(),
            tls: None,
        })
    }

    /// Authenticates every request with `authn` (see [`crate::authn`]); without it,
    /// every request is `User:ANONYMOUS`.
    pub fn with_authentication(mut self, authn: AuthnLayer) -> GrpcListener {
        self.authn = authn;
        self
    }

    /// Also binds the external listener's address, when there is one.
    pub async fn with_external(
        mut self,
        addr: Option<SocketAddr>,
    ) -> Result<GrpcListener, GrpcServerError> {
        if let Some(addr) = addr {
            self.external = Some(bind_one(addr).await?);
        }
        Ok(self)
    }

    /// Serves TLS only, on every listener, when `tls` is given.
    pub fn with_tls(mut self, tls: Option<ServerTls>) -> GrpcListener {
        self.tls = tls;
        self
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The addresses bound, to tell a request's listener from its local address.
    pub fn bound(&self) -> BoundListeners {
        BoundListeners {
            internal: self.local_addr,
            external: self.external.as_ref().map(|(_, addr)| *addr),
        }
    }

    /// Serves `routes` (the server's own services; `service` names the one health
    /// reports on) with health and reflection, until `stop` is cancelled; see
    /// [`RunningServer::stopped`].
    pub fn serve(
        self,
        routes: Routes,
        service: &'static str,
        health: &Health,
        settings: GrpcSettings,
        stop: CancellationToken,
    ) -> Result<RunningServer, GrpcServerError> {
        let (reporter, health_service) = tonic_health::server::health_reporter();
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(idem_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(|e| GrpcServerError::Reflection(e.to_string()))?;
        let routes = routes.add_service(health_service).add_service(reflection);
        let mut builder = tonic::transport::Server::builder();
        // 0 is no limit: no layer (a semaphore cannot hold usize::MAX permits).
        if settings.max_in_flight_per_connection > 0 {
            builder =
                builder.concurrency_limit_per_connection(settings.max_in_flight_per_connection);
        }
        let router = builder
            .trace_fn(|request| {
                let path = request.uri().path();
                let span = tracing::info_span!("rpc", path, otel.name = path, otel.kind = "server");
                traces::continue_remote_trace(&span, request.headers());
                span
            })
            .timeout(settings.request_timeout)
            .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
                settings.concurrency_limit,
            ))
            .layer(RpcMetricsLayer)
            .layer(self.authn)
            .add_routes(routes);
        let accepted =
            ConnectionLimiter::new(settings.connections).limit(futures::stream::select_all(
                std::iter::once(self.listener)
                    .chain(self.external.map(|(listener, _)| listener))
                    .map(accept_without_nagle),
            ));
        let stopped = stop.clone().cancelled_owned();
        let server: futures::future::BoxFuture<'static, Result<(), tonic::transport::Error>> =
            match self.tls {
                None => Box::pin(router.serve_with_incoming_shutdown(accepted, stopped)),
                Some(tls) => {
                    reload_on_sighup(tls.clone(), stop.clone()).map_err(GrpcServerError::Signal)?;
                    let sessions = tls.incoming(accepted, stop.clone());
                    Box::pin(router.serve_with_incoming_shutdown(sessions, stopped))
                }
            };
        let report = health.clone().report(reporter, service);
        // Past the grace period the server future is dropped with the connections
        // still open: idle clients and long-polls must not keep a stopping server.
        let grace_over = CancellationToken::new();
        let serving = grace_over.clone().run_until_cancelled_owned(async move {
            tokio::select! {
                served = server => served,
                () = report => std::future::pending().await,
            }
        });
        Ok(RunningServer {
            stop,
            grace_over,
            grace: settings.grace,
            health: health.clone(),
            task: tokio::spawn(serving),
        })
    }
}

async fn bind_one(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), GrpcServerError> {
    let bind_error = |source| GrpcServerError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local_addr = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local_addr))
}

/// A server serving in the background.
#[derive(Debug)]
pub struct RunningServer {
    stop: CancellationToken,
    grace_over: CancellationToken,
    grace: Duration,
    health: Health,
    task: JoinHandle<Option<Result<(), tonic::transport::Error>>>,
}

impl RunningServer {
    /// Waits until the stop token is cancelled (or the server failed), reports
    /// NOT_SERVING, stops accepting and waits for in-flight requests for the grace
    /// period at most.
    pub async fn stopped(mut self) -> Result<(), GrpcServerError> {
        let early = tokio::select! {
            ended = &mut self.task => Some(ended),
            () = self.stop.cancelled() => None,
        };
        self.health.set_stopping();
        let ended = match early {
            Some(ended) => ended,
            None => match tokio::time::timeout(self.grace, &mut self.task).await {
                Ok(ended) => ended,
                Err(_) => {
                    tracing::warn!(
                        grace_ms = self.grace.as_millis() as u64,
                        "clients still connected after the grace period; stopping anyway"
                    );
                    self.grace_over.cancel();
                    (&mut self.task).await
                }
            },
        };
        match ended {
            Ok(Some(served)) => Ok(served?),
            Ok(None) => Ok(()),
            Err(e) => Err(GrpcServerError::Task(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio_stream::StreamExt;

    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let mut incoming = accept_without_nagle(listener);
        let _client = tokio::net::TcpStream::connect(address)
            .await
            .expect("connect");
        let accepted = incoming
            .next()
            .await
            .expect("a connection")
            .expect("accepted");
        assert!(accepted.nodelay().expect("nodelay"), "Nagle is on");
    }
}
