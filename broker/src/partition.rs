//! One partition on this broker: its log, its producer state, and the rule that ties
//! them together: a batch is checked against the producer state and appended under one
//! lock, so a duplicate can never be appended twice. With `every-append` flushing,
//! concurrent appends share one fsync (group commit) and the high watermark only
//! covers what is on disk, so a consumer never sees a record a crash could take back.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use idem_proto::batch::{self, BatchHeader};
use tokio::sync::watch;

use crate::error::BrokerError;
use crate::log::{FlushPolicy, LogConfig, PartitionLog};
use crate::producer_state::{self, BatchMetadata, Decision, ProducerStateTable};

/// Settings every partition of a broker shares.
#[derive(Debug, Clone)]
pub struct PartitionSettings {
    pub log: LogConfig,
    pub max_batch_bytes: usize,
    pub producer_id_expiration_ms: i64,
}

/// What a successful produce to this partition answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Offset of the batch's first record; for a duplicate, the original one.
    pub base_offset: i64,
    pub duplicate: bool,
    pub log_start_offset: i64,
}

/// Offsets of a partition as a client sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub log_end_offset: i64,
}

struct PartitionInner {
    log: PartitionLog,
    producers: ProducerStateTable,
}

pub struct Partition {
    topic: String,
    index: i32,
    dir: PathBuf,
    settings: PartitionSettings,
    inner: Mutex<PartitionInner>,
    /// Offset below which every batch is on disk; the group-commit lock.
    durable: tokio::sync::Mutex<i64>,
    /// The high watermark; fetches wait on it for new data.
    high_watermark: watch::Sender<i64>,
}

impl Partition {
    /// Opens (or creates) the partition in `dir`: recovers the log, then rebuilds the
    /// producer state from the newest usable snapshot plus the batches after it.
    pub fn open(
        topic: &str,
        index: i32,
        dir: &Path,
        settings: PartitionSettings,
    ) -> Result<Self, BrokerError> {
        // The log reports any torn tail it cut (a warning with the reason).
        let (log, _report) = PartitionLog::open(dir, settings.log.clone())?;
        let producers = rebuild_producer_state(dir, &log, now_ms())?;
        let log_end = log.log_end_offset();
        let (high_watermark, _) = watch::channel(log_end);
        Ok(Partition {
            topic: topic.to_string(),
            index,
            dir: dir.to_path_buf(),
            settings,
            inner: Mutex::new(PartitionInner { log, producers }),
            durable: tokio::sync::Mutex::new(log_end),
            high_watermark,
        })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn index(&self) -> i32 {
        self.index
    }

    /// Validates and appends one produced batch, or answers a duplicate with the
    /// offsets it got the first time. Bad input changes nothing.
    pub async fn append(&self, records: &[u8]) -> Result<AppendOutcome, BrokerError> {
        if records.len() > self.settings.max_batch_bytes {
            return Err(BrokerError::MessageTooLarge {
                size: records.len(),
                limit: self.settings.max_batch_bytes,
            });
        }
        let header = batch::validate_produced(records)?;
        refuse_unsupported_batch(&header)?;
        let mut buf = records.to_vec();
        let (outcome, durable_end) = {
            let mut inner = self.lock();
            if let Some(original) = check_producer(&inner.producers, &header)? {
                let outcome = AppendOutcome {
                    base_offset: original.first_offset,
                    duplicate: true,
                    log_start_offset: inner.log.log_start_offset(),
                };
                (outcome, original.last_offset + 1)
            } else {
                let info = inner.log.append(&mut buf, 0)?;
                if let Some(rolled_at) = info.rolled_at {
                    // The table holds exactly the state as of the new segment's base offset.
                    if let Err(e) =
                        producer_state::write_snapshot(&self.dir, rolled_at, &inner.producers)
                    {
                        tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "producer state snapshot failed");
                    }
                }
                if header.has_producer_id() {
                    let meta = BatchMetadata {
                        first_seq: header.base_sequence,
                        last_seq: header.last_sequence(),
                        first_offset: info.base_offset,
                        last_offset: info.last_offset,
                        timestamp_ms: header.max_timestamp,
                    };
                    inner.producers.apply(
                        header.producer_id,
                        header.producer_epoch,
                        meta,
                        now_ms(),
                    );
                }
                let outcome = AppendOutcome {
                    base_offset: info.base_offset,
                    duplicate: false,
                    log_start_offset: inner.log.log_start_offset(),
                };
                (outcome, info.last_offset + 1)
            }
        };
        if outcome.duplicate {
            tracing::debug!(
                topic = %self.topic,
                partition = self.index,
                producer_id = header.producer_id,
                base_sequence = header.base_sequence,
                base_offset = outcome.base_offset,
                "duplicate batch answered with its original offsets"
            );
        }
        self.make_visible(durable_end).await?;
        Ok(outcome)
    }

    /// Makes every offset below `end` durable (per the flush policy) and visible.
    async fn make_visible(&self, end: i64) -> Result<(), BrokerError> {
        if self.settings.log.flush != FlushPolicy::EveryAppend {
            self.advance_high_watermark(end);
            return Ok(());
        }
        // Group commit: whoever holds the lock fsyncs everything appended so far; the
        // appends queued behind it usually find their offsets already durable.
        let mut durable = self.durable.lock().await;
        if *durable >= end {
            return Ok(());
        }
        let sync_point = self.lock().log.sync_point();
        let synced_to = tokio::task::spawn_blocking(move || {
            sync_point.sync().map(|()| sync_point.end_offset())
        })
        .await
        .map_err(|e| BrokerError::Io(std::io::Error::other(e)))??;
        *durable = synced_to;
        self.advance_high_watermark(synced_to);
        Ok(())
    }

    fn advance_high_watermark(&self, offset: i64) {
        self.high_watermark.send_if_modified(|hw| {
            let advanced = offset > *hw;
            if advanced {
                *hw = offset;
            }
            advanced
        });
    }

    /// Whole batches from the one containing `offset`, up to `max_bytes` (at least one
    /// batch) and never past the high watermark.
    pub fn read(&self, offset: i64, max_bytes: usize) -> Result<Vec<u8>, BrokerError> {
        let inner = self.lock();
        let high_watermark = *self.high_watermark.borrow();
        let (log_start, log_end) = (inner.log.log_start_offset(), inner.log.log_end_offset());
        if offset < log_start || offset > log_end {
            return Err(BrokerError::OffsetOutOfRange {
                offset,
                log_start,
                log_end,
            });
        }
        if offset >= high_watermark {
            return Ok(Vec::new());
        }
        Ok(inner.log.read(offset, max_bytes, high_watermark)?)
    }

    pub fn offsets(&self) -> PartitionOffsets {
        let inner = self.lock();
        PartitionOffsets {
            log_start_offset: inner.log.log_start_offset(),
            high_watermark: *self.high_watermark.borrow(),
            log_end_offset: inner.log.log_end_offset(),
        }
    }

    /// A receiver that changes whenever the high watermark advances.
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// Forgets producers idle longer than the configured expiration (server clock).
    pub fn expire_producers(&self, now_ms: i64) -> usize {
        let expired = self
            .lock()
            .producers
            .remove_expired(now_ms, self.settings.producer_id_expiration_ms);
        if expired > 0 {
            tracing::info!(topic = %self.topic, partition = self.index, expired, "expired idle producer ids");
        }
        expired
    }

    /// Flushes on a timer for `interval:<ms>` policies.
    pub fn flush(&self) -> Result<(), BrokerError> {
        Ok(self.lock().log.flush()?)
    }

    /// Clean shutdown: flush the log and snapshot the producer state at the log end,
    /// so the next start needs no replay.
    pub fn shutdown(&self) -> Result<(), BrokerError> {
        let mut inner = self.lock();
        inner.log.flush()?;
        let end = inner.log.log_end_offset();
        producer_state::write_snapshot(&self.dir, end, &inner.producers)?;
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, PartitionInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Control batches come only from a transaction coordinator and transactional batches
/// only inside an open transaction; neither exists on this broker yet, so both are
/// refused before they can leave a transaction hanging.
fn refuse_unsupported_batch(header: &BatchHeader) -> Result<(), BrokerError> {
    if header.is_control() {
        return Err(BrokerError::InvalidRequest(
            "control batches are written only by the transaction coordinator".into(),
        ));
    }
    if header.is_transactional() {
        return Err(BrokerError::InvalidTxnState(
            "transactional batch outside a registered open transaction".into(),
        ));
    }
    if header.has_producer_id() && (header.base_sequence < 0 || header.producer_epoch < 0) {
        return Err(BrokerError::InvalidRequest(format!(
            "producer {} sent base sequence {} with epoch {}: both must be >= 0",
            header.producer_id, header.base_sequence, header.producer_epoch
        )));
    }
    Ok(())
}

/// `Some(original)` for a duplicate; `None` when the batch is the next one to append.
fn check_producer(
    producers: &ProducerStateTable,
    header: &BatchHeader,
) -> Result<Option<BatchMetadata>, BrokerError> {
    if !header.has_producer_id() {
        return Ok(None);
    }
    let producer_id = header.producer_id;
    match producers.check(
        producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.last_sequence(),
    ) {
        Decision::Append => Ok(None),
        Decision::Duplicate(original) => Ok(Some(original)),
        Decision::OutOfOrder { expected, got } => Err(BrokerError::OutOfOrderSequence {
            producer_id,
            expected,
            got,
        }),
        Decision::InvalidEpoch { current, got } => Err(BrokerError::InvalidProducerEpoch {
            producer_id,
            current,
            got,
        }),
        Decision::UnknownProducerId => Err(BrokerError::UnknownProducerId {
            producer_id,
            sequence: header.base_sequence,
        }),
    }
}

fn rebuild_producer_state(
    dir: &Path,
    log: &PartitionLog,
    now_ms: i64,
) -> Result<ProducerStateTable, BrokerError> {
    let log_end = log.log_end_offset();
    producer_state::delete_snapshots_above(dir, log_end)?;
    let (from, mut table) = match producer_state::latest_snapshot(dir, log_end) {
        Ok(Some((offset, table))) => (offset, table),
        Ok(None) => (log.log_start_offset(), ProducerStateTable::default()),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "no usable producer snapshot; replaying the whole log");
            (log.log_start_offset(), ProducerStateTable::default())
        }
    };
    let mut replayed = 0usize;
    for (header, _) in log.batches_from(from)? {
        if header.base_offset >= from {
            table.apply_batch(&header, now_ms);
            replayed += 1;
        }
    }
    tracing::debug!(dir = %dir.display(), snapshot_offset = from, replayed, producers = table.len(), "rebuilt producer state");
    Ok(table)
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
