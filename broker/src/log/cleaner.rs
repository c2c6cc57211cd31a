//! The log cleaner's I/O: compacts the sealed segments of a log by the rules of
//! [`compaction`](super::compaction). Two passes over the cleanable segments (a key map,
//! then a rewrite), one segment at a time written aside as `{base}.log.cleaned`, fsynced,
//! and renamed over the segment (its index deleted first and rebuilt after), so a crash
//! at any point leaves either the old segment or the cleaned one, both complete; a
//! leftover `.cleaned` file is deleted when the log opens. Memory: the key map, one entry
//! per distinct key of the cleaned segments (the key bytes plus about 50 bytes), and one
//! batch at a time. Offsets, batch boundaries and markers never change, so the log stays
//! dense at batch level and everything derived from headers (producer state, epochs,
//! transactions) is the same before and after.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::Path;

use idem_proto::batch::{self, BatchHeader};

use super::checkpoint;
use super::compaction::{CleaningRules, KeyMap};
use super::error::{IoContext, LogError};
use super::segment::{self, Segment};
use super::PartitionLog;

/// Suffix of a segment being cleaned.
pub(crate) const CLEANED_SUFFIX: &str = ".log.cleaned";

/// What one cleaning pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CleanReport {
    /// Sealed segments examined (all of them below the bound).
    pub segments: usize,
    /// Segments rewritten (the others lost nothing).
    pub rewritten: usize,
    /// Distinct keys in the key map.
    pub keys: usize,
    pub records_removed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

impl PartitionLog {
    /// Cleans the sealed segments wholly below `rules.clean_below` whose newest record
    /// is at least `min_lag_ms` old (`min.compaction.lag.ms`: the prefix of such
    /// segments); skipped when no segment was sealed since the last pass and no
    /// tombstone can have come due (`delete_retention_ms` since it). `aborted(producer_id, base_offset)` says whether a transactional batch
    /// belongs to an aborted transaction.
    pub fn clean(
        &mut self,
        rules: CleaningRules,
        min_lag_ms: u64,
        aborted: impl Fn(i64, i64) -> bool,
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
        // Cleaning again what was cleaned changes nothing, unless a tombstone came due.
        let through = self.segments[count - 1].next_offset();
        if let Some((cleaned_through, at_ms)) = self.last_clean {
            let due = i128::from(rules.now_ms) - i128::from(at_ms)
                >= i128::from(rules.delete_retention_ms);
            if through <= cleaned_through && !due {
                report.segments = 0;
                return Ok(report);
            }
        }
        self.last_clean = Some((through, rules.now_ms));
        let is_aborted =
            |h: &BatchHeader| h.is_transactional() && aborted(h.producer_id, h.base_offset);
        let mut keys = KeyMap::default();
        for segment in &self.segments[..count] {
            for_each_batch(segment, |header, bytes| {
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
        for i in 0..count {
            let before = self.segments[i].size();
            let removed = self.rewrite_segment(i, &rules, &keys, &is_aborted)?;
            if let Some(removed) = removed {
                report.rewritten += 1;
                report.records_removed += removed;
            }
            report.bytes_before += before;
            report.bytes_after += self.segments[i].size();
        }
        if report.rewritten > 0 {
            tracing::info!(dir = %self.dir.display(), ?report, "compacted sealed segments");
        }
        Ok(report)
    }

    /// Rewrites segment `i` keeping what the rules keep; returns how many records went,
    /// or `None` when none did (the segment is left as it was).
    fn rewrite_segment(
        &mut self,
        i: usize,
        rules: &CleaningRules,
        keys: &KeyMap,
        is_aborted: &impl Fn(&BatchHeader) -> bool,
    ) -> Result<Option<u64>, LogError> {
        let base = self.segments[i].base_offset();
        let next = self.segments[i].next_offset();
        let aside = cleaned_path(&self.dir, base);
        let file = File::create(&aside).at("creating", &aside)?;
        let mut out = BufWriter::new(file);
        let mut removed = 0u64;
        for_each_batch(&self.segments[i], |header, bytes| {
            let kept = if header.is_control() {
                None
            } else {
                let aborted = is_aborted(header);
                batch::retain_records(bytes, |record| rules.keeps(&record, aborted, keys))
                    .map_err(|e| corrupt(header, e))?
            };
            match kept {
                Some(rewritten) => {
                    let left = batch::decode_header(&rewritten).map_or(0, |h| h.record_count);
                    removed += u64::try_from(header.record_count - left).unwrap_or(0);
                    out.write_all(&rewritten).at("writing", &aside)
                }
                None => out.write_all(bytes).at("writing", &aside),
            }
        })?;
        if removed == 0 {
            drop(out);
            fs::remove_file(&aside).at("removing", &aside)?;
            return Ok(None);
        }
        let file = out
            .into_inner()
            .map_err(|e| e.into_error())
            .at("writing", &aside)?;
        file.sync_all().at("fsyncing", &aside)?;
        drop(file);
        // The old index points into the old file: it goes before the swap, and a crash
        // in between leaves a segment whose index is rebuilt when it opens.
        let index = segment::index_path(&self.dir, base);
        if let Err(e) = fs::remove_file(&index) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(e).at("removing", &index);
            }
        }
        let target = segment::log_path(&self.dir, base);
        fs::rename(&aside, &target).at("renaming into place", &target)?;
        checkpoint::sync_dir(&self.dir)?;
        self.segments[i] =
            Segment::open_rewritten(&self.dir, base, next, self.config.index_interval_bytes)?;
        Ok(Some(removed))
    }
}

/// `{base}.log.cleaned` in `dir`.
pub(crate) fn cleaned_path(dir: &Path, base_offset: i64) -> std::path::PathBuf {
    dir.join(format!("{base_offset:020}{CLEANED_SUFFIX}"))
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
