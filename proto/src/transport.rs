//! How idem's servers accept connections, shared by the broker and the coordinator
//! (which meet only through this crate).

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

/// The largest gRPC message any idem process sends in an answer or accepts in one: the
/// SDK, brokers (answers and follower fetches) and coordinators all use it, so no answer
/// is ever larger than what its receiver decodes. A Fetch answer is kept far below it by
/// its byte budget; Metadata (about 60 bytes a partition) and ListTransactions (about 120
/// bytes a transactional id) fit around a million entries.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// The accepted connections of `listener`, each with Nagle's algorithm off. Tonic's
/// `Server::tcp_nodelay` applies only to listeners it binds itself, not to a stream of
/// connections handed in; with Nagle on, a response split over several writes waits
/// for the client's delayed ACK (about 40 ms a round trip on Linux).
pub fn accept_without_nagle(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
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
