//! The sparse offset index of one segment: `(relative_offset u32, position u32)` pairs,
//! big-endian, 8 bytes each, one for the first batch after every `index_interval_bytes`
//! of appended data. Entries strictly increase in both fields. The index only narrows
//! where a scan of the log starts; it is never trusted over the log and is rebuilt from
//! it whenever it is missing or inconsistent.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::error::{IoContext, LogError};

pub const ENTRY_LEN: usize = 8;

/// A batch whose base offset is `segment base + relative_offset` starts at `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub relative_offset: u32,
    pub position: u32,
}

impl IndexEntry {
    /// The entry's 8 bytes in the file.
    pub fn encode(self) -> [u8; ENTRY_LEN] {
        let mut out = [0u8; ENTRY_LEN];
        out[..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        out[4..].copy_from_slice(&self.position.to_be_bytes());
        out
    }
}

/// Decodes an index file; `Err` says why it cannot be used.
pub fn decode(bytes: &[u8]) -> Result<Vec<IndexEntry>, String> {
    if !bytes.chunks_exact(ENTRY_LEN).remainder().is_empty() {
        return Err(format!(
            "length {} is not a multiple of {ENTRY_LEN}",
            bytes.len()
        ));
    }
    let entries: Vec<IndexEntry> = bytes
        .chunks_exact(ENTRY_LEN)
        .map(|c| IndexEntry {
            relative_offset: u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
            position: u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    for pair in entries.windows(2) {
        if pair[1].relative_offset <= pair[0].relative_offset
            || pair[1].position <= pair[0].position
        {
            return Err(format!(
                "entries {:?} and {:?} do not increase",
                pair[0], pair[1]
            ));
        }
    }
    if entries.first().is_some_and(|e| e.position == 0) {
        return Err("an entry points at position 0".into());
    }
    Ok(entries)
}

/// Decides which batches get an index entry. Used by appends and by rebuilds, so both
/// produce the same index.
#[derive(Debug, Clone)]
pub(crate) struct IndexCadence {
    interval: u64,
    bytes_since_entry: u64,
}

impl IndexCadence {
    pub fn new(interval_bytes: u32) -> Self {
        IndexCadence {
            interval: u64::from(interval_bytes),
            bytes_since_entry: 0,
        }
    }

    /// Resumes after the last entry (or the segment start) with `segment_size` bytes
    /// written.
    pub fn resume(interval_bytes: u32, last: Option<IndexEntry>, segment_size: u64) -> Self {
        let from = last.map_or(0, |e| u64::from(e.position));
        IndexCadence {
            interval: u64::from(interval_bytes),
            bytes_since_entry: segment_size.saturating_sub(from),
        }
    }

    /// Called for every batch in order; returns the entry to add, if any. Position 0
    /// never needs one: a lookup with no entry starts there.
    pub fn on_batch(
        &mut self,
        relative_offset: u32,
        position: u32,
        size: u64,
    ) -> Option<IndexEntry> {
        let entry = (position > 0 && self.bytes_since_entry >= self.interval).then(|| {
            self.bytes_since_entry = 0;
            IndexEntry {
                relative_offset,
                position,
            }
        });
        self.bytes_since_entry += size;
        entry
    }
}

/// The index file of one segment and its entries, kept in memory for lookups.
#[derive(Debug)]
pub(crate) struct OffsetIndex {
    path: PathBuf,
    file: File,
    entries: Vec<IndexEntry>,
}

impl OffsetIndex {
    /// Opens (creating if missing) the index file. Returns the index and, if its content
    /// could not be used, why; the entries are then empty and the caller rebuilds.
    pub fn open(path: &Path) -> Result<(OffsetIndex, Option<String>), LogError> {
        let existed = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .at("opening index", path)?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut &file, &mut bytes).at("reading index", path)?;
        let (entries, problem) = match decode(&bytes) {
            Ok(entries) => (entries, None),
            Err(reason) => (Vec::new(), Some(reason)),
        };
        let problem = problem.or_else(|| (!existed).then(|| "index file is missing".to_string()));
        Ok((
            OffsetIndex {
                path: path.to_path_buf(),
                file,
                entries,
            },
            problem,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    #[cfg(test)]
    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    pub fn last(&self) -> Option<IndexEntry> {
        self.entries.last().copied()
    }

    /// The greatest entry whose relative offset is <= `relative_offset`.
    pub fn lookup(&self, relative_offset: u32) -> Option<IndexEntry> {
        let after = self
            .entries
            .partition_point(|e| e.relative_offset <= relative_offset);
        after.checked_sub(1).map(|i| self.entries[i])
    }

    pub fn append(&mut self, entry: IndexEntry) -> Result<(), LogError> {
        let at = (self.entries.len() * ENTRY_LEN) as u64;
        self.file
            .write_all_at(&entry.encode(), at)
            .at("appending to index", &self.path)?;
        self.entries.push(entry);
        Ok(())
    }

    /// Replaces the whole file with `entries`.
    pub fn replace(&mut self, entries: Vec<IndexEntry>) -> Result<(), LogError> {
        let bytes: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
        self.file
            .write_all_at(&bytes, 0)
            .at("rewriting index", &self.path)?;
        self.file
            .set_len(bytes.len() as u64)
            .at("truncating index", &self.path)?;
        self.entries = entries;
        Ok(())
    }

    /// Drops the entries of batches at or after `relative_offset`.
    pub fn truncate_from(&mut self, relative_offset: u32) -> Result<(), LogError> {
        let keep = self
            .entries
            .partition_point(|e| e.relative_offset < relative_offset);
        self.entries.truncate(keep);
        self.file
            .set_len((keep * ENTRY_LEN) as u64)
            .at("truncating index", &self.path)
    }

    pub fn sync(&self) -> Result<(), LogError> {
        self.file.sync_data().at("fsyncing index", &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(relative_offset: u32, position: u32) -> IndexEntry {
        IndexEntry {
            relative_offset,
            position,
        }
    }

    #[test]
    fn lookup_finds_the_greatest_entry_at_or_below_the_target() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut index, problem) = OffsetIndex::open(&dir.path().join("0.index")).expect("open");
        assert!(problem.is_some(), "a new file is reported missing");
        assert_eq!(index.lookup(5), None);
        for (o, p) in [(10, 100), (20, 200), (30, 300)] {
            index.append(entry(o, p)).expect("append");
        }
        assert_eq!(index.lookup(0), None);
        assert_eq!(index.lookup(9), None);
        assert_eq!(index.lookup(10), Some(entry(10, 100)));
        assert_eq!(index.lookup(19), Some(entry(10, 100)));
        assert_eq!(index.lookup(25), Some(entry(20, 200)));
        assert_eq!(index.lookup(u32::MAX), Some(entry(30, 300)));
    }

    #[test]
    fn index_file_round_trips_and_truncates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("0.index");
        let (mut index, _) = OffsetIndex::open(&path).expect("open");
        index
            .replace(vec![entry(3, 50), entry(9, 120), entry(15, 400)])
            .expect("replace");
        index.truncate_from(9).expect("truncate");
        drop(index);
        let (index, problem) = OffsetIndex::open(&path).expect("reopen");
        assert_eq!(problem, None);
        assert_eq!(index.entries(), &[entry(3, 50)]);
    }

    #[test]
    fn inconsistent_index_bytes_are_rejected() {
        let ok: Vec<u8> = [entry(1, 10), entry(2, 20)]
            .iter()
            .flat_map(|e| e.encode())
            .collect();
        assert_eq!(decode(&ok).expect("valid").len(), 2);
        assert!(decode(&ok[..7]).is_err(), "partial entry");
        let backwards: Vec<u8> = [entry(2, 20), entry(1, 10)]
            .iter()
            .flat_map(|e| e.encode())
            .collect();
        assert!(decode(&backwards).is_err());
        assert!(decode(&entry(0, 0).encode()).is_err(), "position 0");
    }

    #[test]
    fn cadence_adds_an_entry_for_the_first_batch_after_each_interval() {
        let mut cadence = IndexCadence::new(100);
        let mut entries = Vec::new();
        let mut position = 0u32;
        for relative_offset in 0..10u32 {
            entries.extend(cadence.on_batch(relative_offset, position, 40));
            position += 40;
        }
        // Batches at 0, 40, 80 fill 120 bytes; the batch at 120 gets the first entry.
        assert_eq!(entries, vec![entry(3, 120), entry(6, 240), entry(9, 360)]);
        let resumed = IndexCadence::resume(100, Some(entry(9, 360)), 400);
        assert_eq!(resumed.bytes_since_entry, 40);
    }
}
