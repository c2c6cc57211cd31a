//! Cluster administration: create topics, describe topics and brokers, look up a
//! partition's earliest or latest offset. `create_topic` is one RPC to the bootstrap
//! broker and its broker errors come back untouched (not retried), so the caller sees
//! exactly what the broker decided; `metadata` asks any broker; `list_offsets` asks the
//! partition's leader and retries only answers that were lost or came from a broker
//! that no longer leads (after refreshing the metadata). Transactions: see
//! [`transactions`]; moving partitions between brokers: [`reassignments`]; topic
//! settings: [`configs`]; the log's lifecycle: [`delete_records`] (move a partition's
//! log start), [`create_partitions`] (grow a topic).

pub mod acls;
pub mod configs;
pub mod create_partitions;
pub mod delete_records;
pub mod groups;
pub mod reassignments;
pub mod topic_deletion;
pub mod transactions;
pub mod txn_log_slices;

use crate::connection::{Connection, DEFAULT_REQUEST_TIMEOUT};
use crate::error::ClientError;
use crate::metadata::ClusterMetadata;
use crate::tls::TlsConfig;
pub use crate::types::OffsetSpec;
use crate::types::{Isolation, OffsetAndTimestamp};
use idem_proto::v1::{ConfigEntry, CreatableTopic, CreateTopicsRequest};

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    /// 0 for the cluster default.
    pub replication_factor: i32,
    /// Let an out-of-ISR replica lead when the whole ISR is gone (may lose data).
    pub unclean_leader_election: bool,
    /// Topic settings `(key, value)` overriding the broker's defaults, e.g.
    /// `("retention.ms", "86400000")` (docs/operations.md, "Topic configs").
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    /// `partitions` partitions with the cluster's default replication factor, no
    /// unclean leader election and no config of its own.
    pub fn new(name: &str, partitions: i32) -> NewTopic {
        NewTopic {
            name: name.to_string(),
            partitions,
            replication_factor: 0,
            unclean_leader_election: false,
            configs: Vec::new(),
        }
    }

    pub fn replication_factor(mut self, replication_factor: i32) -> NewTopic {
        self.replication_factor = replication_factor;
        self
    }

    /// Overrides one setting (validated by the broker: an unknown key or a bad value
    /// is `INVALID_CONFIG` and nothing is created).
    pub fn config(mut self, key: &str, value: &str) -> NewTopic {
        self.configs.push((key.to_string(), value.to_string()));
        self
    }
}

/// Administrative client.
#[derive(Debug, Clone)]
pub struct Admin {
    conn: Connection,
}

impl Admin {
    /// Connects to `bootstrap` (`host:port`, or a comma-separated list of them tried in
    /// turn).
    pub async fn connect(bootstrap: &str) -> Result<Admin, ClientError> {
        Admin::connect_with(bootstrap, crate::credentials::Credentials::none(), None).await
    }

    /// [`Admin::connect`], presenting `credentials` on every call, with TLS on every
    /// connection when `tls` is given.
    pub async fn connect_with(
        bootstrap: &str,
        credentials: crate::credentials::Credentials,
        tls: Option<TlsConfig>,
    ) -> Result<Admin, ClientError> {
        Ok(Admin {
            conn: Connection::connect_with(bootstrap, DEFAULT_REQUEST_TIMEOUT, credentials, tls)
                .await?,
        })
    }

    /// An admin client sharing an existing connection.
    pub fn from_connection(conn: Connection) -> Admin {
        Admin { conn }
    }

    /// Creates a topic. An existing topic is `Broker { code: TOPIC_ALREADY_EXISTS, .. }`;
    /// invalid names and partition counts are the broker's `INVALID_*` codes.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
    ) -> Result<(), ClientError> {
        self.create_topic_with(
            NewTopic::new(name, partitions).replication_factor(replication_factor),
        )
        .await
    }

    /// Creates a topic with every setting spelled out. A refused config is
    /// `Broker { code: INVALID_CONFIG, .. }` naming the key, and nothing is created.
    pub async fn create_topic_with(&self, topic: NewTopic) -> Result<(), ClientError> {
        let name = topic.name.clone();
        let mut client = self.conn.client();
        let response = self
            .conn
            .call(client.create_topics(CreateTopicsRequest {
                topics: vec![CreatableTopic {
                    name: topic.name,
                    num_partitions: topic.partitions,
                    replication_factor: topic.replication_factor,
                    unclean_leader_election: topic.unclean_leader_election,
                    // Clients never create internal topics.
                    coordinator_id: None,
                    configs: topic
                        .configs
                        .into_iter()
                        .map(|(name, value)| ConfigEntry { name, value })
                        .collect(),
                }],
            }))
            .await?;
        let result = response
            .topics
            .into_iter()
            .find(|t| t.name == name)
            .ok_or_else(|| {
                ClientError::Protocol(format!("create topics answer lacks topic {name:?}"))
            })?;
        self.conn.invalidate(&name);
        if result.error_code == 0 {
            Ok(())
        } else {
            Err(ClientError::broker(result.error_code, result.error_message))
        }
    }

    /// Metadata of `topics`, or of every topic when `topics` is empty. Unknown topics are
    /// listed with `error: Some(UNKNOWN_TOPIC_OR_PARTITION)`.
    pub async fn metadata(&self, topics: &[&str]) -> Result<ClusterMetadata, ClientError> {
        self.conn
            .fetch_metadata(topics.iter().map(|t| t.to_string()).collect())
            .await
    }

    /// The earliest or latest offset of a partition, asked of its leader.
    pub async fn list_offsets(
        &self,
        topic: &str,
        partition: i32,
        spec: OffsetSpec,
        isolation: Isolation,
    ) -> Result<i64, ClientError> {
        self.conn
            .list_offset(topic, partition, spec, isolation)
            .await
    }

    /// The first record of `topic`/`partition` whose timestamp is at or after
    /// `timestamp_ms` (ms since the epoch), among those `isolation` may read; `None`
    /// when every such record is older. A consumer seeks there to replay from a time.
    pub async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp_ms: i64,
        isolation: Isolation,
    ) -> Result<Option<OffsetAndTimestamp>, ClientError> {
        self.conn
            .offset_for_timestamp(topic, partition, timestamp_ms, isolation)
            .await
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}
