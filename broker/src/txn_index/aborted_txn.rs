//! One aborted transaction of a partition, as the transaction index and its segment
//! files keep it: read_committed fetches drop the batches it covers.

/// One aborted transaction in this partition: `producer_id`'s batches with
/// `first_offset <= base_offset < last_offset` belong to it; `last_offset` is its ABORT
/// marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

impl AbortedTxn {
    /// Whether a transactional batch of `producer_id` starting at `base_offset` is part
    /// of this aborted transaction.
    pub fn covers(&self, producer_id: i64, base_offset: i64) -> bool {
        self.producer_id == producer_id
            && self.first_offset <= base_offset
            && base_offset < self.last_offset
    }
}
