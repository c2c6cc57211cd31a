//! Retention of one partition: the `delete` cleanup policy applied to its log (the
//! decision is `log::retention`'s), and a follower's log start following its leader's.
//! Deleting segments must not lose what was derived from them: before any segment goes,
//! a producer-state snapshot at or above the first segment that stays and at or below
//! the high watermark must exist, so a restart or a truncation (which never goes below
//! the high watermark) replays from it and an idle producer keeps its sequence numbers
//! (KAFKA-7190). Aborted
//! transactions that ended before the new start are forgotten with their files.

use std::sync::atomic::Ordering;

use crate::error::BrokerError;
use crate::log::compaction::CleaningRules;
use crate::log::retention::{self, RetentionLimits};
use crate::log::CleanReport;
use crate::producer_state::{self, ProducerStateTable, SnapshotBounds};
use crate::replication::epoch_history::EpochHistory;
use crate::txn_index::{segment_file, SegmentTxns, TxnIndex};

use super::{now_ms, producer_state_at, txn_recovery, Partition, PartitionInner};

impl Partition {
    /// Applies the topic's retention at `now_ms`: rolls the active segment once it is
    /// `segment.ms` old (whatever the policy), then moves the log start past the sealed
    /// segments retention lets go, never past the high watermark or the last stable
    /// offset. Returns the new log start when it moved. Topics without the `delete`
    /// policy keep everything.
    pub fn enforce_retention(&self, now_ms: i64) -> Result<Option<i64>, BrokerError> {
        let settings = self.topic_settings();
        if self.is_retired() {
            return Ok(None);
        }
        let mut inner = self.lock();
        // Any policy: compaction too only reaches sealed segments.
        let first = inner.log.active_first_batch_timestamp()?;
        if retention::active_segment_due(first, now_ms, settings.segment_ms) {
            let sealed_base = inner.log.active_segment_base();
            if let Some(rolled_at) = inner.log.roll_now()? {
                self.segment_sealed(&inner, sealed_base, rolled_at);
            }
        }
        if !settings.cleanup_policy.delete {
            return Ok(None);
        }
        let high_watermark = *self.high_watermark.borrow();
        let bound = inner.txns.last_stable_offset(high_watermark);
        let sealed = inner.log.sealed_segment_stats()?;
        let limits = RetentionLimits {
            retention_ms: settings.retention_ms,
            retention_bytes: settings.retention_bytes,
        };
        let active = inner.log.active_segment_bytes();
        let Some((start, breach)) =
            retention::retention_start(&sealed, active, limits, now_ms, bound)
        else {
            return Ok(None);
        };
        tracing::info!(topic = %self.topic, partition = self.index, log_start = start, ?breach, "retention moves the log start");
        self.move_log_start(&mut inner, start)
    }

    /// Applies the `compact` cleanup policy at `now_ms`: each key keeps its latest record
    /// in the sealed segments below the last stable offset (see `log::compaction`).
    /// Every replica compacts its own log by the same rules; offsets never change (removed
    /// batches and markers become fillers), and each producer's last batch stays.
    /// Holds the partition lock while it cleans (produce waits), like the retention pass.
    pub fn compact(&self, now_ms: i64) -> Result<CleanReport, BrokerError> {
        let settings = self.topic_settings();
        if !settings.cleanup_policy.compact || self.is_retired() {
            return Ok(CleanReport::default());
        }
        let mut inner = self.lock();
        let high_watermark = *self.high_watermark.borrow();
        let rules = CleaningRules {
            clean_below: inner.txns.last_stable_offset(high_watermark),
            now_ms,
            delete_retention_ms: settings.delete_retention_ms,
        };
        let PartitionInner {
            log,
            txns,
            producers,
            ..
        } = &mut *inner;
        // The producer state's batch cache empties at each marker: then the producer's
        // last batch is a marker, and the cleaner keeps its last one among what it cleans.
        let last_data_batch = |producer_id| {
            producers.get(producer_id).map(|entry| {
                entry
                    .batches
                    .back()
                    .map_or(i64::MIN, |batch| batch.first_offset)
            })
        };
        let sealed_before = log.sealed_segments();
        let report = log.clean(
            rules,
            settings.min_compaction_lag_ms,
            |producer_id, offset| txns.is_aborted(producer_id, offset),
            last_data_batch,
        )?;
        if report.merged_away > 0 {
            self.merge_txn_files(&sealed_before, &log.sealed_segments());
        }
        Ok(report)
    }

    /// The cleaner merged segments: each merged one gets the transaction index file of
    /// its parts (so the next open still reads files instead of walking it), and the
    /// parts' files go. A crash in between costs a walk (a file whose next offset does
    /// not match its segment is not used) and leaves small files no segment names.
    fn merge_txn_files(&self, before: &[(i64, i64)], after: &[(i64, i64)]) {
        for &(base, next) in after {
            let parts: Vec<i64> = before
                .iter()
                .filter(|(b, _)| (base..next).contains(b))
                .map(|(b, _)| *b)
                .collect();
            if parts.len() < 2 {
                continue;
            }
            let files: Option<Vec<SegmentTxns>> = parts
                .iter()
                .map(|&b| segment_file::read(&self.dir, b).ok().flatten())
                .collect();
            match files.as_deref().and_then(segment_file::merged) {
                Some(merged) if merged.next_offset == next => {
                    txn_recovery::write_file(&self.dir, &merged);
                }
                _ => {
                    if let Err(e) = segment_file::remove(&self.dir, base) {
                        tracing::warn!(topic = %self.topic, partition = self.index, base, error = %e, "could not delete a transaction index file");
                    }
                }
            }
            for &b in &parts[1..] {
                if let Err(e) = segment_file::remove(&self.dir, b) {
                    tracing::warn!(topic = %self.topic, partition = self.index, base = b, error = %e, "could not delete a transaction index file");
                }
            }
        }
    }

    /// Follower: the leader's log start moved to `leader_log_start`; this replica starts
    /// there too, as far as its own high watermark (it never deletes what it has not
    /// confirmed with the leader).
    pub fn follow_log_start(&self, leader_log_start: i64) -> Result<Option<i64>, BrokerError> {
        // Every fetch answer of a follower carries the leader's start: the lock is taken
        // only when it moved past this replica's.
        if self.is_retired() || leader_log_start <= self.log_start.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let mut inner = self.lock();
        let start = leader_log_start.min(*self.high_watermark.borrow());
        if start <= inner.log.log_start_offset() {
            return Ok(None);
        }
        self.move_log_start(&mut inner, start)
    }

    /// Follower: the leader's log starts at `leader_log_start`, past this replica's end,
    /// so what this replica lacks is gone from the leader too. It starts over, empty,
    /// there (Kafka's truncate-fully-and-start-at) and fetches on from it. The producer
    /// state and transactions of the deleted range are not on the leader's log either;
    /// they start afresh.
    pub fn restart_at(&self, leader_log_start: i64) -> Result<(), BrokerError> {
        let mut inner = self.lock();
        if self.is_retired() || leader_log_start <= inner.log.log_end_offset() {
            return Ok(());
        }
        inner.log.restart_at(leader_log_start)?;
        self.log_start.store(leader_log_start, Ordering::SeqCst);
        producer_state::delete_snapshots_above(&self.dir, -1)?;
        segment_file::delete_from(&self.dir, i64::MIN)?;
        inner.producers = ProducerStateTable::default();
        inner.txns = TxnIndex::new();
        *self.epoch_history() = EpochHistory::default();
        self.local_end.fetch_max(leader_log_start, Ordering::SeqCst);
        self.log_end.send_replace(leader_log_start);
        self.high_watermark.send_if_modified(|hw| {
            let raised = *hw < leader_log_start;
            if raised {
                *hw = leader_log_start;
            }
            raised
        });
        self.publish_last_stable(&inner);
        tracing::warn!(topic = %self.topic, partition = self.index, leader_log_start, "the leader deleted what this replica lacks; starting over at its log start");
        Ok(())
    }

    pub(super) fn move_log_start(
        &self,
        inner: &mut PartitionInner,
        start: i64,
    ) -> Result<Option<i64>, BrokerError> {
        let keep_from = inner.log.segment_base_for(start);
        let high_watermark = *self.high_watermark.borrow();
        // `start` is at most the high watermark (retention's bound, or the follower's),
        // so a snapshot in `keep_from..=high_watermark` can exist. It serves both a
        // restart (it is above what goes) and a truncation (which never cuts below the
        // high watermark); without one, the idle producers of the deleted segments
        // would be forgotten (KAFKA-7190).
        let snapshots = producer_state::snapshot_offsets(&self.dir)?;
        let bounds = SnapshotBounds {
            log_start: keep_from,
            high_watermark,
            log_end: inner.log.log_end_offset(),
        };
        if !snapshots
            .iter()
            .any(|&o| (keep_from..=high_watermark).contains(&o))
        {
            // The state as of `keep_from`, from the log still whole; made durable first
            // so a restart cannot find the snapshot past a shorter log.
            inner.log.flush()?;
            let table = producer_state_at(&self.dir, &inner.log, keep_from, now_ms())?;
            producer_state::write_snapshot(&self.dir, keep_from, &table, bounds)?;
        }
        let before = inner.log.log_start_offset();
        let deleted = inner.log.advance_start(start)?;
        for base in &deleted {
            if let Err(e) = segment_file::remove(&self.dir, *base) {
                tracing::warn!(topic = %self.topic, partition = self.index, base, error = %e, "could not delete a transaction index file");
            }
        }
        producer_state::prune_snapshots(&self.dir, bounds)?;
        let now = inner.log.log_start_offset();
        self.log_start.store(now, Ordering::SeqCst);
        inner.txns.forget_before(now);
        Ok((now > before).then_some(now))
    }
}
