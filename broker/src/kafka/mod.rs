//! The Kafka-protocol listener (issue 30; docs/kafka.md): Kafka clients (librdkafka,
//! the Java client) produce, idempotently too, and fetch through it. Every request is
//! translated onto the same `BrokerService` calls the gRPC service makes, so ACLs,
//! producer state, replication and read_committed behave as they do for idem's SDK;
//! the codecs are the `kafka-protocol` crate's. One file per idea: `connection`
//! (framing, dispatch), `versions` (what is served), `records` (batch conversion),
//! `errors` (code mapping), `coordinator_link` (the coordinators it proxies the
//! coordinator APIs to), and one per API. On a TLS broker the listener speaks TLS only
//! (Kafka's `security.protocol=SSL`), with the gRPC listeners' certificate, client-auth
//! policy and SIGHUP reload; under mutual TLS each connection's principal is its client
//! certificate's, else `User:ANONYMOUS`, unless the client authenticates with SASL
//! (`sasl_session.rs`: PLAIN or OAUTHBEARER with a token of `--auth-token-file`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::authn::certificate::principal_from_certificate;
use idem_runtime::authn::principal::Principal;
use idem_runtime::authn::TokenFile;
use idem_runtime::shutdown::{CancellationToken, Duties};
use idem_runtime::tls::ServerTls;
use tokio::net::{TcpListener, TcpStream};

use crate::service::BrokerService;

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod api_versions;
pub mod connection;
#[cfg(test)]
mod connection_sasl_tests;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod consumer_protocol;
pub mod coordinator_link;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_topics;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_producers;
pub mod describe_transactions;
pub mod end_txn;
pub mod errors;
pub mod fan_out;
pub mod fetch;
pub mod find_coordinator;
pub mod forward;
pub mod group_description;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod records;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod sasl_oauthbearer;
pub mod sasl_plain;
pub mod sasl_session;
pub mod sync_group;
#[cfg(test)]
mod test_broker;
pub mod topic_ids;
pub mod txn_offset_commit;
pub mod unsupported;
pub mod versions;

/// What every connection serves with.
pub struct KafkaContext {
    pub service: Arc<BrokerService>,
    /// `--max-request-bytes`: larger frames are closed on before they are read.
    pub max_request_bytes: usize,
    /// The coordinators this broker forwards the Kafka coordinator APIs to.
    pub link: Arc<coordinator_link::CoordinatorLink>,
    /// `--auth-token-file`: with it, SASL (PLAIN, OAUTHBEARER) is advertised and a
    /// connection may authenticate as a token's principal (`sasl_session.rs`).
    pub tokens: Option<TokenFile>,
    /// `--kafka-failed-authentication-delay-ms`: how long a refused SASL exchange's
    /// answer (and the close after it) waits.
    pub failed_authentication_delay: Duration,
}

/// Accepts Kafka connections on `listener` until the duties stop; each connection is
/// a duty of its own that ends between requests. With `tls` (the broker's `ServerTls`,
/// shared with its gRPC listeners) every connection handshakes first, with the config
/// current when it was accepted: no plaintext client is served on a TLS broker.
pub async fn accept(
    listener: TcpListener,
    tls: Option<ServerTls>,
    context: Arc<KafkaContext>,
    duties: Duties,
) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                // Small requests and answers: Nagle would add its delay to each.
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(%peer, error = %e, "TCP_NODELAY not set");
                }
                let (context, tls) = (context.clone(), tls.clone());
                duties.spawn_cooperative(move |stop| async move {
                    match tls {
                        None => {
                            let anonymous = Principal::anonymous();
                            connection::serve(stream, peer, anonymous, context, stop).await;
                        }
                        Some(tls) => serve_tls(&tls, stream, peer, context, stop).await,
                    }
                });
            }
            Err(e) => {
                // Out of file descriptors, typically: wait rather than spin on it.
                tracing::warn!(error = %e, "Kafka listener cannot accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Handshakes `stream` (bounded by the handshake timeout, or `stop`), then serves it as
/// its client certificate's principal. A failed handshake closes this connection only.
async fn serve_tls(
    tls: &ServerTls,
    stream: TcpStream,
    peer: SocketAddr,
    context: Arc<KafkaContext>,
    stop: CancellationToken,
) {
    let session = tokio::select! {
        () = stop.cancelled() => return,
        session = tls.handshake(stream) => session,
    };
    let session = match session {
        Ok(session) => session,
        Err(e) => {
            // A plaintext client, an unknown CA, no certificate where one is required:
            // the client's mistake, not the broker's, so no warning.
            tracing::info!(%peer, error = %e, "Kafka TLS handshake failed");
            return;
        }
    };
    let leaf = session
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first());
    let principal = match leaf.map(|leaf| principal_from_certificate(leaf.as_ref())) {
        None => Principal::anonymous(),
        Some(Ok(principal)) => principal,
        Some(Err(e)) => {
            // Verified against the CA but naming no one: refused, as on gRPC.
            tracing::info!(%peer, error = %e, "Kafka client certificate refused");
            return;
        }
    };
    tracing::debug!(%peer, principal = principal.as_str(), "Kafka TLS session");
    connection::serve(session, peer, principal, context, stop).await;
}

/// The address a bound Kafka listener advertises: `--kafka-advertise`, else the bound
/// address.
pub fn advertised(bound: SocketAddr, advertise: Option<&str>) -> String {
    advertise.map_or_else(|| bound.to_string(), str::to_string)
}
