//! How many connections a server holds (Kafka's `max.connections` and
//! `max.connections.per.ip`): a client that opens connections in a loop, or a fleet
//! that reconnects all at once, must not exhaust the server's file descriptors and
//! memory for everyone. A connection past a limit is closed as soon as it is accepted,
//! before any TLS handshake or HTTP/2 frame costs anything, logged (rate-limited) and
//! counted in `idem_connections_refused_total{reason}`; `idem_connections_open` is the
//! number held. The count of a connection ends when the server drops it.
//!
//! [`Admission`] is the pure decision; [`ConnectionLimiter`] the shared count the accept
//! loop asks, and [`LimitedStream`] the accepted socket that gives its place back.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::log_limit::LogLimit;

/// The limits; 0 means none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnectionLimits {
    /// Connections held at once, from every client.
    pub max_connections: usize,
    /// Connections held at once from one client IP address.
    pub max_connections_per_ip: usize,
}

/// RPCs one connection may have served at once unless told otherwise: 200 partitions
/// of one idempotent producer at its full pipeline of 5.
pub const DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION: usize = 1000;

/// The flags every server takes for its connections (broker and coordinator alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct ConnectionFlags {
    /// Most connections the server holds at once, from every client; more are closed
    /// as soon as they are accepted. 0, the default: no limit (as Kafka's
    /// `max.connections`).
    #[arg(long, env = "IDEM_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,
    /// Most connections the server holds at once from one client IP address. 0, the
    /// default: no limit.
    #[arg(long, env = "IDEM_MAX_CONNECTIONS_PER_IP", default_value_t = 0)]
    pub max_connections_per_ip: usize,
    /// Most RPCs one connection has served at once; more wait their turn. One gRPC
    /// channel carries all of a client's calls (an idempotent producer keeps up to 5
    /// produces in flight per partition). 0: no limit.
    #[arg(
        long,
        env = "IDEM_MAX_IN_FLIGHT_PER_CONNECTION",
        default_value_t = DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION
    )]
    pub max_in_flight_per_connection: usize,
}

impl Default for ConnectionFlags {
    fn default() -> Self {
        ConnectionFlags {
            max_connections: 0,
            max_connections_per_ip: 0,
            max_in_flight_per_connection: DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION,
        }
    }
}

impl ConnectionFlags {
    /// The connection limits of a [`crate::grpc_server::GrpcSettings`].
    pub fn limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections,
            max_connections_per_ip: self.max_connections_per_ip,
        }
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Total,
    PerIp,
}

impl Refused {
    fn as_str(self) -> &'static str {
        match self {
            Refused::Total => "max_connections",
            Refused::PerIp => "max_connections_per_ip",
        }
    }
}

/// The connections held: the pure decision of whether one more may be.
#[derive(Debug, Default)]
pub struct Admission {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

impl Admission {
    /// Counts a connection from `ip` if `limits` allow one more.
    pub fn admit(&mut self, ip: IpAddr, limits: ConnectionLimits) -> Result<(), Refused> {
        if limits.max_connections > 0 && self.total >= limits.max_connections {
            return Err(Refused::Total);
        }
        let from_ip = self.per_ip.get(&ip).copied().unwrap_or(0);
        if limits.max_connections_per_ip > 0 && from_ip >= limits.max_connections_per_ip {
            return Err(Refused::PerIp);
        }
        self.total += 1;
        self.per_ip.insert(ip, from_ip + 1);
        Ok(())
    }

    /// Gives back the place of a connection from `ip` that [`Admission::admit`] counted.
    pub fn release(&mut self, ip: IpAddr) {
        self.total = self.total.saturating_sub(1);
        if let Some(count) = self.per_ip.get_mut(&ip) {
            *count -= 1;
            if *count == 0 {
                self.per_ip.remove(&ip);
            }
        }
    }

    pub fn held(&self) -> usize {
        self.total
    }
}

/// The count of one server's connections, shared by its listeners.
#[derive(Debug, Clone)]
pub struct ConnectionLimiter {
    limits: ConnectionLimits,
    held: Arc<Mutex<Admission>>,
    refusals: Arc<Mutex<LogLimit>>,
}

impl ConnectionLimiter {
    pub fn new(limits: ConnectionLimits) -> ConnectionLimiter {
        ConnectionLimiter {
            limits,
            held: Arc::default(),
            refusals: Arc::new(Mutex::new(LogLimit::for_repeated_failures())),
        }
    }

    /// Keeps the connections `accepted` that the limits allow, each holding its place
    /// until it is dropped; closes the others at once.
    pub fn limit<S>(
        self,
        accepted: S,
    ) -> impl Stream<Item = io::Result<LimitedStream>> + Send + Unpin + 'static
    where
        S: Stream<Item = io::Result<TcpStream>> + Send + Unpin + 'static,
    {
        accepted.filter_map(move |next| {
            let admitted = match next {
                Err(e) => Some(Err(e)),
                Ok(stream) => self.admit(stream).map(Ok),
            };
            futures::future::ready(admitted)
        })
    }

    fn admit(&self, stream: TcpStream) -> Option<LimitedStream> {
        // A socket whose peer is already gone is dropped: it would be closed anyway.
        let peer = stream.peer_addr().ok()?;
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match held.admit(peer.ip(), self.limits) {
            Ok(()) => {
                metrics::gauge!("idem_connections_open").set(held.held() as f64);
                Some(LimitedStream {
                    stream,
                    _place: Place {
                        ip: peer.ip(),
                        held: self.held.clone(),
                    },
                })
            }
            Err(refused) => {
                metrics::counter!("idem_connections_refused_total", "reason" => refused.as_str())
                    .increment(1);
                crate::warn_limited!(
                    self.refusals.lock().unwrap_or_else(|e| e.into_inner()),
                    %peer,
                    limit = refused.as_str(),
                    limits = ?self.limits,
                    "connection refused: the server holds as many as it may"
                );
                None
            }
        }
    }
}

/// A connection's place in the count, given back when the connection is dropped.
#[derive(Debug)]
struct Place {
    ip: IpAddr,
    held: Arc<Mutex<Admission>>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.release(self.ip);
        metrics::gauge!("idem_connections_open").set(held.held() as f64);
    }
}

/// An accepted TCP connection that holds its place in the server's count.
#[derive(Debug)]
pub struct LimitedStream {
    stream: TcpStream,
    _place: Place,
}

impl LimitedStream {
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.stream.peer_addr()
    }
}

impl Connected for LimitedStream {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn given_the_limits_reached_then_the_reason_is_named_and_a_release_frees_a_place() {
        let limits = ConnectionLimits {
            max_connections: 3,
            max_connections_per_ip: 2,
        };
        let mut held = Admission::default();
        assert_eq!(held.admit(ip(1), limits), Ok(()));
        assert_eq!(held.admit(ip(1), limits), Ok(()));
        assert_eq!(held.admit(ip(1), limits), Err(Refused::PerIp));
        assert_eq!(held.admit(ip(2), limits), Ok(()));
        assert_eq!(held.admit(ip(3), limits), Err(Refused::Total));
        held.release(ip(1));
        assert_eq!(held.admit(ip(3), limits), Ok(()));
        assert_eq!(held.held(), 3);
        // No limits: everything is admitted.
        let mut open = Admission::default();
        for _ in 0..1000 {
            assert_eq!(open.admit(ip(9), ConnectionLimits::default()), Ok(()));
        }
    }

    proptest! {
        /// Whatever the order of opens and closes, the count never passes a limit
        /// and is exactly what was admitted and not yet released.
        #[test]
        fn the_count_never_passes_a_limit(
            total in 1usize..8,
            per_ip in 1usize..4,
            steps in prop::collection::vec((any::<bool>(), 0u8..4), 1..300),
        ) {
            let limits = ConnectionLimits { max_connections: total, max_connections_per_ip: per_ip };
            let mut held = Admission::default();
            let mut open: Vec<u8> = Vec::new();
            for (connect, who) in steps {
                if connect {
                    if held.admit(ip(who), limits).is_ok() {
                        open.push(who);
                    }
                } else if let Some(at) = open.iter().position(|w| *w == who) {
                    open.remove(at);
                    held.release(ip(who));
                }
                prop_assert_eq!(held.held(), open.len());
                prop_assert!(open.len() <= total);
                for w in 0..4u8 {
                    prop_assert!(open.iter().filter(|o| **o == w).count() <= per_ip);
                }
            }
        }
    }
}
