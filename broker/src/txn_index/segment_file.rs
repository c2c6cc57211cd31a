//! The per-segment transaction index file `{base_offset:020}.txnindex`: what a sealed
//! segment contributes to the partition's [`TxnIndex`](super::TxnIndex), so a broker
//! that opens (or truncates) a partition reads these small files instead of every
//! control batch of the log.
//!
//! A file holds the transactions aborted by an ABORT marker inside the segment and the
//! transactions still open at the segment's end. It is a cache of the log: written when
//! the segment is sealed, deleted when its segment becomes active again (truncation,
//! recovery), and a missing, torn or mismatched file only means the segment is walked.
//!
//! Layout (big-endian): magic `IDTX`, version u16, base offset i64, next offset i64,
//! aborted count u32, open count u32, aborted entries (producer id, first offset, last
//! offset: 3 × i64), open entries (producer id, first offset: 2 × i64), CRC-32C of
//! everything before it (u32).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::aborted_txn::AbortedTxn;

const MAGIC: &[u8; 4] = b"IDTX";
const VERSION: u16 = 1;
const SUFFIX: &str = ".txnindex";
const HEADER_LEN: usize = 4 + 2 + 8 + 8 + 4 + 4;
const ABORTED_LEN: usize = 24;
const OPEN_LEN: usize = 16;
const CRC_LEN: usize = 4;

/// What one sealed segment `[base_offset, next_offset)` holds of transactions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentTxns {
    pub base_offset: i64,
    pub next_offset: i64,
    /// Transactions whose ABORT marker lies in the segment, by marker offset.
    pub aborted: Vec<AbortedTxn>,
    /// Transactions open at `next_offset`: `(producer_id, first_offset)`.
    pub open: Vec<(i64, i64)>,
}

/// Why a file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SegmentFileError {
    #[error("reading {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is not a valid transaction index: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

pub fn path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}{SUFFIX}"))
}

impl SegmentTxns {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            HEADER_LEN + self.aborted.len() * ABORTED_LEN + self.open.len() * OPEN_LEN + CRC_LEN,
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&self.next_offset.to_be_bytes());
        out.extend_from_slice(&(self.aborted.len() as u32).to_be_bytes());
        out.extend_from_slice(&(self.open.len() as u32).to_be_bytes());
        for a in &self.aborted {
            for v in [a.producer_id, a.first_offset, a.last_offset] {
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
        for (producer_id, first_offset) in &self.open {
            out.extend_from_slice(&producer_id.to_be_bytes());
            out.extend_from_slice(&first_offset.to_be_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<SegmentTxns, String> {
        if bytes.len() < HEADER_LEN + CRC_LEN {
            return Err(format!("{} bytes is shorter than a header", bytes.len()));
        }
        let (body, crc) = bytes.split_at(bytes.len() - CRC_LEN);
        let stored = u32::from_be_bytes(crc.try_into().map_err(|_| "crc".to_string())?);
        if crc32c::crc32c(body) != stored {
            return Err("CRC mismatch".into());
        }
        let mut r = Reader { bytes: body };
        if r.take(4)? != MAGIC {
            return Err("bad magic".into());
        }
        let version = u16::from_be_bytes(r.array()?);
        if version != VERSION {
            return Err(format!("unknown version {version}"));
        }
        let base_offset = r.i64()?;
        let next_offset = r.i64()?;
        let aborted_count = u32::from_be_bytes(r.array()?) as usize;
        let open_count = u32::from_be_bytes(r.array()?) as usize;
        let expected = aborted_count * ABORTED_LEN + open_count * OPEN_LEN;
        if r.bytes.len() != expected {
            return Err(format!(
                "counts need {expected} bytes of entries, {} are there",
                r.bytes.len()
            ));
        }
        let mut aborted = Vec::with_capacity(aborted_count);
        for _ in 0..aborted_count {
            aborted.push(AbortedTxn {
                producer_id: r.i64()?,
                first_offset: r.i64()?,
                last_offset: r.i64()?,
            });
        }
        let mut open = Vec::with_capacity(open_count);
        for _ in 0..open_count {
            open.push((r.i64()?, r.i64()?));
        }
        Ok(SegmentTxns {
            base_offset,
            next_offset,
            aborted,
            open,
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.bytes.len() < n {
            return Err("truncated".into());
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        self.take(N)?
            .try_into()
            .map_err(|_| "truncated".to_string())
    }

    fn i64(&mut self) -> Result<i64, String> {
        Ok(i64::from_be_bytes(self.array()?))
    }
}

/// The file of a segment the cleaner merged from consecutive segments `parts`: their
/// aborted transactions in order, and what is open at the end of the last. `None` when
/// the parts are not consecutive (one was missing): the merged segment is walked then.
pub fn merged(parts: &[SegmentTxns]) -> Option<SegmentTxns> {
    let (first, last) = (parts.first()?, parts.last()?);
    if parts
        .windows(2)
        .any(|w| w[0].next_offset != w[1].base_offset)
    {
        return None;
    }
    Some(SegmentTxns {
        base_offset: first.base_offset,
        next_offset: last.next_offset,
        aborted: parts
            .iter()
            .flat_map(|p| p.aborted.iter().copied())
            .collect(),
        open: last.open.clone(),
    })
}

/// Writes the file of a sealed segment: temp file, fsync, rename. The directory is not
/// fsynced: a file lost in a crash is rebuilt by walking its segment.
pub fn write(dir: &Path, segment: &SegmentTxns) -> io::Result<()> {
    let target = path(dir, segment.base_offset);
    let tmp = target.with_extension("txnindex.tmp");
    {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(&segment.encode())?;
        file.sync_all()?;
    }
    fs::rename(&tmp, &target)
}

/// Deletes the file of the segment at `base_offset` (retention deleted the segment).
pub fn remove(dir: &Path, base_offset: i64) -> io::Result<()> {
    match fs::remove_file(path(dir, base_offset)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The file of the segment at `base_offset`, or `None` if there is none.
pub fn read(dir: &Path, base_offset: i64) -> Result<Option<SegmentTxns>, SegmentFileError> {
    let path = path(dir, base_offset);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(SegmentFileError::Io { path, source }),
    };
    let segment = SegmentTxns::decode(&bytes).map_err(|reason| SegmentFileError::Invalid {
        path: path.clone(),
        reason,
    })?;
    if segment.base_offset != base_offset {
        return Err(SegmentFileError::Invalid {
            path,
            reason: format!("it describes segment {}", segment.base_offset),
        });
    }
    Ok(Some(segment))
}

/// Deletes the files (and leftover temp files) of every segment based at or after
/// `from`: those segments are gone or active again, so their files are stale.
pub fn delete_from(dir: &Path, from: i64) -> io::Result<usize> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut deleted = 0;
    for entry in entries {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name
            .strip_suffix(SUFFIX)
            .or_else(|| name.strip_suffix(".txnindex.tmp"))
        else {
            continue;
        };
        let stale = stem.parse::<i64>().map_or(true, |base| base >= from);
        if stale || name.ends_with(".tmp") {
            match fs::remove_file(&path) {
                Ok(()) => deleted += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_files_merge_into_one_and_a_gap_gives_none() {
        let aborted = |p| AbortedTxn {
            producer_id: p,
            first_offset: 0,
            last_offset: 1,
        };
        let part = |base, next, a: Vec<AbortedTxn>, open: Vec<(i64, i64)>| SegmentTxns {
            base_offset: base,
            next_offset: next,
            aborted: a,
            open,
        };
        let parts = [
            part(0, 10, vec![aborted(1)], vec![(2, 5)]),
            part(10, 20, vec![aborted(3)], vec![(4, 15)]),
        ];
        assert_eq!(
            merged(&parts),
            Some(part(0, 20, vec![aborted(1), aborted(3)], vec![(4, 15)]))
        );
        assert_eq!(
            merged(&[parts[0].clone(), part(11, 20, vec![], vec![])]),
            None
        );
        assert_eq!(merged(&[]), None);
    }

    fn sample() -> SegmentTxns {
        SegmentTxns {
            base_offset: 100,
            next_offset: 250,
            aborted: vec![
                AbortedTxn {
                    producer_id: 7,
                    first_offset: 90,
                    last_offset: 120,
                },
                AbortedTxn {
                    producer_id: 8,
                    first_offset: 130,
                    last_offset: 200,
                },
            ],
            open: vec![(9, 240), (3, 60)],
        }
    }

    #[test]
    fn given_a_segment_then_it_round_trips_through_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), &sample()).expect("write");
        assert_eq!(read(dir.path(), 100).expect("read"), Some(sample()));
        assert_eq!(read(dir.path(), 0).expect("read"), None);
    }

    #[test]
    fn given_any_flipped_or_missing_byte_then_decoding_refuses_it() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(SegmentTxns::decode(&bad).is_err(), "flip at {i}");
            assert!(SegmentTxns::decode(&bytes[..i]).is_err(), "cut at {i}");
        }
    }

    #[test]
    fn given_a_file_named_for_another_segment_then_reading_refuses_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(path(dir.path(), 5), sample().encode()).expect("write");
        assert!(matches!(
            read(dir.path(), 5),
            Err(SegmentFileError::Invalid { .. })
        ));
    }

    #[test]
    fn given_files_around_a_cut_then_only_those_at_or_after_it_are_deleted() {
        let dir = tempfile::tempdir().expect("tempdir");
        for base in [0, 100, 250] {
            let segment = SegmentTxns {
                base_offset: base,
                ..sample()
            };
            write(dir.path(), &segment).expect("write");
        }
        fs::write(dir.path().join("00000000000000000000.log"), b"").expect("log");
        assert_eq!(delete_from(dir.path(), 100).expect("delete"), 2);
        assert!(path(dir.path(), 0).exists());
        assert!(!path(dir.path(), 100).exists());
        assert!(dir.path().join("00000000000000000000.log").exists());
    }
}
