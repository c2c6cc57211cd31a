//! TxnOffsetCommit's write: the offsets go to the group's `__consumer_offsets`
//! partition as ONE transactional batch carrying the producer's id and epoch, declaring
//! this owner's coordinator epoch, so that the broker admits it only while the
//! producer's transaction is open there (AddOffsetsToTxn's BEGIN) and the transaction's
//! COMMIT/ABORT marker decides it.
//!
//! Sequences: the batch lives in the producer's sequence space of that partition, which
//! only this owner writes data into. Its base sequence is the one after the producer's
//! last offset batch of the same epoch since its last marker in this partition (as the
//! slice read it back from the log), else 0 — what the broker's producer state expects
//! after a BEGIN. A batch is resent byte for byte (same sequence) until the leader
//! answers, so a lost answer is deduplicated (DUPLICATE_SEQUENCE_NUMBER counts as
//! written) and never collides with the next batch; a refused batch wrote nothing and
//! leaves the sequence free. The slice serialises these writes.

use std::time::Duration;

use bytes::Bytes;
use idem_client::Connection;
use idem_proto::batch::{self, ProducerInfo, Record, ATTR_TRANSACTIONAL};
use idem_proto::txn::OFFSETS_TOPIC;
use idem_proto::v1::{PartitionProduceData, ProduceRequest, TopicProduceData};
use idem_proto::ErrorCode;

use super::records::GroupRecord;
use crate::clock::now_ms;
use crate::error::CoordinatorError;
use crate::log::writer::produce_once;
use crate::ownership::token::OwnershipToken;
use crate::retry::{self, Failed};

const PRODUCE_TIMEOUT_MS: i32 = 10_000;
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The producer whose transaction the offsets join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// How the leader answered the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnBatchOutcome {
    Written,
    /// Send the same bytes again.
    Retry,
    /// A newer owner of the slice fenced this coordinator.
    CoordinatorFenced,
    /// Refused for the producer (stale epoch, no open transaction, …): nothing written;
    /// the producer hears the code.
    Refused,
}

/// Classifies the leader's answer to a transactional offset batch.
pub fn classify(code: ErrorCode) -> TxnBatchOutcome {
    use ErrorCode as E;
    match code {
        E::None | E::DuplicateSequenceNumber => TxnBatchOutcome::Written,
        E::TransactionCoordinatorFenced => TxnBatchOutcome::CoordinatorFenced,
        E::UnknownTopicOrPartition => TxnBatchOutcome::Retry,
        c if idem_client::error::is_retriable(c) => TxnBatchOutcome::Retry,
        _ => TxnBatchOutcome::Refused,
    }
}

/// The batch of `records` for `producer` at `base_sequence`.
pub fn encode(producer: TxnProducer, base_sequence: i32, records: &[GroupRecord]) -> Bytes {
    let now = now_ms();
    let records: Vec<Record> = records
        .iter()
        .map(|r| {
            let (key, value) = r.encode();
            Record {
                key: Some(key),
                value,
                headers: Vec::new(),
                timestamp_ms: now,
            }
        })
        .collect();
    batch::encode(
        ProducerInfo {
            producer_id: producer.producer_id,
            producer_epoch: producer.producer_epoch,
            base_sequence,
        },
        ATTR_TRANSACTIONAL,
        &records,
    )
}

/// Appends `bytes` to `partition` (acks=all), resending them until the leader answers;
/// returns the batch's base offset.
pub async fn append(
    conn: &Connection,
    partition: i32,
    coordinator_epoch: i32,
    token: &OwnershipToken,
    bytes: Bytes,
) -> Result<i64, CoordinatorError> {
    let request = ProduceRequest {
        acks: -1,
        timeout_ms: PRODUCE_TIMEOUT_MS,
        topics: vec![TopicProduceData {
            name: OFFSETS_TOPIC.to_string(),
            partitions: vec![PartitionProduceData {
                partition,
                records: bytes,
            }],
        }],
        coordinator_epoch: Some(coordinator_epoch),
    };
    let attempt = || async {
        if token.is_lost() {
            return Err(Failed::Stop(CoordinatorError::ownership_lost(
                partition,
                "claim lost while appending transactional offsets",
            )));
        }
        let (code, message, base_offset) =
            produce_once(conn, OFFSETS_TOPIC, partition, &request).await;
        match classify(code) {
            TxnBatchOutcome::Written => Ok(base_offset),
            TxnBatchOutcome::CoordinatorFenced => Err(Failed::Stop(
                CoordinatorError::ownership_lost(partition, format!("{code:?}: {message}")),
            )),
            TxnBatchOutcome::Refused => Err(Failed::Stop(CoordinatorError::Refused {
                what: format!("transactional offsets to {OFFSETS_TOPIC}/{partition}"),
                code,
                message,
            })),
            TxnBatchOutcome::Retry => Err(Failed::Again(format!("{code:?}: {message}"))),
        }
    };
    retry::while_owned(token, BACKOFF_MAX, attempt, |reason| {
        tracing::debug!(partition, %reason, "transactional offsets append will retry");
        conn.request_refresh();
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_that_concern_the_producer_are_its_refusals_not_the_coordinators_fencing() {
        use ErrorCode as E;
        for code in [E::None, E::DuplicateSequenceNumber] {
            assert_eq!(classify(code), TxnBatchOutcome::Written, "{code:?}");
        }
        assert_eq!(
            classify(E::TransactionCoordinatorFenced),
            TxnBatchOutcome::CoordinatorFenced
        );
        for code in [
            E::InvalidProducerEpoch,
            E::ProducerFenced,
            E::InvalidTxnState,
            E::OutOfOrderSequenceNumber,
        ] {
            assert_eq!(classify(code), TxnBatchOutcome::Refused, "{code:?}");
        }
        for code in [
            E::NotLeaderOrFollower,
            E::RequestTimedOut,
            E::NotEnoughReplicas,
        ] {
            assert_eq!(classify(code), TxnBatchOutcome::Retry, "{code:?}");
        }
    }
}
