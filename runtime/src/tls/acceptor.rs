//! The accept path of a TLS server: each accepted TCP connection gets its handshake in
//! a task of its own, with the certificate current at that moment, so a slow or silent
//! client never holds up the others, and a reload ([`ServerTls::replace`]) applies to
//! every connection accepted after it while open ones keep their session. Connections
//! whose handshake fails or times out are dropped: only finished TLS sessions reach the
//! gRPC server, which then reads the peer's certificates from each one
//! (`tonic::Request::peer_certs`).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::connection_limit::LimitedStream;
use futures::{Stream, StreamExt};
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::tls::files::{LoadedTls, TlsFiles};

/// Longest a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for the gRPC server to take them.
const READY_BACKLOG: usize = 128;

/// Why a client's handshake did not finish (the connection is dropped).
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("TLS handshake refused: {0}")]
    Refused(std::io::Error),
    #[error("TLS handshake not finished within {HANDSHAKE_TIMEOUT:?}")]
    TimedOut,
}

/// What else follows a reload of the files (the TLS a server dials members with).
type OnReload = Arc<dyn Fn(&LoadedTls) + Send + Sync>;

/// A server's TLS: the files it was started with and the config built from them last.
#[derive(Clone)]
pub struct ServerTls {
    files: TlsFiles,
    current: Arc<RwLock<Arc<ServerConfig>>>,
    on_reload: Arc<RwLock<Vec<OnReload>>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    pub fn new(files: TlsFiles, config: Arc<ServerConfig>) -> Self {
        ServerTls {
            files,
            current: Arc::new(RwLock::new(config)),
            on_reload: Arc::default(),
        }
    }

    /// Calls `then` with the files each time they are reloaded successfully: the
    /// clients this process dials other members with must present the rotated
    /// certificate too ([`crate::tls::PeerTls::replace`]).
    pub fn on_reload(&self, then: impl Fn(&LoadedTls) + Send + Sync + 'static) {
        self.on_reload
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Arc::new(then));
    }

    /// Makes `loaded` what the listeners accept with and what every follower of
    /// [`ServerTls::on_reload`] dials with, from now on.
    pub fn reloaded(&self, loaded: &LoadedTls) {
        self.replace(loaded.server.clone());
        let followers = self
            .on_reload
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for then in followers {
            then(loaded);
        }
    }

    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The config new connections are accepted with.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Makes `config` the one every connection accepted from now on handshakes with.
    pub fn replace(&self, config: Arc<ServerConfig>) {
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = config;
    }

    /// The TLS session of one accepted connection, handshaken with the config current
    /// now, within [`HANDSHAKE_TIMEOUT`] (a silent client cannot hold a task). Every
    /// listener of the server (gRPC, Kafka) accepts through here, so all count their
    /// failures in `idem_tls_handshake_failures_total`.
    pub async fn handshake<IO>(&self, connection: IO) -> Result<TlsStream<IO>, HandshakeError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let acceptor = TlsAcceptor::from(self.current());
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(connection)).await {
            Ok(Ok(session)) => Ok(session),
            Ok(Err(e)) => {
                metrics::counter!("idem_tls_handshake_failures_total", "reason" => "refused")
                    .increment(1);
                Err(HandshakeError::Refused(e))
            }
            Err(_) => {
                metrics::counter!("idem_tls_handshake_failures_total", "reason" => "timeout")
                    .increment(1);
                Err(HandshakeError::TimedOut)
            }
        }
    }

    /// The TLS sessions of the connections `accepted` yields, in the order their
    /// handshakes finish, until `stop` is cancelled or the stream is dropped.
    pub fn incoming<S>(
        &self,
        accepted: S,
        stop: CancellationToken,
    ) -> impl Stream<Item = std::io::Result<TlsStream<LimitedStream>>> + Send + 'static
    where
        S: Stream<Item = std::io::Result<LimitedStream>> + Send + Unpin + 'static,
    {
        let (ready, mut sessions) = mpsc::channel(READY_BACKLOG);
        tokio::spawn(accept_loop(self.clone(), accepted, ready, stop));
        futures::stream::poll_fn(move |cx| sessions.poll_recv(cx))
    }
}

async fn accept_loop<S>(
    tls: ServerTls,
    mut accepted: S,
    ready: mpsc::Sender<std::io::Result<TlsStream<LimitedStream>>>,
    stop: CancellationToken,
) where
    S: Stream<Item = std::io::Result<LimitedStream>> + Send + Unpin + 'static,
{
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => return,
            () = ready.closed() => return,
            next = accepted.next() => next,
        };
        let connection = match next {
            None => return,
            Some(Ok(connection)) => connection,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "accept failed");
                continue;
            }
        };
        let (tls, ready) = (tls.clone(), ready.clone());
        tokio::spawn(async move {
            let peer = connection.peer_addr().ok();
            match tls.handshake(connection).await {
                Ok(session) => {
                    let _ = ready.send(Ok(session)).await;
                }
                Err(e) => tracing::debug!(?peer, error = %e, "TLS handshake failed"),
            }
        });
    }
}
