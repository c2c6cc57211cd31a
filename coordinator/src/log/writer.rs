//! The one writer of a partition of an internal topic this coordinator owns
//! (`__transaction_state`, or `__consumer_offsets` of the same slice): an idempotent
//! producer with `producer_id = writer_producer_id` and `producer_epoch =
//! coordinator_epoch`, its own sequence numbers, acks=all, one batch in flight.
//!
//! Every request declares `coordinator_epoch`, without which the broker refuses any
//! write to an internal topic.
//!
//! Invariant: a batch is retried byte for byte (same sequence) until the leader answers
//! it, so a lost answer can never make a record land twice or out of order (the broker
//! deduplicates). INVALID_PRODUCER_EPOCH or OUT_OF_ORDER_SEQUENCE_NUMBER means a newer
//! owner fenced us: the writer fails every append from then on and the claim is lost.
//! Appends that queue up while a batch is in flight go out together as the next batch.

use std::time::Duration;

use idem_client::error::is_retriable;
use idem_client::{ClientError, Connection};
use idem_proto::batch::{self, ProducerInfo, Record};
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::v1::{PartitionProduceData, ProduceRequest, TopicProduceData};
use idem_proto::ErrorCode;
use tokio::sync::{mpsc, oneshot};

use crate::clock::now_ms;
use crate::error::CoordinatorError;
use crate::log::record::LogRecord;
use crate::ownership::token::OwnershipToken;
use crate::retry::{self, Failed};

/// Most records one batch carries.
const MAX_RECORDS_PER_BATCH: usize = 256;
const PRODUCE_TIMEOUT_MS: i32 = 10_000;
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Who writes: the partition and the producer identity the claim gave us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterIdentity {
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// A record's key and value (no value: a tombstone), as it goes into a batch.
pub type EncodedRecord = (bytes::Bytes, Option<bytes::Bytes>);

/// Records that go out in one batch, in order; `done` gets the first one's offset.
struct Append {
    records: Vec<EncodedRecord>,
    done: oneshot::Sender<Result<i64, CoordinatorError>>,
}

/// A handle on the partition's writer task (cheap to clone).
#[derive(Debug, Clone)]
pub struct TxnLogWriter {
    partition: i32,
    producer_id: i64,
    queue: mpsc::UnboundedSender<Append>,
}

impl TxnLogWriter {
    /// Starts the writer of `__transaction_state`; it begins at sequence 0 (the fence
    /// record must be its first append) and stops when every handle is dropped.
    pub fn start(conn: Connection, identity: WriterIdentity, token: OwnershipToken) -> Self {
        Self::start_for(TXN_LOG_TOPIC, conn, identity, token)
    }

    /// [`TxnLogWriter::start`] for another internal topic partitioned like the
    /// transaction log (`__consumer_offsets`), written under the same claim.
    pub fn start_for(
        topic: &'static str,
        conn: Connection,
        identity: WriterIdentity,
        token: OwnershipToken,
    ) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(topic, conn, identity, token, rx));
        TxnLogWriter {
            partition: identity.partition,
            producer_id: identity.producer_id,
            queue,
        }
    }

    /// The producer id every owner of the partition writes it with.
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    /// Appends `record` (acks=all) and returns its offset.
    pub async fn append(&self, record: LogRecord) -> Result<i64, CoordinatorError> {
        self.append_all(vec![record]).await
    }

    /// Appends `records` in one batch (acks=all), so they land all together or not at
    /// all, and returns the first one's offset.
    pub async fn append_all(&self, records: Vec<LogRecord>) -> Result<i64, CoordinatorError> {
        self.append_encoded(records.iter().map(LogRecord::encode).collect())
            .await
    }

    /// [`TxnLogWriter::append_all`] for records already encoded (another topic's).
    pub async fn append_encoded(
        &self,
        records: Vec<EncodedRecord>,
    ) -> Result<i64, CoordinatorError> {
        debug_assert!(!records.is_empty(), "an append carries at least one record");
        let (done, answer) = oneshot::channel();
        self.queue
            .send(Append { records, done })
            .map_err(|_| CoordinatorError::ownership_lost(self.partition, "writer stopped"))?;
        answer
            .await
            .map_err(|_| CoordinatorError::ownership_lost(self.partition, "writer stopped"))?
    }
}

async fn run(
    topic: &'static str,
    conn: Connection,
    identity: WriterIdentity,
    token: OwnershipToken,
    mut rx: mpsc::UnboundedReceiver<Append>,
) {
    let mut next_sequence: i32 = 0;
    let mut failed: Option<String> = None;
    while let Some(first) = rx.recv().await {
        let mut count = first.records.len();
        let mut appends = vec![first];
        while count < MAX_RECORDS_PER_BATCH {
            match rx.try_recv() {
                Ok(more) => {
                    count += more.records.len();
                    appends.push(more);
                }
                Err(_) => break,
            }
        }
        if let Some(reason) = &failed {
            for append in appends {
                let _ = append.done.send(Err(CoordinatorError::ownership_lost(
                    identity.partition,
                    reason.clone(),
                )));
            }
            continue;
        }
        let now = now_ms();
        let records: Vec<Record> = appends
            .iter()
            .flat_map(|a| &a.records)
            .map(|(key, value)| Record {
                key: Some(key.clone()),
                value: value.clone(),
                headers: Vec::new(),
                timestamp_ms: now,
            })
            .collect();
        let bytes = batch::encode(
            ProducerInfo {
                producer_id: identity.producer_id,
                producer_epoch: identity.producer_epoch,
                base_sequence: next_sequence,
            },
            0,
            &records,
        );
        match send_until_answered(topic, &conn, identity, &token, bytes).await {
            Ok(base_offset) => {
                next_sequence = batch::sequence_add(next_sequence, records.len() as i32);
                let mut offset = base_offset;
                for append in appends {
                    let _ = append.done.send(Ok(offset));
                    offset += append.records.len() as i64;
                }
            }
            Err(e) => {
                if let CoordinatorError::OwnershipLost { reason, .. } = &e {
                    tracing::warn!(partition = identity.partition, producer_id = identity.producer_id, epoch = identity.producer_epoch, %reason, "transaction log writer fenced");
                    failed = Some(reason.clone());
                    token.lose();
                }
                // Refused outright: nothing was written, the sequence stays free.
                let message = e.to_string();
                for append in appends {
                    let error = match &e {
                        CoordinatorError::OwnershipLost { .. } => {
                            CoordinatorError::ownership_lost(identity.partition, message.clone())
                        }
                        CoordinatorError::Refused {
                            what,
                            code,
                            message,
                        } => CoordinatorError::Refused {
                            what: what.clone(),
                            code: *code,
                            message: message.clone(),
                        },
                        _ => CoordinatorError::Refused {
                            what: "transaction log append".into(),
                            code: ErrorCode::UnknownServerError,
                            message: message.clone(),
                        },
                    };
                    let _ = append.done.send(Err(error));
                }
            }
        }
    }
}

/// What one produce answer means for the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProduceOutcome {
    Written,
    /// Send the same bytes again (after a metadata refresh).
    Retry,
    /// A newer owner fenced us.
    Fenced,
    /// Refused for good; nothing was written.
    Refused,
}

/// Classifies a produce answer of the transaction log writer.
pub fn classify_produce(code: ErrorCode) -> ProduceOutcome {
    use ErrorCode as E;
    match code {
        E::None | E::DuplicateSequenceNumber => ProduceOutcome::Written,
        E::InvalidProducerEpoch
        | E::ProducerFenced
        | E::OutOfOrderSequenceNumber
        | E::UnknownProducerId
        // The broker knows of a newer claim of the partition than ours.
        | E::TransactionCoordinatorFenced => ProduceOutcome::Fenced,
        // Just created: the leader may not know it yet.
        E::UnknownTopicOrPartition => ProduceOutcome::Retry,
        c if is_retriable(c) => ProduceOutcome::Retry,
        _ => ProduceOutcome::Refused,
    }
}

async fn send_until_answered(
    topic: &'static str,
    conn: &Connection,
    identity: WriterIdentity,
    token: &OwnershipToken,
    bytes: bytes::Bytes,
) -> Result<i64, CoordinatorError> {
    let partition = identity.partition;
    let request = ProduceRequest {
        acks: -1,
        timeout_ms: PRODUCE_TIMEOUT_MS,
        topics: vec![TopicProduceData {
            name: topic.to_string(),
            partitions: vec![PartitionProduceData {
                partition,
                records: bytes,
            }],
        }],
        // The proof of ownership an internal topic asks for: our coordinator epoch,
        // which is also the batch's producer epoch.
        coordinator_epoch: Some(i32::from(identity.producer_epoch)),
    };
    let append = || async {
        if token.is_lost() {
            return Err(Failed::Stop(CoordinatorError::ownership_lost(
                partition,
                "claim lost while appending",
            )));
        }
        let (code, message, base_offset) = produce_once(conn, topic, partition, &request).await;
        match classify_produce(code) {
            ProduceOutcome::Written => Ok(base_offset),
            ProduceOutcome::Fenced => Err(Failed::Stop(CoordinatorError::ownership_lost(
                partition,
                format!("{code:?}: {message}"),
            ))),
            ProduceOutcome::Refused => Err(Failed::Stop(CoordinatorError::Refused {
                what: format!("append to {topic}/{partition}"),
                code,
                message,
            })),
            ProduceOutcome::Retry => Err(Failed::Again(format!("{code:?}: {message}"))),
        }
    };
    retry::while_owned(token, BACKOFF_MAX, append, |reason| {
        tracing::debug!(partition, %reason, "transaction log append will retry");
        conn.request_refresh();
    })
    .await
}

/// One Produce of `request` to `topic`-`partition`'s leader: the partition's code,
/// message and base offset. No answer, or no leader known, reads as REQUEST_TIMED_OUT:
/// the batch may or may not be in, and the caller resends the same bytes.
pub(crate) async fn produce_once(
    conn: &Connection,
    topic: &str,
    partition: i32,
    request: &ProduceRequest,
) -> (ErrorCode, String, i64) {
    let answer = async {
        let (_, mut client) = conn.leader_client(topic, partition).await?;
        conn.call(client.produce(request.clone())).await
    }
    .await;
    match answer {
        Ok(response) => {
            match response
                .topics
                .into_iter()
                .flat_map(|t| t.partitions)
                .find(|p| p.partition == partition)
            {
                Some(p) => (
                    ErrorCode::try_from(p.error_code).unwrap_or(ErrorCode::UnknownServerError),
                    p.error_message,
                    p.base_offset,
                ),
                None => (
                    ErrorCode::UnknownServerError,
                    "answer lacks the partition".into(),
                    -1,
                ),
            }
        }
        Err(e @ (ClientError::Transport(_) | ClientError::Broker { .. }))
        | Err(e @ ClientError::UnknownTopic { .. }) => {
            (ErrorCode::RequestTimedOut, e.to_string(), -1)
        }
        Err(e) => (ErrorCode::UnknownServerError, e.to_string(), -1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn produce_answers_are_classified_as_the_design_says() {
        use ErrorCode as E;
        for code in [E::None, E::DuplicateSequenceNumber] {
            assert_eq!(classify_produce(code), ProduceOutcome::Written, "{code:?}");
        }
        for code in [
            E::InvalidProducerEpoch,
            E::OutOfOrderSequenceNumber,
            E::ProducerFenced,
            E::UnknownProducerId,
            E::TransactionCoordinatorFenced,
        ] {
            assert_eq!(classify_produce(code), ProduceOutcome::Fenced, "{code:?}");
        }
        for code in [
            E::NotLeaderOrFollower,
            E::LeaderNotAvailable,
            E::NotEnoughReplicas,
            E::NotEnoughReplicasAfterAppend,
            E::RequestTimedOut,
            E::FencedLeaderEpoch,
            E::UnknownTopicOrPartition,
            E::UnknownServerError,
        ] {
            assert_eq!(classify_produce(code), ProduceOutcome::Retry, "{code:?}");
        }
        for code in [
            E::MessageTooLarge,
            E::CorruptMessage,
            E::InvalidRequest,
            E::InvalidTopicException,
        ] {
            assert_eq!(classify_produce(code), ProduceOutcome::Refused, "{code:?}");
        }
    }
}
