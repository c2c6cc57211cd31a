//! `--null-produce`, a benchmark mode that DISCARDS DATA. Each partition's batch is
//! decoded and checked as a real append checks it (header, CRC, every record), then
//! answered with made-up offsets; the log and the producer state are never touched.
//! What remains is the cost of the transport and the decode: the ceiling that the real
//! produce path is measured against (`idem bench produce --null`).

use std::sync::atomic::{AtomicI64, Ordering};

use idem_proto::batch;

use crate::error::BrokerError;

/// Hands out the fake offsets: one counter for every partition, so that offsets only
/// increase and no two batches share one.
#[derive(Debug, Default)]
pub(super) struct NullProduce {
    next_offset: AtomicI64,
}

impl NullProduce {
    /// Validates `records` like an append does (a corrupt batch gets the same error)
    /// and returns the base offset to answer with.
    pub(super) fn accept(&self, records: &[u8]) -> Result<i64, BrokerError> {
        let header = batch::validate_produced(records)?;
        Ok(self
            .next_offset
            .fetch_add(i64::from(header.record_count), Ordering::Relaxed))
    }
}
