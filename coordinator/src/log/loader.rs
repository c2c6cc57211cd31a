//! Taking a transaction log partition over: append the fence record at the new
//! coordinator epoch (the writer's first batch, sequence 0: from then on every append
//! of an earlier owner is refused by the leader), then read the partition from its log
//! start up to the fence and keep the last record of every transactional id.
//!
//! Invariant: everything an earlier owner persisted is before the fence, so the state
//! read back is complete; nothing after the fence is read (it is ours). A record that
//! does not decode stops the load only if a coordinator wrote it (its batch carries the
//! partition's writer producer id): any other record carries no state, so it is skipped,
//! logged at ERROR and counted, and never leaves the partition unavailable.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use idem_client::{Connection, Isolation, OffsetSpec};
use idem_proto::batch::{self, Batches};
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::v1::{FetchPartition, FetchRequest, FetchTopic, IsolationLevel};
use idem_proto::ErrorCode;

use crate::error::CoordinatorError;
use crate::log::record::LogRecord;
use crate::log::writer::TxnLogWriter;
use crate::ownership::token::OwnershipToken;
use crate::retry::{self, Failed};
use crate::txn::decide::TxnMetadata;
use crate::txn::state::TxnState;

const FETCH_MAX_BYTES: i32 = 8 * 1024 * 1024;
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The state read back so far: the last record of each transactional id.
#[derive(Debug, Default)]
pub struct Replay {
    partition: i32,
    /// Batches of this producer id were written by a coordinator of the partition.
    writer_producer_id: i64,
    txns: HashMap<String, TxnMetadata>,
    skipped: u64,
    /// Records read back (applied or skipped), for the load's report.
    records_read: u64,
}

impl Replay {
    pub fn new(partition: i32, writer_producer_id: i64) -> Self {
        Replay {
            partition,
            writer_producer_id,
            txns: HashMap::new(),
            skipped: 0,
            records_read: 0,
        }
    }

    /// Records skipped so far because they do not decode and no coordinator wrote them.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Records read back so far (applied or skipped).
    pub fn records_read(&self) -> u64 {
        self.records_read
    }

    /// Applies the record at `offset` of a batch written by `producer_id`: as
    /// [`Replay::apply`], except that an undecodable record no coordinator wrote is
    /// skipped and counted instead of stopping the load.
    pub fn apply_from(
        &mut self,
        producer_id: i64,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<(), CoordinatorError> {
        self.records_read += 1;
        match self.apply(offset, key, value) {
            Err(CoordinatorError::CorruptLog { reason, .. })
                if producer_id != self.writer_producer_id =>
            {
                tracing::error!(
                    partition = self.partition,
                    offset,
                    producer_id,
                    writer_producer_id = self.writer_producer_id,
                    %reason,
                    "skipping a transaction log record no coordinator wrote"
                );
                self.skipped += 1;
                Ok(())
            }
            result => result,
        }
    }

    /// Applies the record at `offset`. Fence records carry no transaction state.
    pub fn apply(
        &mut self,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<(), CoordinatorError> {
        match LogRecord::decode(key, value) {
            Ok(LogRecord::Txn(meta)) if meta.state == TxnState::Dead => {
                self.txns.remove(&meta.transactional_id);
                Ok(())
            }
            Ok(LogRecord::Removed { transactional_id }) => {
                self.txns.remove(&transactional_id);
                Ok(())
            }
            Ok(LogRecord::Txn(meta)) => {
                self.txns.insert(meta.transactional_id.clone(), meta);
                Ok(())
            }
            Ok(LogRecord::Fence { .. }) => Ok(()),
            Err(e) => Err(CoordinatorError::CorruptLog {
                partition: self.partition,
                offset,
                reason: e.to_string(),
            }),
        }
    }

    pub fn into_txns(self) -> HashMap<String, TxnMetadata> {
        self.txns
    }
}

/// Fences earlier owners and reads the partition's state back.
pub async fn load(
    conn: &Connection,
    writer: &TxnLogWriter,
    partition: i32,
    coordinator_epoch: i32,
    token: &OwnershipToken,
) -> Result<HashMap<String, TxnMetadata>, CoordinatorError> {
    // The load's report (docs/benchmarks.md: a takeover's time per slice).
    let started = std::time::Instant::now();
    let fence_offset = writer
        .append(LogRecord::Fence { coordinator_epoch })
        .await?;
    tracing::info!(
        partition,
        coordinator_epoch,
        fence_offset,
        "fenced the transaction log partition; reading it back"
    );
    let log_start_offset = log_start(conn, partition, token).await?;
    let offset = AtomicI64::new(log_start_offset);
    let bytes_read = AtomicU64::new(0);
    // Read by one attempt at a time; a lock, not a RefCell, so that loading stays Send.
    let replay = Mutex::new(Replay::new(partition, writer.producer_id()));
    // One read: Ok once it moved `offset` forward; a read that found nothing new yet (a
    // new leader catching up) or failed goes again after a pause.
    let read_more = || async {
        lost_check(token, partition).map_err(Failed::Stop)?;
        let from = offset.load(Ordering::Relaxed);
        match fetch_once(conn, partition, from).await {
            Ok((records, next_fetch_offset)) => {
                bytes_read.fetch_add(records.len() as u64, Ordering::Relaxed);
                let next = {
                    // Poisoned only by a panic, which ended this load with it.
                    let mut replay = replay.lock().unwrap_or_else(PoisonError::into_inner);
                    apply_batches(&mut replay, &records, from, fence_offset)
                        .map_err(Failed::Stop)?
                }
                .max(next_fetch_offset)
                .max(from);
                offset.store(next, Ordering::Relaxed);
                if next == from {
                    Err(Failed::Again("nothing below the high watermark yet".into()))
                } else {
                    Ok(())
                }
            }
            Err(FetchFailure::OutOfRange) => {
                let start = log_start(conn, partition, token)
                    .await
                    .map_err(Failed::Stop)?;
                offset.fetch_max(start, Ordering::Relaxed);
                Err(Failed::Again(format!("offset {from} is out of range")))
            }
            Err(FetchFailure::Retry(reason)) => {
                tracing::debug!(partition, offset = from, %reason, "transaction log fetch will retry");
                conn.request_refresh();
                Err(Failed::Again(reason))
            }
        }
    };
    // The pauses start over from the shortest after every read that made progress.
    while offset.load(Ordering::Relaxed) < fence_offset {
        retry::while_owned(token, BACKOFF_MAX, read_more, |_| {}).await?;
    }
    let replay = replay.into_inner().unwrap_or_else(PoisonError::into_inner);
    let skipped_records = replay.skipped();
    let records_read = replay.records_read();
    let txns = replay.into_txns();
    tracing::info!(
        partition,
        coordinator_epoch,
        transactional_ids = txns.len(),
        skipped_records,
        records_read,
        bytes_read = bytes_read.load(Ordering::Relaxed),
        log_start_offset,
        fence_offset,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "transaction log partition loaded"
    );
    Ok(txns)
}

/// Applies every record in `records` (concatenated batches) whose offset lies in
/// `[from, fence_offset)`; returns the offset after the last batch seen.
pub fn apply_batches(
    replay: &mut Replay,
    records: &[u8],
    from: i64,
    fence_offset: i64,
) -> Result<i64, CoordinatorError> {
    let mut next = from;
    for item in Batches::new(records) {
        let (header, bytes) = item.map_err(|e| CoordinatorError::CorruptLog {
            partition: replay.partition,
            offset: next,
            reason: e.to_string(),
        })?;
        next = next.max(header.next_offset());
        if header.is_control() {
            continue;
        }
        let decoded = batch::records(bytes).map_err(|e| CoordinatorError::CorruptLog {
            partition: replay.partition,
            offset: header.base_offset,
            reason: e.to_string(),
        })?;
        for record in decoded {
            if record.offset < from || record.offset >= fence_offset {
                continue;
            }
            replay.apply_from(
                header.producer_id,
                record.offset,
                record.key.as_deref(),
                record.value.as_deref(),
            )?;
        }
    }
    Ok(next)
}

fn lost_check(token: &OwnershipToken, partition: i32) -> Result<(), CoordinatorError> {
    if token.is_lost() {
        return Err(CoordinatorError::ownership_lost(
            partition,
            "claim lost while loading",
        ));
    }
    Ok(())
}

async fn log_start(
    conn: &Connection,
    partition: i32,
    token: &OwnershipToken,
) -> Result<i64, CoordinatorError> {
    let read_start = || async {
        lost_check(token, partition).map_err(Failed::Stop)?;
        conn.list_offset(
            TXN_LOG_TOPIC,
            partition,
            OffsetSpec::Earliest,
            Isolation::ReadUncommitted,
        )
        .await
        .map_err(|e| Failed::Again(e.to_string()))
    };
    retry::while_owned(token, BACKOFF_MAX, read_start, |reason| {
        tracing::debug!(partition, error = %reason, "log start of the transaction log will retry");
    })
    .await
}

enum FetchFailure {
    OutOfRange,
    Retry(String),
}

async fn fetch_once(
    conn: &Connection,
    partition: i32,
    offset: i64,
) -> Result<(bytes::Bytes, i64), FetchFailure> {
    let request = FetchRequest {
        max_wait_ms: 200,
        min_bytes: 1,
        max_bytes: FETCH_MAX_BYTES,
        isolation_level: IsolationLevel::ReadUncommitted as i32,
        topics: vec![FetchTopic {
            name: TXN_LOG_TOPIC.to_string(),
            partitions: vec![FetchPartition {
                partition,
                fetch_offset: offset,
                partition_max_bytes: FETCH_MAX_BYTES,
                current_leader_epoch: None,
            }],
        }],
        replica_id: None,
        include_control_batches: false,
    };
    let (_, mut client) = conn
        .leader_client(TXN_LOG_TOPIC, partition)
        .await
        .map_err(|e| FetchFailure::Retry(e.to_string()))?;
    let response = conn
        .call(client.fetch(request))
        .await
        .map_err(|e| FetchFailure::Retry(e.to_string()))?;
    let answer = response
        .topics
        .into_iter()
        .flat_map(|t| t.partitions)
        .find(|p| p.partition == partition)
        .ok_or_else(|| FetchFailure::Retry("answer lacks the partition".into()))?;
    match ErrorCode::try_from(answer.error_code) {
        Ok(ErrorCode::None) => Ok((answer.records, answer.next_fetch_offset)),
        Ok(ErrorCode::OffsetOutOfRange) => Err(FetchFailure::OutOfRange),
        _ => Err(FetchFailure::Retry(format!(
            "code {}: {}",
            answer.error_code, answer.error_message
        ))),
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use idem_proto::batch::{ProducerInfo, Record};

    use super::*;
    use crate::txn::state::TxnState;

    fn meta(id: &str, epoch: i16, state: TxnState) -> TxnMetadata {
        TxnMetadata::for_tests(id, 5, epoch, state)
    }

    /// A batch as the leader stores it: the records at `base_offset`.
    fn stored_batch(base_offset: i64, records: &[LogRecord]) -> BytesMut {
        let records: Vec<Record> = records
            .iter()
            .map(|r| {
                let (key, value) = r.encode();
                Record {
                    key: Some(key),
                    value,
                    headers: Vec::new(),
                    timestamp_ms: 1,
                }
            })
            .collect();
        let mut buf = BytesMut::from(&batch::encode(writer(), 0, &records)[..]);
        batch::assign(&mut buf, base_offset, 0);
        buf
    }

    const WRITER: i64 = 500;

    fn writer() -> ProducerInfo {
        ProducerInfo {
            producer_id: WRITER,
            producer_epoch: 1,
            base_sequence: 0,
        }
    }

    /// One batch at `base_offset` of `producer` holding a record that is no log record.
    fn garbage_batch(producer: ProducerInfo, base_offset: i64) -> BytesMut {
        let mut buf = BytesMut::from(
            &batch::encode(
                producer,
                0,
                &[Record {
                    key: Some(bytes::Bytes::from_static(b"a")),
                    value: Some(bytes::Bytes::from_static(b"garbage")),
                    headers: Vec::new(),
                    timestamp_ms: 1,
                }],
            )[..],
        );
        batch::assign(&mut buf, base_offset, 0);
        buf
    }

    #[test]
    fn the_last_record_of_each_id_before_the_fence_wins() {
        let mut log = BytesMut::new();
        log.extend_from_slice(&stored_batch(
            0,
            &[
                LogRecord::Fence {
                    coordinator_epoch: 1,
                },
                LogRecord::Txn(meta("a", 0, TxnState::Empty)),
                LogRecord::Txn(meta("b", 0, TxnState::Empty)),
            ],
        ));
        log.extend_from_slice(&stored_batch(
            3,
            &[
                LogRecord::Txn(meta("a", 0, TxnState::Ongoing)),
                LogRecord::Txn(meta("a", 1, TxnState::PrepareCommit)),
            ],
        ));
        // Our own fence at 5, and something after it that must not be read.
        log.extend_from_slice(&stored_batch(
            5,
            &[
                LogRecord::Fence {
                    coordinator_epoch: 2,
                },
                LogRecord::Txn(meta("b", 9, TxnState::Dead)),
            ],
        ));
        let mut replay = Replay::new(0, WRITER);
        let next = apply_batches(&mut replay, &log, 0, 5).expect("applies");
        assert_eq!(next, 7);
        let txns = replay.into_txns();
        assert_eq!(txns.len(), 2);
        assert_eq!(txns["a"], meta("a", 1, TxnState::PrepareCommit));
        assert_eq!(txns["b"], meta("b", 0, TxnState::Empty));
    }

    #[test]
    fn a_dead_record_forgets_its_id_and_a_later_record_brings_it_back() {
        let log = stored_batch(
            0,
            &[
                LogRecord::Txn(meta("a", 3, TxnState::CompleteCommit)),
                LogRecord::Txn(meta("b", 0, TxnState::Empty)),
                LogRecord::Txn(meta("a", 3, TxnState::Dead)),
                LogRecord::Txn(meta("b", 0, TxnState::Dead)),
                LogRecord::Txn(meta("b", 0, TxnState::Empty)),
            ],
        );
        let mut replay = Replay::new(0, WRITER);
        apply_batches(&mut replay, &log, 0, 5).expect("applies");
        let txns = replay.into_txns();
        assert!(!txns.contains_key("a"), "retired");
        assert_eq!(txns["b"], meta("b", 0, TxnState::Empty), "started afresh");
        assert_eq!(txns.len(), 1);
    }

    #[test]
    fn records_before_the_fetch_offset_are_not_applied_twice_or_out_of_order() {
        let log = stored_batch(
            10,
            &[
                LogRecord::Txn(meta("a", 3, TxnState::Ongoing)),
                LogRecord::Txn(meta("a", 4, TxnState::Empty)),
            ],
        );
        let mut replay = Replay::new(0, WRITER);
        replay
            .apply(
                11,
                Some(b"a"),
                LogRecord::Txn(meta("a", 4, TxnState::Empty))
                    .encode()
                    .1
                    .as_deref(),
            )
            .expect("applies");
        // Fetching from 12 may return the whole batch at 10: 10 and 11 are skipped.
        let next = apply_batches(&mut replay, &log, 12, 100).expect("applies");
        assert_eq!(next, 12);
        assert_eq!(
            replay.into_txns()["a"].state,
            TxnState::Empty,
            "offset 10 was not re-applied"
        );
    }

    #[test]
    fn given_a_corrupt_record_a_coordinator_wrote_when_loading_then_the_load_stops_at_its_offset() {
        let buf = garbage_batch(writer(), 42);
        let mut replay = Replay::new(3, WRITER);
        let error = apply_batches(&mut replay, &buf, 0, 100).expect_err("corrupt");
        assert!(
            matches!(
                error,
                CoordinatorError::CorruptLog {
                    partition: 3,
                    offset: 42,
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn given_undecodable_records_no_coordinator_wrote_when_loading_then_they_are_skipped_and_counted(
    ) {
        // The probe of issue 21: a plain batch (no producer id) and an idempotent one of
        // another producer, between records of the writer.
        let mut log = BytesMut::new();
        log.extend_from_slice(&stored_batch(
            0,
            &[LogRecord::Txn(meta("a", 0, TxnState::Ongoing))],
        ));
        log.extend_from_slice(&garbage_batch(ProducerInfo::NONE, 1));
        log.extend_from_slice(&garbage_batch(
            ProducerInfo {
                producer_id: WRITER + 1,
                producer_epoch: 0,
                base_sequence: 0,
            },
            2,
        ));
        log.extend_from_slice(&stored_batch(
            3,
            &[LogRecord::Txn(meta("a", 1, TxnState::PrepareCommit))],
        ));
        let mut replay = Replay::new(3, WRITER);
        let next = apply_batches(&mut replay, &log, 0, 100).expect("skips what it cannot read");
        assert_eq!(next, 4);
        assert_eq!(replay.skipped(), 2);
        let txns = replay.into_txns();
        assert_eq!(txns.len(), 1);
        assert_eq!(txns["a"], meta("a", 1, TxnState::PrepareCommit));
    }
}
