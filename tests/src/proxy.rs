//! A TCP proxy between a client and a broker that breaks gRPC calls on purpose. It reads
//! the HTTP/2 frames going each way (never altering a frame, so header compression
//! stays in step) and can:
//! - lose responses: close the connection instead of forwarding the first DATA frame of
//!   a response, after the broker has fully processed the request;
//! - lose a request body: drop the DATA frames of the next request stream, so the broker
//!   never sees that request, then close the connection once `n` later responses have
//!   been forwarded, failing the swallowed call.
//!
//! Counters say what happened, so a test can assert that the fault really occurred.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const FRAME_DATA: u8 = 0;

#[derive(Default)]
struct Faults {
    /// Responses still to lose.
    lose_responses: AtomicUsize,
    /// Request bodies still to swallow.
    swallow_requests: AtomicUsize,
    /// After a swallowed request: responses to forward before closing the connection.
    close_after_responses: AtomicUsize,
    lost_responses: AtomicUsize,
    swallowed_requests: AtomicUsize,
    forwarded_responses: AtomicUsize,
    closed_connections: AtomicUsize,
    changed: Notify,
}

/// A fault-injecting proxy listening on 127.0.0.1; dial [`FaultyProxy::addr`].
pub struct FaultyProxy {
    addr: SocketAddr,
    faults: Arc<Faults>,
    stop: watch::Sender<bool>,
}

impl FaultyProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let faults = Arc::new(Faults::default());
        let (stop, stopped) = watch::channel(false);
        let accept_faults = faults.clone();
        tokio::spawn(async move {
            loop {
                let mut stopped = stopped.clone();
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = stopped.changed() => return,
                };
                let Ok((client, _)) = accepted else { return };
                let faults = accept_faults.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    relay(client, server, faults, stopped).await;
                });
            }
        });
        FaultyProxy { addr, faults, stop }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    /// The next `n` responses are lost: each one closes its connection instead.
    pub fn lose_next_responses(&self, n: usize) {
        self.faults.lose_responses.store(n, Ordering::SeqCst);
    }

    /// The next request body never reaches the broker; its connection is closed once
    /// `responses_before_close` later responses have been forwarded.
    pub fn swallow_next_request(&self, responses_before_close: usize) {
        self.faults
            .close_after_responses
            .store(responses_before_close, Ordering::SeqCst);
        self.faults.swallow_requests.store(1, Ordering::SeqCst);
    }

    pub fn lost_responses(&self) -> usize {
        self.faults.lost_responses.load(Ordering::SeqCst)
    }

    pub fn swallowed_requests(&self) -> usize {
        self.faults.swallowed_requests.load(Ordering::SeqCst)
    }

    pub fn closed_connections(&self) -> usize {
        self.faults.closed_connections.load(Ordering::SeqCst)
    }

    /// Responses (gRPC message bodies) forwarded to the client.
    pub fn forwarded_responses(&self) -> usize {
        self.faults.forwarded_responses.load(Ordering::SeqCst)
    }

    /// Waits until the proxy has closed at least `n` connections on purpose.
    pub async fn wait_closed_connections(&self, n: usize) {
        self.wait_until(|proxy| proxy.closed_connections() >= n)
            .await;
    }

    /// Waits until at least `n` responses have been forwarded.
    pub async fn wait_forwarded_responses(&self, n: usize) {
        self.wait_until(|proxy| proxy.forwarded_responses() >= n)
            .await;
    }

    async fn wait_until(&self, done: impl Fn(&Self) -> bool) {
        loop {
            let changed = self.faults.changed.notified();
            if done(self) {
                return;
            }
            changed.await;
        }
    }
}

impl Drop for FaultyProxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    faults: Arc<Faults>,
    mut stopped: watch::Receiver<bool>,
) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let (close, closed) = watch::channel(false);
    let upstream = pump(
        client_read,
        server_write,
        Direction::Request,
        faults.clone(),
        close.clone(),
        closed.clone(),
    );
    let downstream = pump(
        server_read,
        client_write,
        Direction::Response,
        faults.clone(),
        close.clone(),
        closed,
    );
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = stopped.changed() => {}
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Request,
    Response,
}

/// Copies frames one way; returns when either side closes or a fault closes the pair.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    direction: Direction,
    faults: Arc<Faults>,
    close: watch::Sender<bool>,
    mut closed: watch::Receiver<bool>,
) {
    if direction == Direction::Request {
        let mut preface = [0u8; PREFACE.len()];
        if from.read_exact(&mut preface).await.is_err() || to.write_all(&preface).await.is_err() {
            return;
        }
    }
    let mut swallowed_stream: Option<u32> = None;
    loop {
        let mut header = [0u8; FRAME_HEADER_LEN];
        let read = tokio::select! {
            read = from.read_exact(&mut header) => read,
            _ = closed.changed() => return,
        };
        if read.is_err() {
            return;
        }
        let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        let frame_type = header[3];
        let stream_id =
            u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; length];
        if from.read_exact(&mut payload).await.is_err() {
            return;
        }
        let is_body = frame_type == FRAME_DATA && length > 0;
        match direction {
            Direction::Response if is_body => {
                if take_one(&faults.lose_responses) {
                    faults.lost_responses.fetch_add(1, Ordering::SeqCst);
                    close_connection(&faults, &close);
                    return;
                }
                faults.forwarded_responses.fetch_add(1, Ordering::SeqCst);
                faults.changed.notify_waiters();
            }
            Direction::Request if is_body => {
                if swallowed_stream.is_none() && take_one(&faults.swallow_requests) {
                    swallowed_stream = Some(stream_id);
                    faults.swallowed_requests.fetch_add(1, Ordering::SeqCst);
                }
                if swallowed_stream == Some(stream_id) {
                    continue;
                }
            }
            _ => {}
        }
        if to.write_all(&header).await.is_err() || to.write_all(&payload).await.is_err() {
            return;
        }
        if direction == Direction::Response
            && is_body
            && faults.swallowed_requests.load(Ordering::SeqCst) > 0
        {
            let remaining = faults.close_after_responses.load(Ordering::SeqCst);
            if remaining > 0 && faults.close_after_responses.fetch_sub(1, Ordering::SeqCst) == 1 {
                let _ = to.flush().await;
                close_connection(&faults, &close);
                return;
            }
        }
    }
}

fn take_one(counter: &AtomicUsize) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

fn close_connection(faults: &Faults, close: &watch::Sender<bool>) {
    let _ = close.send(true);
    faults.closed_connections.fetch_add(1, Ordering::SeqCst);
    faults.changed.notify_waiters();
}
