//! A TCP link between one process and etcd that a test can cut and heal, to cut that
//! one process off from etcd while every other process still reaches it. While cut,
//! nothing crosses in either direction and new connections are accepted but not
//! connected onward, as across a network partition: the process sees silence, not
//! resets, and what it sent before the cut arrives after the heal, as TCP would deliver
//! it once the partition ends.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct CuttableLink {
    addr: SocketAddr,
    cut: Arc<watch::Sender<bool>>,
    accept: JoinHandle<()>,
}

impl CuttableLink {
    /// Listens on a free 127.0.0.1 port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> CuttableLink {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a link port");
        let addr = listener.local_addr().expect("link address");
        let (cut, _) = watch::channel(false);
        let cut = Arc::new(cut);
        let accept = {
            let cut = cut.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(forward(client, upstream, cut.subscribe()));
                }
            })
        };
        CuttableLink { addr, cut, accept }
    }

    /// `http://127.0.0.1:PORT`, for `--etcd`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for CuttableLink {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Waits while the link is cut.
async fn until_open(cut: &mut watch::Receiver<bool>) {
    // The sender lives as long as the link; if it is gone, so is the test.
    let _ = cut.wait_for(|cut| !*cut).await;
}

async fn forward(client: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<bool>) {
    until_open(&mut cut).await;
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = tokio::spawn(pump(client_read, server_write, cut.clone()));
    let down = tokio::spawn(pump(server_read, client_write, cut));
    let _ = tokio::join!(up, down);
}

/// Copies one direction, holding every chunk while the link is cut.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut cut: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        until_open(&mut cut).await;
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        until_open(&mut cut).await;
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
