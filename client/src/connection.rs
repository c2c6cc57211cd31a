//! The client's link to the cluster: one gRPC channel to the bootstrap broker (HTTP/2,
//! `TCP_NODELAY`, 64 MiB messages), a per-call timeout, and the metadata cache. Every
//! RPC the SDK makes outside the produce path goes through here and comes back as a
//! plain value or a [`ClientError`]. Single-node for now: all requests go to the
//! bootstrap broker; the cache already records leaders for when partitions move.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use idem_proto::v1::broker_client::BrokerClient;
use idem_proto::v1::{
    InitProducerIdRequest, ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
    MetadataRequest,
};
use tonic::transport::{Channel, Endpoint};

use crate::admin::OffsetSpec;
use crate::consumer::Isolation;
use crate::error::{is_retriable_status, ClientError};
use crate::metadata::{ClusterMetadata, MetadataCache};
use crate::producer::inflight::ProducerIdAndEpoch;

/// Largest gRPC message sent or accepted.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Default time one RPC may take.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts for requests that are safe to repeat (metadata, offsets, producer ids).
const READ_RETRIES: u32 = 8;

/// A cheap-to-clone handle on the channel and the metadata cache.
#[derive(Debug, Clone)]
pub struct Connection {
    bootstrap: String,
    client: BrokerClient<Channel>,
    metadata: Arc<RwLock<MetadataCache>>,
    request_timeout: Duration,
}

/// `host:port` or a full URI as an endpoint URI.
fn endpoint_uri(bootstrap: &str) -> String {
    let bootstrap = bootstrap.trim();
    if bootstrap.contains("://") {
        bootstrap.to_string()
    } else {
        format!("http://{bootstrap}")
    }
}

/// An error and its sources on one line (tonic's own message is just "transport error").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    message
}

impl Connection {
    /// Connects to `bootstrap` (`host:port`); fails if the broker cannot be reached.
    pub async fn connect(bootstrap: &str, request_timeout: Duration) -> Result<Self, ClientError> {
        if bootstrap.trim().is_empty() {
            return Err(ClientError::InvalidConfig(
                "bootstrap address is empty".into(),
            ));
        }
        let endpoint = Endpoint::from_shared(endpoint_uri(bootstrap))
            .map_err(|e| {
                ClientError::InvalidConfig(format!(
                    "bad bootstrap address {bootstrap:?}: {}",
                    error_chain(&e)
                ))
            })?
            .tcp_nodelay(true)
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(20));
        let channel = endpoint.connect().await.map_err(|e| ClientError::Connect {
            address: bootstrap.to_string(),
            message: error_chain(&e),
        })?;
        let client = BrokerClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(Connection {
            bootstrap: bootstrap.to_string(),
            client,
            metadata: Arc::new(RwLock::new(MetadataCache::default())),
            request_timeout,
        })
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// A client on the shared channel (cheap: the channel multiplexes).
    pub fn client(&self) -> BrokerClient<Channel> {
        self.client.clone()
    }

    /// Runs one RPC with the request timeout.
    pub async fn call<T>(
        &self,
        rpc: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, ClientError> {
        with_timeout(self.request_timeout, rpc).await
    }

    /// Runs a read-only (or otherwise safe to repeat) RPC, retrying answers lost in
    /// transport with a growing backoff for up to `READ_RETRIES` attempts.
    pub async fn call_retrying<T, F, Fut>(&self, mut rpc: F) -> Result<T, ClientError>
    where
        F: FnMut(BrokerClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut backoff = Duration::from_millis(20);
        let mut attempt = 1;
        loop {
            match self.call(rpc(self.client())).await {
                Err(ClientError::Transport(status))
                    if attempt < READ_RETRIES && is_retriable_status(status.code()) =>
                {
                    tracing::debug!(attempt, status = %status, "retrying a safe request");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Asks for metadata of `topics` (all topics when empty) and updates the cache.
    pub async fn fetch_metadata(
        &self,
        topics: Vec<String>,
    ) -> Result<ClusterMetadata, ClientError> {
        let response = self
            .call_retrying(|mut client| {
                let request = MetadataRequest {
                    topics: topics.clone(),
                };
                async move { client.metadata(request).await }
            })
            .await?;
        let metadata = ClusterMetadata::from(response);
        if let Ok(mut cache) = self.metadata.write() {
            cache.update(&metadata);
        }
        Ok(metadata)
    }

    /// The partition count of `topic`, from the cache or the broker.
    pub async fn partition_count(&self, topic: &str) -> Result<i32, ClientError> {
        if let Some(count) = self.cached_partition_count(topic) {
            return Ok(count);
        }
        let metadata = self.fetch_metadata(vec![topic.to_string()]).await?;
        match metadata.topic(topic) {
            Some(t) if t.error.is_none() && !t.partitions.is_empty() => {
                Ok(t.partitions.len() as i32)
            }
            Some(t) => match t.error {
                Some(code) if code != idem_proto::ErrorCode::UnknownTopicOrPartition => Err(
                    ClientError::broker(code as i32, format!("metadata of topic {topic}")),
                ),
                _ => Err(ClientError::UnknownTopic {
                    topic: topic.to_string(),
                    partition: None,
                }),
            },
            None => Err(ClientError::UnknownTopic {
                topic: topic.to_string(),
                partition: None,
            }),
        }
    }

    pub fn cached_partition_count(&self, topic: &str) -> Option<i32> {
        self.metadata.read().ok()?.partition_count(topic)
    }

    /// Forgets what the cache knows about `topic`.
    pub fn invalidate(&self, topic: &str) {
        if let Ok(mut cache) = self.metadata.write() {
            cache.invalidate(topic);
        }
    }

    /// A fresh idempotent producer id (epoch 0).
    ///
    /// Retriable refusals (the broker's producer-id store is unreachable:
    /// `COORDINATOR_LOAD_IN_PROGRESS`) are retried with a growing backoff for up to the
    /// request timeout; the last refusal is returned after that. Lost answers are
    /// retried too: a repeated request only wastes an id.
    pub async fn init_producer_id(&self) -> Result<ProducerIdAndEpoch, ClientError> {
        self.request_producer_id(None).await
    }

    /// The next epoch of `current`'s producer id (KIP-360): what an idempotent partition
    /// takes when it must abandon sequences it cannot resolve. Every batch of the older
    /// epoch that still reaches a partition after the new epoch did is refused with
    /// `INVALID_PRODUCER_EPOCH`, so a late request cannot land behind newer batches. When
    /// the epoch is exhausted (`i16::MAX`) the broker hands out a fresh producer id at
    /// epoch 0 instead.
    ///
    /// Retried like [`Connection::init_producer_id`]; repeating it is harmless (the
    /// broker answers the same bump for the same `current`).
    pub async fn bump_producer_epoch(
        &self,
        current: ProducerIdAndEpoch,
    ) -> Result<ProducerIdAndEpoch, ClientError> {
        let next = self.request_producer_id(Some(current)).await?;
        let newer = if next.producer_id == current.producer_id {
            next.producer_epoch > current.producer_epoch
        } else {
            next.producer_epoch == 0
        };
        if !newer {
            return Err(ClientError::Protocol(format!(
                "asked to bump producer {} epoch {}, got producer {} epoch {}",
                current.producer_id, current.producer_epoch, next.producer_id, next.producer_epoch
            )));
        }
        Ok(next)
    }

    /// InitProducerId for an idempotent producer: a fresh id, or the epoch after `bump`.
    /// Retriable refusals are retried with a growing backoff within the request timeout.
    async fn request_producer_id(
        &self,
        bump: Option<ProducerIdAndEpoch>,
    ) -> Result<ProducerIdAndEpoch, ClientError> {
        let request = InitProducerIdRequest {
            producer_id: bump.map(|p| p.producer_id),
            producer_epoch: bump.map_or(0, |p| i32::from(p.producer_epoch)),
            ..InitProducerIdRequest::default()
        };
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let mut backoff = Duration::from_millis(50);
        loop {
            match self.init_producer_id_once(&request).await {
                Err(
                    e @ ClientError::Broker {
                        retriable: true, ..
                    },
                ) if tokio::time::Instant::now() + backoff < deadline => {
                    tracing::debug!(error = %e, "InitProducerId refused; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }

    async fn init_producer_id_once(
        &self,
        request: &InitProducerIdRequest,
    ) -> Result<ProducerIdAndEpoch, ClientError> {
        // Safe to repeat (a fresh id only wastes one; a bump of the same epoch gets the
        // same answer), so a lost answer is retried.
        let response = self
            .call_retrying(|mut client| {
                let request = request.clone();
                async move { client.init_producer_id(request).await }
            })
            .await?;
        if response.error_code != 0 {
            return Err(ClientError::broker(
                response.error_code,
                response.error_message,
            ));
        }
        let producer_epoch = i16::try_from(response.producer_epoch)
            .ok()
            .filter(|e| *e >= 0)
            .ok_or_else(|| {
                ClientError::Protocol(format!(
                    "producer epoch {} out of range",
                    response.producer_epoch
                ))
            })?;
        if response.producer_id < 0 {
            return Err(ClientError::Protocol(format!(
                "broker handed out producer id {}",
                response.producer_id
            )));
        }
        Ok(ProducerIdAndEpoch {
            producer_id: response.producer_id,
            producer_epoch,
        })
    }

    /// The earliest or latest offset of one partition.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        spec: OffsetSpec,
        isolation: Isolation,
    ) -> Result<i64, ClientError> {
        let request = ListOffsetsRequest {
            isolation_level: isolation.to_proto() as i32,
            topics: vec![ListOffsetsTopic {
                name: topic.to_string(),
                partitions: vec![ListOffsetsPartition {
                    partition,
                    timestamp: spec.timestamp(),
                }],
            }],
        };
        let response = self
            .call_retrying(|mut client| {
                let request = request.clone();
                async move { client.list_offsets(request).await }
            })
            .await?;
        let answer = response
            .topics
            .into_iter()
            .filter(|t| t.name == topic)
            .flat_map(|t| t.partitions)
            .find(|p| p.partition == partition)
            .ok_or_else(|| {
                ClientError::Protocol(format!("list offsets answer lacks {topic}/{partition}"))
            })?;
        match crate::metadata::error_code(answer.error_code) {
            None => Ok(answer.offset),
            Some(idem_proto::ErrorCode::UnknownTopicOrPartition) => {
                Err(ClientError::UnknownTopic {
                    topic: topic.to_string(),
                    partition: Some(partition),
                })
            }
            Some(_) => Err(ClientError::broker(answer.error_code, answer.error_message)),
        }
    }
}

/// Runs `rpc`, giving up after `timeout` with `DEADLINE_EXCEEDED`.
pub(crate) async fn with_timeout<T>(
    timeout: Duration,
    rpc: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, ClientError> {
    match tokio::time::timeout(timeout, rpc).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(ClientError::Transport(status)),
        Err(_) => Err(ClientError::Transport(tonic::Status::deadline_exceeded(
            format!("no answer within {timeout:?}"),
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_addresses_become_http_uris() {
        assert_eq!(endpoint_uri("127.0.0.1:9092"), "http://127.0.0.1:9092");
        assert_eq!(endpoint_uri(" localhost:1 "), "http://localhost:1");
        assert_eq!(endpoint_uri("https://b:443"), "https://b:443");
    }

    #[tokio::test]
    async fn connecting_to_a_closed_port_is_a_connect_error() {
        // Bind then drop a listener: the port is very likely closed afterwards.
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr").port()
        };
        let result =
            Connection::connect(&format!("127.0.0.1:{port}"), DEFAULT_REQUEST_TIMEOUT).await;
        assert!(
            matches!(result, Err(ClientError::Connect { .. })),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn an_empty_bootstrap_is_invalid_config() {
        let result = Connection::connect("  ", DEFAULT_REQUEST_TIMEOUT).await;
        assert!(matches!(result, Err(ClientError::InvalidConfig(_))));
    }
}
