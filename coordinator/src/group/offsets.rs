//! A consumer group's committed offsets, and offsets pending in transactions (KIP-447).
//! Pure: which commits a group accepts, what a commit or a transaction's outcome does to
//! the offsets, and what OffsetFetch answers.
//!
//! The log decides: every offset carries the log offset of the record that stored it in
//! `__consumer_offsets`, and a value replaces another only if its record came later in
//! the log. So a transaction that commits after a plain commit of the same partition
//! (written after the transaction's offsets) does not undo it, and a coordinator that
//! replays the log ends with exactly the offsets the previous owner had.

use std::collections::BTreeMap;

use super::membership::Group;
use crate::txn::decide::TopicPartition;

/// Most bytes of metadata a committed offset carries (Kafka's
/// `offset.metadata.max.bytes`).
pub const MAX_METADATA_BYTES: usize = 4096;

/// One partition's committed (or pending) offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    /// The next offset the group reads.
    pub offset: i64,
    pub leader_epoch: Option<i32>,
    pub metadata: String,
    pub commit_ms: i64,
    /// Where the record that stored it lies in the group's `__consumer_offsets`
    /// partition.
    pub record_offset: i64,
}

/// Why a partition's offset was not committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitRefusal {
    #[error("member {member_id} is not a member of the group")]
    UnknownMemberId { member_id: String },
    #[error("member {member_id} committed at epoch {sent} but is at epoch {current}")]
    StaleMemberEpoch {
        member_id: String,
        sent: i32,
        current: i32,
    },
    #[error("member {member_id} does not own {topic}-{partition}")]
    NotOwned {
        member_id: String,
        topic: String,
        partition: i32,
    },
    #[error("{topic}-{partition} does not exist")]
    UnknownPartition { topic: String, partition: i32 },
    #[error("offset {offset} for {topic}-{partition} is negative")]
    InvalidOffset {
        topic: String,
        partition: i32,
        offset: i64,
    },
    #[error("metadata of {topic}-{partition} is {bytes} bytes; at most {MAX_METADATA_BYTES}")]
    MetadataTooLarge {
        topic: String,
        partition: i32,
        bytes: usize,
    },
}

/// Who commits: a member (with its epoch), or nobody for a group without members
/// (manual assignment, an operator resetting offsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committer {
    Member {
        member_id: String,
        member_epoch: i32,
    },
    Nobody,
}

/// Whether `committer` may commit `offset` for `tp` in `group`. `partitions(topic)`:
/// the topic's partition count, `None` if it does not exist.
pub fn check_commit(
    group: &Group,
    committer: &Committer,
    tp: &TopicPartition,
    offset: i64,
    metadata: &str,
    partitions: &dyn Fn(&str) -> Option<i32>,
) -> Result<(), CommitRefusal> {
    match committer {
        Committer::Nobody if !group.members.is_empty() => {
            // A group with members takes commits only from them (a consumer that
            // thinks it is alone would overwrite their progress).
            return Err(CommitRefusal::UnknownMemberId {
                member_id: String::new(),
            });
        }
        Committer::Nobody => {}
        Committer::Member {
            member_id,
            member_epoch,
        } => {
            let Some(member) = group.members.get(member_id) else {
                return Err(CommitRefusal::UnknownMemberId {
                    member_id: member_id.clone(),
                });
            };
            let current = member.assignment.member_epoch;
            if *member_epoch != current {
                return Err(CommitRefusal::StaleMemberEpoch {
                    member_id: member_id.clone(),
                    sent: *member_epoch,
                    current,
                });
            }
            // A member commits what it processed before it reports a revocation, so a
            // partition pending revocation is still its to commit.
            if !member.assignment.holds(tp) {
                return Err(CommitRefusal::NotOwned {
                    member_id: member_id.clone(),
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                });
            }
        }
    }
    if !partitions(&tp.topic).is_some_and(|n| (0..n).contains(&tp.partition)) {
        return Err(CommitRefusal::UnknownPartition {
            topic: tp.topic.clone(),
            partition: tp.partition,
        });
    }
    if offset < 0 {
        return Err(CommitRefusal::InvalidOffset {
            topic: tp.topic.clone(),
            partition: tp.partition,
            offset,
        });
    }
    if metadata.len() > MAX_METADATA_BYTES {
        return Err(CommitRefusal::MetadataTooLarge {
            topic: tp.topic.clone(),
            partition: tp.partition,
            bytes: metadata.len(),
        });
    }
    Ok(())
}

/// What OffsetFetch with `require_stable` cannot answer yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unstable {
    /// The producers whose open transactions hold an offset of the partition.
    pub producer_ids: Vec<i64>,
}

/// A group's offsets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupOffsets {
    committed: BTreeMap<TopicPartition, OffsetAndMetadata>,
    /// Per producer id, offsets its open transaction stored.
    pending: BTreeMap<i64, BTreeMap<TopicPartition, OffsetAndMetadata>>,
}

impl GroupOffsets {
    /// A plain commit, replayed or just appended.
    pub fn commit(&mut self, tp: TopicPartition, value: OffsetAndMetadata) {
        put_if_later(&mut self.committed, tp, value);
    }

    /// Offsets a transaction of `producer_id` stored; they count once its COMMIT
    /// marker is read.
    pub fn stage(&mut self, producer_id: i64, tp: TopicPartition, value: OffsetAndMetadata) {
        put_if_later(self.pending.entry(producer_id).or_default(), tp, value);
    }

    /// The transaction of `producer_id` ended (its marker was read).
    pub fn complete(&mut self, producer_id: i64, committed: bool) {
        let Some(offsets) = self.pending.remove(&producer_id) else {
            return;
        };
        if committed {
            for (tp, value) in offsets {
                put_if_later(&mut self.committed, tp, value);
            }
        }
    }

    /// The committed offset of `tp`; `Unstable` if `require_stable` and a transaction
    /// holds an offset for it.
    pub fn fetch(
        &self,
        tp: &TopicPartition,
        require_stable: bool,
    ) -> Result<Option<&OffsetAndMetadata>, Unstable> {
        if require_stable && self.is_pending(tp) {
            let producer_ids = self
                .pending
                .iter()
                .filter(|(_, p)| p.contains_key(tp))
                .map(|(id, _)| *id)
                .collect();
            return Err(Unstable { producer_ids });
        }
        Ok(self.committed.get(tp))
    }

    /// Every committed offset.
    pub fn committed(&self) -> &BTreeMap<TopicPartition, OffsetAndMetadata> {
        &self.committed
    }

    /// Whether any transaction holds offsets of this group.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether an open transaction holds an offset of `tp`.
    pub fn is_pending(&self, tp: &TopicPartition) -> bool {
        self.pending.values().any(|p| p.contains_key(tp))
    }

    /// Forgets `tp` (its offset expired, its topic was deleted, or the group was).
    pub fn remove(&mut self, tp: &TopicPartition) {
        self.committed.remove(tp);
    }
}

fn put_if_later(
    offsets: &mut BTreeMap<TopicPartition, OffsetAndMetadata>,
    tp: TopicPartition,
    value: OffsetAndMetadata,
) {
    match offsets.get(&tp) {
        Some(existing) if existing.record_offset > value.record_offset => {}
        _ => {
            offsets.insert(tp, value);
        }
    }
}

#[cfg(test)]
mod tests;
