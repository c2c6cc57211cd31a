//! Binary snapshot of a [`ProducerStateTable`]: every producer with its epoch, its broker
//! clock of last update and all its cached batches, so a restart restores duplicate
//! detection exactly. Any bit flip or truncation is caught by the CRC32C or the length
//! checks and reported, never decoded into a wrong table.
//!
//! ```text
//! magic    "IDPS"
//! version  u16 = 2
//! crc      u32   CRC32C of everything after this field
//! count    u32   producers, sorted by producer_id
//! count x  producer_id i64 | producer_epoch i16 | last_update_ms i64
//!          | coordinator_epoch i32 | txn_first_offset i64 (-1: no open transaction)
//!          | batches u8 (<= 5)
//!          batches x  first_seq i32 | last_seq i32 | first_offset i64 | last_offset i64
//!                     | timestamp_ms i64
//! ```
//! All integers big-endian. Version 1 (without the transaction fields) is not read: such
//! a snapshot is skipped and the log replayed, which derives the same table.

use std::collections::VecDeque;

use bytes::{Buf, BufMut};

use super::entry::{BatchMetadata, ProducerEntry, MAX_CACHED_BATCHES};
use super::ProducerStateTable;

const MAGIC: &[u8; 4] = b"IDPS";
const VERSION: u16 = 2;
/// magic + version + crc
const PREAMBLE_LEN: usize = 4 + 2 + 4;
const ENTRY_LEN: usize = 8 + 2 + 8 + 4 + 8 + 1;
const BATCH_LEN: usize = 4 + 4 + 8 + 8 + 8;

/// Why a producer state snapshot cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot truncated")]
    Truncated,
    #[error("not a producer state snapshot (bad magic)")]
    BadMagic,
    #[error("unsupported snapshot version {0}")]
    UnsupportedVersion(u16),
    #[error("snapshot CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("snapshot is malformed: {0}")]
    Malformed(&'static str),
    #[error("snapshot I/O: {0}")]
    Io(#[from] std::io::Error),
}

impl ProducerStateTable {
    /// Encodes the whole table (see the module doc for the format). Deterministic: equal
    /// tables give equal bytes.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let mut entries: Vec<_> = self.iter().collect();
        entries.sort_unstable_by_key(|(id, _)| *id);
        let body_len: usize = 4 + entries
            .iter()
            .map(|(_, e)| ENTRY_LEN + e.batches.len() * BATCH_LEN)
            .sum::<usize>();
        let mut buf = Vec::with_capacity(PREAMBLE_LEN + body_len);
        buf.put_slice(MAGIC);
        buf.put_u16(VERSION);
        buf.put_u32(0); // crc, filled below
        buf.put_u32(entries.len() as u32);
        for (producer_id, entry) in entries {
            buf.put_i64(producer_id);
            buf.put_i16(entry.producer_epoch);
            buf.put_i64(entry.last_update_ms);
            buf.put_i32(entry.coordinator_epoch);
            buf.put_i64(entry.txn_first_offset.unwrap_or(-1));
            // The cache never holds more than MAX_CACHED_BATCHES (5).
            buf.put_u8(entry.batches.len() as u8);
            for b in &entry.batches {
                buf.put_i32(b.first_seq);
                buf.put_i32(b.last_seq);
                buf.put_i64(b.first_offset);
                buf.put_i64(b.last_offset);
                buf.put_i64(b.timestamp_ms);
            }
        }
        let crc = crc32c::crc32c(&buf[PREAMBLE_LEN..]);
        buf[PREAMBLE_LEN - 4..PREAMBLE_LEN].copy_from_slice(&crc.to_be_bytes());
        buf
    }

    /// Decodes bytes written by [`encode_snapshot`](Self::encode_snapshot). Corrupt,
    /// truncated or over-long input is an error.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<Self, SnapshotError> {
        if bytes.len() < PREAMBLE_LEN {
            return Err(SnapshotError::Truncated);
        }
        let mut buf = bytes;
        let mut magic = [0u8; 4];
        buf.copy_to_slice(&mut magic);
        if &magic != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let version = buf.get_u16();
        if version != VERSION {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        let stored = buf.get_u32();
        let computed = crc32c::crc32c(buf);
        if stored != computed {
            return Err(SnapshotError::CrcMismatch { stored, computed });
        }
        let count = take_u32(&mut buf)? as usize;
        let mut table = ProducerStateTable::new();
        for _ in 0..count {
            need(buf, ENTRY_LEN)?;
            let producer_id = buf.get_i64();
            let producer_epoch = buf.get_i16();
            let last_update_ms = buf.get_i64();
            let coordinator_epoch = buf.get_i32();
            let txn_first_offset = match buf.get_i64() {
                -1 => None,
                offset if offset >= 0 => Some(offset),
                _ => return Err(SnapshotError::Malformed("negative transaction offset")),
            };
            let batch_count = usize::from(buf.get_u8());
            if batch_count > MAX_CACHED_BATCHES {
                return Err(SnapshotError::Malformed("more than 5 cached batches"));
            }
            need(buf, batch_count * BATCH_LEN)?;
            let mut batches = VecDeque::with_capacity(MAX_CACHED_BATCHES);
            for _ in 0..batch_count {
                batches.push_back(BatchMetadata {
                    first_seq: buf.get_i32(),
                    last_seq: buf.get_i32(),
                    first_offset: buf.get_i64(),
                    last_offset: buf.get_i64(),
                    timestamp_ms: buf.get_i64(),
                });
            }
            if table.get(producer_id).is_some() {
                return Err(SnapshotError::Malformed("producer id listed twice"));
            }
            table.insert_entry(
                producer_id,
                ProducerEntry {
                    producer_epoch,
                    batches,
                    last_update_ms,
                    txn_first_offset,
                    coordinator_epoch,
                },
            );
        }
        if !buf.is_empty() {
            return Err(SnapshotError::Malformed(
                "trailing bytes after the last producer",
            ));
        }
        Ok(table)
    }
}

fn need(buf: &[u8], n: usize) -> Result<(), SnapshotError> {
    if buf.len() < n {
        Err(SnapshotError::Truncated)
    } else {
        Ok(())
    }
}

fn take_u32(buf: &mut &[u8]) -> Result<u32, SnapshotError> {
    need(buf, 4)?;
    Ok(buf.get_u32())
}
