//! The log cleaner's I/O: compacts the sealed segments of a log by the rules of
//! [`compaction`](super::compaction) (which records stay) and
//! [`batch_removal`](super::batch_removal) (which batches go). Two passes over the
//! cleanable segments (a key map and each producer's last batch, then a rewrite). The
//! rewrite cleans consecutive segments into one output while it stays within
//! `segment.bytes` ([`cleaning_group`](super::cleaning_group)), written aside as
//! `{first base}.log.cleaned`, fsynced, and swapped in for the group by the crash-safe
//! protocol of [`segment_swap`](super::segment_swap): a crash at any point leaves either
//! the old segments or the merged one, which `open` finishes or undoes. So a compacted
//! log is bounded by its live keys, not by how many segments its history filled.
//!
//! Offsets never change: a removed batch (an emptied data batch that is not its
//! producer's last, a marker whose transaction is gone and whose delete horizon passed)
//! becomes a filler, and adjacent fillers of one leader epoch within an output merge into
//! one 61-byte header, so the log stays dense at batch level, the leader-epoch history
//! read from headers is unchanged, and a run of finished transactions costs one header.
//!
//! Memory: the key map, one entry per distinct key of the cleaned segments (the key
//! bytes plus about 50 bytes); two maps keyed by producer id (its last batch, and its
//! transaction open at the current point of the rewrite), about 40 bytes per producer
//! the state still knows or with a transaction open; one batch at a time.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use idem_proto::batch::{self, BatchHeader};
use idem_proto::control;
use idem_proto::v1::ControlType;

use super::batch_removal::{BatchFacts, BatchFate, BatchKind, BatchRemoval, LastBatches};
use super::cleaning_group::{self, GroupOutput, SegmentShape};
use super::compaction::{CleaningRules, KeyMap};
use super::error::{IoContext, LogError};
use super::file_ops;
use super::segment::Segment;
use super::segment_swap::{self, FileOp, SegmentFile};
use super::PartitionLog;

/// What one cleaning pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CleanReport {
    /// Sealed segments examined (all of them below the bound).
    pub segments: usize,
    /// Segments rewritten (the others lost nothing), merged ones included.
    pub rewritten: usize,
    /// Segments whose files went: their batches now live in the segment before them,
    /// cleaned into one while it stays within `segment.bytes`.
    pub merged_away: usize,
    /// Distinct keys in the key map.
    pub keys: usize,
    /// Producers whose last batch is among the cleaned segments (kept whatever it holds).
    pub producers: usize,
    pub records_removed: u64,
    /// Data batches and BEGIN markers turned into fillers (or merged into one).
    pub batches_removed: u64,
    /// COMMIT/ABORT markers turned into fillers, their horizon passed.
    pub markers_removed: u64,
    /// Markers given a delete horizon: their transaction is gone.
    pub horizons_set: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

impl PartitionLog {
    /// Cleans the sealed segments wholly below `rules.clean_below` whose newest record
    /// is at least `min_lag_ms` old (`min.compaction.lag.ms`: the prefix of such
    /// segments); skipped when no segment was sealed since the last pass and no
    /// tombstone or marker horizon can have come due (`delete_retention_ms` since it).
    /// `aborted(producer_id, base_offset)` says whether a transactional batch belongs to
    /// an aborted transaction. `last_data_batch(producer_id)` is what the producer state
    /// knows of a producer: `None` when it does not know it (expired: none of its batches
    /// needs keeping), else the base offset of its last data batch since its last marker
    /// (`i64::MIN` when a marker came after it). The last batch of each known producer
    /// among the cleaned segments stays, unless that data batch lies past them.
    pub fn clean(
        &mut self,
        rules: CleaningRules,
        min_lag_ms: u64,
        aborted: impl Fn(i64, i64) -> bool,
        last_data_batch: impl Fn(i64) -> Option<i64>,
    ) -> Result<CleanReport, LogError> {
        let sealed = self.segments.len().saturating_sub(1);
        let mut count = 0;
        for segment in &mut self.segments[..sealed] {
            if segment.next_offset() > rules.clean_below {
                break;
            }
            let newest = segment.max_timestamp()?;
            if newest != i64::MIN
                && i128::from(rules.now_ms) - i128::from(newest) < i128::from(min_lag_ms)
            {
                break;
            }
            count += 1;
        }
        let mut report = CleanReport {
            segments: count,
            ..CleanReport::default()
        };
        if count == 0 {
            return Ok(report);
        }
        // Cleaning again what was cleaned changes nothing, unless a tombstone came due
        // or segments cleaned apart (too large then) now fit together.
        let through = self.segments[count - 1].next_offset();
        let max_bytes = self.config.effective_segment_bytes();
        if let Some((cleaned_through, at_ms)) = self.last_clean {
            let due = i128::from(rules.now_ms) - i128::from(at_ms)
                >= i128::from(rules.delete_retention_ms);
            let shapes: Vec<(i64, SegmentShape)> = self.segments[..count]
                .iter()
                .map(|s| {
                    let shape = SegmentShape {
                        size: s.size(),
                        next_offset: s.next_offset(),
                    };
                    (s.base_offset(), shape)
                })
                .collect();
            let mergeable = cleaning_group::would_merge(&shapes, max_bytes);
            if through <= cleaned_through && !due && !mergeable {
                report.segments = 0;
                return Ok(report);
            }
        }
        self.last_clean = Some((through, rules.now_ms));
        let is_aborted =
            |h: &BatchHeader| h.is_transactional() && aborted(h.producer_id, h.base_offset);
        let mut keys = KeyMap::default();
        let mut last_batches = LastBatches::default();
        for segment in &self.segments[..count] {
            for_each_batch(segment, |header, bytes| {
                if header.has_producer_id()
                    && last_data_batch(header.producer_id).is_some_and(|o| o <= header.base_offset)
                {
                    last_batches.note(header.producer_id, header.base_offset);
                }
                if header.is_control() {
                    return Ok(());
                }
                let aborted = is_aborted(header);
                batch::retain_records(bytes, |record| {
                    if let (true, Some(key)) = (rules.notes(&record, aborted), record.key) {
                        keys.note(key, record.offset);
                    }
                    true
                })
                .map_err(|e| corrupt(header, e))?;
                Ok(())
            })?;
        }
        report.keys = keys.len();
        report.producers = last_batches.len();
        let mut removal = BatchRemoval::new(rules.now_ms, rules.delete_retention_ms, &last_batches);
        let cleaning = SegmentCleaning {
            rules: &rules,
            keys: &keys,
            is_aborted: &is_aborted,
        };
        // Segments `[group.first, i)` are being cleaned into one output; merging them
        // shortens `self.segments`, so `i` and `end` move back by the segments that went.
        let mut group: Option<GroupWriter> = None;
        let (mut i, mut end) = (0, count);
        while i < end {
            let segment = &self.segments[i];
            let shape = SegmentShape {
                size: segment.size(),
                next_offset: segment.next_offset(),
            };
            if let Some(open) = group.take() {
                if cleaning_group::joins(open.output(), shape, max_bytes) {
                    group = Some(open);
                } else {
                    let merged_away = self.finish_group(open, &mut report)?;
                    i -= merged_away;
                    end -= merged_away;
                }
            }
            let segment = &self.segments[i];
            let writer = match group.as_mut() {
                Some(writer) => writer,
                None => group.insert(GroupWriter::start(&self.dir, i, segment.base_offset())?),
            };
            report.bytes_before += shape.size;
            writer.clean_segment(segment, &cleaning, &mut removal)?;
            i += 1;
        }
        if let Some(open) = group.take() {
            let merged_away = self.finish_group(open, &mut report)?;
            end -= merged_away;
        }
        report.bytes_after = self.segments[..end].iter().map(Segment::size).sum();
        if report.rewritten > 0 {
            tracing::info!(dir = %self.dir.display(), ?report, "compacted sealed segments");
        }
        Ok(report)
    }

    /// Puts the group's output in place of its segments (see
    /// [`segment_swap`](super::segment_swap)) and returns how many segments went; a
    /// group of one segment that lost nothing is left as it was.
    fn finish_group(
        &mut self,
        group: GroupWriter,
        report: &mut CleanReport,
    ) -> Result<usize, LogError> {
        let (first, end, changes) = (group.first, group.end, group.changes);
        let bases = group.bases.clone();
        let (Some(&base), members) = (bases.first(), bases.len()) else {
            return Ok(0);
        };
        let Some(file) = group.finish()? else {
            return Ok(0);
        };
        file.sync_all()
            .at("fsyncing", &cleaned_path(&self.dir, base))?;
        drop(file);
        for op in segment_swap::merge_plan(&bases, end) {
            self.perform(op)?;
        }
        let merged =
            Segment::open_rewritten(&self.dir, base, end, self.config.index_interval_bytes)?;
        // The old segments' files are gone; their open handles close here.
        self.segments.splice(first..first + members, [merged]);
        report.rewritten += members;
        report.merged_away += members - 1;
        report.records_removed += changes.records_removed;
        report.batches_removed += changes.batches_removed;
        report.markers_removed += changes.markers_removed;
        report.horizons_set += changes.horizons_set;
        Ok(members - 1)
    }

    /// One step of a segment swap; tests stop here to act out a crash.
    fn perform(&mut self, op: FileOp) -> Result<(), LogError> {
        #[cfg(test)]
        if let Some(left) = self.crash_after_file_ops.as_mut() {
            if *left == 0 {
                return Err(LogError::Io(std::io::Error::other("simulated crash")));
            }
            *left -= 1;
        }
        file_ops::perform(&self.dir, op)
    }
}

/// The cleaned output of a group of consecutive segments, written aside as
/// `{first base}.log.cleaned`.
struct GroupWriter {
    /// Index of the group's first segment in the log's segments.
    first: usize,
    bases: Vec<i64>,
    /// Next offset of the group's last segment.
    end: i64,
    aside: PathBuf,
    out: BufWriter<File>,
    bytes: u64,
    /// Removed batches not yet written: a run may go on in the next segment.
    run: Option<FillerRun>,
    changes: SegmentChanges,
}

impl GroupWriter {
    fn start(dir: &Path, first: usize, base_offset: i64) -> Result<GroupWriter, LogError> {
        let aside = cleaned_path(dir, base_offset);
        let file = File::create(&aside).at("creating", &aside)?;
        Ok(GroupWriter {
            first,
            bases: Vec::new(),
            end: base_offset,
            aside,
            out: BufWriter::new(file),
            bytes: 0,
            run: None,
            changes: SegmentChanges::default(),
        })
    }

    fn output(&self) -> GroupOutput {
        GroupOutput {
            base_offset: self.bases.first().copied().unwrap_or(self.end),
            bytes: self.bytes,
            pending_filler: self.run.is_some(),
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), LogError> {
        self.out.write_all(bytes).at("writing", &self.aside)?;
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    fn write_run(&mut self) -> Result<(), LogError> {
        if let Some(done) = self.run.take() {
            let filler = done.to_batch(&mut self.changes);
            self.write(&filler)?;
        }
        Ok(())
    }

    /// Appends what the rules keep of `segment` (records, then whole batches).
    fn clean_segment(
        &mut self,
        segment: &Segment,
        cleaning: &SegmentCleaning<'_, impl Fn(&BatchHeader) -> bool>,
        removal: &mut BatchRemoval<'_>,
    ) -> Result<(), LogError> {
        self.bases.push(segment.base_offset());
        self.end = segment.next_offset();
        for_each_batch(segment, |header, bytes| {
            let (kind, kept) = cleaning.kind_and_records(header, bytes)?;
            let facts = BatchFacts {
                base_offset: header.base_offset,
                producer_id: header.producer_id,
                kind,
            };
            match removal.decide(&facts) {
                BatchFate::Filler => {
                    match kind {
                        BatchKind::End { .. } => self.changes.markers_removed += 1,
                        _ if !header.is_filler() => self.changes.batches_removed += 1,
                        _ => {}
                    }
                    if !header.is_control() {
                        self.changes.records_removed +=
                            u64::try_from(header.record_count).unwrap_or(0);
                    }
                    match self.run.as_mut() {
                        Some(current) if current.joins(header) => current.extend(header),
                        _ => {
                            self.write_run()?;
                            self.run = Some(FillerRun::start(header));
                        }
                    }
                    Ok(())
                }
                fate => {
                    self.write_run()?;
                    match (fate, kept) {
                        (BatchFate::SetHorizon(horizon), _) => {
                            let mut marker = bytes.to_vec();
                            batch::set_delete_horizon(&mut marker, horizon)
                                .map_err(|e| corrupt(header, e))?;
                            self.changes.horizons_set += 1;
                            self.write(&marker)
                        }
                        (_, Some(rewritten)) => {
                            let left =
                                batch::decode_header(&rewritten).map_or(0, |h| h.record_count);
                            self.changes.records_removed +=
                                u64::try_from(header.record_count - left).unwrap_or(0);
                            self.write(&rewritten)
                        }
                        (_, None) => self.write(bytes),
                    }
                }
            }
        })
    }

    /// The written output file, or `None` when writing it changed nothing (one segment
    /// that lost nothing: the aside file is removed).
    fn finish(mut self) -> Result<Option<File>, LogError> {
        self.write_run()?;
        if self.bases.len() == 1 && !self.changes.any() {
            drop(self.out);
            fs::remove_file(&self.aside).at("removing", &self.aside)?;
            return Ok(None);
        }
        let file = self
            .out
            .into_inner()
            .map_err(|e| e.into_error())
            .at("writing", &self.aside)?;
        Ok(Some(file))
    }
}

/// What a pass decides records by, for one segment at a time.
struct SegmentCleaning<'a, A> {
    rules: &'a CleaningRules,
    keys: &'a KeyMap,
    is_aborted: &'a A,
}

impl<A: Fn(&BatchHeader) -> bool> SegmentCleaning<'_, A> {
    /// What the batch is for [`BatchRemoval`], and a data batch rewritten with the records
    /// that stay (`None`: all stay, or it is a control batch).
    fn kind_and_records(
        &self,
        header: &BatchHeader,
        bytes: &[u8],
    ) -> Result<(BatchKind, Option<bytes::Bytes>), LogError> {
        if header.is_control() {
            let kind = match control::decode_control(bytes).map(|m| m.control_type) {
                Ok(ControlType::Begin) => BatchKind::Begin,
                Ok(ControlType::Commit | ControlType::Abort) => BatchKind::End {
                    delete_horizon: header.delete_horizon(),
                },
                Err(_) => BatchKind::UnreadableControl,
            };
            return Ok((kind, None));
        }
        let aborted = (self.is_aborted)(header);
        let kept = batch::retain_records(bytes, |record| {
            self.rules.keeps(&record, aborted, self.keys)
        })
        .map_err(|e| corrupt(header, e))?;
        let records_left = match &kept {
            Some(rewritten) => batch::decode_header(rewritten).map_or(0, |h| h.record_count),
            None => header.record_count,
        };
        let kind = BatchKind::Data {
            transactional: header.is_transactional(),
            records_left,
        };
        Ok((kind, kept))
    }
}

/// What rewriting one segment changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct SegmentChanges {
    records_removed: u64,
    batches_removed: u64,
    markers_removed: u64,
    horizons_set: u64,
    /// Fillers written that were not already there as they are.
    fillers_changed: u64,
}

impl SegmentChanges {
    fn any(&self) -> bool {
        self.records_removed
            + self.batches_removed
            + self.markers_removed
            + self.horizons_set
            + self.fillers_changed
            > 0
    }
}

/// Adjacent removed batches of one leader epoch, to be written as one filler.
#[derive(Debug, Clone, Copy)]
struct FillerRun {
    base_offset: i64,
    last_offset: i64,
    partition_leader_epoch: i32,
    max_timestamp: i64,
    /// The run is one batch that already was a filler: written back unchanged.
    unchanged: bool,
}

impl FillerRun {
    fn start(header: &BatchHeader) -> Self {
        FillerRun {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            partition_leader_epoch: header.partition_leader_epoch,
            max_timestamp: header.max_timestamp,
            unchanged: header.is_filler(),
        }
    }

    /// Whether the removed batch `header`, the next one in the log, can join the run:
    /// same leader epoch (the epoch history stays as it was), and a span that fits an
    /// `i32` offset delta.
    fn joins(&self, header: &BatchHeader) -> bool {
        header.partition_leader_epoch == self.partition_leader_epoch
            && header.base_offset == self.last_offset + 1
            && header.last_offset() - self.base_offset <= i64::from(i32::MAX)
    }

    fn extend(&mut self, header: &BatchHeader) {
        self.last_offset = header.last_offset();
        self.max_timestamp = self.max_timestamp.max(header.max_timestamp);
        self.unchanged = false;
    }

    fn to_batch(self, changes: &mut SegmentChanges) -> bytes::Bytes {
        if !self.unchanged {
            changes.fillers_changed += 1;
        }
        // `extend` keeps the span within an i32 delta.
        let delta = i32::try_from(self.last_offset - self.base_offset).unwrap_or(i32::MAX);
        batch::filler(
            self.base_offset,
            delta,
            self.partition_leader_epoch,
            self.max_timestamp,
        )
    }
}

/// `{base}.log.cleaned` in `dir`.
fn cleaned_path(dir: &Path, base_offset: i64) -> PathBuf {
    SegmentFile::Cleaned(base_offset).path(dir)
}

/// Visits every batch of a sealed segment in order, CRC-verified.
fn for_each_batch(
    segment: &Segment,
    mut visit: impl FnMut(&BatchHeader, &[u8]) -> Result<(), LogError>,
) -> Result<(), LogError> {
    let (mut position, mut expected) = (0u64, segment.base_offset());
    while position < segment.size() {
        let header = segment.header_at(position, expected)?;
        let bytes = segment.read_verified(position, &header)?;
        visit(&header, &bytes)?;
        position += header.size() as u64;
        expected = header.next_offset();
    }
    Ok(())
}

fn corrupt(header: &BatchHeader, e: batch::BatchError) -> LogError {
    LogError::Corrupt {
        offset: header.base_offset,
        reason: format!("records of a stored batch do not decode: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LogConfig;
    use bytes::Bytes;
    use idem_proto::batch::{Batches, ProducerInfo, Record};

    fn update(key: &str, value: &str, producer: ProducerInfo) -> Vec<u8> {
        let record = Record {
            key: Some(Bytes::copy_from_slice(key.as_bytes())),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers: Vec::new(),
            timestamp_ms: 1_000,
        };
        batch::encode(producer, 0, &[record]).to_vec()
    }

    /// `(base, last, leader epoch, records, producer id)` of every batch of the log.
    fn batches(log: &PartitionLog) -> Vec<(i64, i64, i32, i32, i64)> {
        let all = log
            .read(log.log_start_offset(), usize::MAX, i64::MAX)
            .expect("read");
        Batches::new(&all)
            .map(|b| {
                let (h, _) = b.expect("valid batch");
                (
                    h.base_offset,
                    h.last_offset(),
                    h.partition_leader_epoch,
                    h.record_count,
                    h.producer_id,
                )
            })
            .collect()
    }

    #[test]
    fn given_emptied_batches_in_two_leader_epochs_then_one_filler_per_epoch_and_the_last_batch_of_a_producer_stays(
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = PartitionLog::open(dir.path(), LogConfig::default()).expect("open");
        let idempotent = |seq| ProducerInfo {
            producer_id: 7,
            producer_epoch: 0,
            base_sequence: seq,
        };
        // Offsets 0-5 update one key; 1 is producer 7's only batch; epochs 0,0,0,1,1,1.
        for (offset, epoch) in [0, 0, 0, 1, 1, 1].into_iter().enumerate() {
            let producer = if offset == 1 {
                idempotent(0)
            } else {
                ProducerInfo::NONE
            };
            log.append(&update("k", &format!("v{offset}"), producer), epoch)
                .expect("append");
        }
        log.roll_now().expect("roll");
        let rules = CleaningRules {
            clean_below: log.active_segment_base(),
            now_ms: 2_000,
            delete_retention_ms: 0,
        };
        let report = log
            .clean(
                rules,
                0,
                |_, _| false,
                |producer| (producer == 7).then_some(1),
            )
            .expect("clean");
        assert_eq!(
            (
                report.records_removed,
                report.batches_removed,
                report.producers
            ),
            (5, 4, 1),
            "{report:?}"
        );
        let expected = vec![
            (0, 0, 0, 0, -1),
            (1, 1, 0, 0, 7), // producer 7's last batch, emptied, stays
            (2, 2, 0, 0, -1),
            (3, 4, 1, 0, -1), // fillers merge within an epoch, never across
            (5, 5, 1, 1, -1),
        ];
        assert_eq!(batches(&log), expected);
        // Cleaning again changes nothing (fillers are written back as they are).
        let again = log
            .clean(
                CleaningRules {
                    now_ms: 5_000,
                    ..rules
                },
                0,
                |_, _| false,
                |producer| (producer == 7).then_some(1),
            )
            .expect("clean");
        assert_eq!(again.rewritten, 0, "{again:?}");
        // Once the producer is forgotten its emptied batch joins the filler before it.
        log.clean(
            CleaningRules {
                now_ms: 9_000,
                ..rules
            },
            0,
            |_, _| false,
            |_| None,
        )
        .expect("clean");
        let merged = vec![(0, 2, 0, 0, -1), (3, 4, 1, 0, -1), (5, 5, 1, 1, -1)];
        assert_eq!(batches(&log), merged);
        // The cleaned segment reopens as it is (recovery accepts fillers).
        drop(log);
        let (log, report) = PartitionLog::open(dir.path(), LogConfig::default()).expect("reopen");
        assert_eq!(report.reason, None);
        assert_eq!(batches(&log), merged);
        assert_eq!(log.log_end_offset(), 6);
    }
}
