//! One segment: `{base_offset:020}.log` holding whole batches back to back, and its
//! sparse index `{base_offset:020}.index`. Invariant: `size` bytes of the log file are
//! consecutive, CRC-valid batches covering offsets `base_offset..next_offset` (for the
//! segments recovery scanned; older ones were verified before they were flushed).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use idem_proto::batch::{self, BatchHeader, HEADER_LEN};

use super::error::{IoContext, LogError};
use super::index::{IndexCadence, IndexEntry, OffsetIndex};

pub(crate) const LOG_SUFFIX: &str = ".log";
pub(crate) const INDEX_SUFFIX: &str = ".index";

pub(crate) fn log_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}{LOG_SUFFIX}"))
}

pub(crate) fn index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}{INDEX_SUFFIX}"))
}

/// The base offset named by a segment file name with `suffix`, if it is one.
pub(crate) fn parse_base_offset(file_name: &str, suffix: &str) -> Option<i64> {
    let stem = file_name.strip_suffix(suffix)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// What a recovery scan of a segment found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScanOutcome {
    /// Bytes cut from the end of the file (0 if it was intact).
    pub truncated_bytes: u64,
    /// Why the scan stopped before the end of the file, with the position.
    pub reason: Option<String>,
}

#[derive(Debug)]
pub(crate) struct Segment {
    base_offset: i64,
    log_path: PathBuf,
    log: Arc<File>,
    size: u64,
    next_offset: i64,
    index: OffsetIndex,
    cadence: IndexCadence,
    index_interval_bytes: u32,
    /// The largest record timestamp in the segment once read (`i64::MIN` when empty);
    /// `None` until first asked for: reading it means visiting every batch header, which
    /// opening a sealed segment does not do.
    max_timestamp: Option<i64>,
}

fn open_log_file(path: &Path, truncate: bool) -> Result<File, LogError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .open(path)
        .at("opening segment", path)
}

/// Sequential reads through positional reads, so the file cursor is never involved.
struct PositionalReader<'a> {
    file: &'a File,
    position: u64,
}

impl Read for PositionalReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.position)?;
        self.position += n as u64;
        Ok(n)
    }
}

impl Segment {
    /// Creates an empty segment, replacing any leftover files of that name.
    pub fn create(
        dir: &Path,
        base_offset: i64,
        index_interval_bytes: u32,
    ) -> Result<Segment, LogError> {
        let log_path = log_path(dir, base_offset);
        let log = open_log_file(&log_path, true)?;
        let (mut index, _) = OffsetIndex::open(&index_path(dir, base_offset))?;
        index.replace(Vec::new())?;
        Ok(Segment {
            base_offset,
            log_path,
            log: Arc::new(log),
            size: 0,
            next_offset: base_offset,
            index,
            cadence: IndexCadence::new(index_interval_bytes),
            index_interval_bytes,
            max_timestamp: Some(i64::MIN),
        })
    }

    /// Opens a segment below the recovery point without scanning it: it was verified
    /// and fsynced before the recovery point passed it. Its index is checked cheaply and
    /// rebuilt from the batch headers if it does not fit the log.
    pub fn open_flushed(
        dir: &Path,
        base_offset: i64,
        next_offset: i64,
        index_interval_bytes: u32,
    ) -> Result<Segment, LogError> {
        let (mut segment, problem) =
            Segment::open_sealed(dir, base_offset, next_offset, index_interval_bytes)?;
        if let Some(problem) = problem.or_else(|| segment.index_mismatch()) {
            tracing::warn!(
                segment = %segment.log_path.display(),
                problem = %problem,
                "rebuilding offset index from the log"
            );
            segment.rebuild_index()?;
        }
        Ok(segment)
    }

    /// Opens a sealed segment whose log file was just rewritten (compacted), building
    /// its index anew from the batch headers.
    pub fn open_rewritten(
        dir: &Path,
        base_offset: i64,
        next_offset: i64,
        index_interval_bytes: u32,
    ) -> Result<Segment, LogError> {
        let (mut segment, _) =
            Segment::open_sealed(dir, base_offset, next_offset, index_interval_bytes)?;
        segment.rebuild_index()?;
        Ok(segment)
    }

    /// A sealed segment's files, opened as they are, and what is wrong with its index.
    fn open_sealed(
        dir: &Path,
        base_offset: i64,
        next_offset: i64,
        index_interval_bytes: u32,
    ) -> Result<(Segment, Option<String>), LogError> {
        let log_path = log_path(dir, base_offset);
        let log = open_log_file(&log_path, false)?;
        let size = log.metadata().at("reading size of", &log_path)?.len();
        let (index, problem) = OffsetIndex::open(&index_path(dir, base_offset))?;
        let mut segment = Segment {
            base_offset,
            log_path,
            log: Arc::new(log),
            size,
            next_offset,
            cadence: IndexCadence::new(index_interval_bytes),
            index,
            index_interval_bytes,
            max_timestamp: None,
        };
        segment.cadence =
            IndexCadence::resume(index_interval_bytes, segment.index.last(), segment.size);
        Ok((segment, problem))
    }

    /// Opens a segment at or after the recovery point and verifies it batch by batch.
    /// At the first batch that is torn, malformed, fails its CRC or does not continue
    /// the offsets, the file is cut there (and fsynced). The index is rebuilt from the
    /// scan either way.
    pub fn recover(
        dir: &Path,
        base_offset: i64,
        index_interval_bytes: u32,
    ) -> Result<(Segment, ScanOutcome), LogError> {
        let log_path = log_path(dir, base_offset);
        let log = open_log_file(&log_path, false)?;
        let file_len = log.metadata().at("reading size of", &log_path)?.len();
        let mut reader = BufReader::with_capacity(
            1 << 20,
            PositionalReader {
                file: &log,
                position: 0,
            },
        );
        let mut cadence = IndexCadence::new(index_interval_bytes);
        let mut entries = Vec::new();
        let mut position = 0u64;
        let mut expected = base_offset;
        let mut buf = Vec::new();
        let reason = loop {
            let remaining = file_len - position;
            if remaining == 0 {
                break None;
            }
            if remaining < HEADER_LEN as u64 {
                break Some(format!(
                    "{remaining} trailing bytes are shorter than a batch header"
                ));
            }
            buf.resize(HEADER_LEN, 0);
            reader.read_exact(&mut buf).at("scanning", &log_path)?;
            let header = match batch::decode_header(&buf) {
                Ok(header) => header,
                Err(e) => break Some(e.to_string()),
            };
            let size = header.size() as u64;
            if size > remaining {
                break Some(format!(
                    "batch claims {size} bytes but only {remaining} remain"
                ));
            }
            buf.resize(header.size(), 0);
            reader
                .read_exact(&mut buf[HEADER_LEN..])
                .at("scanning", &log_path)?;
            if let Err(e) = batch::verify(&buf) {
                break Some(e.to_string());
            }
            if header.base_offset != expected {
                break Some(format!(
                    "batch has base offset {} where {expected} was expected",
                    header.base_offset
                ));
            }
            if header.last_offset_delta < 0 {
                break Some(format!(
                    "negative last offset delta {}",
                    header.last_offset_delta
                ));
            }
            let (Ok(relative_offset), Ok(index_position)) = (
                u32::try_from(header.base_offset - base_offset),
                u32::try_from(position),
            ) else {
                break Some("batch lies beyond the reach of the segment index".into());
            };
            if header.last_offset() - base_offset > i64::from(u32::MAX) {
                break Some("batch lies beyond the reach of the segment index".into());
            }
            entries.extend(cadence.on_batch(relative_offset, index_position, size));
            position += size;
            expected = header.next_offset();
        };
        drop(reader);
        let reason = reason.map(|r| format!("at position {position}: {r}"));
        if reason.is_some() {
            log.set_len(position).at("truncating", &log_path)?;
            log.sync_all().at("fsyncing", &log_path)?;
        }
        let (mut index, _) = OffsetIndex::open(&index_path(dir, base_offset))?;
        index.replace(entries)?;
        let segment = Segment {
            base_offset,
            log_path,
            log: Arc::new(log),
            size: position,
            next_offset: expected,
            index,
            cadence,
            index_interval_bytes,
            max_timestamp: None,
        };
        Ok((
            segment,
            ScanOutcome {
                truncated_bytes: file_len - position,
                reason,
            },
        ))
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    pub fn log_file(&self) -> &Arc<File> {
        &self.log
    }

    /// Whether a batch of `len` bytes ending `last_offset_delta` after `base_offset`
    /// must go to a new segment: this one would outgrow `max_bytes`, or its offsets
    /// would leave the `u32` reach of the index. An empty segment takes any batch.
    pub fn needs_roll(
        &self,
        len: usize,
        base_offset: i64,
        last_offset_delta: i32,
        max_bytes: u64,
    ) -> bool {
        !self.is_empty()
            && (self.size + len as u64 > max_bytes
                || base_offset + i64::from(last_offset_delta) - self.base_offset
                    > i64::from(u32::MAX))
    }

    /// Appends one batch that carries its offsets in `stamped` (its first bytes) and
    /// continues with `rest` as received. Index trouble is logged and skipped: the index
    /// is only an optimisation.
    pub fn append(
        &mut self,
        stamped: &[u8],
        rest: &[u8],
        header: &BatchHeader,
    ) -> Result<(), LogError> {
        let written = self.log.write_all_at(stamped, self.size).and_then(|()| {
            self.log
                .write_all_at(rest, self.size + stamped.len() as u64)
        });
        if let Err(e) = written {
            // Do not leave a partial batch behind the valid data.
            let _ = self.log.set_len(self.size);
            return Err(e).at("appending to", &self.log_path);
        }
        let len = (stamped.len() + rest.len()) as u64;
        let relative_offset = u32::try_from(header.base_offset - self.base_offset).ok();
        let position = u32::try_from(self.size).ok();
        if let (Some(relative_offset), Some(position)) = (relative_offset, position) {
            if let Some(entry) = self.cadence.on_batch(relative_offset, position, len) {
                if let Err(e) = self.index.append(entry) {
                    tracing::warn!(
                        index = %self.index.path().display(),
                        error = %e,
                        "could not append to offset index; lookups will scan further"
                    );
                }
            }
        }
        self.size += len;
        self.next_offset = header.next_offset();
        if let Some(max) = &mut self.max_timestamp {
            *max = (*max).max(header.max_timestamp);
        }
        Ok(())
    }

    /// The largest record timestamp in the segment (`i64::MIN` when it is empty): read
    /// from every batch header the first time, then kept up to date by appends.
    pub fn max_timestamp(&mut self) -> Result<i64, LogError> {
        if let Some(max) = self.max_timestamp {
            return Ok(max);
        }
        let (mut max, mut position, mut expected) = (i64::MIN, 0, self.base_offset);
        while position < self.size {
            let header = self.header_at(position, expected)?;
            max = max.max(header.max_timestamp);
            position += header.size() as u64;
            expected = header.next_offset();
        }
        self.max_timestamp = Some(max);
        Ok(max)
    }

    /// The timestamp of the segment's first batch (its largest), the age `segment.ms`
    /// counts from; `None` when the segment is empty.
    pub fn first_batch_timestamp(&self) -> Result<Option<i64>, LogError> {
        if self.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.header_at(0, self.base_offset)?.max_timestamp))
    }

    fn corrupt(&self, offset: i64, position: u64, reason: impl std::fmt::Display) -> LogError {
        LogError::Corrupt {
            offset,
            reason: format!(
                "{} at position {position}: {reason}",
                self.log_path.display()
            ),
        }
    }

    /// Decodes the header of the batch at `position`, which the caller expects to hold
    /// offset `expected` (used only to name the place in errors). The whole batch must
    /// lie within the segment.
    pub fn header_at(&self, position: u64, expected: i64) -> Result<BatchHeader, LogError> {
        if position + HEADER_LEN as u64 > self.size {
            return Err(self.corrupt(expected, position, "batch header runs past the segment end"));
        }
        let mut buf = [0u8; HEADER_LEN];
        self.log
            .read_exact_at(&mut buf, position)
            .at("reading", &self.log_path)?;
        let header = batch::decode_header(&buf).map_err(|e| self.corrupt(expected, position, e))?;
        if position + header.size() as u64 > self.size {
            return Err(self.corrupt(expected, position, "batch runs past the segment end"));
        }
        Ok(header)
    }

    /// Reads the whole batch at `position` and checks its CRC.
    pub fn read_verified(&self, position: u64, header: &BatchHeader) -> Result<Vec<u8>, LogError> {
        let mut buf = vec![0u8; header.size()];
        self.log
            .read_exact_at(&mut buf, position)
            .at("reading", &self.log_path)?;
        match batch::verify(&buf) {
            Ok(read) if read == *header => Ok(buf),
            Ok(_) => Err(self.corrupt(header.base_offset, position, "batch changed while read")),
            Err(e) => Err(self.corrupt(header.base_offset, position, e)),
        }
    }

    /// The position and header of the batch that contains `offset`, or `None` if the
    /// segment ends first. Starts at the index entry at or below `offset`; an entry that
    /// does not point at the batch it names is ignored (the scan restarts at 0).
    pub fn find(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>, LogError> {
        if offset < self.base_offset {
            return Ok(None);
        }
        let relative = u32::try_from(offset - self.base_offset).unwrap_or(u32::MAX);
        let (mut position, mut expected) = match self.index.lookup(relative) {
            Some(entry) if self.entry_points_at_batch(entry) => (
                u64::from(entry.position),
                self.base_offset + i64::from(entry.relative_offset),
            ),
            Some(entry) => {
                tracing::warn!(
                    segment = %self.log_path.display(),
                    relative_offset = entry.relative_offset,
                    position = entry.position,
                    "offset index entry does not match the log; scanning from the segment start"
                );
                (0, self.base_offset)
            }
            None => (0, self.base_offset),
        };
        while position < self.size {
            let header = self.header_at(position, expected)?;
            if header.base_offset != expected {
                return Err(self.corrupt(
                    expected,
                    position,
                    format!("batch has base offset {}", header.base_offset),
                ));
            }
            if header.last_offset() >= offset {
                return Ok(Some((position, header)));
            }
            position += header.size() as u64;
            expected = header.next_offset();
        }
        Ok(None)
    }

    fn entry_points_at_batch(&self, entry: IndexEntry) -> bool {
        let expected = self.base_offset + i64::from(entry.relative_offset);
        u64::from(entry.position) < self.size
            && expected < self.next_offset
            && self
                .header_at(u64::from(entry.position), expected)
                .is_ok_and(|h| h.base_offset == expected)
    }

    /// Why the loaded index does not fit the log, if it does not.
    fn index_mismatch(&self) -> Option<String> {
        let last = self.index.last()?;
        if self.entry_points_at_batch(last) {
            None
        } else {
            Some(format!("last entry {last:?} does not point at its batch"))
        }
    }

    /// Replaces the index with one built from the batch headers (after the log file was
    /// rewritten under it).
    pub fn rebuild_index(&mut self) -> Result<(), LogError> {
        let entries = self.index_from_headers();
        self.index.replace(entries)?;
        self.index.sync()?;
        self.cadence =
            IndexCadence::resume(self.index_interval_bytes, self.index.last(), self.size);
        Ok(())
    }

    /// Index entries from a walk over the batch headers (no CRC check), stopping at the
    /// first header that does not decode.
    fn index_from_headers(&self) -> Vec<IndexEntry> {
        let mut cadence = IndexCadence::new(self.index_interval_bytes);
        let mut entries = Vec::new();
        let mut position = 0u64;
        let mut expected = self.base_offset;
        while position < self.size {
            let Ok(header) = self.header_at(position, expected) else {
                break;
            };
            let (Ok(relative_offset), Ok(index_position)) = (
                u32::try_from(header.base_offset - self.base_offset),
                u32::try_from(position),
            ) else {
                break;
            };
            if header.base_offset != expected {
                break;
            }
            entries.extend(cadence.on_batch(relative_offset, index_position, header.size() as u64));
            position += header.size() as u64;
            expected = header.next_offset();
        }
        entries
    }

    /// Cuts the segment so it ends just before `offset`, which must start a batch (or be
    /// the segment end). The cut is fsynced.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        let position = if offset == self.next_offset {
            self.size
        } else if offset == self.base_offset {
            0
        } else {
            match self.find(offset)? {
                Some((position, header)) if header.base_offset == offset => position,
                _ => return Err(LogError::NotBatchBoundary { offset }),
            }
        };
        self.log
            .set_len(position)
            .at("truncating", &self.log_path)?;
        self.log.sync_all().at("fsyncing", &self.log_path)?;
        let relative = u32::try_from(offset - self.base_offset).unwrap_or(u32::MAX);
        self.index.truncate_from(relative)?;
        self.size = position;
        self.next_offset = offset;
        self.max_timestamp = None;
        self.cadence = IndexCadence::resume(self.index_interval_bytes, self.index.last(), position);
        Ok(())
    }

    /// Fsyncs the log file and the index.
    pub fn sync(&self) -> Result<(), LogError> {
        let started = std::time::Instant::now();
        self.log.sync_data().at("fsyncing", &self.log_path)?;
        metrics::histogram!("idem_log_fsync_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        self.index.sync()
    }

    /// Removes both files of the segment.
    pub fn delete(self) -> Result<(), LogError> {
        for path in [self.log_path.as_path(), self.index.path()] {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).at("deleting", path),
            }
        }
        Ok(())
    }
}

/// Removes the files of a segment that was never opened.
pub(crate) fn delete_files(dir: &Path, base_offset: i64) -> Result<u64, LogError> {
    let mut removed = 0;
    for path in [log_path(dir, base_offset), index_path(dir, base_offset)] {
        let len = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        match fs::remove_file(&path) {
            Ok(()) => {
                if path.extension().is_some_and(|e| e == "log") {
                    removed += len;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).at("deleting", &path),
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_file_names_are_twenty_digit_base_offsets() {
        let dir = Path::new("/p");
        assert_eq!(log_path(dir, 42), Path::new("/p/00000000000000000042.log"));
        assert_eq!(
            index_path(dir, 42),
            Path::new("/p/00000000000000000042.index")
        );
        assert_eq!(
            parse_base_offset("00000000000000000042.log", LOG_SUFFIX),
            Some(42)
        );
        assert_eq!(
            parse_base_offset("00000000000000000042.index", LOG_SUFFIX),
            None
        );
        assert_eq!(parse_base_offset("42.log", LOG_SUFFIX), None);
        assert_eq!(
            parse_base_offset("0000000000000000004x.log", LOG_SUFFIX),
            None
        );
        assert_eq!(
            parse_base_offset("99999999999999999999.log", LOG_SUFFIX),
            None
        );
    }
}
