//! Rebuilding a partition's transaction index when it opens or is truncated: the
//! per-segment files of the sealed segments (up to the high watermark) give the aborted
//! transactions and the open ones at their end, and only the rest of the log is walked.
//! A missing or unusable file just moves the walk's start back to its segment; the
//! walk writes the files it finds missing, so the next open is cheap again.

use std::ops::ControlFlow;
use std::path::Path;

use crate::error::BrokerError;
use crate::log::PartitionLog;
use crate::txn_index::segment_file::{self, SegmentTxns};
use crate::txn_index::TxnIndex;

/// How many batches the walk applies between prunes of stable completed transactions,
/// so a long log's history of commits is never held at once.
const PRUNE_EVERY: usize = 1024;

/// The transaction index of `log`, with completed transactions below `high_watermark`
/// already stable.
pub(super) fn recover_transactions(
    dir: &Path,
    log: &PartitionLog,
    high_watermark: i64,
) -> Result<TxnIndex, BrokerError> {
    // Segments from the active one on were cut or are new: their files describe bytes
    // that are gone.
    if let Err(e) = segment_file::delete_from(dir, log.active_segment_base()) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not delete stale transaction index files");
    }
    let sealed = log.sealed_segments();
    let loaded = load_files(dir, &sealed, high_watermark);
    let resume_at = loaded
        .last()
        .map_or(log.first_segment_base(), |f| f.next_offset);
    let from_files = loaded.len();
    let mut txns = TxnIndex::resume(loaded);
    let mut unsealed = sealed
        .into_iter()
        .filter(|(base, _)| *base >= resume_at)
        .peekable();
    let mut walked = 0usize;
    log.for_each_batch(resume_at, |header, marker| {
        while let Some(&(base, next)) = unsealed.peek() {
            if header.base_offset < next {
                break;
            }
            write_file(dir, &txns.seal(base, next));
            unsealed.next();
        }
        txns.apply(header, marker);
        walked += 1;
        if walked.is_multiple_of(PRUNE_EVERY) {
            txns.prune_stable(high_watermark);
        }
        ControlFlow::Continue(())
    })?;
    for (base, next) in unsealed {
        write_file(dir, &txns.seal(base, next));
    }
    txns.prune_stable(high_watermark);
    tracing::debug!(dir = %dir.display(), from_files, resume_at, walked, "rebuilt the transaction index");
    Ok(txns)
}

/// The files of the leading sealed segments, stopping at the first one that is missing
/// or unusable, or whose segment reaches past the high watermark (its completed
/// transactions might not be stable yet, which a file does not record).
fn load_files(dir: &Path, sealed: &[(i64, i64)], high_watermark: i64) -> Vec<SegmentTxns> {
    let mut loaded = Vec::new();
    for &(base, next) in sealed {
        if next > high_watermark {
            break;
        }
        match segment_file::read(dir, base) {
            Ok(Some(file)) if file.next_offset == next => loaded.push(file),
            Ok(Some(file)) => {
                tracing::warn!(dir = %dir.display(), base, file_next = file.next_offset, segment_next = next, "transaction index file does not match its segment; walking the segment");
                break;
            }
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), base, error = %e, "unusable transaction index file; walking the segment");
                break;
            }
        }
    }
    loaded
}

/// Persists a sealed segment's file. A failure costs only a walk at the next open.
pub(super) fn write_file(dir: &Path, segment: &SegmentTxns) {
    if let Err(e) = segment_file::write(dir, segment) {
        tracing::warn!(dir = %dir.display(), base = segment.base_offset, error = %e, "could not write the transaction index file");
    }
}
