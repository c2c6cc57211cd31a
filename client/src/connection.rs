//! The client's link to the cluster: a gRPC channel to the bootstrap broker, a pool of
//! lazily dialled channels to the brokers the metadata lists (one per address; HTTP/2,
//! `TCP_NODELAY`, 64 MiB messages each), a per-call timeout, and a view of the metadata
//! (`metadata_view.rs`: the cache and its one refresh at a time).
//!
//! Routing: requests any broker may serve (Metadata, InitProducerId) go to the node
//! that last answered one (the bootstrap at first) and fail over to the other known
//! brokers when a node does not answer; CreateTopics goes to the bootstrap; requests
//! for a partition's leader (Produce, Fetch, ListOffsets) go where
//! [`crate::metadata::MetadataCache::route`] says. A broker that does not answer or
//! says it does not lead the partition makes the caller refresh the metadata:
//! refreshes are coalesced and rate-limited ([`crate::refresh::RefreshGate`]) and ask
//! any broker for every topic. Retries of what is safe to repeat follow `retry.rs`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::Retryable;
use futures::future::FutureExt;
use idem_proto::v1::broker_client::BrokerClient;
use idem_proto::v1::{
    InitProducerIdRequest, ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
    MetadataRequest,
};
use idem_proto::ErrorCode;
use tonic::transport::{Channel, Endpoint};

use crate::credentials::{AuthChannel, Credentials};

use crate::bootstrap;
use crate::error::{is_retriable_status, ClientError};
use crate::metadata::{ClusterMetadata, Route};
use crate::metadata_view::{MetadataView, RefreshFuture};
use crate::retry;
use crate::tls::{mismatch_hint, TlsConfig};
use crate::types::{Isolation, OffsetAndTimestamp, OffsetSpec, ProducerIdAndEpoch};

/// The largest gRPC message the SDK sends or decodes: the protocol's limit.
pub use idem_proto::transport::MAX_MESSAGE_BYTES;
/// Default time one RPC may take.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How old cached metadata may get before it is asked for again: Kafka's
/// `metadata.max.age.ms` default. Partitions added to a topic are used within it.
pub const DEFAULT_METADATA_MAX_AGE: Duration = Duration::from_secs(300);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest one attempt of a request any broker may serve waits before the next broker
/// is tried (a paused broker accepts connections but never answers).
const ANY_BROKER_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a plaintext connect to a single address waits to see whether the server
/// closes the connection at once (a TLS-only server does).
const PLAINTEXT_CHECK: Duration = Duration::from_secs(1);

/// A broker the client can send to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Node {
    /// Through the bootstrap connection.
    Bootstrap,
    /// A pooled channel to this advertised `host:port`.
    Broker(String),
}

impl Node {
    fn from_route(route: Route) -> Option<Node> {
        match route {
            Route::Bootstrap => Some(Node::Bootstrap),
            Route::Broker { address, .. } => Some(Node::Broker(address)),
            Route::Unknown => None,
        }
    }
}

/// A cheap-to-clone handle on the channels and the metadata cache.
#[derive(Debug, Clone)]
pub struct Connection {
    bootstrap: String,
    client: BrokerClient<AuthChannel>,
    shared: Arc<SharedState>,
    request_timeout: Duration,
    /// How old a topic's cached metadata may get before a use of it asks for fresh
    /// metadata (in the background; the use goes on with what is cached).
    metadata_max_age: Duration,
    /// TLS for every channel (`None`: plaintext).
    tls: Option<Arc<TlsConfig>>,
}

#[derive(Debug)]
struct SharedState {
    /// The metadata cache and its refresh.
    metadata: Arc<MetadataView>,
    /// One channel per broker address, dialled on first use.
    pool: Mutex<HashMap<String, BrokerClient<AuthChannel>>>,
    /// The node that last answered a request any broker may serve.
    preferred: Mutex<Node>,
    /// Presented on every call of every channel (see [`crate::credentials`]).
    credentials: Credentials,
}

/// `host:port` or a full URI as an endpoint URI: `https` with TLS, else `http`.
fn endpoint_uri(bootstrap: &str, tls: bool) -> String {
    let bootstrap = bootstrap.trim();
    if bootstrap.contains("://") {
        bootstrap.to_string()
    } else if tls {
        format!("https://{bootstrap}")
    } else {
        format!("http://{bootstrap}")
    }
}

/// The endpoint settings every channel uses (to brokers and to coordinators).
pub(crate) fn endpoint(address: &str, tls: Option<&TlsConfig>) -> Result<Endpoint, String> {
    let endpoint = Endpoint::from_shared(endpoint_uri(address, tls.is_some()))
        .map_err(|e| error_chain(&e))?
        .tcp_nodelay(true)
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(20));
    match tls {
        Some(tls) => endpoint
            .tls_config(tls.client_config())
            .map_err(|e| format!("TLS settings: {}", error_chain(&e))),
        None => Ok(endpoint),
    }
}

/// A connection failure that points to a TLS mismatch becomes [`ClientError::Tls`].
fn tls_classified(error: ClientError, tls: bool) -> ClientError {
    match error {
        ClientError::Connect { address, message } => match mismatch_hint(tls, &message) {
            Some(hint) => ClientError::Tls {
                address,
                hint: hint.to_string(),
                message,
            },
            None => ClientError::Connect { address, message },
        },
        other => other,
    }
}

fn broker_client(channel: Channel, credentials: &Credentials) -> BrokerClient<AuthChannel> {
    BrokerClient::new(AuthChannel::new(channel, credentials.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
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

/// Codes of a leader-only request that mean "ask the metadata who leads now, then
/// retry": nothing was done.
pub(crate) fn is_leadership_error(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NotLeaderOrFollower
            | ErrorCode::LeaderNotAvailable
            | ErrorCode::FencedLeaderEpoch
    )
}

impl Connection {
    /// Connects to `bootstrap`, one `host:port` or a comma-separated list of them
    /// ([`crate::bootstrap`]): the first broker of the list that can be reached (and,
    /// when there is a choice, answers Metadata) becomes the bootstrap connection. Fails
    /// naming each broker that could not be reached.
    pub async fn connect(bootstrap: &str, request_timeout: Duration) -> Result<Self, ClientError> {
        Connection::connect_with(bootstrap, request_timeout, Credentials::none(), None).await
    }

    /// [`Connection::connect`], presenting `credentials` on every call, with TLS on
    /// every channel when `tls` is given. With TLS the first broker is always asked for
    /// Metadata before this returns, so a certificate the server refuses (TLS 1.3 tells
    /// a client so only after its handshake) fails here, as [`ClientError::Tls`], rather
    /// than at the first request.
    pub async fn connect_with(
        bootstrap: &str,
        request_timeout: Duration,
        credentials: Credentials,
        tls: Option<TlsConfig>,
    ) -> Result<Self, ClientError> {
        let addresses = bootstrap::addresses(bootstrap)?;
        for address in &addresses {
            endpoint(address, tls.as_ref()).map_err(|e| {
                ClientError::InvalidConfig(format!("bad bootstrap address {address:?}: {e}"))
            })?;
        }
        // With one address there is nothing to choose: the first request reports trouble.
        let probe = (addresses.len() > 1 || tls.is_some())
            .then(|| request_timeout.min(ANY_BROKER_ATTEMPT_TIMEOUT));
        let probing = &credentials;
        let tls_ref = tls.as_ref();
        let (bootstrap, channel) = bootstrap::first_answering(&addresses, |address| async move {
            let endpoint = endpoint(&address, tls_ref)?;
            let channel = endpoint.connect().await.map_err(|e| error_chain(&e))?;
            if let Some(timeout) = probe {
                bootstrap::answers_metadata(broker_client(channel.clone(), probing), timeout)
                    .await?;
            } else if let Err(why) = bootstrap::answers_metadata(
                broker_client(channel.clone(), probing),
                PLAINTEXT_CHECK,
            )
            .await
            {
                // A TLS-only server closes a plaintext connection at its first request;
                // say so now rather than at the caller's first request. Any other
                // outcome (no answer yet, a broker still loading) is left to that request.
                if mismatch_hint(false, &why).is_some() {
                    return Err(why);
                }
            }
            Ok(channel)
        })
        .await
        .map_err(|e| tls_classified(e, tls_ref.is_some()))?;
        Ok(Connection {
            bootstrap,
            client: broker_client(channel, &credentials),
            shared: Arc::new(SharedState {
                metadata: Arc::default(),
                pool: Mutex::new(HashMap::new()),
                preferred: Mutex::new(Node::Bootstrap),
                credentials,
            }),
            request_timeout,
            metadata_max_age: DEFAULT_METADATA_MAX_AGE,
            tls: tls.map(Arc::new),
        })
    }

    /// Like [`Connection::connect`] without dialling: the bootstrap channel connects on
    /// first use (and again whenever it breaks), so this succeeds while the broker is
    /// still starting. For servers that talk to brokers (the transaction coordinator).
    /// A bootstrap list becomes one channel balanced over its addresses: requests go to
    /// the ones that are up.
    pub fn connect_lazy(bootstrap: &str, request_timeout: Duration) -> Result<Self, ClientError> {
        Connection::connect_lazy_with(bootstrap, request_timeout, Credentials::none(), None)
    }

    /// [`Connection::connect_lazy`], presenting `credentials` on every call, with TLS on
    /// every channel when `tls` is given.
    pub fn connect_lazy_with(
        bootstrap: &str,
        request_timeout: Duration,
        credentials: Credentials,
        tls: Option<TlsConfig>,
    ) -> Result<Self, ClientError> {
        let addresses = bootstrap::addresses(bootstrap)?;
        let mut endpoints = Vec::with_capacity(addresses.len());
        for address in &addresses {
            endpoints.push(endpoint(address, tls.as_ref()).map_err(|e| {
                ClientError::InvalidConfig(format!("bad bootstrap address {address:?}: {e}"))
            })?);
        }
        // Several addresses: requests go to whichever of them is up (a channel balanced
        // over the list), so a server started before one of its brokers still gets in.
        let channel = match endpoints.as_slice() {
            [one] => one.connect_lazy(),
            _ => Channel::balance_list(endpoints.into_iter()),
        };
        Ok(Connection {
            bootstrap: addresses.join(","),
            client: broker_client(channel, &credentials),
            shared: Arc::new(SharedState {
                metadata: Arc::default(),
                pool: Mutex::new(HashMap::new()),
                preferred: Mutex::new(Node::Bootstrap),
                credentials,
            }),
            request_timeout,
            metadata_max_age: DEFAULT_METADATA_MAX_AGE,
            tls: tls.map(Arc::new),
        })
    }

    /// This connection with cached topic metadata asked for again once it is older
    /// than `max_age` (default [`DEFAULT_METADATA_MAX_AGE`]).
    pub fn with_metadata_max_age(mut self, max_age: Duration) -> Self {
        self.metadata_max_age = max_age;
        self
    }

    /// What this connection presents on every call.
    pub fn credentials(&self) -> &Credentials {
        &self.shared.credentials
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The TLS every channel of this connection uses (`None`: plaintext).
    pub fn tls(&self) -> Option<&TlsConfig> {
        self.tls.as_deref()
    }

    /// A client on the bootstrap channel (cheap: the channel multiplexes).
    pub fn client(&self) -> BrokerClient<AuthChannel> {
        self.client.clone()
    }

    /// A client for `node`: the bootstrap channel, or the pooled channel of a broker
    /// address (dialled lazily on first use, redialled by the channel when it breaks).
    pub(crate) fn client_for(&self, node: &Node) -> Result<BrokerClient<AuthChannel>, ClientError> {
        let address = match node {
            Node::Bootstrap => return Ok(self.client()),
            Node::Broker(address) => address,
        };
        let mut pool = self
            .shared
            .pool
            .lock()
            .map_err(|_| ClientError::Fatal("connection pool poisoned".into()))?;
        if let Some(client) = pool.get(address) {
            return Ok(client.clone());
        }
        let endpoint = endpoint(address, self.tls()).map_err(|e| {
            ClientError::Protocol(format!(
                "a broker advertises a bad address {address:?}: {e}"
            ))
        })?;
        let client = broker_client(endpoint.connect_lazy(), &self.shared.credentials);
        pool.insert(address.clone(), client.clone());
        Ok(client)
    }

    /// Where the leader of `topic`/`partition` is, by the cache alone.
    pub(crate) fn leader_node(&self, topic: &str, partition: i32) -> Option<Node> {
        let route = self
            .shared
            .metadata
            .route(topic, partition, &self.bootstrap)?;
        Node::from_route(route)
    }

    /// The leader epoch the cache holds for this partition.
    pub(crate) fn leader_epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        self.shared.metadata.leader_epoch(topic, partition)
    }

    /// Whether the cache lists this partition.
    pub(crate) fn knows_partition(&self, topic: &str, partition: i32) -> bool {
        self.shared.metadata.knows_partition(topic, partition)
    }

    /// A client for the current leader of `topic`/`partition`. Waits for a refresh
    /// already under way; when the cache knows no leader, refreshes once. Fails with
    /// `LEADER_NOT_AVAILABLE` (retriable; nothing was sent) when no live leader is known
    /// even then, or [`ClientError::UnknownTopic`] when no broker lists the partition.
    pub(crate) async fn leader(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(Node, BrokerClient<AuthChannel>), ClientError> {
        self.wait_for_refresh().await;
        for refreshed in [false, true] {
            if let Some(node) = self.leader_node(topic, partition) {
                let client = self.client_for(&node)?;
                return Ok((node, client));
            }
            if !refreshed {
                self.refresh_metadata().await;
            }
        }
        if self.knows_partition(topic, partition) {
            Err(ClientError::Broker {
                code: ErrorCode::LeaderNotAvailable,
                message: format!("no live leader known for {topic}/{partition}"),
                retriable: true,
            })
        } else {
            Err(ClientError::UnknownTopic {
                topic: topic.to_string(),
                partition: Some(partition),
            })
        }
    }

    /// A client for the current leader of `topic`/`partition`, and a name of that leader
    /// (its advertised address, or `"bootstrap"`) so callers can group requests per
    /// leader. Fails like the SDK's own routing: `LEADER_NOT_AVAILABLE` (retriable) or
    /// [`ClientError::UnknownTopic`].
    pub async fn leader_client(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(String, BrokerClient<AuthChannel>), ClientError> {
        let (node, client) = self.leader(topic, partition).await?;
        let name = match node {
            Node::Bootstrap => "bootstrap".to_string(),
            Node::Broker(address) => address,
        };
        Ok((name, client))
    }

    /// Refreshes the metadata of every topic and waits for it: joins a refresh already
    /// under way, else starts one (no sooner than the minimum interval after the
    /// previous one). Failures are logged; the cache keeps what it knew.
    pub async fn refresh_metadata(&self) {
        if let Some(refresh) = self.start_refresh() {
            refresh.await;
        }
    }

    /// Like [`Connection::refresh_metadata`] without waiting for it.
    pub fn request_refresh(&self) {
        let _ = self.start_refresh();
    }

    /// Waits for the refresh under way, if any; starts none.
    pub(crate) async fn wait_for_refresh(&self) {
        if let Some(refresh) = self.shared.metadata.current_refresh() {
            refresh.await;
        }
    }

    /// The refresh to wait for: the one under way, or a new one of every topic's
    /// metadata (see [`MetadataView::start_refresh`]).
    fn start_refresh(&self) -> Option<RefreshFuture> {
        let conn = self.clone();
        self.shared.metadata.start_refresh(move || {
            async move {
                if let Err(e) = conn.fetch_metadata(Vec::new()).await {
                    tracing::warn!(error = %e, "metadata refresh failed");
                }
            }
            .boxed()
        })
    }

    /// Nodes for a request any broker may serve: the one that answered last, the
    /// bootstrap, then every other live broker.
    fn any_nodes(&self) -> Vec<Node> {
        let mut nodes = Vec::new();
        if let Ok(preferred) = self.shared.preferred.lock() {
            nodes.push(preferred.clone());
        }
        if !nodes.contains(&Node::Bootstrap) {
            nodes.push(Node::Bootstrap);
        }
        for address in self.shared.metadata.brokers_besides(&self.bootstrap) {
            let node = Node::Broker(address);
            if !nodes.contains(&node) {
                nodes.push(node);
            }
        }
        nodes
    }

    /// Runs a request any broker may serve and that is safe to repeat, moving on to the
    /// next broker after an attempt that got no answer, for up to
    /// [`retry::READ_ATTEMPTS`] attempts with [`retry::read_backoff`] between them.
    async fn call_any<T, F, Fut>(&self, mut rpc: F) -> Result<(T, Node), ClientError>
    where
        F: FnMut(BrokerClient<AuthChannel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let nodes = self.any_nodes();
        let attempt_timeout = self.request_timeout.min(ANY_BROKER_ATTEMPT_TIMEOUT);
        let mut attempt = 0;
        let (value, node) = (|| {
            let node = nodes[attempt % nodes.len()].clone();
            attempt += 1;
            let call = self.client_for(&node).map(&mut rpc);
            async move {
                match call {
                    Ok(call) => with_timeout(attempt_timeout, call)
                        .await
                        .map(|value| (value, node)),
                    Err(e) => Err(e),
                }
            }
        })
        .retry(retry::read_backoff())
        .when(retry::is_lost_answer)
        .notify(|error, pause| {
            tracing::debug!(%error, ?pause, "no answer; trying the next broker");
        })
        .await?;
        if let Ok(mut preferred) = self.shared.preferred.lock() {
            *preferred = node.clone();
        }
        Ok((value, node))
    }

    /// Runs one RPC with the request timeout.
    pub async fn call<T>(
        &self,
        rpc: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, ClientError> {
        with_timeout(self.request_timeout, rpc).await
    }

    /// Runs a read-only (or otherwise safe to repeat) RPC on the bootstrap connection,
    /// retrying answers lost in transport for up to 8 attempts, with jittered pauses
    /// from 20 ms doubling to 1 s (`retry.rs`). (The SDK itself sends such requests to
    /// any broker, with failover; this stays for callers that want the bootstrap
    /// broker's answer.)
    pub async fn call_retrying<T, F, Fut>(&self, mut rpc: F) -> Result<T, ClientError>
    where
        F: FnMut(BrokerClient<AuthChannel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        (|| self.call(rpc(self.client())))
            .retry(retry::read_backoff())
            .when(retry::is_lost_answer)
            .notify(|error, pause| tracing::debug!(%error, ?pause, "retrying a safe request"))
            .await
    }

    /// Asks any broker for metadata of `topics` (all topics when empty) and updates the
    /// cache.
    pub async fn fetch_metadata(
        &self,
        topics: Vec<String>,
    ) -> Result<ClusterMetadata, ClientError> {
        let (response, node) = self
            .call_any(|mut client| {
                let request = MetadataRequest {
                    topics: topics.clone(),
                };
                async move { client.metadata(request).await }
            })
            .await?;
        let metadata = ClusterMetadata::from(response);
        self.shared
            .metadata
            .learn(&metadata, node == Node::Bootstrap, topics.is_empty());
        if !metadata.brokers.is_empty() {
            if let Ok(mut pool) = self.shared.pool.lock() {
                pool.retain(|address, _| metadata.brokers.iter().any(|b| &b.address == address));
            }
        }
        Ok(metadata)
    }

    /// The partition count of `topic`, from the cache or the broker. A cached count
    /// older than the metadata max age is still answered, and a refresh is started, so
    /// the uses after it see partitions added since.
    pub async fn partition_count(&self, topic: &str) -> Result<i32, ClientError> {
        if let Some(count) = self.cached_partition_count(topic) {
            if self
                .shared
                .metadata
                .is_older_than(topic, self.metadata_max_age)
            {
                self.request_refresh();
            }
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
        self.shared.metadata.partition_count(topic)
    }

    /// Forgets what the cache knows about `topic`.
    pub fn invalidate(&self, topic: &str) {
        self.shared.metadata.invalidate(topic);
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
        (|| self.init_producer_id_once(&request))
            .retry(retry::until_deadline_backoff(self.request_timeout))
            .when(|e| {
                matches!(
                    e,
                    ClientError::Broker {
                        retriable: true,
                        ..
                    }
                )
            })
            // No pause that would end past the deadline: the last refusal is the answer.
            .adjust(move |_, pause| pause.filter(|p| tokio::time::Instant::now() + *p < deadline))
            .notify(|error, _| tracing::debug!(%error, "InitProducerId refused; retrying"))
            .await
    }

    async fn init_producer_id_once(
        &self,
        request: &InitProducerIdRequest,
    ) -> Result<ProducerIdAndEpoch, ClientError> {
        // Safe to repeat (a fresh id only wastes one; a bump of the same epoch gets the
        // same answer), so a lost answer is retried, on another broker if need be.
        let (response, _) = self
            .call_any(|mut client| {
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

    /// The earliest or latest offset of one partition, asked of its leader (only the
    /// leader knows the high watermark and last stable offset). A leader that does not
    /// answer or no longer leads makes it refresh the metadata and ask again, for up to
    /// 8 attempts (`retry.rs`).
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        spec: OffsetSpec,
        isolation: Isolation,
    ) -> Result<i64, ClientError> {
        let (offset, _) = self
            .list_offset_at(topic, partition, spec.timestamp(), isolation)
            .await?;
        Ok(offset)
    }

    /// The first record of `topic`/`partition` whose timestamp is at or after
    /// `timestamp_ms` (Kafka's `offsetsForTimes`), among those `isolation` may read;
    /// `None` when every such record is older.
    pub async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp_ms: i64,
        isolation: Isolation,
    ) -> Result<Option<OffsetAndTimestamp>, ClientError> {
        if timestamp_ms < 0 {
            return Err(ClientError::InvalidConfig(format!(
                "a timestamp to look up is ms since the epoch, not {timestamp_ms}"
            )));
        }
        let (offset, timestamp_ms) = self
            .list_offset_at(topic, partition, timestamp_ms, isolation)
            .await?;
        Ok((offset >= 0).then_some(OffsetAndTimestamp {
            offset,
            timestamp_ms,
        }))
    }

    /// ListOffsets of one partition at its leader: `(offset, timestamp)` as answered.
    async fn list_offset_at(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation: Isolation,
    ) -> Result<(i64, i64), ClientError> {
        let request = ListOffsetsRequest {
            isolation_level: isolation.to_proto() as i32,
            topics: vec![ListOffsetsTopic {
                name: topic.to_string(),
                partitions: vec![ListOffsetsPartition {
                    partition,
                    timestamp,
                }],
            }],
        };
        self.at_leader(topic, partition, "list offsets", || {
            self.list_offset_once(topic, partition, &request)
        })
        .await
    }

    /// Runs `attempt`, one call to the leader of `topic`/`partition`, until it answers
    /// or fails for good: an unanswered call, a leadership error, or a leader that does
    /// not know the partition the metadata lists yet (just created) is asked again
    /// after a metadata refresh, with the read backoff (`retry.rs`).
    pub(crate) async fn at_leader<T, F, Fut>(
        &self,
        topic: &str,
        partition: i32,
        what: &str,
        attempt: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        attempt
            .retry(retry::read_backoff())
            .when(|error| match error {
                ClientError::Transport(status) => is_retriable_status(status.code()),
                ClientError::Broker { code, .. } => is_leadership_error(*code),
                ClientError::UnknownTopic { .. } => self.knows_partition(topic, partition),
                _ => false,
            })
            .notify(|error, _| {
                tracing::debug!(%error, topic, partition, what, "will retry");
                self.request_refresh();
            })
            .await
    }

    async fn list_offset_once(
        &self,
        topic: &str,
        partition: i32,
        request: &ListOffsetsRequest,
    ) -> Result<(i64, i64), ClientError> {
        let (_, mut client) = self.leader(topic, partition).await?;
        let response = self.call(client.list_offsets(request.clone())).await?;
        let answer = response
            .topics
            .into_iter()
            .filter(|t| t.name == topic)
            .flat_map(|t| t.partitions)
            .find(|p| p.partition == partition)
            .ok_or_else(|| {
                ClientError::Protocol(format!("list offsets answer lacks {topic}/{partition}"))
            })?;
        partition_answer(topic, partition, answer.error_code, answer.error_message)?;
        Ok((answer.offset, answer.timestamp))
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

/// What a leader answered for one partition: `Ok` for NONE, the unknown-topic error the
/// retry loop of [`Connection::at_leader`] knows, else the broker's error.
pub(crate) fn partition_answer(
    topic: &str,
    partition: i32,
    code: i32,
    message: String,
) -> Result<(), ClientError> {
    match crate::metadata::error_code(code) {
        None => Ok(()),
        Some(ErrorCode::UnknownTopicOrPartition) => Err(ClientError::UnknownTopic {
            topic: topic.to_string(),
            partition: Some(partition),
        }),
        Some(_) => Err(ClientError::broker(code, message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_addresses_become_http_uris() {
        assert_eq!(
            endpoint_uri("127.0.0.1:9092", false),
            "http://127.0.0.1:9092"
        );
        assert_eq!(
            endpoint_uri("127.0.0.1:9092", true),
            "https://127.0.0.1:9092"
        );
        assert_eq!(endpoint_uri(" localhost:1 ", false), "http://localhost:1");
        assert_eq!(endpoint_uri("https://b:443", false), "https://b:443");
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
