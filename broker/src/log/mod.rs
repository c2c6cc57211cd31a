//! The partition log: record batches appended in offset order to segment files, with a
//! sparse index per segment and a recovery point below which data is known to be on
//! disk. Invariants: offsets are dense and assigned here; everything served was
//! CRC-verified on the way out; a torn or corrupt tail is cut on open, never served and
//! never a reason for `open` to fail. Synchronous: the caller wraps it in a mutex and
//! fsyncs through a [`SyncPoint`] after releasing it. On-disk format: docs/format.md.

pub mod batch_removal;
mod checkpoint;
mod cleaner;
#[cfg(test)]
mod cleaner_merge_tests;
mod cleaning_group;
pub mod compaction;
mod config;
mod error;
mod file_ops;
/// Public for the fuzz target of its file decoder (fuzz/); the index itself stays
/// crate-private.
pub mod index;
pub mod retention;
mod segment;
mod segment_swap;
mod sync;
mod time_lookup;

use std::fs;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_proto::batch::{self, BatchHeader};
use idem_proto::control::{self, ControlMarker};

pub use cleaner::CleanReport;
pub use config::{FlushPolicy, LogConfig, ParseFlushPolicyError};
pub use error::LogError;
pub use sync::SyncPoint;
pub use time_lookup::TimestampedOffset;

use checkpoint::{StoredOffset, LOG_START, RECOVERY_POINT};
use error::IoContext;
use segment::Segment;
use sync::SyncShared;

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The base offset of the new segment, when this append rolled one before writing.
    pub rolled_at: Option<i64>,
    /// The batch's header as stored (with its offset and leader epoch); the caller's
    /// bytes are not stamped.
    pub stored: BatchHeader,
}

/// What `open` found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Base offset of the first segment that was scanned (the one holding the recovery
    /// point, or the first segment when there was no usable recovery point).
    pub recovered_from: i64,
    /// Bytes cut from the tail, including deleted segments.
    pub truncated_bytes: u64,
    pub log_end_offset: i64,
    /// Why data was cut, when it was.
    pub reason: Option<String>,
}

/// How much one read may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimit {
    pub max_bytes: usize,
    /// Return the first batch even when it alone is larger than `max_bytes`, so a batch
    /// bigger than every limit can still be read.
    pub min_one_batch: bool,
}

impl ReadLimit {
    /// Up to `max_bytes`, but at least one batch.
    pub fn at_least_one(max_bytes: usize) -> ReadLimit {
        ReadLimit {
            max_bytes,
            min_one_batch: true,
        }
    }
}

#[derive(Debug)]
pub struct PartitionLog {
    dir: PathBuf,
    config: LogConfig,
    /// Ascending base offsets, never empty; the last one is active.
    segments: Vec<Segment>,
    log_end_offset: i64,
    /// The first offset served (retention moved it past what was deleted); persisted in
    /// the `log-start-offset` file. At least the first segment's base, at most the end.
    log_start: i64,
    /// Everything below it is on disk; persisted in the `recovery-point` file.
    recovery_point: i64,
    /// `(end of the cleaned segments, when)` of the last cleaning pass: a pass with
    /// nothing newly sealed is skipped until a tombstone may have come due.
    last_clean: Option<(i64, i64)>,
    last_flush: Instant,
    sync: Arc<SyncShared>,
    /// Tests: how many more segment-swap file ops may run before a simulated crash.
    #[cfg(test)]
    crash_after_file_ops: Option<usize>,
}

impl PartitionLog {
    /// Opens the log in `dir` (created if missing) and recovers it: segments from the one
    /// holding the recovery point onwards are verified batch by batch and cut at the
    /// first bad batch; later segments are deleted.
    pub fn open(dir: &Path, config: LogConfig) -> Result<(PartitionLog, RecoveryReport), LogError> {
        fs::create_dir_all(dir).at("creating log directory", dir)?;
        let bases = list_segments(dir)?;
        let interval = config.index_interval_bytes;
        let recovery_point = match RECOVERY_POINT.read(dir)? {
            StoredOffset::Valid(offset) => Some(offset),
            StoredOffset::Missing => None,
            StoredOffset::Invalid(problem) => {
                tracing::warn!(
                    dir = %dir.display(),
                    problem = %problem,
                    "unreadable recovery-point file; scanning every segment"
                );
                None
            }
        };

        let mut segments = Vec::with_capacity(bases.len().max(1));
        let mut report = RecoveryReport {
            recovered_from: bases.first().copied().unwrap_or(0),
            truncated_bytes: 0,
            log_end_offset: 0,
            reason: None,
        };
        if bases.is_empty() {
            segments.push(Segment::create(dir, 0, interval)?);
        } else {
            let scan_from = recovery_point
                .and_then(|rp| bases.iter().rposition(|&base| base <= rp))
                .unwrap_or(0);
            report.recovered_from = bases[scan_from];
            for (i, &base) in bases[..scan_from].iter().enumerate() {
                segments.push(Segment::open_flushed(dir, base, bases[i + 1], interval)?);
            }
            let mut expected = bases[scan_from];
            for &base in &bases[scan_from..] {
                if report.reason.is_none() && base != expected {
                    report.reason = Some(format!(
                        "segment {base} does not start at the log end {expected}"
                    ));
                }
                if report.reason.is_some() {
                    report.truncated_bytes += segment::delete_files(dir, base)?;
                    continue;
                }
                let (segment, outcome) = Segment::recover(dir, base, interval)?;
                report.truncated_bytes += outcome.truncated_bytes;
                report.reason = outcome.reason.map(|r| format!("segment {base} {r}"));
                expected = segment.next_offset();
                segments.push(segment);
            }
            // The scanned data may so far live only in the page cache.
            for segment in &segments[scan_from..] {
                segment.sync()?;
            }
        }
        checkpoint::sync_dir(dir)?;

        let log_end_offset = segments.last().map_or(0, Segment::next_offset);
        report.log_end_offset = log_end_offset;
        if let Some(rp) = recovery_point.filter(|&rp| rp > log_end_offset) {
            let lost = format!("the recovery point {rp} is beyond the recovered log end");
            report.reason = Some(match report.reason.take() {
                Some(reason) => format!("{reason}; {lost}"),
                None => lost,
            });
        }
        if let Some(reason) = &report.reason {
            tracing::warn!(
                dir = %dir.display(),
                recovered_from = report.recovered_from,
                truncated_bytes = report.truncated_bytes,
                log_end_offset,
                reason = %reason,
                "recovered partition log by truncating its tail"
            );
        } else {
            tracing::debug!(
                dir = %dir.display(),
                recovered_from = report.recovered_from,
                log_end_offset,
                "opened partition log"
            );
        }
        RECOVERY_POINT.write(dir, log_end_offset)?;

        let active = segments
            .last()
            .map(|s| Arc::clone(s.log_file()))
            .ok_or_else(|| LogError::Corrupt {
                offset: log_end_offset,
                reason: "no segment after recovery".into(),
            })?;
        let first_base = segments.first().map_or(0, Segment::base_offset);
        let log_start = match LOG_START.read(dir)? {
            StoredOffset::Valid(offset) => offset.max(first_base).min(log_end_offset),
            StoredOffset::Missing => first_base,
            StoredOffset::Invalid(problem) => {
                tracing::warn!(dir = %dir.display(), problem = %problem, "unreadable log-start-offset file; the log starts at its first segment");
                first_base
            }
        };
        let log = PartitionLog {
            dir: dir.to_path_buf(),
            config,
            segments,
            log_end_offset,
            log_start,
            recovery_point: log_end_offset,
            last_clean: None,
            last_flush: Instant::now(),
            sync: SyncShared::new(active, log_end_offset, log_end_offset),
            #[cfg(test)]
            crash_after_file_ops: None,
        };
        Ok((log, report))
    }

    /// Appends one encoded batch, assigning it `base_offset = log_end_offset` and the
    /// leader epoch. Rolls a new segment first if the active one would outgrow
    /// `segment_bytes`. Does not fsync the batch (see [`PartitionLog::sync_point`]).
    pub fn append(&mut self, batch: &[u8], leader_epoch: i32) -> Result<AppendInfo, LogError> {
        let header = batch::decode_header(batch).map_err(|e| LogError::InvalidBatch {
            reason: e.to_string(),
        })?;
        if header.size() != batch.len() {
            return Err(LogError::InvalidBatch {
                reason: format!(
                    "batch length says {} bytes but {} were given",
                    header.size(),
                    batch.len()
                ),
            });
        }
        if header.last_offset_delta < 0 {
            return Err(LogError::InvalidBatch {
                reason: format!("negative last offset delta {}", header.last_offset_delta),
            });
        }
        let base_offset = self.log_end_offset;
        let last_offset = base_offset
            .checked_add(i64::from(header.last_offset_delta))
            .ok_or_else(|| LogError::InvalidBatch {
                reason: "offsets would overflow".into(),
            })?;

        let mut rolled_at = None;
        if self.active().needs_roll(
            batch.len(),
            base_offset,
            header.last_offset_delta,
            self.config.effective_segment_bytes(),
        ) {
            self.roll()?;
            rolled_at = Some(base_offset);
        }

        // Flush what is already there before writing: an error must mean the batch was
        // not appended, or the caller would retry it into a duplicate.
        if matches!(self.config.flush, FlushPolicy::IntervalMs(_)) {
            self.flush_if_due()?;
        }
        // Only the stamped bytes are new: the rest goes to disk as received, uncopied.
        let stamped = batch::stamped_prefix(batch, base_offset, leader_epoch);
        let header = BatchHeader {
            base_offset,
            partition_leader_epoch: leader_epoch,
            ..header
        };
        self.active_mut()
            .append(&stamped, &batch[batch::STAMPED_LEN..], &header)?;
        self.log_end_offset = last_offset + 1;
        self.sync.appended(self.log_end_offset);
        Ok(AppendInfo {
            base_offset,
            last_offset,
            rolled_at,
            stored: header,
        })
    }

    /// Seals the active segment and starts a new one at the log end. Unless the policy
    /// is `never`, the sealed segment is fsynced and the recovery point moves past it.
    fn roll(&mut self) -> Result<(), LogError> {
        let new_base = self.log_end_offset;
        let durable = self.config.flush != FlushPolicy::Never;
        if durable {
            let active = self.active();
            self.sync.log_fsync(new_base, true, || active.sync())?;
        }
        let segment = Segment::create(&self.dir, new_base, self.config.index_interval_bytes)?;
        let sealed = Arc::clone(self.active().log_file());
        let active = Arc::clone(segment.log_file());
        self.segments.push(segment);
        self.sync.rolled(active, (!durable).then_some(sealed));
        if durable {
            // Also makes the new segment's directory entry durable.
            RECOVERY_POINT.write(&self.dir, new_base)?;
            self.recovery_point = new_base;
        }
        tracing::debug!(dir = %self.dir.display(), base_offset = new_base, "rolled segment");
        Ok(())
    }

    /// [`PartitionLog::read_within`] up to `max_bytes`, but always the first
    /// qualifying batch, however large.
    pub fn read(
        &self,
        from_offset: i64,
        max_bytes: usize,
        max_offset: i64,
    ) -> Result<Vec<u8>, LogError> {
        self.read_within(from_offset, ReadLimit::at_least_one(max_bytes), max_offset)
    }

    /// Whole batches from the one containing `from_offset`, stopping before the first
    /// batch whose last offset is `>= max_offset` and before exceeding
    /// `limit.max_bytes` (but the first qualifying batch, however large, when
    /// `limit.min_one_batch`; nothing when it does not fit otherwise). Every batch is
    /// CRC-verified. If the first batch fails verification the error is returned; if a
    /// later one does, the batches before it are returned and the next read starting
    /// there reports the corruption.
    pub fn read_within(
        &self,
        from_offset: i64,
        limit: ReadLimit,
        max_offset: i64,
    ) -> Result<Vec<u8>, LogError> {
        self.check_range(from_offset)?;
        let mut out = Vec::new();
        if from_offset == self.log_end_offset || max_offset <= from_offset {
            return Ok(out);
        }
        let mut cursor = self.locate(from_offset)?;
        while let Some((i, position, expected)) = cursor {
            let segment = &self.segments[i];
            let header = match segment.header_at(position, expected) {
                Ok(header) => header,
                Err(e) => return self.partial_or(out, e),
            };
            if header.base_offset != expected {
                let reason = format!("batch has base offset {}", header.base_offset);
                return self.partial_or(
                    out,
                    LogError::Corrupt {
                        offset: expected,
                        reason,
                    },
                );
            }
            if header.last_offset() >= max_offset {
                break;
            }
            let exempt = out.is_empty() && limit.min_one_batch;
            if !exempt && out.len() + header.size() > limit.max_bytes {
                break;
            }
            match segment.read_verified(position, &header) {
                Ok(bytes) => out.extend_from_slice(&bytes),
                Err(e) => return self.partial_or(out, e),
            }
            cursor = self.advance(i, position, &header);
        }
        Ok(out)
    }

    /// Every batch whose last offset is `>= from_offset`, up to the log end, verified.
    /// Offsets below the log start read from the log start.
    pub fn batches_from(&self, from_offset: i64) -> Result<Vec<(BatchHeader, Vec<u8>)>, LogError> {
        let mut out = Vec::new();
        if from_offset >= self.log_end_offset {
            return Ok(out);
        }
        let mut cursor = self.locate(from_offset.max(self.log_start_offset()))?;
        while let Some((i, position, expected)) = cursor {
            let segment = &self.segments[i];
            let header = segment.header_at(position, expected)?;
            if header.base_offset != expected {
                return Err(self.report_corrupt(LogError::Corrupt {
                    offset: expected,
                    reason: format!("batch has base offset {}", header.base_offset),
                }));
            }
            let bytes = segment
                .read_verified(position, &header)
                .map_err(|e| self.report_corrupt(e))?;
            out.push((header, bytes));
            cursor = self.advance(i, position, &header);
        }
        Ok(out)
    }

    /// Visits the header of every batch whose last offset is `>= from_offset`, in
    /// order, without reading the batches' records: rebuilding producer state and the
    /// leader-epoch history needs only headers, and must not hold a whole log in memory.
    /// The visitor stops the walk by returning `ControlFlow::Break`. Headers are not
    /// CRC-checked here (recovery checked the tail; reads check every batch they serve).
    pub fn for_each_header(
        &self,
        from_offset: i64,
        mut visit: impl FnMut(&BatchHeader) -> ControlFlow<()>,
    ) -> Result<(), LogError> {
        self.walk(from_offset, false, |header, _| visit(header))
    }

    /// [`for_each_header`](Self::for_each_header), plus what each control batch says:
    /// transaction state (open transactions, aborted ones, markers' coordinator epochs)
    /// needs the marker type, which is in the control record, not the header. Only control
    /// batches are read whole (one small record each) and CRC-checked; an unreadable
    /// marker is `Corrupt`.
    pub fn for_each_batch(
        &self,
        from_offset: i64,
        visit: impl FnMut(&BatchHeader, Option<ControlMarker>) -> ControlFlow<()>,
    ) -> Result<(), LogError> {
        self.walk(from_offset, true, visit)
    }

    fn walk(
        &self,
        from_offset: i64,
        read_markers: bool,
        mut visit: impl FnMut(&BatchHeader, Option<ControlMarker>) -> ControlFlow<()>,
    ) -> Result<(), LogError> {
        if from_offset >= self.log_end_offset {
            return Ok(());
        }
        // Rebuilding derived state needs every batch still on disk, also those below a
        // log start that moved inside the first segment.
        let mut cursor = self.locate(from_offset.max(self.first_segment_base()))?;
        while let Some((i, position, expected)) = cursor {
            let segment = &self.segments[i];
            let header = segment.header_at(position, expected)?;
            if header.base_offset != expected {
                return Err(self.report_corrupt(LogError::Corrupt {
                    offset: expected,
                    reason: format!("batch has base offset {}", header.base_offset),
                }));
            }
            let marker = if read_markers && header.is_control() {
                let bytes = segment
                    .read_verified(position, &header)
                    .map_err(|e| self.report_corrupt(e))?;
                let marker = control::decode_control(&bytes).map_err(|e| {
                    self.report_corrupt(LogError::Corrupt {
                        offset: header.base_offset,
                        reason: format!("unreadable control record: {e}"),
                    })
                })?;
                Some(marker)
            } else {
                None
            };
            if visit(&header, marker).is_break() {
                return Ok(());
            }
            cursor = self.advance(i, position, &header);
        }
        Ok(())
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start
    }

    /// Size, offsets and newest timestamp of every sealed segment, oldest first.
    /// Reading a segment's timestamp the first time visits its batch headers.
    pub fn sealed_segment_stats(&mut self) -> Result<Vec<retention::SegmentStats>, LogError> {
        let sealed = self.segments.len().saturating_sub(1);
        self.segments[..sealed]
            .iter_mut()
            .map(|s| {
                Ok(retention::SegmentStats {
                    base_offset: s.base_offset(),
                    next_offset: s.next_offset(),
                    size_bytes: s.size(),
                    max_timestamp: s.max_timestamp()?,
                })
            })
            .collect()
    }

    /// Where the data on disk starts: the first segment's base, at or below the log
    /// start (a follower's start follows its leader's, inside a segment).
    pub fn first_segment_base(&self) -> i64 {
        self.segments[0].base_offset()
    }

    /// The base offset of the segment holding `offset` (the active one's past the end).
    pub fn segment_base_for(&self, offset: i64) -> i64 {
        self.segments[self.segment_index_for(offset)].base_offset()
    }

    /// Bytes in the active segment.
    pub fn active_segment_bytes(&self) -> u64 {
        self.active().size()
    }

    /// Bytes of every segment: what the partition takes on disk, indexes aside.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(Segment::size).sum()
    }

    /// The timestamp of the active segment's first batch (None: it is empty).
    pub fn active_first_batch_timestamp(&self) -> Result<Option<i64>, LogError> {
        self.active().first_batch_timestamp()
    }

    /// Seals the active segment now (unless it is empty) and returns the new one's base.
    pub fn roll_now(&mut self) -> Result<Option<i64>, LogError> {
        if self.active().is_empty() {
            return Ok(None);
        }
        self.roll()?;
        Ok(Some(self.log_end_offset))
    }

    /// Drops every segment and starts over, empty, at `offset` (past the log end): a
    /// follower whose leader already deleted everything it still lacks. Old segments go
    /// first; a crash before the new start is stored leaves an empty log at 0 or an
    /// unchanged one, either of which the follower starts over from again.
    pub fn restart_at(&mut self, offset: i64) -> Result<(), LogError> {
        if offset <= self.log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start: self.log_start,
                log_end: self.log_end_offset,
            });
        }
        for segment in self.segments.drain(..) {
            segment.delete()?;
        }
        let segment = Segment::create(&self.dir, offset, self.config.index_interval_bytes)?;
        let active = Arc::clone(segment.log_file());
        self.segments.push(segment);
        checkpoint::sync_dir(&self.dir)?;
        LOG_START.write(&self.dir, offset)?;
        RECOVERY_POINT.write(&self.dir, offset)?;
        self.log_start = offset;
        self.log_end_offset = offset;
        self.recovery_point = offset;
        self.sync.truncated(active, offset);
        tracing::warn!(dir = %self.dir.display(), offset, "started the log over at a later offset");
        Ok(())
    }

    /// Moves the log start up to `offset` (never past the log end, never back) and
    /// deletes every sealed segment wholly below it; returns the base offsets of the
    /// deleted segments. The new start is persisted before any file goes, so a crash in
    /// between leaves segments that the next call deletes, never a start that serves
    /// deleted data.
    pub fn advance_start(&mut self, offset: i64) -> Result<Vec<i64>, LogError> {
        let offset = offset.min(self.log_end_offset);
        if offset > self.log_start {
            LOG_START.write(&self.dir, offset)?;
            self.log_start = offset;
        }
        let mut deleted = Vec::new();
        while self.segments.len() > 1 && self.segments[0].next_offset() <= self.log_start {
            let segment = self.segments.remove(0);
            deleted.push(segment.base_offset());
            segment.delete()?;
        }
        if !deleted.is_empty() {
            checkpoint::sync_dir(&self.dir)?;
            tracing::info!(
                dir = %self.dir.display(),
                log_start = self.log_start,
                deleted_segments = deleted.len(),
                "moved the log start and deleted the segments below it"
            );
        }
        Ok(deleted)
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    pub fn active_segment_base(&self) -> i64 {
        self.active().base_offset()
    }

    /// `(base offset, next offset)` of every segment but the active one, in order.
    pub fn sealed_segments(&self) -> Vec<(i64, i64)> {
        let sealed = self.segments.len().saturating_sub(1);
        self.segments[..sealed]
            .iter()
            .map(|s| (s.base_offset(), s.next_offset()))
            .collect()
    }

    /// The offset below which data is known to be on disk, as persisted in the
    /// `recovery-point` file.
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// The size at which the active segment rolls from the next append on.
    pub fn set_segment_bytes(&mut self, segment_bytes: u64) {
        self.config.segment_bytes = segment_bytes;
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A handle that fsyncs everything appended so far, usable without the log.
    pub fn sync_point(&self) -> SyncPoint {
        SyncPoint::new(Arc::clone(&self.sync), self.log_end_offset)
    }

    /// Fsyncs every segment holding data past the recovery point (log and index), then
    /// moves the recovery point to the log end and persists it.
    pub fn flush(&mut self) -> Result<(), LogError> {
        let end = self.log_end_offset;
        let recovery_point = self.recovery_point;
        let segments = &self.segments;
        self.sync.log_fsync(end, true, || {
            segments
                .iter()
                .filter(|s| s.next_offset() > recovery_point || s.base_offset() >= recovery_point)
                .try_for_each(Segment::sync)
        })?;
        if end != self.recovery_point {
            RECOVERY_POINT.write(&self.dir, end)?;
            self.recovery_point = end;
        }
        self.last_flush = Instant::now();
        Ok(())
    }

    /// Under `interval:<ms>`, flushes if the interval has passed since the last flush
    /// and there is something to flush; returns whether it flushed. A broker calls this
    /// from a timer so that an idle log's tail reaches the disk too.
    pub fn flush_if_due(&mut self) -> Result<bool, LogError> {
        let FlushPolicy::IntervalMs(ms) = self.config.flush else {
            return Ok(false);
        };
        if self.log_end_offset == self.recovery_point
            || self.last_flush.elapsed() < Duration::from_millis(ms)
        {
            return Ok(false);
        }
        self.flush()?;
        Ok(true)
    }

    /// Drops every batch at or after `offset`, which must start a batch (or be the log
    /// end). Later segments are deleted; the cut is fsynced and the recovery point
    /// lowered first, so a crash midway leaves a log recovery accepts.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        self.check_range(offset)?;
        if offset == self.log_end_offset {
            return Ok(());
        }
        let i = self.segment_index_for(offset);
        let segment = &self.segments[i];
        if offset != segment.base_offset() && offset != segment.next_offset() {
            match segment.find(offset)? {
                Some((_, header)) if header.base_offset == offset => {}
                _ => return Err(LogError::NotBatchBoundary { offset }),
            }
        }
        if self.recovery_point > offset {
            RECOVERY_POINT.write(&self.dir, offset)?;
            self.recovery_point = offset;
        }
        while self.segments.len() > i + 1 {
            if let Some(later) = self.segments.pop() {
                later.delete()?;
            }
        }
        self.active_mut().truncate_to(offset)?;
        checkpoint::sync_dir(&self.dir)?;
        let removed = self.log_end_offset - offset;
        self.log_end_offset = offset;
        self.sync
            .truncated(Arc::clone(self.active().log_file()), offset);
        tracing::info!(
            dir = %self.dir.display(),
            offset,
            removed_offsets = removed,
            "truncated partition log"
        );
        Ok(())
    }

    /// Clean shutdown: flush everything and persist the recovery point at the log end.
    pub fn close(mut self) -> Result<(), LogError> {
        self.flush()
    }

    fn active(&self) -> &Segment {
        // `segments` is never empty (see `open` and `truncate_to`).
        &self.segments[self.segments.len() - 1]
    }

    fn active_mut(&mut self) -> &mut Segment {
        let last = self.segments.len() - 1;
        &mut self.segments[last]
    }

    fn check_range(&self, offset: i64) -> Result<(), LogError> {
        let (log_start, log_end) = (self.log_start_offset(), self.log_end_offset);
        if offset < log_start || offset > log_end {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start,
                log_end,
            });
        }
        Ok(())
    }

    /// Index of the last segment whose base offset is `<= offset`.
    fn segment_index_for(&self, offset: i64) -> usize {
        self.segments
            .partition_point(|s| s.base_offset() <= offset)
            .saturating_sub(1)
    }

    /// Where the batch containing `offset` (`log_start <= offset < log_end`) starts:
    /// `(segment index, position, base offset)`.
    fn locate(&self, offset: i64) -> Result<Option<(usize, u64, i64)>, LogError> {
        let i = self.segment_index_for(offset);
        match self.segments[i].find(offset) {
            Ok(Some((position, header))) => Ok(Some((i, position, header.base_offset))),
            Ok(None) => Err(self.report_corrupt(LogError::Corrupt {
                offset,
                reason: format!(
                    "segment {} ends before the offset",
                    self.segments[i].base_offset()
                ),
            })),
            Err(e) => Err(self.report_corrupt(e)),
        }
    }

    /// The batch after the one at `position` in segment `i`, if the log goes on.
    fn advance(&self, i: usize, position: u64, header: &BatchHeader) -> Option<(usize, u64, i64)> {
        let next = position + header.size() as u64;
        let expected = header.next_offset();
        if next < self.segments[i].size() {
            return Some((i, next, expected));
        }
        // Skip empty segments (only the active one can be empty).
        (i + 1..self.segments.len())
            .find(|&j| !self.segments[j].is_empty())
            .map(|j| (j, 0, expected))
    }

    fn partial_or(&self, out: Vec<u8>, error: LogError) -> Result<Vec<u8>, LogError> {
        let error = self.report_corrupt(error);
        if out.is_empty() {
            Err(error)
        } else {
            Ok(out)
        }
    }

    fn report_corrupt(&self, error: LogError) -> LogError {
        if let LogError::Corrupt { offset, reason } = &error {
            tracing::error!(
                dir = %self.dir.display(),
                offset,
                reason = %reason,
                "corrupt data in partition log; not serving it"
            );
        }
        error
    }
}

/// Base offsets of the segments in `dir`, ascending. Removes leftovers (a temporary
/// checkpoint file, an index without a log) and finishes or undoes a segment swap the
/// cleaner died in (see [`segment_swap::resolve`]).
fn list_segments(dir: &Path) -> Result<Vec<i64>, LogError> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).at("listing", dir)? {
        let entry = entry.at("listing", dir)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if let Some(file) = segment_swap::SegmentFile::parse(name) {
            files.push(file);
        } else if RECOVERY_POINT.is_temp_file(name) || LOG_START.is_temp_file(name) {
            let path = entry.path();
            fs::remove_file(&path).at("removing", &path)?;
        }
    }
    let (ops, bases) = segment_swap::resolve(&files);
    if !ops.is_empty() {
        tracing::warn!(dir = %dir.display(), ?ops, "finishing or undoing an interrupted segment swap");
    }
    for op in ops {
        file_ops::perform(dir, op)?;
    }
    Ok(bases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use idem_proto::batch::{Batches, ProducerInfo, Record};
    use std::fs::OpenOptions;
    use std::os::unix::fs::FileExt;

    fn records(count: usize, value_len: usize) -> Vec<Record> {
        (0..count)
            .map(|i| Record {
                key: Some(Bytes::from(format!("key-{i}"))),
                value: Some(Bytes::from(vec![b'v'; value_len])),
                headers: Vec::new(),
                timestamp_ms: 1_000 + i as i64,
            })
            .collect()
    }

    fn batch_of(count: usize, value_len: usize) -> Vec<u8> {
        batch::encode(ProducerInfo::NONE, 0, &records(count, value_len)).to_vec()
    }

    fn small_segments() -> LogConfig {
        LogConfig {
            segment_bytes: 1024,
            index_interval_bytes: 100,
            flush: FlushPolicy::EveryAppend,
        }
    }

    fn open(dir: &Path, config: LogConfig) -> (PartitionLog, RecoveryReport) {
        PartitionLog::open(dir, config).expect("open log")
    }

    /// `(base_offset, last_offset)` of every batch in a read result; panics on a bad one.
    fn batch_spans(buf: &[u8]) -> Vec<(i64, i64)> {
        Batches::new(buf)
            .map(|b| {
                let (header, _) = b.expect("valid batch in read result");
                (header.base_offset, header.last_offset())
            })
            .collect()
    }

    /// Appends batches of `sizes[i]` records each; returns their `(base, last)` spans.
    fn append_all(log: &mut PartitionLog, sizes: &[usize], value_len: usize) -> Vec<(i64, i64)> {
        sizes
            .iter()
            .map(|&n| {
                let info = log.append(&batch_of(n, value_len), 7).expect("append");
                (info.base_offset, info.last_offset)
            })
            .collect()
    }

    fn read_all(log: &PartitionLog) -> Vec<u8> {
        log.read(log.log_start_offset(), usize::MAX, i64::MAX)
            .expect("read whole log")
    }

    fn segment_file(dir: &Path, base: i64) -> PathBuf {
        segment::log_path(dir, base)
    }

    fn file_len(path: &Path) -> u64 {
        fs::metadata(path).expect("metadata").len()
    }

    #[test]
    fn a_new_log_is_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (log, report) = open(&dir.path().join("orders-0"), LogConfig::default());
        assert_eq!(report.log_end_offset, 0);
        assert_eq!(report.reason, None);
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
        assert_eq!(log.active_segment_base(), 0);
        assert!(log.read(0, 1024, i64::MAX).expect("read").is_empty());
        assert!(segment_file(log.dir(), 0).exists());
    }

    #[test]
    fn append_assigns_consecutive_offsets_and_read_returns_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), LogConfig::default());
        let produced = batch_of(1, 10);
        let first = log.append(&produced, 3).expect("append");
        assert_eq!(
            first,
            AppendInfo {
                base_offset: 0,
                last_offset: 0,
                rolled_at: None,
                stored: BatchHeader {
                    base_offset: 0,
                    partition_leader_epoch: 3,
                    ..batch::decode_header(&produced).expect("header")
                },
            }
        );
        assert_eq!(append_all(&mut log, &[3, 2], 10), vec![(1, 3), (4, 5)]);
        assert_eq!(log.log_end_offset(), 6);

        let buf = read_all(&log);
        assert_eq!(batch_spans(&buf), vec![(0, 0), (1, 3), (4, 5)]);
        let (header, bytes) = Batches::new(&buf).next().expect("one").expect("valid");
        assert_eq!(header.partition_leader_epoch, 3);
        let stored = batch::records(bytes).expect("records");
        assert_eq!(stored[0].offset, 0);
        assert_eq!(stored[0].key.as_deref(), Some(&b"key-0"[..]));
        let second = Batches::new(&buf).nth(1).expect("two").expect("valid").1;
        let offsets: Vec<i64> = batch::records(second)
            .expect("records")
            .iter()
            .map(|r| r.offset)
            .collect();
        assert_eq!(offsets, vec![1, 2, 3]);
    }

    #[test]
    fn read_from_the_middle_of_a_batch_returns_that_whole_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), LogConfig::default());
        append_all(&mut log, &[1, 3, 2], 10);
        assert_eq!(
            batch_spans(&log.read(2, usize::MAX, i64::MAX).expect("read")),
            vec![(1, 3), (4, 5)]
        );
        assert_eq!(
            batch_spans(&log.read(5, usize::MAX, i64::MAX).expect("read")),
            vec![(4, 5)]
        );
    }

    #[test]
    fn read_within_a_strict_limit_returns_only_batches_that_fit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), LogConfig::default());
        append_all(&mut log, &[2, 2, 2], 50);
        let one = batch_of(2, 50).len();
        let strict = |max_bytes| ReadLimit {
            max_bytes,
            min_one_batch: false,
        };
        assert!(log
            .read_within(0, strict(one - 1), i64::MAX)
            .expect("read")
            .is_empty());
        assert!(log
            .read_within(0, strict(0), i64::MAX)
            .expect("read")
            .is_empty());
        assert_eq!(
            batch_spans(&log.read_within(0, strict(one), i64::MAX).expect("read")),
            vec![(0, 1)]
        );
        assert_eq!(
            batch_spans(
                &log.read_within(2, strict(2 * one + 1), i64::MAX)
                    .expect("read")
            ),
            vec![(2, 3), (4, 5)]
        );
    }

    #[test]
    fn read_stops_at_max_bytes_but_returns_at_least_one_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), LogConfig::default());
        append_all(&mut log, &[2, 2, 2], 50);
        let one = batch_of(2, 50).len();
        assert_eq!(
            batch_spans(&log.read(0, 1, i64::MAX).expect("read")),
            vec![(0, 1)]
        );
        assert_eq!(
            batch_spans(&log.read(0, 0, i64::MAX).expect("read")),
            vec![(0, 1)]
        );
        assert_eq!(
            batch_spans(&log.read(0, 2 * one, i64::MAX).expect("read")),
            vec![(0, 1), (2, 3)]
        );
        assert_eq!(
            batch_spans(&log.read(0, 3 * one - 1, i64::MAX).expect("read")),
            vec![(0, 1), (2, 3)]
        );
        assert_eq!(
            batch_spans(&log.read(0, 3 * one, i64::MAX).expect("read")).len(),
            3
        );
    }

    #[test]
    fn read_stops_before_a_batch_that_reaches_max_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), LogConfig::default());
        append_all(&mut log, &[1, 3, 2], 10);
        let read =
            |from, max_offset| batch_spans(&log.read(from, usize::MAX, max_offset).expect("read"));
        assert_eq!(read(0, 6), vec![(0, 0), (1, 3), (4, 5)]);
        assert_eq!(read(0, 5), vec![(0, 0), (1, 3)]);
        assert_eq!(read(0, 4), vec![(0, 0), (1, 3)]);
        assert_eq!(read(0, 3), vec![(0, 0)]);
        assert_eq!(read(0, 1), vec![(0, 0)]);
        assert_eq!(read(0, 0), vec![]);
        assert_eq!(read(2, 3), vec![], "the batch holding 2 ends at 3");
        // max_offset wins over the at-least-one-batch rule.
        assert!(log.read(1, 0, 2).expect("read").is_empty());
    }

    #[test]
    fn reads_outside_the_log_are_out_of_range() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), LogConfig::default());
        append_all(&mut log, &[2, 2], 10);
        for offset in [-1, 5, 100] {
            assert!(
                matches!(
                    log.read(offset, 1024, i64::MAX),
                    Err(LogError::OffsetOutOfRange {
                        offset: o,
                        log_start: 0,
                        log_end: 4
                    }) if o == offset
                ),
                "offset {offset}"
            );
        }
        assert!(log
            .read(4, 1024, i64::MAX)
            .expect("read at log end")
            .is_empty());
        assert!(matches!(
            log.truncate_to(5),
            Err(LogError::OffsetOutOfRange { .. })
        ));
    }

    #[test]
    fn appends_roll_at_segment_bytes_and_reads_span_segments() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        let size = batch_of(2, 100).len() as u64;
        let per_segment = (1024 / size) as i64;
        let mut rolls = Vec::new();
        for i in 0..40i64 {
            let info = log.append(&batch_of(2, 100), 1).expect("append");
            assert_eq!(info.base_offset, 2 * i);
            if let Some(base) = info.rolled_at {
                assert_eq!(base, info.base_offset, "rolls before writing the batch");
                rolls.push(base);
            }
        }
        let expected_rolls: Vec<i64> = (1..)
            .map(|k| 2 * k * per_segment)
            .take_while(|&b| b < 80)
            .collect();
        assert_eq!(rolls, expected_rolls);
        assert_eq!(log.active_segment_base(), *rolls.last().expect("rolled"));
        for base in std::iter::once(0).chain(rolls.iter().copied()) {
            let path = segment_file(dir.path(), base);
            assert!(file_len(&path) <= 1024, "{} is too big", path.display());
            assert!(segment::index_path(dir.path(), base).exists());
        }
        // Rolling fsynced the sealed segments and moved the recovery point.
        assert_eq!(log.recovery_point(), log.active_segment_base());

        let all = read_all(&log);
        assert_eq!(
            batch_spans(&all),
            (0..40).map(|i| (2 * i, 2 * i + 1)).collect::<Vec<_>>()
        );
        for from in 0..80 {
            let got = batch_spans(&log.read(from, 3 * size as usize, i64::MAX).expect("read"));
            let first = from - from % 2;
            assert_eq!(got[0], (first, first + 1), "read from {from}");
            assert_eq!(
                got.len(),
                3.min(((80 - first) / 2) as usize),
                "read from {from}"
            );
        }
    }

    #[test]
    fn a_batch_larger_than_a_segment_gets_a_segment_of_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        append_all(&mut log, &[1], 10);
        let big = log.append(&batch_of(3, 2000), 1).expect("append big");
        assert_eq!(big.rolled_at, Some(1));
        let after = log.append(&batch_of(1, 10), 1).expect("append after");
        assert_eq!(after.rolled_at, Some(4));
        assert_eq!(batch_spans(&read_all(&log)), vec![(0, 0), (1, 3), (4, 4)]);
    }

    #[test]
    fn reopen_after_close_keeps_everything() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        append_all(&mut log, &[3; 30], 40);
        let before = read_all(&log);
        let end = log.log_end_offset();
        log.close().expect("close");

        let (mut log, report) = open(dir.path(), small_segments());
        assert_eq!(report.reason, None);
        assert_eq!(report.truncated_bytes, 0);
        assert_eq!(report.log_end_offset, end);
        assert_eq!(log.log_end_offset(), end);
        assert_eq!(log.recovery_point(), end);
        assert_eq!(read_all(&log), before);
        let next = log.append(&batch_of(1, 1), 2).expect("append");
        assert_eq!(next.base_offset, end);
    }

    #[test]
    fn reopen_after_a_crash_keeps_every_valid_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            flush: FlushPolicy::Never,
            ..small_segments()
        };
        let (mut log, _) = open(dir.path(), config.clone());
        append_all(&mut log, &[2; 25], 40);
        let before = read_all(&log);
        drop(log); // no close: the recovery point is still 0
        let (log, report) = open(dir.path(), config);
        assert_eq!(report.recovered_from, 0);
        assert_eq!(report.reason, None);
        assert_eq!(log.log_end_offset(), 50);
        assert_eq!(read_all(&log), before);
    }

    /// Writes batches of 2 records each into small segments, drops the log without
    /// closing it, and returns the batch spans.
    fn crashed_log(dir: &Path, batches: usize) -> Vec<(i64, i64)> {
        let (mut log, _) = open(dir, small_segments());
        let spans = append_all(&mut log, &vec![2; batches], 40);
        drop(log);
        spans
    }

    fn active_segment_path(dir: &Path) -> PathBuf {
        let (log, _) = open(dir, small_segments());
        let path = segment_file(dir, log.active_segment_base());
        drop(log);
        path
    }

    #[test]
    fn a_torn_tail_is_cut_on_open_and_appends_continue() {
        let batch_len = batch_of(2, 40).len() as u64;
        // batch_len - STAMPED_LEN: a crash between the append's two writes, only the
        // stamped prefix on disk.
        let prefix_only = batch_len - batch::STAMPED_LEN as u64;
        for cut in [
            1,
            7,
            batch_len - 61,
            batch_len - 20,
            prefix_only,
            batch_len - 1,
        ] {
            let dir = tempfile::tempdir().expect("tempdir");
            let spans = crashed_log(dir.path(), 20);
            let (last_base, _) = *spans.last().expect("batches");
            let (log, _) = open(dir.path(), small_segments());
            let active = segment_file(dir.path(), log.active_segment_base());
            drop(log);
            let len = file_len(&active);
            OpenOptions::new()
                .write(true)
                .open(&active)
                .and_then(|f| f.set_len(len - cut))
                .expect("tear the tail");

            let (mut log, report) = open(dir.path(), small_segments());
            assert_eq!(log.log_end_offset(), last_base, "cut {cut}");
            assert_eq!(report.log_end_offset, last_base);
            assert_eq!(report.truncated_bytes, batch_len - cut, "cut {cut}");
            assert!(report.reason.is_some());
            assert_eq!(file_len(&active), len - batch_len);
            assert_eq!(
                batch_spans(&read_all(&log)),
                spans[..spans.len() - 1].to_vec()
            );
            let next = log.append(&batch_of(1, 1), 1).expect("append");
            assert_eq!(next.base_offset, last_base);
            assert_eq!(
                batch_spans(&log.read(last_base, 1024, i64::MAX).expect("read")),
                vec![(last_base, last_base)]
            );
        }
    }

    #[test]
    fn a_garbled_last_batch_is_cut_on_open() {
        let batch_len = batch_of(2, 40).len() as u64;
        // A byte in the records, in the CRC-covered header, and in the magic byte.
        for back in [5, batch_len - 30, batch_len - 16] {
            let dir = tempfile::tempdir().expect("tempdir");
            let spans = crashed_log(dir.path(), 12);
            let active = active_segment_path(dir.path());
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&active)
                .expect("open segment");
            let at = file_len(&active) - back;
            let mut byte = [0u8; 1];
            file.read_exact_at(&mut byte, at).expect("read byte");
            file.write_all_at(&[byte[0] ^ 0x5a], at).expect("garble");
            drop(file);

            let (mut log, report) = open(dir.path(), small_segments());
            let (last_base, _) = *spans.last().expect("batches");
            assert_eq!(
                log.log_end_offset(),
                last_base,
                "garbled {back} from the end"
            );
            assert_eq!(report.truncated_bytes, batch_len);
            assert_eq!(
                batch_spans(&read_all(&log)),
                spans[..spans.len() - 1].to_vec()
            );
            assert_eq!(
                log.append(&batch_of(2, 1), 1).expect("append").base_offset,
                last_base
            );
        }
    }

    #[test]
    fn garbage_after_valid_data_is_cut_on_open() {
        let garbage: [&[u8]; 3] = [&[0u8; 4096], &[0xab; 100], &[1, 2, 3]];
        for junk in garbage {
            let dir = tempfile::tempdir().expect("tempdir");
            let spans = crashed_log(dir.path(), 12);
            let active = active_segment_path(dir.path());
            let len = file_len(&active);
            OpenOptions::new()
                .append(true)
                .open(&active)
                .and_then(|f| f.write_all_at(junk, len))
                .expect("append garbage");

            let (log, report) = open(dir.path(), small_segments());
            assert_eq!(report.truncated_bytes, junk.len() as u64);
            assert!(report.reason.is_some());
            assert_eq!(file_len(&active), len);
            assert_eq!(log.log_end_offset(), 24);
            assert_eq!(batch_spans(&read_all(&log)), spans);
        }
    }

    #[test]
    fn a_valid_batch_that_does_not_continue_the_offsets_is_cut_on_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spans = crashed_log(dir.path(), 3);
        let path = segment_file(dir.path(), 0);
        let len = file_len(&path);
        // A stale copy of the first batch: valid CRC, base offset 0.
        let mut first = batch_of(2, 40);
        batch::assign(&mut first, 0, 7);
        OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.write_all_at(&first, len))
            .expect("append stale batch");
        let (log, report) = open(dir.path(), small_segments());
        assert_eq!(report.truncated_bytes, first.len() as u64);
        assert!(report
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("base offset 0")));
        assert_eq!(batch_spans(&read_all(&log)), spans);
    }

    #[test]
    fn segments_after_a_corrupt_one_are_deleted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            flush: FlushPolicy::Never, // rolls leave the recovery point at 0
            ..small_segments()
        };
        let (mut log, _) = open(dir.path(), config.clone());
        let spans = append_all(&mut log, &[2; 30], 40);
        drop(log);
        let mut bases: Vec<i64> = list_segments(dir.path()).expect("list");
        assert!(bases.len() >= 4);
        let torn = bases[1];
        let path = segment_file(dir.path(), torn);
        let len = file_len(&path);
        OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(len - 3))
            .expect("tear segment 1");

        let (log, report) = open(dir.path(), config);
        let kept: Vec<(i64, i64)> = spans
            .iter()
            .copied()
            .filter(|&(_, last)| last < log.log_end_offset())
            .collect();
        assert_eq!(batch_spans(&read_all(&log)), kept);
        assert_eq!(log.active_segment_base(), torn);
        assert!(log.log_end_offset() > torn && log.log_end_offset() < bases[2]);
        for &deleted in &bases[2..] {
            assert!(!segment::index_path(dir.path(), deleted).exists());
        }
        bases.truncate(2);
        assert_eq!(list_segments(dir.path()).expect("list"), bases);
        assert!(report.truncated_bytes > len);
    }

    #[test]
    fn an_unreadable_recovery_point_scans_everything() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spans = crashed_log(dir.path(), 20);
        fs::write(RECOVERY_POINT.path(dir.path()), b"not a checkpoint").expect("garble");
        let (log, report) = open(dir.path(), small_segments());
        assert_eq!(report.recovered_from, 0);
        assert_eq!(batch_spans(&read_all(&log)), spans);
        assert_eq!(
            RECOVERY_POINT.read(dir.path()).expect("read"),
            StoredOffset::Valid(40)
        );
    }

    #[test]
    fn a_missing_or_corrupt_index_is_rebuilt_from_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        let spans = append_all(&mut log, &[1; 60], 20);
        log.close().expect("close");
        let bases = list_segments(dir.path()).expect("list");
        assert!(bases.len() >= 4);
        let index_bytes =
            |base| fs::read(segment::index_path(dir.path(), base)).expect("read index");
        let originals: Vec<Vec<u8>> = bases.iter().map(|&b| index_bytes(b)).collect();
        assert!(
            originals.iter().all(|i| !i.is_empty()),
            "indexes have entries"
        );

        // Segment 0: missing. Segment 1: partial entry. Segment 2: well formed but
        // pointing at the wrong places. The active segment: zeroed.
        fs::remove_file(segment::index_path(dir.path(), bases[0])).expect("remove");
        fs::write(segment::index_path(dir.path(), bases[1]), [1u8; 13]).expect("write");
        let mut wrong = originals[2].clone();
        for entry in wrong.chunks_exact_mut(8) {
            entry[7] = entry[7].wrapping_add(3);
        }
        fs::write(segment::index_path(dir.path(), bases[2]), wrong).expect("write");
        let last = bases.len() - 1;
        fs::write(
            segment::index_path(dir.path(), bases[last]),
            vec![0u8; originals[last].len()],
        )
        .expect("write");

        let (log, report) = open(dir.path(), small_segments());
        assert_eq!(report.reason, None, "index damage is not data loss");
        for (i, &base) in bases.iter().enumerate() {
            assert_eq!(index_bytes(base), originals[i], "index of segment {base}");
        }
        for (base, last) in &spans {
            assert_eq!(
                batch_spans(&log.read(*base, 1, i64::MAX).expect("read")),
                vec![(*base, *last)]
            );
        }
    }

    #[test]
    fn a_wrong_index_entry_in_a_flushed_segment_is_ignored_by_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LogConfig {
            index_interval_bytes: 1,
            ..small_segments()
        };
        let (mut log, _) = open(dir.path(), config.clone());
        let spans = append_all(&mut log, &[1; 30], 20);
        log.close().expect("close");
        assert!(list_segments(dir.path()).expect("list").len() >= 2);
        // Point the first entry of the sealed segment 0 into the middle of a batch. The
        // file still decodes and its last entry is right, so open keeps it.
        let path = segment::index_path(dir.path(), 0);
        let mut bytes = fs::read(&path).expect("read index");
        bytes[4..8].copy_from_slice(&3u32.to_be_bytes());
        fs::write(&path, &bytes).expect("write index");
        let (log, _) = open(dir.path(), config);
        assert_eq!(fs::read(&path).expect("read index"), bytes, "not rebuilt");
        for (base, last) in &spans {
            assert_eq!(
                batch_spans(&log.read(*base, 1, i64::MAX).expect("read")),
                vec![(*base, *last)]
            );
        }
    }

    #[test]
    fn a_corrupt_batch_below_the_recovery_point_is_never_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        append_all(&mut log, &[2; 30], 40);
        log.close().expect("close");
        let batch_len = batch_of(2, 40).len() as u64;
        // Garble the third batch (offsets 4..5) of the first, flushed segment.
        let path = segment_file(dir.path(), 0);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open");
        file.write_all_at(b"XX", 2 * batch_len + 70)
            .expect("garble");
        drop(file);

        let (log, report) = open(dir.path(), small_segments());
        assert_eq!(report.reason, None, "flushed segments are not rescanned");
        assert!(matches!(
            log.read(4, usize::MAX, i64::MAX),
            Err(LogError::Corrupt { offset: 4, .. })
        ));
        assert!(matches!(
            log.read(5, usize::MAX, i64::MAX),
            Err(LogError::Corrupt { offset: 4, .. })
        ));
        // Reads that start before it stop before it.
        assert_eq!(batch_spans(&read_all(&log)), vec![(0, 1), (2, 3)]);
        // Reads after it are fine.
        assert_eq!(
            batch_spans(&log.read(6, 1, i64::MAX).expect("read")),
            vec![(6, 7)]
        );
        assert!(matches!(
            log.batches_from(0),
            Err(LogError::Corrupt { offset: 4, .. })
        ));
    }

    #[test]
    fn batches_from_returns_every_batch_reaching_the_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        let spans = append_all(&mut log, &[3; 20], 40);
        let got: Vec<(i64, i64)> = log
            .batches_from(10)
            .expect("batches")
            .iter()
            .map(|(h, bytes)| {
                assert_eq!(h.size(), bytes.len());
                (h.base_offset, h.last_offset())
            })
            .collect();
        assert_eq!(got, spans[3..].to_vec());
        assert_eq!(log.batches_from(-5).expect("all").len(), 20);
        assert!(log.batches_from(60).expect("none").is_empty());
    }

    #[test]
    fn for_each_header_visits_the_same_batches_as_batches_from_and_can_stop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        let spans = append_all(&mut log, &[3; 20], 40);
        let mut seen = Vec::new();
        log.for_each_header(10, |h| {
            seen.push((h.base_offset, h.last_offset()));
            ControlFlow::Continue(())
        })
        .expect("walk");
        assert_eq!(seen, spans[3..].to_vec(), "across segment boundaries too");
        let mut first = None;
        log.for_each_header(31, |h| {
            first = Some(h.base_offset);
            ControlFlow::Break(())
        })
        .expect("walk");
        assert_eq!(first, Some(30), "the batch holding offset 31 starts at 30");
        let mut none = 0;
        log.for_each_header(60, |_| {
            none += 1;
            ControlFlow::Continue(())
        })
        .expect("walk");
        assert_eq!(none, 0);
    }

    #[test]
    fn for_each_batch_reads_the_marker_of_control_batches_only() {
        use idem_proto::v1::ControlType;
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        append_all(&mut log, &[2], 10);
        let marker = ControlMarker {
            control_type: ControlType::Abort,
            coordinator_epoch: 3,
        };
        let buf = control::encode_control(9, 1, marker, 0).to_vec();
        log.append(&buf, 7).expect("append marker");
        append_all(&mut log, &[1], 10);
        let mut seen = Vec::new();
        log.for_each_batch(0, |h, m| {
            seen.push((h.base_offset, m));
            ControlFlow::Continue(())
        })
        .expect("walk");
        assert_eq!(seen, vec![(0, None), (2, Some(marker)), (3, None)]);
    }

    #[test]
    fn for_each_batch_reports_a_control_batch_whose_record_is_unreadable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        // Control attributes, but an ordinary record: no marker key.
        let buf = batch::encode(ProducerInfo::NONE, batch::ATTR_CONTROL, &records(1, 3)).to_vec();
        log.append(&buf, 7).expect("append");
        let walked = log.for_each_batch(0, |_, _| ControlFlow::Continue(()));
        assert!(matches!(walked, Err(LogError::Corrupt { offset: 0, .. })));
    }

    #[test]
    fn truncate_to_drops_later_batches_and_segments() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        let spans = append_all(&mut log, &[2; 30], 40);
        let bases = list_segments(dir.path()).expect("list");
        assert!(bases.len() >= 3);
        // Cut in the middle of segment 1, at a batch boundary.
        let cut = bases[1] + 4;
        log.truncate_to(cut).expect("truncate");
        assert_eq!(log.log_end_offset(), cut);
        assert_eq!(log.active_segment_base(), bases[1]);
        assert!(log.recovery_point() <= cut);
        assert_eq!(
            list_segments(dir.path()).expect("list"),
            bases[..2].to_vec()
        );
        let kept: Vec<(i64, i64)> = spans.iter().copied().filter(|&(b, _)| b < cut).collect();
        assert_eq!(batch_spans(&read_all(&log)), kept);
        assert!(matches!(
            log.read(cut + 1, 10, i64::MAX),
            Err(LogError::OffsetOutOfRange { .. })
        ));

        let next = log.append(&batch_of(1, 1), 9).expect("append");
        assert_eq!(next.base_offset, cut);
        log.close().expect("close");
        let (mut log, report) = open(dir.path(), small_segments());
        assert_eq!(report.reason, None);
        assert_eq!(log.log_end_offset(), cut + 1);

        // Cut at a segment base, and to the very start.
        log.truncate_to(bases[1]).expect("truncate to segment base");
        assert_eq!(log.log_end_offset(), bases[1]);
        log.truncate_to(0).expect("truncate to start");
        assert_eq!(log.log_end_offset(), 0);
        assert!(read_all(&log).is_empty());
        assert_eq!(
            log.append(&batch_of(2, 1), 1).expect("append").base_offset,
            0
        );
    }

    #[test]
    fn truncate_to_inside_a_batch_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), LogConfig::default());
        append_all(&mut log, &[3, 3], 10);
        assert!(matches!(
            log.truncate_to(4),
            Err(LogError::NotBatchBoundary { offset: 4 })
        ));
        assert_eq!(log.log_end_offset(), 6);
        assert_eq!(batch_spans(&read_all(&log)), vec![(0, 2), (3, 5)]);
        log.truncate_to(6)
            .expect("truncating at the end is a no-op");
        assert_eq!(log.log_end_offset(), 6);
    }

    #[test]
    fn append_refuses_bytes_that_are_not_exactly_one_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), LogConfig::default());
        let mut two = batch_of(1, 1);
        two.extend_from_slice(&batch_of(1, 1));
        let mut short = batch_of(1, 1);
        short.truncate(30);
        for bytes in [&mut two, &mut short] {
            assert!(matches!(
                log.append(bytes, 1),
                Err(LogError::InvalidBatch { .. })
            ));
        }
        assert_eq!(log.log_end_offset(), 0);
        assert_eq!(file_len(&segment_file(dir.path(), 0)), 0);
    }

    #[test]
    fn sync_point_covers_appends_and_skips_covered_syncs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        append_all(&mut log, &[2; 3], 10);
        let early = log.sync_point();
        append_all(&mut log, &[2; 3], 10);
        let late = log.sync_point();
        assert_eq!((early.end_offset(), late.end_offset()), (6, 12));
        assert_eq!(early.synced_offset(), 0);
        // The early sync fsyncs everything appended so far, covering the late one too.
        std::thread::spawn(move || early.sync())
            .join()
            .expect("thread")
            .expect("sync");
        assert_eq!(late.synced_offset(), 12);
        late.sync().expect("covered sync");
        // Truncation lowers what is known synced.
        log.truncate_to(4).expect("truncate");
        assert_eq!(log.sync_point().synced_offset(), 4);
    }

    #[test]
    fn sync_point_under_never_also_fsyncs_segments_rolled_without_fsync() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(
            dir.path(),
            LogConfig {
                flush: FlushPolicy::Never,
                ..small_segments()
            },
        );
        append_all(&mut log, &[2; 30], 40);
        assert_eq!(log.recovery_point(), 0, "never policy: rolls do not flush");
        let point = log.sync_point();
        point.sync().expect("sync");
        assert_eq!(point.synced_offset(), 60);
        log.flush().expect("flush");
        assert_eq!(log.recovery_point(), 60);
        assert_eq!(
            RECOVERY_POINT.read(dir.path()).expect("read"),
            StoredOffset::Valid(60)
        );
    }

    #[test]
    fn interval_policy_flushes_once_the_interval_has_passed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(
            dir.path(),
            LogConfig {
                flush: FlushPolicy::IntervalMs(20),
                ..LogConfig::default()
            },
        );
        append_all(&mut log, &[1], 1);
        assert_eq!(log.recovery_point(), 0);
        assert!(!log.flush_if_due().expect("not due"));
        std::thread::sleep(Duration::from_millis(30));
        append_all(&mut log, &[1], 1);
        assert_eq!(
            log.recovery_point(),
            1,
            "the append flushed what came before it"
        );
        append_all(&mut log, &[1], 1);
        std::thread::sleep(Duration::from_millis(30));
        assert!(log.flush_if_due().expect("due"));
        assert_eq!(log.recovery_point(), 3);
        assert!(!log.flush_if_due().expect("nothing to flush"));
    }

    #[test]
    fn given_a_new_start_then_segments_wholly_below_go_and_reads_below_it_are_out_of_range() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        append_all(&mut log, &[5; 12], 60);
        let sealed = log.sealed_segments();
        assert!(sealed.len() >= 3, "{sealed:?}");
        // A start inside the third segment: the first two go, the third stays.
        let (third_base, third_next) = sealed[2];
        let start = third_base + 1;
        let deleted = log.advance_start(start).expect("advance");
        assert_eq!(deleted, vec![sealed[0].0, sealed[1].0]);
        assert!(!segment_file(dir.path(), sealed[0].0).exists());
        assert!(segment_file(dir.path(), third_base).exists());
        assert_eq!(log.log_start_offset(), start);
        match log.read(start - 1, usize::MAX, i64::MAX) {
            Err(LogError::OffsetOutOfRange { log_start, .. }) => assert_eq!(log_start, start),
            other => panic!("read below the start: {other:?}"),
        }
        assert!(log.read(start, usize::MAX, i64::MAX).is_ok());
        // Never back, never past the end.
        assert_eq!(log.advance_start(0).expect("no-op"), Vec::<i64>::new());
        assert_eq!(log.log_start_offset(), start);
        let end = log.log_end_offset();
        log.advance_start(end + 100).expect("clamped");
        assert_eq!(log.log_start_offset(), end);
        assert!(third_next <= end);
        drop(log);
        let (log, _) = open(dir.path(), small_segments());
        assert_eq!(log.log_start_offset(), end, "the start survives a restart");
        assert_eq!(log.sealed_segments(), Vec::<(i64, i64)>::new());
    }

    #[test]
    fn given_a_crash_after_the_start_was_stored_then_reopen_serves_from_it_and_the_next_call_deletes_the_rest(
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        append_all(&mut log, &[5; 12], 60);
        let sealed = log.sealed_segments();
        log.close().expect("close");
        // As if the broker died between persisting the start and deleting files.
        LOG_START
            .write(dir.path(), sealed[1].1)
            .expect("store start");
        let (mut log, _) = open(dir.path(), small_segments());
        assert_eq!(log.log_start_offset(), sealed[1].1);
        assert!(log.read(sealed[0].0, usize::MAX, i64::MAX).is_err());
        let start = log.log_start_offset();
        assert_eq!(
            log.advance_start(start).expect("clean up"),
            vec![sealed[0].0, sealed[1].0]
        );
    }

    #[test]
    fn segment_stats_carry_the_newest_timestamp_also_after_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        append_all(&mut log, &[5; 12], 60);
        let before = log.sealed_segment_stats().expect("stats");
        // records(5, _) stamps 1000..1004.
        assert!(before.iter().all(|s| s.max_timestamp == 1004), "{before:?}");
        assert_eq!(log.active_first_batch_timestamp().expect("ts"), Some(1004));
        log.close().expect("close");
        let (mut log, _) = open(dir.path(), small_segments());
        assert_eq!(log.sealed_segment_stats().expect("stats"), before);
        let end = log.log_end_offset();
        assert_eq!(log.roll_now().expect("roll"), Some(end));
        assert_eq!(log.roll_now().expect("empty active"), None);
    }

    /// A batch of `(key, value)` records stamped `timestamp_ms`.
    fn keyed(pairs: &[(&str, Option<&str>)], timestamp_ms: i64) -> Vec<u8> {
        let records: Vec<Record> = pairs
            .iter()
            .map(|(k, v)| Record {
                key: Some(Bytes::copy_from_slice(k.as_bytes())),
                value: v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
                headers: Vec::new(),
                timestamp_ms,
            })
            .collect();
        batch::encode(ProducerInfo::NONE, 0, &records).to_vec()
    }

    /// `(offset, key, value)` of every record from the log start.
    fn keyed_records(log: &PartitionLog) -> Vec<(i64, String, Option<String>)> {
        Batches::new(&read_all(log))
            .flat_map(|b| {
                let (_, bytes) = b.expect("valid batch");
                batch::records(bytes).expect("records")
            })
            .map(|r| {
                let text = |b: Option<Bytes>| b.map(|b| String::from_utf8_lossy(&b).into_owned());
                (r.offset, text(r.key).unwrap_or_default(), text(r.value))
            })
            .collect()
    }

    #[test]
    fn given_keyed_updates_then_cleaning_keeps_each_keys_latest_below_the_bound_and_every_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        for round in 0..12 {
            let value = format!("round-{round}-{}", "v".repeat(40));
            let pairs: Vec<(String, Option<&str>)> = (0..4)
                .map(|k| (format!("k{k}"), Some(value.as_str())))
                .collect();
            let pairs: Vec<(&str, Option<&str>)> =
                pairs.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            log.append(&keyed(&pairs, 1_000), 0).expect("append");
        }
        // k3 is deleted: its tombstone is young (stays) at first, old later.
        log.append(&keyed(&[("k3", None)], 5_000), 0)
            .expect("append");
        log.roll_now().expect("roll");
        let before = keyed_records(&log);
        let end = log.log_end_offset();
        let sealed_before = log.sealed_segments();
        let rules = compaction::CleaningRules {
            clean_below: log.active_segment_base(),
            now_ms: 6_000,
            delete_retention_ms: 10_000,
        };
        let report = log.clean(rules, 0, |_, _| false, |_| None).expect("clean");
        assert!(report.rewritten > 0 && report.keys == 4, "{report:?}");
        assert!(report.bytes_after < report.bytes_before, "{report:?}");
        assert_eq!(log.log_end_offset(), end);
        // The cleaned segments merge: the same offsets, from the same start, in fewer.
        let sealed_after = log.sealed_segments();
        assert_eq!(
            sealed_after.first().map(|s| s.0),
            sealed_before.first().map(|s| s.0)
        );
        assert_eq!(
            sealed_after.last().map(|s| s.1),
            sealed_before.last().map(|s| s.1)
        );
        assert!(sealed_after.len() < sealed_before.len(), "{sealed_after:?}");
        assert_eq!(report.merged_away, sealed_before.len() - sealed_after.len());
        let after = keyed_records(&log);
        let latest = |records: &[(i64, String, Option<String>)], key: &str| {
            records.iter().rev().find(|r| r.1 == key).cloned()
        };
        for key in ["k0", "k1", "k2", "k3"] {
            assert_eq!(latest(&after, key), latest(&before, key), "{key}");
            assert_eq!(after.iter().filter(|r| r.1 == key).count(), 1, "{key}");
        }
        // Cleaned records keep their offsets: every one was there before, as it was.
        assert!(after.iter().all(|r| before.contains(r)));
        // Reopened, the cleaned segments read the same (indexes rebuilt).
        drop(log);
        let (mut log, report) = open(dir.path(), small_segments());
        assert_eq!(report.reason, None);
        assert_eq!(keyed_records(&log), after);
        // Past delete.retention.ms the tombstone goes too.
        let later = compaction::CleaningRules {
            now_ms: 20_000,
            ..rules
        };
        log.clean(later, 0, |_, _| false, |_| None).expect("clean");
        assert!(keyed_records(&log).iter().all(|r| r.1 != "k3"));
        // Every offset still reads: a fetch inside a cleaned batch gets that batch.
        for offset in log.log_start_offset()..log.log_end_offset() {
            assert!(log.read(offset, 1, i64::MAX).is_ok(), "offset {offset}");
        }
    }

    #[test]
    fn given_young_segments_or_an_aborted_update_then_cleaning_spares_them_as_it_should() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        for round in 0..6 {
            let value = format!("{round}{}", "v".repeat(200));
            log.append(&keyed(&[("k", Some(value.as_str()))], 1_000), 0)
                .expect("append");
        }
        log.roll_now().expect("roll");
        let before = keyed_records(&log);
        let rules = compaction::CleaningRules {
            clean_below: log.active_segment_base(),
            now_ms: 1_500,
            delete_retention_ms: 0,
        };
        let young = log
            .clean(rules, 1_000, |_, _| false, |_| None)
            .expect("clean");
        assert_eq!((young.segments, young.rewritten), (0, 0));
        assert_eq!(keyed_records(&log), before);
        // Every batch "aborted": nothing is anyone's latest, all of it goes.
        log.clean(rules, 0, |_, _| true, |_| None).expect("clean");
        // Batches are not transactional here, so nothing counts as aborted: the
        // latest value stays, the rest goes.
        let after = keyed_records(&log);
        assert_eq!(after.len(), 1);
        assert_eq!(after.last(), before.last());
    }

    #[test]
    fn a_leftover_cleaned_file_is_removed_when_the_log_opens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = open(dir.path(), small_segments());
        append_all(&mut log, &[5; 6], 60);
        drop(log);
        let leftover = segment_swap::SegmentFile::Cleaned(0).path(dir.path());
        fs::write(&leftover, b"half a cleaning").expect("write");
        let (log, report) = open(dir.path(), small_segments());
        assert!(!leftover.exists());
        assert_eq!(report.reason, None);
        assert_eq!(log.log_end_offset(), 30);
    }
}
