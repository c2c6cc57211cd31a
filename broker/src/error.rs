//! `BrokerError`: every way a broker request can be refused, each mapped to the stable
//! wire `ErrorCode` a client acts on (docs/protocol.md says which are retriable).

use idem_pidstore::PidStoreError;
use idem_proto::batch::BatchError;
use idem_proto::ErrorCode;

use crate::cluster::reassignment::ReassignmentRefusal;
use crate::log::LogError;
use crate::partition::delete_target::DeleteRecordsRefusal;
use crate::producer_state::TxnRefusal;
use crate::topic_config::TopicConfigError;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The request's principal may not do this (issue 29); nothing was changed.
    #[error("{0}")]
    Unauthorized(idem_runtime::acl::Denied),
    #[error("unknown topic or partition {topic}-{partition}")]
    UnknownTopicOrPartition { topic: String, partition: i32 },
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidTopic { name: String, reason: &'static str },
    #[error("topic {topic:?} refused: {reason}")]
    InternalTopic { topic: String, reason: String },
    #[error("topic {0:?} already exists")]
    TopicAlreadyExists(String),
    #[error("invalid partition count {count}: must be between 1 and {max}")]
    InvalidPartitions { count: i32, max: i32 },
    #[error(
        "topic {topic:?} has {current} partitions: it can only grow, and {requested} is not more"
    )]
    PartitionsNotGrown {
        topic: String,
        requested: i32,
        current: i32,
    },
    #[error("invalid replication factor {factor}: this cluster has {brokers} broker(s)")]
    InvalidReplicationFactor { factor: i32, brokers: i32 },
    #[error(
        "invalid replication factor {0}: use a replica count >= 1, or 0 or -1 for the default (1)"
    )]
    NegativeReplicationFactor(i32),
    #[error("broker is not the leader of {topic}-{partition} (leader: broker {leader})")]
    NotLeaderOrFollower {
        topic: String,
        partition: i32,
        leader: i32,
    },
    #[error("only {isr} in-sync replica(s); min.insync.replicas is {min}")]
    NotEnoughReplicas { isr: i32, min: i32 },
    #[error("written, but the ISR shrank to {isr} below min.insync.replicas = {min} before it was confirmed")]
    NotEnoughReplicasAfterAppend { isr: i32, min: i32 },
    #[error("the in-sync replicas did not confirm offsets below {end} within {timeout:?}; the batch may have been written")]
    ReplicationTimedOut {
        end: i64,
        timeout: std::time::Duration,
    },
    /// The batch was appended here as leader, then leadership moved before the ISR
    /// confirmed it: the new leader may or may not hold it.
    #[error("{topic}-{partition}: leadership moved (epoch {epoch} ended) before the in-sync replicas confirmed the batch; it may have been written")]
    LeadershipLostAfterAppend {
        topic: String,
        partition: i32,
        epoch: i32,
    },
    #[error("leader epoch {asked} is older than the current epoch {current}")]
    FencedLeaderEpoch { asked: i32, current: i32 },
    /// A topic config refused by name; nothing changed.
    #[error(transparent)]
    InvalidConfig(#[from] TopicConfigError),
    #[error("cluster metadata: {0}")]
    Cluster(String),
    #[error("cannot reassign {topic}-{partition}: {refusal}")]
    Reassignment {
        topic: String,
        partition: i32,
        refusal: ReassignmentRefusal,
    },
    #[error("cannot delete records of {topic}-{partition}: {refusal}")]
    DeleteRecords {
        topic: String,
        partition: i32,
        refusal: DeleteRecordsRefusal,
    },
    #[error("corrupt record batch: {0}")]
    CorruptBatch(#[from] BatchError),
    #[error("record batch of {size} bytes exceeds the limit of {limit} (the broker's --max-batch-bytes, or the topic's max.message.bytes if lower)")]
    MessageTooLarge { size: usize, limit: usize },
    #[error("offset {offset} is out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    #[error(
        "producer {producer_id}: out of order sequence number: expected {expected}, got {got}"
    )]
    OutOfOrderSequence {
        producer_id: i64,
        expected: i32,
        got: i32,
    },
    #[error("producer {producer_id}: epoch {got} is older than the current epoch {current}")]
    InvalidProducerEpoch {
        producer_id: i64,
        current: i16,
        got: i16,
    },
    #[error(
        "producer {producer_id} is unknown to this partition and sent sequence {sequence}, not 0"
    )]
    UnknownProducerId { producer_id: i64, sequence: i32 },
    #[error("invalid required acks {0}: use -1, 0 or 1")]
    InvalidRequiredAcks(i32),
    #[error("{0}")]
    InvalidRequest(String),
    /// A record the partition cannot take (INVALID_RECORD).
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    #[error("producer {producer_id}: {refusal}")]
    InvalidTxnState {
        producer_id: i64,
        refusal: TxnRefusal,
    },
    #[error("producer {producer_id}: marker from coordinator epoch {got}, but a coordinator of epoch {current} already wrote one (this coordinator was replaced)")]
    CoordinatorFenced {
        producer_id: i64,
        current: i32,
        got: i32,
    },
    #[error("no transaction coordinator available: {0}")]
    CoordinatorNotAvailable(String),
    #[error("{0}")]
    NotCoordinator(String),
    #[error("storage error: {0}")]
    Storage(#[from] LogError),
    #[error("producer id store: {0}")]
    ProducerIds(#[from] PidStoreError),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl BrokerError {
    /// The wire code a client sees for this refusal.
    pub fn code(&self) -> ErrorCode {
        match self {
            BrokerError::Unauthorized(denied) => denied.error_code(),
            BrokerError::UnknownTopicOrPartition { .. } | BrokerError::UnknownTopic(_) => {
                ErrorCode::UnknownTopicOrPartition
            }
            BrokerError::InvalidTopic { .. } | BrokerError::InternalTopic { .. } => {
                ErrorCode::InvalidTopicException
            }
            BrokerError::TopicAlreadyExists(_) => ErrorCode::TopicAlreadyExists,
            BrokerError::InvalidPartitions { .. } | BrokerError::PartitionsNotGrown { .. } => {
                ErrorCode::InvalidPartitions
            }
            BrokerError::InvalidReplicationFactor { .. }
            | BrokerError::NegativeReplicationFactor(_) => ErrorCode::InvalidReplicationFactor,
            BrokerError::NotLeaderOrFollower { .. } => ErrorCode::NotLeaderOrFollower,
            BrokerError::InvalidConfig(_) => ErrorCode::InvalidConfig,
            // etcd unreachable or slow: the client may retry.
            BrokerError::Cluster(_) => ErrorCode::RequestTimedOut,
            BrokerError::Reassignment {
                refusal: ReassignmentRefusal::InProgress { .. },
                ..
            } => ErrorCode::ReassignmentInProgress,
            BrokerError::Reassignment { .. } => ErrorCode::InvalidReplicaAssignment,
            BrokerError::NotEnoughReplicas { .. } => ErrorCode::NotEnoughReplicas,
            BrokerError::ReplicationTimedOut { .. } => ErrorCode::RequestTimedOut,
            // Retriable, and "may have been written", as a timeout is: not
            // NOT_LEADER_OR_FOLLOWER, which says nothing was written.
            BrokerError::LeadershipLostAfterAppend { .. } => ErrorCode::RequestTimedOut,
            BrokerError::NotEnoughReplicasAfterAppend { .. } => {
                ErrorCode::NotEnoughReplicasAfterAppend
            }
            BrokerError::FencedLeaderEpoch { .. } => ErrorCode::FencedLeaderEpoch,
            BrokerError::CorruptBatch(_) => ErrorCode::CorruptMessage,
            BrokerError::MessageTooLarge { .. } => ErrorCode::MessageTooLarge,
            BrokerError::OffsetOutOfRange { .. } | BrokerError::DeleteRecords { .. } => {
                ErrorCode::OffsetOutOfRange
            }
            BrokerError::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequenceNumber,
            BrokerError::InvalidProducerEpoch { .. } => ErrorCode::InvalidProducerEpoch,
            BrokerError::UnknownProducerId { .. } => ErrorCode::UnknownProducerId,
            BrokerError::InvalidRequiredAcks(_) => ErrorCode::InvalidRequiredAcks,
            BrokerError::InvalidRequest(_) => ErrorCode::InvalidRequest,
            BrokerError::InvalidRecord(_) => ErrorCode::InvalidRecord,
            BrokerError::InvalidTxnState { .. } => ErrorCode::InvalidTxnState,
            BrokerError::CoordinatorFenced { .. } => ErrorCode::TransactionCoordinatorFenced,
            BrokerError::CoordinatorNotAvailable(_) => ErrorCode::CoordinatorNotAvailable,
            BrokerError::NotCoordinator(_) => ErrorCode::NotCoordinator,
            BrokerError::Storage(LogError::OffsetOutOfRange { .. }) => ErrorCode::OffsetOutOfRange,
            BrokerError::Storage(LogError::Corrupt { .. }) => ErrorCode::CorruptMessage,
            BrokerError::Storage(_) | BrokerError::Io(_) => ErrorCode::UnknownServerError,
            BrokerError::ProducerIds(e) if e.is_retriable() => ErrorCode::CoordinatorLoadInProgress,
            BrokerError::ProducerIds(PidStoreError::Exhausted) => ErrorCode::ProducerIdsExhausted,
            BrokerError::ProducerIds(_) => ErrorCode::UnknownServerError,
        }
    }
}
