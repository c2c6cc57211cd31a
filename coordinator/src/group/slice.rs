//! The state of one `__consumer_offsets` partition as its owner keeps it: every group
//! (last record per group wins, a tombstone removes it), every group's committed and
//! pending offsets, and where each producer's transactional offset batches stand in the
//! partition's sequence space. Pure: built by replaying the partition's batches (the
//! load) and changed by the shell after each acknowledged append.
//!
//! Invariant: replaying the log from its start gives the state the owner had when it
//! wrote the last record read, so a takeover serves exactly what was persisted.

use std::collections::{BTreeMap, HashMap};

use idem_proto::batch::{self, BatchHeader, Batches};
use idem_proto::control;
use idem_proto::v1::ControlType;

use super::membership::Group;
use super::offsets::GroupOffsets;
use super::records::GroupRecord;
use crate::error::CoordinatorError;

/// Where a producer's transactional offset batches stand in this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnSequence {
    pub producer_epoch: i16,
    /// The sequence the producer's next batch of `producer_epoch` must carry.
    pub next: i32,
}

/// One `__consumer_offsets` partition's groups and offsets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceState {
    pub groups: BTreeMap<String, Group>,
    pub offsets: BTreeMap<String, GroupOffsets>,
    /// Per producer id with offset batches since its last COMMIT/ABORT marker here.
    pub txn_sequences: HashMap<i64, TxnSequence>,
    /// The transactional offset batch being appended (the owner writes one at a time),
    /// and the marker of its producer the tail read meanwhile, if any.
    txn_write: Option<TxnWrite>,
}

/// A transactional offset batch in flight: appended, not yet applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TxnWrite {
    producer_id: i64,
    /// The offset and outcome (committed?) of the producer's last marker read since
    /// the write began.
    ended: Option<(i64, bool)>,
}

impl SliceState {
    /// A record the owner appended (replayed, or just acknowledged at `record_offset`).
    pub fn apply(&mut self, record: GroupRecord) {
        match record {
            GroupRecord::Fence { .. } => {}
            GroupRecord::Group { group_id, group } => {
                self.groups.insert(group_id, group);
            }
            GroupRecord::GroupRemoved { group_id } => {
                self.groups.remove(&group_id);
            }
            GroupRecord::Offset {
                group_id,
                tp,
                value,
            } => self.offsets.entry(group_id).or_default().commit(tp, value),
            GroupRecord::OffsetRemoved { group_id, tp } => {
                if let Some(offsets) = self.offsets.get_mut(&group_id) {
                    offsets.remove(&tp);
                    if offsets.committed().is_empty() && !offsets.has_pending() {
                        self.offsets.remove(&group_id);
                    }
                }
            }
        }
    }

    /// Offsets a transaction of `producer_id` stored (a transactional batch); only
    /// `Offset` records carry state there.
    pub fn stage(&mut self, producer_id: i64, record: GroupRecord) {
        if let GroupRecord::Offset {
            group_id,
            tp,
            value,
        } = record
        {
            self.offsets
                .entry(group_id)
                .or_default()
                .stage(producer_id, tp, value);
        }
    }

    /// A transactional batch of `producer_id` at `producer_epoch` whose last sequence is
    /// `last_sequence` is in the log: the producer's next batch follows it.
    pub fn advance_sequence(&mut self, producer_id: i64, producer_epoch: i16, last_sequence: i32) {
        self.txn_sequences.insert(
            producer_id,
            TxnSequence {
                producer_epoch,
                next: batch::sequence_add(last_sequence, 1),
            },
        );
    }

    /// The sequence a new transactional offset batch of `(producer_id, producer_epoch)`
    /// carries: right after the producer's last batch of that epoch here since its last
    /// marker, else 0 (the broker's producer state accepts only 0 after a BEGIN of a new
    /// epoch or a marker that emptied its batch cache).
    pub fn next_sequence(&self, producer_id: i64, producer_epoch: i16) -> i32 {
        self.txn_sequences
            .get(&producer_id)
            .filter(|s| s.producer_epoch == producer_epoch)
            .map_or(0, |s| s.next)
    }

    /// A transactional offset batch of `producer_id` is about to be appended: a marker
    /// of its producer the tail reads before [`Self::finish_txn_write`] is kept for it.
    pub fn begin_txn_write(&mut self, producer_id: i64) {
        self.txn_write = Some(TxnWrite {
            producer_id,
            ended: None,
        });
    }

    /// The append begun by [`Self::begin_txn_write`] wrote nothing.
    pub fn abandon_txn_write(&mut self) {
        self.txn_write = None;
    }

    /// The batch begun by [`Self::begin_txn_write`] was acknowledged at `first_offset`,
    /// its last record carrying `last_sequence` of `producer_epoch`; `records` (their
    /// record offsets set) are its records. Normally they become pending. But the
    /// producer's transaction may have ended while the append waited for its
    /// acknowledgement (its caller gave up, say, and aborted): the tail then read its
    /// marker, after this batch in the log, before this call. The log decides: the
    /// records count as that marker decided, exactly as a replay would apply them,
    /// rather than pending behind a marker already passed, forever.
    pub fn finish_txn_write(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        first_offset: i64,
        last_sequence: i32,
        records: Vec<GroupRecord>,
    ) {
        let ended = self
            .txn_write
            .take()
            .filter(|w| w.producer_id == producer_id)
            .and_then(|w| w.ended)
            .filter(|(marker_offset, _)| *marker_offset > first_offset);
        match ended {
            Some((_, true)) => records.into_iter().for_each(|r| self.apply(r)),
            Some((_, false)) => {}
            None => {
                for record in records {
                    self.stage(producer_id, record);
                }
                self.advance_sequence(producer_id, producer_epoch, last_sequence);
            }
        }
    }

    /// The COMMIT or ABORT marker of `producer_id`, at `offset`, was read: its pending
    /// offsets become committed or vanish, and its next transaction starts its
    /// sequences afresh.
    pub fn complete(&mut self, producer_id: i64, committed: bool, offset: i64) {
        if let Some(write) = self.txn_write.as_mut() {
            if write.producer_id == producer_id {
                write.ended = Some((offset, committed));
            }
        }
        for offsets in self.offsets.values_mut() {
            offsets.complete(producer_id, committed);
        }
        self.offsets
            .retain(|_, o| !o.committed().is_empty() || o.has_pending());
        self.txn_sequences.remove(&producer_id);
    }

    /// Whether the group exists here (a group record, or offsets of a group without
    /// members).
    pub fn knows(&self, group_id: &str) -> bool {
        self.groups.contains_key(group_id) || self.offsets.contains_key(group_id)
    }
}

/// What one replayed stretch of the log did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    /// The offset after the last batch examined.
    pub next_offset: i64,
    pub records: u64,
    pub markers: u64,
}

/// Which batches a replay applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// The load: everything below `fence_offset` (the fence and what follows is ours).
    Everything { fence_offset: i64 },
    /// The tail after the load: only COMMIT/ABORT markers, because everything else
    /// after the fence was written by this owner and applied when it was acknowledged.
    MarkersOnly,
}

/// Applies the batches of `bytes` (concatenated, as Fetch returns them with control
/// batches) at or after `from` to `state`.
pub fn replay(
    state: &mut SliceState,
    partition: i32,
    bytes: &[u8],
    from: i64,
    mode: Replay,
) -> Result<Replayed, CoordinatorError> {
    let corrupt = |offset: i64, reason: String| CoordinatorError::CorruptLog {
        partition,
        offset,
        reason,
    };
    let mut done = Replayed {
        next_offset: from,
        ..Replayed::default()
    };
    for item in Batches::new(bytes) {
        let (header, raw) = item.map_err(|e| corrupt(done.next_offset, e.to_string()))?;
        done.next_offset = done.next_offset.max(header.next_offset());
        if header.base_offset < from {
            continue;
        }
        if let Replay::Everything { fence_offset } = mode {
            if header.base_offset >= fence_offset {
                continue;
            }
        }
        if header.is_control() {
            let marker = control::decode_control(raw)
                .map_err(|e| corrupt(header.base_offset, e.to_string()))?;
            match marker.control_type {
                ControlType::Commit => state.complete(header.producer_id, true, header.base_offset),
                ControlType::Abort => state.complete(header.producer_id, false, header.base_offset),
                ControlType::Begin => {}
            }
            done.markers += 1;
            continue;
        }
        if mode == Replay::MarkersOnly {
            continue;
        }
        apply_data(state, &header, raw).map_err(|reason| corrupt(header.base_offset, reason))?;
        done.records += u64::try_from(header.record_count).unwrap_or(0);
    }
    Ok(done)
}

fn apply_data(state: &mut SliceState, header: &BatchHeader, raw: &[u8]) -> Result<(), String> {
    let records = batch::records(raw).map_err(|e| e.to_string())?;
    for record in records {
        let decoded = GroupRecord::decode(
            record.key.as_deref(),
            record.value.as_deref(),
            record.offset,
        )
        .map_err(|e| e.to_string())?;
        if header.is_transactional() {
            state.stage(header.producer_id, decoded);
        } else {
            state.apply(decoded);
        }
    }
    if header.is_transactional() {
        state.advance_sequence(
            header.producer_id,
            header.producer_epoch,
            header.last_sequence(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
