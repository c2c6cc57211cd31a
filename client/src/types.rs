//! Plain values every layer of the SDK shares (and users name): which end of a
//! partition to look up, which records a consumer may see, a producer's id and epoch.
//! This file imports nothing from the SDK but its error type, so any layer may use it.

use std::str::FromStr;

use idem_proto::v1::IsolationLevel;

use crate::error::ClientError;

/// Which end of a partition to look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The high watermark (read-uncommitted) or last stable offset (read-committed).
    Latest,
}

impl OffsetSpec {
    /// The protocol's encoding: -2 earliest, -1 latest.
    pub fn timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
        }
    }
}

/// A record found by its timestamp: its offset and its own timestamp (at or after the
/// one asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAndTimestamp {
    pub offset: i64,
    pub timestamp_ms: i64,
}

/// Which records a consumer may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Only committed data: the broker stops at the last stable offset and filters
    /// aborted transactions. The default: idem exists for exactly-once pipelines.
    #[default]
    ReadCommitted,
    /// Everything up to the high watermark, including open and aborted transactions.
    ReadUncommitted,
}

impl Isolation {
    pub fn to_proto(self) -> IsolationLevel {
        match self {
            Isolation::ReadCommitted => IsolationLevel::ReadCommitted,
            Isolation::ReadUncommitted => IsolationLevel::ReadUncommitted,
        }
    }
}

impl FromStr for Isolation {
    type Err = ClientError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "read-committed" => Ok(Isolation::ReadCommitted),
            "read-uncommitted" => Ok(Isolation::ReadUncommitted),
            other => Err(ClientError::InvalidConfig(format!(
                "unknown isolation {other:?}: expected read-committed or read-uncommitted"
            ))),
        }
    }
}

/// A producer id and the epoch that goes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// What a transactional producer needs to store offsets for this member
/// (`send_offsets_to_transaction`): the coordinator refuses them once the member's
/// epoch has moved on (it was fenced, or its partitions were reassigned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
}
