//! A TCP proxy between a client and a broker that breaks gRPC calls on purpose. It reads
//! the HTTP/2 frames going each way (never altering a frame, so header compression
//! stays in step) and can:
//! - lose responses: close the connection instead of forwarding the first DATA frame of
//!   a response, after the broker has fully processed the request;
//! - lose a request body: drop the DATA frames of the next request stream, so the broker
//!   never sees that request, then close the connection once `n` later responses have
//!   been forwarded, failing the swallowed call;
//! - hold a request: keep back the DATA frames of the next request stream (its HEADERS
//!   went through: header compression forbids holding or reordering HEADERS frames) and
//!   every later frame of that stream, such as the client's RST_STREAM when it gives up,
//!   while other streams flow; [`FaultyProxy::release_held`] then delivers them in their
//!   original order, as a request that arrives late. The frames from the stream's first
//!   RST_STREAM on are delivered only once the broker has answered the released request
//!   (or reset it): a reset arriving right behind the body would let the broker drop the
//!   request unprocessed, and the point is to have it processed late. The body of that
//!   answer is kept ([`FaultyProxy::released_response_bodies`]).
//!
//! Counters say what happened, so a test can assert that the fault really occurred.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const FRAME_DATA: u8 = 0;
const FRAME_HEADERS: u8 = 1;
const FRAME_RST_STREAM: u8 = 3;
const FRAME_CONTINUATION: u8 = 9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_PADDED: u8 = 0x8;

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
    /// Request streams still to hold.
    hold_requests: AtomicUsize,
    /// Request streams held so far.
    held_requests: AtomicUsize,
    /// Held request streams delivered to the broker.
    released_requests: AtomicUsize,
    /// Answers (end of stream or reset) of released requests forwarded to the client.
    released_responses: AtomicUsize,
    /// The DATA payloads of each released request's answer, concatenated.
    released_response_bodies: Mutex<Vec<Vec<u8>>>,
    /// Bumped by [`FaultyProxy::release_held`]; every connection watches it.
    release: watch::Sender<u64>,
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
        let faults = Arc::new(Faults {
            lose_responses: AtomicUsize::new(0),
            swallow_requests: AtomicUsize::new(0),
            close_after_responses: AtomicUsize::new(0),
            lost_responses: AtomicUsize::new(0),
            swallowed_requests: AtomicUsize::new(0),
            forwarded_responses: AtomicUsize::new(0),
            closed_connections: AtomicUsize::new(0),
            hold_requests: AtomicUsize::new(0),
            held_requests: AtomicUsize::new(0),
            released_requests: AtomicUsize::new(0),
            released_responses: AtomicUsize::new(0),
            released_response_bodies: Mutex::new(Vec::new()),
            release: watch::channel(0).0,
            changed: Notify::new(),
        });
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

    /// Holds the next request stream (the first one to send a DATA frame from now on):
    /// its body and every later frame of it stay in the proxy until
    /// [`FaultyProxy::release_held`].
    pub fn hold_next_request(&self) {
        self.faults.hold_requests.store(1, Ordering::SeqCst);
    }

    /// Delivers every held request to the broker, its frames in their original order
    /// (from its first RST_STREAM on, only after the broker answered it).
    pub fn release_held(&self) {
        self.faults
            .release
            .send_modify(|generation| *generation += 1);
    }

    /// Request streams held so far.
    pub fn held_requests(&self) -> usize {
        self.faults.held_requests.load(Ordering::SeqCst)
    }

    /// Held requests delivered to the broker.
    pub fn released_requests(&self) -> usize {
        self.faults.released_requests.load(Ordering::SeqCst)
    }

    /// Answers to released requests forwarded to the client.
    pub fn released_responses(&self) -> usize {
        self.faults.released_responses.load(Ordering::SeqCst)
    }

    /// The gRPC body (DATA payloads, length-prefixed messages) of each answer to a
    /// released request, in the order they completed.
    pub fn released_response_bodies(&self) -> Vec<Vec<u8>> {
        self.faults
            .released_response_bodies
            .lock()
            .map(|bodies| bodies.clone())
            .unwrap_or_default()
    }

    /// Waits until at least `n` requests are held.
    pub async fn wait_held_requests(&self, n: usize) {
        self.wait_until(|proxy| proxy.held_requests() >= n).await;
    }

    /// Waits until at least `n` answers to released requests have been forwarded.
    pub async fn wait_released_responses(&self, n: usize) {
        self.wait_until(|proxy| proxy.released_responses() >= n)
            .await;
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

/// One frame as read: the 9-byte header followed by the payload.
struct Frame {
    bytes: Vec<u8>,
}

impl Frame {
    fn kind(&self) -> u8 {
        self.bytes[3]
    }

    fn flags(&self) -> u8 {
        self.bytes[4]
    }

    fn stream_id(&self) -> u32 {
        u32::from_be_bytes([self.bytes[5], self.bytes[6], self.bytes[7], self.bytes[8]])
            & 0x7fff_ffff
    }

    fn payload(&self) -> &[u8] {
        &self.bytes[FRAME_HEADER_LEN..]
    }

    fn ends_stream(&self) -> bool {
        matches!(self.kind(), FRAME_DATA | FRAME_HEADERS) && self.flags() & FLAG_END_STREAM != 0
    }

    /// A DATA frame's data, without padding.
    fn data(&self) -> &[u8] {
        let payload = self.payload();
        if self.flags() & FLAG_PADDED == 0 {
            return payload;
        }
        let Some((&pad, rest)) = payload.split_first() else {
            return &[];
        };
        &rest[..rest.len().saturating_sub(pad as usize)]
    }
}

/// A held request stream of one connection.
enum Hold {
    Idle,
    /// Frames of `stream` kept back, in arrival order.
    Holding {
        stream: u32,
        frames: Vec<Frame>,
    },
    /// The body went to the broker; `deferred` (the stream's RST_STREAM and anything
    /// after it) follows once the broker answered. `body` collects the answer.
    Released {
        stream: u32,
        deferred: Vec<Frame>,
        body: Vec<u8>,
    },
}

/// One proxied connection: both writers (so a release or a deferred reset can write
/// to the broker from outside the request pump) and the held stream.
struct Conn {
    upstream: tokio::sync::Mutex<OwnedWriteHalf>,
    downstream: tokio::sync::Mutex<OwnedWriteHalf>,
    hold: Mutex<Hold>,
}

impl Conn {
    fn hold(&self) -> std::sync::MutexGuard<'_, Hold> {
        // A panic while holding the lock leaves a usable state: recover it.
        self.hold.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides what to write to the broker for one client frame: nothing (held), the
    /// frame, or held frames followed by it. Called with the upstream writer locked, so
    /// decisions and writes happen in one order.
    fn route_request(&self, frame: Frame, faults: &Faults) -> Vec<Frame> {
        let stream = frame.stream_id();
        let mut hold = self.hold();
        match &mut *hold {
            Hold::Idle => {
                if frame.kind() == FRAME_DATA && stream != 0 && take_one(&faults.hold_requests) {
                    *hold = Hold::Holding {
                        stream,
                        frames: vec![frame],
                    };
                    faults.held_requests.fetch_add(1, Ordering::SeqCst);
                    faults.changed.notify_waiters();
                    return Vec::new();
                }
                vec![frame]
            }
            Hold::Holding {
                stream: held,
                frames,
            }
            | Hold::Released {
                stream: held,
                deferred: frames,
                ..
            } if *held == stream => {
                if matches!(frame.kind(), FRAME_HEADERS | FRAME_CONTINUATION) {
                    // Header blocks must reach the broker in order across all streams
                    // (HPACK): give up the hold rather than reorder.
                    let mut out = std::mem::take(frames);
                    out.push(frame);
                    *hold = Hold::Idle;
                    return out;
                }
                frames.push(frame);
                Vec::new()
            }
            _ => vec![frame],
        }
    }

    /// Delivers a held request: its frames up to its first RST_STREAM now, the rest once
    /// the broker answered.
    async fn release(&self, faults: &Faults) -> std::io::Result<()> {
        let mut to = self.upstream.lock().await;
        let now = {
            let mut hold = self.hold();
            let Hold::Holding { stream, frames } = &mut *hold else {
                return Ok(());
            };
            let stream = *stream;
            let mut frames = std::mem::take(frames);
            let split = frames
                .iter()
                .position(|f| f.kind() == FRAME_RST_STREAM)
                .unwrap_or(frames.len());
            let deferred = frames.split_off(split);
            *hold = Hold::Released {
                stream,
                deferred,
                body: Vec::new(),
            };
            frames
        };
        for frame in &now {
            to.write_all(&frame.bytes).await?;
        }
        to.flush().await?;
        faults.released_requests.fetch_add(1, Ordering::SeqCst);
        faults.changed.notify_waiters();
        Ok(())
    }

    /// Whether `stream` is a released request whose answer is still awaited.
    fn awaits_answer(&self, stream: u32) -> bool {
        matches!(&*self.hold(), Hold::Released { stream: s, .. } if *s == stream)
    }

    /// Watches a frame the broker sends: if it answers a released request, keeps the
    /// body and, at the end of the answer, returns the deferred frames to deliver.
    fn observe_response(&self, frame: &Frame, faults: &Faults) -> Option<Vec<Frame>> {
        let mut hold = self.hold();
        let Hold::Released {
            stream,
            deferred,
            body,
        } = &mut *hold
        else {
            return None;
        };
        if frame.stream_id() != *stream {
            return None;
        }
        if frame.kind() == FRAME_DATA {
            body.extend_from_slice(frame.data());
        }
        if !frame.ends_stream() && frame.kind() != FRAME_RST_STREAM {
            return None;
        }
        let deferred = std::mem::take(deferred);
        let body = std::mem::take(body);
        *hold = Hold::Idle;
        if let Ok(mut bodies) = faults.released_response_bodies.lock() {
            bodies.push(body);
        }
        Some(deferred)
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
    let conn = Conn {
        upstream: tokio::sync::Mutex::new(server_write),
        downstream: tokio::sync::Mutex::new(client_write),
        hold: Mutex::new(Hold::Idle),
    };
    let mut release = faults.release.subscribe();
    let (close, closed) = watch::channel(false);
    let upstream = pump(
        client_read,
        Direction::Request,
        &conn,
        &faults,
        close.clone(),
        closed.clone(),
    );
    let downstream = pump(
        server_read,
        Direction::Response,
        &conn,
        &faults,
        close.clone(),
        closed,
    );
    let releaser = async {
        while release.changed().await.is_ok() {
            if conn.release(&faults).await.is_err() {
                return;
            }
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = releaser => {}
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
    mut from: OwnedReadHalf,
    direction: Direction,
    conn: &Conn,
    faults: &Faults,
    close: watch::Sender<bool>,
    mut closed: watch::Receiver<bool>,
) {
    let to = match direction {
        Direction::Request => &conn.upstream,
        Direction::Response => &conn.downstream,
    };
    if direction == Direction::Request {
        let mut preface = [0u8; PREFACE.len()];
        if from.read_exact(&mut preface).await.is_err()
            || to.lock().await.write_all(&preface).await.is_err()
        {
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
        let mut bytes = vec![0u8; FRAME_HEADER_LEN + length];
        bytes[..FRAME_HEADER_LEN].copy_from_slice(&header);
        if from
            .read_exact(&mut bytes[FRAME_HEADER_LEN..])
            .await
            .is_err()
        {
            return;
        }
        let frame = Frame { bytes };
        let stream_id = frame.stream_id();
        let is_body = frame.kind() == FRAME_DATA && length > 0;
        match direction {
            Direction::Response if is_body => {
                if take_one(&faults.lose_responses) {
                    faults.lost_responses.fetch_add(1, Ordering::SeqCst);
                    close_connection(faults, &close);
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
        match direction {
            Direction::Request => {
                let mut to = to.lock().await;
                for frame in conn.route_request(frame, faults) {
                    if to.write_all(&frame.bytes).await.is_err() {
                        return;
                    }
                }
            }
            Direction::Response => {
                // Lock the way to the broker before the end of a released request's
                // answer hands over its deferred frames, so no later frame of that
                // stream can overtake them.
                let mut upstream = match conn.awaits_answer(stream_id) {
                    true => Some(conn.upstream.lock().await),
                    false => None,
                };
                let deferred = conn.observe_response(&frame, faults);
                if to.lock().await.write_all(&frame.bytes).await.is_err() {
                    return;
                }
                if let Some(deferred) = deferred {
                    faults.released_responses.fetch_add(1, Ordering::SeqCst);
                    faults.changed.notify_waiters();
                    let upstream = match upstream.as_mut() {
                        Some(locked) => locked,
                        None => upstream.insert(conn.upstream.lock().await),
                    };
                    for frame in &deferred {
                        if upstream.write_all(&frame.bytes).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
        if direction == Direction::Response
            && is_body
            && faults.swallowed_requests.load(Ordering::SeqCst) > 0
        {
            let remaining = faults.close_after_responses.load(Ordering::SeqCst);
            if remaining > 0 && faults.close_after_responses.fetch_sub(1, Ordering::SeqCst) == 1 {
                let _ = to.lock().await.flush().await;
                close_connection(faults, &close);
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
