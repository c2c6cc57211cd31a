//! What a partition remembers of one producer id: its epoch, its last appended batches
//! (for duplicate detection), its open transaction and the coordinator epoch of its last
//! marker. The table in the parent module keeps one [`ProducerEntry`] per producer id.

use std::collections::VecDeque;

use idem_proto::batch::BatchHeader;

/// `coordinator_epoch` of a producer no marker has been seen for.
pub const NO_COORDINATOR_EPOCH: i32 = -1;

/// How many batches per producer are remembered for duplicate detection; a producer keeps
/// at most this many requests in flight (Kafka's `max.in.flight.requests.per.connection`).
pub const MAX_CACHED_BATCHES: usize = 5;

/// Where one appended batch of a producer sits: its sequence range and its offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    /// The batch's max timestamp (producer clock); informational only.
    pub timestamp_ms: i64,
}

impl BatchMetadata {
    /// The metadata of an appended batch, from its stored header.
    pub fn from_header(header: &BatchHeader) -> Self {
        BatchMetadata {
            first_seq: header.base_sequence,
            last_seq: header.last_sequence(),
            first_offset: header.base_offset,
            last_offset: header.last_offset(),
            timestamp_ms: header.max_timestamp,
        }
    }
}

/// What the partition knows about one producer id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub producer_epoch: i16,
    /// The last appended batches of `producer_epoch`, oldest first, at most
    /// [`MAX_CACHED_BATCHES`]. Empty after an epoch bump by a transaction marker.
    pub batches: VecDeque<BatchMetadata>,
    /// Broker clock (not the producer's timestamps) of the last update; drives expiry.
    pub last_update_ms: i64,
    /// The open transaction's first offset (its BEGIN marker); `None` when no
    /// transaction of this producer is open in this partition.
    pub txn_first_offset: Option<i64>,
    /// Coordinator epoch of the last marker written for this producer
    /// ([`NO_COORDINATOR_EPOCH`] before the first); a lower one is fenced.
    pub coordinator_epoch: i32,
}

impl ProducerEntry {
    pub(super) fn new(producer_epoch: i16, now_ms: i64) -> Self {
        ProducerEntry {
            producer_epoch,
            batches: VecDeque::with_capacity(MAX_CACHED_BATCHES),
            last_update_ms: now_ms,
            txn_first_offset: None,
            coordinator_epoch: NO_COORDINATOR_EPOCH,
        }
    }

    /// Whether a transaction of this producer is open in this partition.
    pub fn in_transaction(&self) -> bool {
        self.txn_first_offset.is_some()
    }

    /// The last sequence appended in the current epoch, if any.
    pub fn last_seq(&self) -> Option<i32> {
        self.batches.back().map(|b| b.last_seq)
    }

    pub(super) fn find_batch(&self, first_seq: i32, last_seq: i32) -> Option<BatchMetadata> {
        self.batches
            .iter()
            .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
            .copied()
    }
}
