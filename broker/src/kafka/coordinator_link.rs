//! The broker's link to idem's coordinators, for the Kafka coordinator APIs it proxies
//! (FindCoordinator names the receiving broker; its requests are forwarded here). Kafka
//! clients know coordinators only by node id, idem's coordinator ids overlap broker ids
//! and coordinators speak gRPC only, so the broker dials the owner of the key itself:
//! over TLS when the cluster runs it (`PeerTls`), with the node's credential, one
//! channel per address kept for the next request. A coordinator that cannot be reached
//! is COORDINATOR_NOT_AVAILABLE to the Kafka client, which finds the coordinator again
//! and retries; the coordinator's own answers pass unchanged.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use idem_proto::v1::group_coordinator_client::GroupCoordinatorClient;
use idem_proto::v1::txn_coordinator_client::TxnCoordinatorClient;
use idem_runtime::authn::NodeCredential;
use idem_runtime::tls::PeerTls;
use kafka_protocol::ResponseError;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// A TxnCoordinator client carrying the broker's credential.
pub type TxnClient = TxnCoordinatorClient<InterceptedService<Channel, NodeCredential>>;
/// A GroupCoordinator client carrying the broker's credential.
pub type GroupClient = GroupCoordinatorClient<InterceptedService<Channel, NodeCredential>>;

/// How long dialling and answering may take.
#[derive(Debug, Clone, Copy)]
pub struct LinkTimeouts {
    /// A coordinator that does not accept the connection within this is unreachable.
    pub connect: Duration,
    /// Longer than a coordinator takes to persist a change (acks=all on
    /// `__transaction_state`) and write BEGIN markers; shorter than a Kafka client's
    /// request timeout (librdkafka: 30 s), so the client hears COORDINATOR_NOT_AVAILABLE
    /// and retries instead of timing the request out itself.
    pub request: Duration,
}

impl Default for LinkTimeouts {
    fn default() -> Self {
        LinkTimeouts {
            connect: Duration::from_secs(2),
            request: Duration::from_secs(25),
        }
    }
}

/// Why a forwarded request got no answer from a coordinator.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("coordinator address {address:?} cannot be dialled: {reason}")]
    BadAddress { address: String, reason: String },
    #[error("TLS to the coordinator at {address}: {reason}")]
    Tls { address: String, reason: String },
    #[error("coordinator at {address} did not answer: {status}")]
    Unreachable { address: String, status: String },
    /// The coordinator refuses the broker itself: its credential is not a super user
    /// there (an operator's mistake, which retrying does not mend).
    #[error("coordinator at {address} refuses this broker's credential: {status}")]
    BrokerRefused { address: String, status: String },
}

impl LinkError {
    /// What the Kafka client hears: the coordinator is not available (retriable: the
    /// client finds the coordinator again, which may have moved); a refused broker
    /// credential is CLUSTER_AUTHORIZATION_FAILED, which stops the client with an error
    /// instead of letting it retry for ever.
    pub fn kafka_code(&self) -> i16 {
        match self {
            LinkError::BrokerRefused { .. } => ResponseError::ClusterAuthorizationFailed.code(),
            _ => ResponseError::CoordinatorNotAvailable.code(),
        }
    }

    /// The failure of a call to `address` that ended with `status`.
    fn of_status(address: &str, status: &tonic::Status) -> LinkError {
        let address = address.to_string();
        let text = format!("{:?}: {}", status.code(), status.message());
        match status.code() {
            tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => {
                LinkError::BrokerRefused {
                    address,
                    status: text,
                }
            }
            _ => LinkError::Unreachable {
                address,
                status: text,
            },
        }
    }
}

/// Channels to coordinators, by address; shared by every Kafka connection of a broker.
pub struct CoordinatorLink {
    credential: NodeCredential,
    tls: Option<PeerTls>,
    timeouts: LinkTimeouts,
    channels: Mutex<HashMap<String, Channel>>,
}

impl std::fmt::Debug for CoordinatorLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorLink")
            .field("tls", &self.tls.is_some())
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl CoordinatorLink {
    pub fn new(credential: NodeCredential, tls: Option<PeerTls>, timeouts: LinkTimeouts) -> Self {
        CoordinatorLink {
            credential,
            tls,
            timeouts,
            channels: Mutex::new(HashMap::new()),
        }
    }

    /// Calls the TxnCoordinator at `address` with `call`; an answer that is a gRPC
    /// failure (no connection, timeout, a status) is [`LinkError::Unreachable`] and the
    /// channel is dropped, so the next request dials afresh.
    pub async fn txn<T, F, Fut>(&self, address: &str, call: F) -> Result<T, LinkError>
    where
        F: FnOnce(TxnClient) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let channel = self.channel(address)?;
        let client = TxnCoordinatorClient::with_interceptor(channel, self.credential.clone());
        self.answered(address, call(client).await)
    }

    /// [`Self::txn`] for the GroupCoordinator service at `address`.
    pub async fn group<T, F, Fut>(&self, address: &str, call: F) -> Result<T, LinkError>
    where
        F: FnOnce(GroupClient) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let channel = self.channel(address)?;
        let client = GroupCoordinatorClient::with_interceptor(channel, self.credential.clone());
        self.answered(address, call(client).await)
    }

    fn answered<T>(
        &self,
        address: &str,
        answer: Result<tonic::Response<T>, tonic::Status>,
    ) -> Result<T, LinkError> {
        answer.map(tonic::Response::into_inner).map_err(|status| {
            let failure = LinkError::of_status(address, &status);
            match &failure {
                LinkError::BrokerRefused { .. } => {
                    tracing::warn!(%address, error = %failure, "a coordinator refuses this broker's credential: Kafka coordinator requests fail until --auth-token names a super user there");
                }
                _ => {
                    // A coordinator that went away may come back elsewhere, or at this
                    // address with a new certificate: nothing of this channel is worth
                    // keeping.
                    self.forget(address);
                    tracing::debug!(%address, code = ?status.code(), message = status.message(), "coordinator call failed");
                }
            }
            failure
        })
    }

    /// The channel to `address`, made on first use. It connects lazily (the first call
    /// dials, within the connect timeout), so no lock is held across a connection.
    fn channel(&self, address: &str) -> Result<Channel, LinkError> {
        let mut channels = self
            .channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(channel) = channels.get(address) {
            return Ok(channel.clone());
        }
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(|e| LinkError::BadAddress {
                address: address.to_string(),
                reason: e.to_string(),
            })?
            .tcp_nodelay(true)
            .connect_timeout(self.timeouts.connect)
            .timeout(self.timeouts.request);
        let endpoint = match &self.tls {
            // The TLS of now: a SIGHUP may have rotated the certificate since.
            Some(tls) => endpoint
                .tls_config(tls.client_config())
                .map_err(|e| LinkError::Tls {
                    address: address.to_string(),
                    reason: e.to_string(),
                })?,
            None => endpoint,
        };
        let channel = endpoint.connect_lazy();
        channels.insert(address.to_string(), channel.clone());
        Ok(channel)
    }

    fn forget(&self, address: &str) {
        self.channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(address);
    }

    /// How many coordinator addresses have a channel now.
    pub fn channel_count(&self) -> usize {
        self.channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_proto::v1::EndTxnRequest;

    fn link(connect: Duration) -> CoordinatorLink {
        CoordinatorLink::new(
            NodeCredential::default(),
            None,
            LinkTimeouts {
                connect,
                request: Duration::from_secs(5),
            },
        )
    }

    /// An address nobody listens on (bound, then released).
    async fn closed_address() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        drop(listener);
        address
    }

    #[tokio::test]
    async fn given_no_coordinator_at_the_address_when_called_then_coordinator_not_available() {
        let link = link(Duration::from_secs(2));
        let address = closed_address().await;
        let started = std::time::Instant::now();
        let answer = link
            .txn(&address, |mut client| async move {
                client.end_txn(EndTxnRequest::default()).await
            })
            .await;
        let Err(e) = answer else {
            panic!("nobody listens at {address}, yet: {answer:?}");
        };
        assert!(matches!(e, LinkError::Unreachable { .. }), "{e}");
        assert_eq!(e.kafka_code(), 15, "COORDINATOR_NOT_AVAILABLE");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "refused at once"
        );
        // The failed channel is not kept for the next request.
        assert_eq!(link.channel_count(), 0);
    }

    #[tokio::test]
    async fn given_a_silent_coordinator_when_called_then_unreachable_within_the_timeout() {
        // Accepts TCP connections but never speaks HTTP/2.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        let held = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let link = CoordinatorLink::new(
            NodeCredential::default(),
            None,
            LinkTimeouts {
                connect: Duration::from_millis(500),
                request: Duration::from_millis(500),
            },
        );
        let started = std::time::Instant::now();
        let answer = link
            .group(&address, |mut client| async move {
                client
                    .txn_offset_commit(idem_proto::v1::TxnOffsetCommitRequest::default())
                    .await
            })
            .await;
        assert!(
            matches!(answer, Err(LinkError::Unreachable { .. })),
            "{answer:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(3));
        held.abort();
    }

    #[test]
    fn given_the_broker_refused_then_cluster_authorization_failed_else_coordinator_not_available() {
        let refused = LinkError::of_status("c:1", &tonic::Status::permission_denied("no"));
        assert!(
            matches!(refused, LinkError::BrokerRefused { .. }),
            "{refused}"
        );
        assert_eq!(refused.kafka_code(), 31);
        let unauthenticated = LinkError::of_status("c:1", &tonic::Status::unauthenticated("who?"));
        assert_eq!(unauthenticated.kafka_code(), 31);
        for status in [
            tonic::Status::unavailable("gone"),
            tonic::Status::deadline_exceeded("slow"),
            tonic::Status::internal("broken"),
        ] {
            assert_eq!(LinkError::of_status("c:1", &status).kafka_code(), 15);
        }
    }

    #[test]
    fn given_an_address_that_is_no_uri_then_bad_address() {
        let link = link(Duration::from_secs(1));
        let answer = link.channel("not an address");
        assert!(
            matches!(answer, Err(LinkError::BadAddress { .. })),
            "{answer:?}"
        );
    }

    #[tokio::test]
    async fn given_two_requests_to_one_address_then_one_channel() {
        let link = link(Duration::from_secs(1));
        link.channel("127.0.0.1:1").expect("channel");
        link.channel("127.0.0.1:1").expect("channel");
        link.channel("127.0.0.1:2").expect("channel");
        assert_eq!(link.channel_count(), 2);
    }
}
