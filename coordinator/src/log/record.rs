//! Records of `__transaction_state` (docs/transactions.md): key = the transactional id
//! (UTF-8), value = JSON of its `TxnMetadata`; the fence record a new owner writes first
//! has an empty key and value `{"fence": coordinator_epoch}`. The last record of a key
//! wins. Decoding is strict: an unreadable record is an error, because skipping one a
//! coordinator wrote could forget a transaction some partition still holds open (the
//! loader skips only records no coordinator wrote).

use std::collections::BTreeSet;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::txn::decide::{PendingEnd, ProducerIdentity, TopicPartition, TxnMetadata};
use crate::txn::state::TxnState;

/// One record of the transaction log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRecord {
    Txn(TxnMetadata),
    /// A new owner took the partition over at this coordinator epoch.
    Fence {
        coordinator_epoch: i32,
    },
    /// The transactional id expired (its `Dead` state): written as a tombstone, a record
    /// with the id as key and no value, so compaction of the log (cleanup.policy
    /// compact) drops every record of the id, and then the tombstone itself.
    Removed {
        transactional_id: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct TxnValue {
    producer_id: i64,
    producer_epoch: i16,
    timeout_ms: i32,
    state: String,
    partitions: Vec<PartitionValue>,
    txn_start_ms: i64,
    last_update_ms: i64,
    ended_by_producer: bool,
    /// Only when the producer's EndTxn kept its epoch (Kafka's transaction version 1);
    /// absent otherwise, and in records written before it existed.
    #[serde(default, skip_serializing_if = "is_false")]
    kept_epoch: bool,
    /// Absent in records written before renewals existed, and in most records since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    renewed_from: Option<IdentityValue>,
    /// Only on a transaction that began while its predecessor's markers were on their
    /// way, until they are written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending_end: Option<PendingEndValue>,
}

fn is_false(value: &bool) -> bool {
    !*value
}

#[derive(Debug, Serialize, Deserialize)]
struct PendingEndValue {
    commit: bool,
    partitions: Vec<PartitionValue>,
}

#[derive(Debug, Serialize, Deserialize)]
struct IdentityValue {
    producer_id: i64,
    producer_epoch: i16,
}

#[derive(Debug, Serialize, Deserialize)]
struct PartitionValue {
    topic: String,
    partition: i32,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FenceValue {
    fence: i32,
}

/// Why a record does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record has no value")]
    NoValue,
    #[error("record key is not UTF-8")]
    KeyNotUtf8,
    #[error("record value is not valid JSON for its key: {0}")]
    BadValue(String),
    #[error("unknown transaction state {0:?}")]
    UnknownState(String),
}

impl LogRecord {
    /// The record's key and value bytes (no value: a tombstone).
    pub fn encode(&self) -> (Bytes, Option<Bytes>) {
        match self {
            LogRecord::Fence { coordinator_epoch } => {
                let value = serde_json::json!({ "fence": coordinator_epoch }).to_string();
                (Bytes::new(), Some(Bytes::from(value)))
            }
            LogRecord::Removed { transactional_id } => {
                (Bytes::copy_from_slice(transactional_id.as_bytes()), None)
            }
            LogRecord::Txn(meta) if meta.state == TxnState::Dead => LogRecord::Removed {
                transactional_id: meta.transactional_id.clone(),
            }
            .encode(),
            LogRecord::Txn(meta) => {
                let value = TxnValue {
                    producer_id: meta.producer_id,
                    producer_epoch: meta.producer_epoch,
                    timeout_ms: meta.timeout_ms,
                    state: meta.state.name().to_string(),
                    partitions: partition_values(&meta.partitions),
                    txn_start_ms: meta.txn_start_ms,
                    last_update_ms: meta.last_update_ms,
                    ended_by_producer: meta.ended_by_producer,
                    kept_epoch: meta.kept_epoch,
                    renewed_from: meta.renewed_from.map(|r| IdentityValue {
                        producer_id: r.producer_id,
                        producer_epoch: r.producer_epoch,
                    }),
                    pending_end: meta.pending_end.as_ref().map(|end| PendingEndValue {
                        commit: end.commit,
                        partitions: partition_values(&end.partitions),
                    }),
                };
                // Serialising plain integers, strings and bools cannot fail.
                let json = serde_json::to_vec(&value).unwrap_or_default();
                (
                    Bytes::copy_from_slice(meta.transactional_id.as_bytes()),
                    Some(Bytes::from(json)),
                )
            }
        }
    }

    /// Reads a record back; a missing key counts as the empty key. A transactional id
    /// without a value is its tombstone (records of `Dead` written before tombstones
    /// existed still read as `Txn` in state `Dead`).
    pub fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<LogRecord, RecordError> {
        let key = key.unwrap_or_default();
        let Some(value) = value else {
            if key.is_empty() {
                return Err(RecordError::NoValue);
            }
            let transactional_id = std::str::from_utf8(key)
                .map_err(|_| RecordError::KeyNotUtf8)?
                .to_string();
            return Ok(LogRecord::Removed { transactional_id });
        };
        if key.is_empty() {
            let fence: FenceValue =
                serde_json::from_slice(value).map_err(|e| RecordError::BadValue(e.to_string()))?;
            return Ok(LogRecord::Fence {
                coordinator_epoch: fence.fence,
            });
        }
        let transactional_id = std::str::from_utf8(key)
            .map_err(|_| RecordError::KeyNotUtf8)?
            .to_string();
        let txn: TxnValue =
            serde_json::from_slice(value).map_err(|e| RecordError::BadValue(e.to_string()))?;
        let state =
            TxnState::from_name(&txn.state).ok_or(RecordError::UnknownState(txn.state.clone()))?;
        Ok(LogRecord::Txn(TxnMetadata {
            transactional_id,
            producer_id: txn.producer_id,
            producer_epoch: txn.producer_epoch,
            timeout_ms: txn.timeout_ms,
            state,
            partitions: topic_partitions(txn.partitions),
            txn_start_ms: txn.txn_start_ms,
            last_update_ms: txn.last_update_ms,
            ended_by_producer: txn.ended_by_producer,
            kept_epoch: txn.kept_epoch,
            renewed_from: txn.renewed_from.map(|r| ProducerIdentity {
                producer_id: r.producer_id,
                producer_epoch: r.producer_epoch,
            }),
            pending_end: txn.pending_end.map(|end| PendingEnd {
                commit: end.commit,
                partitions: topic_partitions(end.partitions),
            }),
        }))
    }
}

fn partition_values(partitions: &BTreeSet<TopicPartition>) -> Vec<PartitionValue> {
    partitions
        .iter()
        .map(|tp| PartitionValue {
            topic: tp.topic.clone(),
            partition: tp.partition,
        })
        .collect()
}

fn topic_partitions(values: Vec<PartitionValue>) -> BTreeSet<TopicPartition> {
    values
        .into_iter()
        .map(|p| TopicPartition {
            topic: p.topic,
            partition: p.partition,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(state: TxnState) -> TxnMetadata {
        TxnMetadata {
            transactional_id: "orders-1".into(),
            producer_id: 1234,
            producer_epoch: 7,
            timeout_ms: 60_000,
            state,
            partitions: [
                TopicPartition {
                    topic: "orders".into(),
                    partition: 2,
                },
                TopicPartition {
                    topic: "stock".into(),
                    partition: 0,
                },
            ]
            .into_iter()
            .collect(),
            txn_start_ms: 1_700_000_000_000,
            last_update_ms: 1_700_000_000_500,
            ended_by_producer: true,
            kept_epoch: false,
            renewed_from: None,
            pending_end: None,
        }
    }

    #[test]
    fn a_kept_epoch_round_trips_and_records_without_one_omit_it() {
        let kept = TxnMetadata {
            kept_epoch: true,
            ..meta(TxnState::PrepareCommit)
        };
        let (key, value) = LogRecord::Txn(kept.clone()).encode();
        let json: serde_json::Value =
            serde_json::from_slice(value.as_deref().unwrap_or_default()).expect("json");
        assert_eq!(json["kept_epoch"], serde_json::json!(true));
        assert_eq!(
            LogRecord::decode(Some(&key), value.as_deref()),
            Ok(LogRecord::Txn(kept))
        );
    }

    #[test]
    fn every_state_but_dead_round_trips() {
        for state in TxnState::ALL.into_iter().filter(|s| *s != TxnState::Dead) {
            let record = LogRecord::Txn(meta(state));
            let (key, value) = record.encode();
            assert_eq!(&key[..], b"orders-1");
            assert_eq!(LogRecord::decode(Some(&key), value.as_deref()), Ok(record));
        }
    }

    #[test]
    fn the_value_is_the_documented_json() {
        let (_, value) = LogRecord::Txn(meta(TxnState::PrepareCommit)).encode();
        let json: serde_json::Value =
            serde_json::from_slice(value.as_deref().unwrap_or_default()).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "producer_id": 1234,
                "producer_epoch": 7,
                "timeout_ms": 60000,
                "state": "PrepareCommit",
                "partitions": [{"topic": "orders", "partition": 2}, {"topic": "stock", "partition": 0}],
                "txn_start_ms": 1_700_000_000_000_i64,
                "last_update_ms": 1_700_000_000_500_i64,
                "ended_by_producer": true,
            })
        );
    }

    #[test]
    fn a_renewed_identity_round_trips_and_older_records_read_without_one() {
        let renewed = TxnMetadata {
            producer_id: 99,
            producer_epoch: 0,
            renewed_from: Some(ProducerIdentity {
                producer_id: 1234,
                producer_epoch: i16::MAX,
            }),
            ..meta(TxnState::Empty)
        };
        let (key, value) = LogRecord::Txn(renewed.clone()).encode();
        let json: serde_json::Value =
            serde_json::from_slice(value.as_deref().unwrap_or_default()).expect("json");
        assert_eq!(
            json["renewed_from"],
            serde_json::json!({"producer_id": 1234, "producer_epoch": 32767})
        );
        assert_eq!(
            LogRecord::decode(Some(&key), value.as_deref()),
            Ok(LogRecord::Txn(renewed))
        );
        // The documented JSON above has no such field: records of older coordinators.
        let (key, value) = LogRecord::Txn(meta(TxnState::Empty)).encode();
        assert!(
            !String::from_utf8_lossy(value.as_deref().unwrap_or_default()).contains("renewed_from")
        );
        assert_eq!(
            LogRecord::decode(Some(&key), value.as_deref()),
            Ok(LogRecord::Txn(meta(TxnState::Empty)))
        );
    }

    #[test]
    fn a_pending_end_round_trips_and_records_without_one_omit_it() {
        let began_behind = TxnMetadata {
            pending_end: Some(PendingEnd {
                commit: true,
                partitions: meta(TxnState::PrepareCommit).partitions,
            }),
            partitions: [TopicPartition {
                topic: "audit".into(),
                partition: 1,
            }]
            .into_iter()
            .collect(),
            ended_by_producer: false,
            ..meta(TxnState::Ongoing)
        };
        let (key, value) = LogRecord::Txn(began_behind.clone()).encode();
        let json: serde_json::Value =
            serde_json::from_slice(value.as_deref().unwrap_or_default()).expect("json");
        assert_eq!(
            json["pending_end"],
            serde_json::json!({
                "commit": true,
                "partitions": [{"topic": "orders", "partition": 2}, {"topic": "stock", "partition": 0}],
            })
        );
        assert_eq!(
            LogRecord::decode(Some(&key), value.as_deref()),
            Ok(LogRecord::Txn(began_behind))
        );
        let (_, value) = LogRecord::Txn(meta(TxnState::Ongoing)).encode();
        assert!(
            !String::from_utf8_lossy(value.as_deref().unwrap_or_default()).contains("pending_end")
        );
    }

    #[test]
    fn the_fence_record_has_an_empty_key_and_the_epoch() {
        let record = LogRecord::Fence {
            coordinator_epoch: 9,
        };
        let (key, value) = record.encode();
        let value = value.expect("a fence has a value");
        assert!(key.is_empty());
        assert_eq!(&value[..], br#"{"fence":9}"#);
        assert_eq!(
            LogRecord::decode(Some(&key), Some(&value)),
            Ok(record.clone())
        );
        assert_eq!(LogRecord::decode(None, Some(&value)), Ok(record));
    }

    #[test]
    fn a_dead_id_is_written_as_its_tombstone_and_read_back_as_removed() {
        let (key, value) = LogRecord::Txn(meta(TxnState::Dead)).encode();
        assert_eq!((&key[..], value), (&b"orders-1"[..], None));
        assert_eq!(
            LogRecord::decode(Some(&key), None),
            Ok(LogRecord::Removed {
                transactional_id: "orders-1".into()
            })
        );
    }

    #[test]
    fn unreadable_records_are_errors() {
        assert_eq!(
            LogRecord::decode(Some(b""), None),
            Err(RecordError::NoValue)
        );
        assert_eq!(LogRecord::decode(None, None), Err(RecordError::NoValue));
        assert_eq!(
            LogRecord::decode(Some(&[0xff, 0xfe]), Some(b"{}")),
            Err(RecordError::KeyNotUtf8)
        );
        assert!(matches!(
            LogRecord::decode(Some(b"tx"), Some(b"not json")),
            Err(RecordError::BadValue(_))
        ));
        assert!(matches!(
            LogRecord::decode(None, Some(br#"{"fence": 1, "extra": 2}"#)),
            Err(RecordError::BadValue(_))
        ));
        let (key, value) = LogRecord::Txn(meta(TxnState::Empty)).encode();
        let value = String::from_utf8(value.unwrap_or_default().to_vec())
            .expect("utf8")
            .replace("\"Empty\"", "\"Limbo\"");
        assert_eq!(
            LogRecord::decode(Some(&key), Some(value.as_bytes())),
            Err(RecordError::UnknownState("Limbo".into()))
        );
    }
}
