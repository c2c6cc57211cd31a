//! A TCP link between one process and etcd that a test can cut and heal, to cut that
//! one process off from etcd while every other process still reaches it. While cut,
//! nothing crosses in either direction and new connections are accepted but not
//! connected onward, as across a network partition: the process sees silence, not
//! resets, and what it sent before the cut arrives after the heal, as TCP would deliver
//! it once the partition ends. It can also refuse: drop every connection and every new
//! one at once, as a host whose port is closed does.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the link does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// Nothing crosses; connections stay open.
    Cut,
    /// Every connection is closed, new ones as soon as they are accepted.
    Refusing,
}

pub struct CuttableLink {
    addr: SocketAddr,
    state: Arc<watch::Sender<State>>,
    accept: JoinHandle<()>,
}

impl CuttableLink {
    /// Listens on a free 127.0.0.1 port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> CuttableLink {
        CuttableLink::start_on("127.0.0.1:0", upstream).await
    }

    /// Listens on `listen` (a given address).
    pub async fn start_on(listen: &str, upstream: SocketAddr) -> CuttableLink {
        let listener = TcpListener::bind(listen).await.expect("bind a link port");
        CuttableLink::start_with(listener, upstream)
    }

    /// Listens on `reserved`, a socket bound before the process behind it started (so
    /// that process could advertise its address): keeping it bound is what stops the
    /// kernel from handing the port to another socket meanwhile; connections made
    /// before the link starts wait in its backlog.
    pub fn start_reserved(reserved: std::net::TcpListener, upstream: SocketAddr) -> CuttableLink {
        reserved
            .set_nonblocking(true)
            .expect("a reserved link port in non-blocking mode");
        let listener = TcpListener::from_std(reserved).expect("a reserved link port on Tokio");
        CuttableLink::start_with(listener, upstream)
    }

    fn start_with(listener: TcpListener, upstream: SocketAddr) -> CuttableLink {
        let addr = listener.local_addr().expect("link address");
        let (state, _) = watch::channel(State::Open);
        let state = Arc::new(state);
        let accept = {
            let state = state.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if *state.borrow() == State::Refusing {
                        drop(client);
                        continue;
                    }
                    tokio::spawn(forward(client, upstream, state.subscribe()));
                }
            })
        };
        CuttableLink {
            addr,
            state,
            accept,
        }
    }

    /// `host:port` of the link.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for `--etcd`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn cut(&self) {
        self.state.send_replace(State::Cut);
    }

    /// Closes every connection and every new one.
    pub fn refuse(&self) {
        self.state.send_replace(State::Refusing);
    }

    pub fn heal(&self) {
        self.state.send_replace(State::Open);
    }
}

impl Drop for CuttableLink {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Waits while the link is cut; `false` when it refuses (the connection must close).
async fn until_open(state: &mut watch::Receiver<State>) -> bool {
    // The sender lives as long as the link; if it is gone, so is the test.
    match state.wait_for(|s| *s != State::Cut).await {
        Ok(s) => *s == State::Open,
        Err(_) => false,
    }
}

async fn forward(client: TcpStream, upstream: SocketAddr, mut state: watch::Receiver<State>) {
    if !until_open(&mut state).await {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = tokio::spawn(pump(client_read, server_write, state.clone()));
    let down = tokio::spawn(pump(server_read, client_write, state));
    let _ = tokio::join!(up, down);
}

/// Copies one direction, holding every chunk while the link is cut; stops when it
/// refuses.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<State>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if !until_open(&mut state).await {
            break;
        }
        let n = tokio::select! {
            read = from.read(&mut buffer) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = state.wait_for(|s| *s == State::Refusing) => break,
        };
        if !until_open(&mut state).await {
            break;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
