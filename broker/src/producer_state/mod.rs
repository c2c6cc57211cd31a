//! Per-partition producer state: the decider behind idempotent and transactional produce.
//!
//! For each producer id the table keeps the epoch, the metadata of the last
//! [`MAX_CACHED_BATCHES`] appended batches, the open transaction's first offset and the
//! coordinator epoch of the last marker. [`ProducerStateTable::check`] and
//! [`ProducerStateTable::check_data`] decide what to do with an incoming batch,
//! [`ProducerStateTable::check_marker`] with a transaction marker (see `txn_rules`);
//! [`ProducerStateTable::apply_batch`] records a batch that is in the log. The table is
//! derived from the log alone (snapshot + replay), so it is pure: no I/O, no clock, no tokio.

mod decision;
mod encoding;
mod entry;
mod kept_snapshots;
pub mod snapshot;
#[cfg(test)]
mod tests;
mod txn_rules;
#[cfg(test)]
mod txn_tests;

use std::collections::HashMap;

use idem_proto::batch::{self, BatchHeader};
use idem_proto::control::ControlMarker;
use idem_proto::v1::ControlType;

pub use decision::{Decision, MarkerDecision, MarkerEpoch, TxnRefusal};
pub use encoding::SnapshotError;
pub use entry::{BatchMetadata, ProducerEntry, MAX_CACHED_BATCHES, NO_COORDINATOR_EPOCH};
pub use kept_snapshots::SnapshotBounds;
pub use snapshot::{
    delete_snapshots_above, latest_snapshot, prune_snapshots, snapshot_offsets, write_snapshot,
};

/// The producer state of one partition: producer id -> [`ProducerEntry`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStateTable {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerStateTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decides what to do with a batch carrying sequences `first_seq..=last_seq` from
    /// `producer_id` (which must be >= 0: batches without a producer id bypass the table).
    ///
    /// Rules (Kafka's): an unknown producer must start at sequence 0; an older epoch is
    /// fenced; a newer epoch must start at 0; in the same epoch, an exact match of a cached
    /// batch is a duplicate, the sequence after the last cached one is appended, anything
    /// else is out of order. Sequences wrap from `i32::MAX` to 0.
    ///
    /// Same epoch with an empty batch cache (after a marker bumped the epoch): only
    /// sequence 0 is accepted, because the next sequence of that epoch is unknown and
    /// accepting anything could hide a gap.
    pub fn check(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        first_seq: i32,
        last_seq: i32,
    ) -> Decision {
        let Some(entry) = self.producers.get(&producer_id) else {
            return if first_seq == 0 {
                Decision::Append
            } else {
                Decision::UnknownProducerId
            };
        };
        if producer_epoch < entry.producer_epoch {
            return Decision::InvalidEpoch {
                current: entry.producer_epoch,
                got: producer_epoch,
            };
        }
        if producer_epoch > entry.producer_epoch {
            return if first_seq == 0 {
                Decision::Append
            } else {
                Decision::OutOfOrder {
                    expected: 0,
                    got: first_seq,
                }
            };
        }
        if let Some(duplicate) = entry.find_batch(first_seq, last_seq) {
            return Decision::Duplicate(duplicate);
        }
        let expected = entry
            .last_seq()
            .map_or(0, |last| batch::sequence_add(last, 1));
        if first_seq == expected {
            Decision::Append
        } else {
            Decision::OutOfOrder {
                expected,
                got: first_seq,
            }
        }
    }

    /// Records a batch that is in the log: after a leader's append, on a follower, and when
    /// replaying the log. Never refuses: the log is the truth. A different epoch (newer, or
    /// older, which only a broken leader could have written) resets the entry to that
    /// epoch; otherwise the batch joins the cache, evicting the oldest beyond
    /// [`MAX_CACHED_BATCHES`]. `now_ms` is the broker clock, used for expiry.
    pub fn apply(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        meta: BatchMetadata,
        now_ms: i64,
    ) {
        let entry = self.entry_for_epoch(producer_id, producer_epoch, now_ms);
        entry.batches.push_back(meta);
        while entry.batches.len() > MAX_CACHED_BATCHES {
            entry.batches.pop_front();
        }
    }

    /// [`apply`](Self::apply) for a stored batch. Batches without a producer id are
    /// ignored. A control batch (transaction marker) carries no sequences; `marker` is
    /// what its record says: BEGIN opens a transaction at the marker's offset, COMMIT and
    /// ABORT close it and empty the batch cache; all three move the producer to the
    /// marker's epoch and record its coordinator epoch. A control batch whose record was
    /// not read (`marker` = `None`) only moves the producer to its epoch. A transactional
    /// data batch while no transaction is open opens one at its offset: the log is the
    /// truth, and the open transaction then holds the last stable offset rather than let
    /// a consumer read past data whose outcome is unknown.
    pub fn apply_batch(
        &mut self,
        header: &BatchHeader,
        marker: Option<ControlMarker>,
        now_ms: i64,
    ) {
        if !header.has_producer_id() {
            return;
        }
        if header.is_control() {
            let entry = self.entry_for_epoch(header.producer_id, header.producer_epoch, now_ms);
            if let Some(marker) = marker {
                entry.coordinator_epoch = marker.coordinator_epoch;
                match marker.control_type {
                    ControlType::Begin => {
                        entry.txn_first_offset.get_or_insert(header.base_offset);
                    }
                    // The batch cache stays: a marker at the next epoch already emptied
                    // it (a new epoch starts at sequence 0), and one at the transaction's
                    // own epoch (Kafka's transaction version 1) leaves the producer at
                    // that epoch, where its sequences go on and a retry of its last
                    // batches is still a duplicate.
                    ControlType::Commit | ControlType::Abort => {
                        entry.txn_first_offset = None;
                    }
                }
            }
            return;
        }
        if header.base_sequence < 0 {
            tracing::warn!(
                producer_id = header.producer_id,
                base_offset = header.base_offset,
                "batch with a producer id but no sequence; not tracked"
            );
            return;
        }
        self.apply(
            header.producer_id,
            header.producer_epoch,
            BatchMetadata::from_header(header),
            now_ms,
        );
        if header.is_transactional() {
            if let Some(entry) = self.producers.get_mut(&header.producer_id) {
                entry.txn_first_offset.get_or_insert(header.base_offset);
            }
        }
    }

    /// Forgets producers idle for at least `idle_ms` of broker time (Kafka's
    /// `producer.id.expiration.ms`). Returns how many were removed. A producer with an
    /// open transaction is never forgotten: its transaction holds the last stable offset
    /// and only its coordinator's marker may end it.
    pub fn remove_expired(&mut self, now_ms: i64, idle_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, entry| {
            entry.in_transaction() || now_ms.saturating_sub(entry.last_update_ms) < idle_ms
        });
        before - self.producers.len()
    }

    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// All entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        self.producers.iter().map(|(id, entry)| (*id, entry))
    }

    /// The entry of `producer_id` moved to `producer_epoch` (reset if the epoch changed),
    /// created if absent, touched at `now_ms`.
    fn entry_for_epoch(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        now_ms: i64,
    ) -> &mut ProducerEntry {
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry::new(producer_epoch, now_ms));
        if entry.producer_epoch != producer_epoch {
            if producer_epoch < entry.producer_epoch {
                tracing::warn!(
                    producer_id,
                    epoch = producer_epoch,
                    current_epoch = entry.producer_epoch,
                    "log holds a batch of an older producer epoch; following the log"
                );
            }
            entry.producer_epoch = producer_epoch;
            entry.batches.clear();
        }
        entry.last_update_ms = now_ms;
        entry
    }

    fn insert_entry(&mut self, producer_id: i64, entry: ProducerEntry) {
        self.producers.insert(producer_id, entry);
    }
}
