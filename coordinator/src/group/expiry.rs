//! Offset expiry (Kafka's KIP-211, `offsets.retention.minutes`), pure: a group with no
//! members loses an offset once `retention` has passed since the later of when the group
//! became empty and when the offset was committed (a group that never had members, as
//! with manual assignment, counts from the commit alone). A group with members keeps
//! every offset, and an offset an open transaction holds is kept until the transaction
//! ends. A group with no members and no offsets left (and none pending) is removed.
//!
//! The shell passes the wall clock, appends [`Expired::records`] to the partition and
//! applies them only once they are acknowledged.

use super::membership::Group;
use super::offsets::GroupOffsets;
use super::records::GroupRecord;
use crate::txn::decide::TopicPartition;

/// What expires of one group now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expired {
    /// Committed offsets whose retention has passed.
    pub offsets: Vec<TopicPartition>,
    /// The group record goes too: no members, and nothing committed or pending is left.
    pub remove_group: bool,
}

impl Expired {
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty() && !self.remove_group
    }

    /// The tombstones that persist this expiry, in one batch.
    pub fn records(&self, group_id: &str) -> Vec<GroupRecord> {
        let mut records: Vec<GroupRecord> = self
            .offsets
            .iter()
            .map(|tp| GroupRecord::OffsetRemoved {
                group_id: group_id.to_string(),
                tp: tp.clone(),
            })
            .collect();
        if self.remove_group {
            records.push(GroupRecord::GroupRemoved {
                group_id: group_id.to_string(),
            });
        }
        records
    }
}

/// What of `group` (its record, `None` for a group only offsets name) and its `offsets`
/// has expired at `now_ms`.
pub fn expired(
    group: Option<&Group>,
    offsets: Option<&GroupOffsets>,
    retention_ms: i64,
    now_ms: i64,
) -> Expired {
    if group.is_some_and(|g| !g.members.is_empty()) {
        return Expired::default();
    }
    let empty_since = group.and_then(|g| g.empty_since_ms);
    let due = |commit_ms: i64| {
        let base = empty_since.map_or(commit_ms, |since| since.max(commit_ms));
        now_ms >= base.saturating_add(retention_ms)
    };
    let mut expired = Expired::default();
    let mut kept = 0usize;
    if let Some(offsets) = offsets {
        for (tp, value) in offsets.committed() {
            if due(value.commit_ms) && !offsets.is_pending(tp) {
                expired.offsets.push(tp.clone());
            } else {
                kept += 1;
            }
        }
    }
    let pending = offsets.is_some_and(GroupOffsets::has_pending);
    // Only a group record needs its tombstone; offsets alone vanish with their last one.
    expired.remove_group = group.is_some() && kept == 0 && !pending;
    expired
}

/// `next` (what a decider made of `before`) with when it became empty: now if its last
/// member just went, unchanged while it stays empty, `None` while it has members.
pub fn note_emptiness(before: &Group, mut next: Group, now_ms: i64) -> Group {
    next.empty_since_ms = match (before.members.is_empty(), next.members.is_empty()) {
        (_, false) => None,
        (false, true) => Some(now_ms),
        (true, true) => before.empty_since_ms,
    };
    next
}

/// A group read back from a record written before expiry existed has no
/// `empty_since_ms`: if it has no members it counts as empty since this load (`now_ms`),
/// so it keeps its offsets for a whole retention from the load. Not persisted: the next
/// change of the group writes it, and a later load starts the clock again.
pub fn empty_since_load(group: &mut Group, now_ms: i64) {
    if group.members.is_empty() && group.empty_since_ms.is_none() {
        group.empty_since_ms = Some(now_ms);
    }
}

#[cfg(test)]
mod tests;
