//! Kafka's OffsetDelete for one group, decided without I/O: the committed offsets of
//! partitions whose topic no member subscribes to are removed; a partition of a
//! subscribed topic is GROUP_SUBSCRIBED_TO_TOPIC (its offset is kept, a member may be
//! reading from it); a partition without an offset is answered without error, as Kafka
//! answers it. An offset an open transaction holds is not committed yet: only the
//! committed one goes.

use std::collections::BTreeSet;

use idem_proto::ErrorCode;

use super::membership::Group;
use super::offsets::GroupOffsets;
use crate::txn::decide::TopicPartition;

/// What OffsetDelete does to one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetDeletion {
    /// The committed offsets to remove (tombstones).
    pub removed: Vec<TopicPartition>,
    /// Each asked partition's answer, in the order asked.
    pub results: Vec<(TopicPartition, ErrorCode)>,
}

/// OffsetDelete of `asked` in the group with `group` members and `offsets`.
pub fn decide(
    group: Option<&Group>,
    offsets: Option<&GroupOffsets>,
    asked: &[TopicPartition],
) -> OffsetDeletion {
    let subscribed: BTreeSet<&str> = group
        .into_iter()
        .flat_map(|g| g.members.values())
        .flat_map(|m| m.subscribed.iter().map(String::as_str))
        .collect();
    let mut removed = Vec::new();
    let results = asked
        .iter()
        .map(|tp| {
            if subscribed.contains(tp.topic.as_str()) {
                return (tp.clone(), ErrorCode::GroupSubscribedToTopic);
            }
            let committed = offsets.is_some_and(|o| o.committed().contains_key(tp));
            if committed && !removed.contains(tp) {
                removed.push(tp.clone());
            }
            (tp.clone(), ErrorCode::None)
        })
        .collect();
    OffsetDeletion { removed, results }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::group::membership::Member;
    use crate::group::offsets::OffsetAndMetadata;
    use crate::group::reconcile::MemberAssignment;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    fn group_reading(topics: &[&str]) -> Group {
        let mut group = Group::default();
        group.members.insert(
            "m1".into(),
            Member {
                instance_id: None,
                subscribed: topics.iter().map(|t| (*t).to_string()).collect(),
                rebalance_timeout_ms: 30_000,
                assignment: MemberAssignment::joining(),
                previous_epoch: 0,
                left_temporarily: false,
            },
        );
        group
    }

    fn offsets(committed: &[TopicPartition]) -> GroupOffsets {
        let mut offsets = GroupOffsets::default();
        for tp in committed {
            offsets.commit(
                tp.clone(),
                OffsetAndMetadata {
                    offset: 5,
                    leader_epoch: None,
                    metadata: String::new(),
                    commit_ms: 0,
                    record_offset: 0,
                },
            );
        }
        offsets
    }

    #[test]
    fn given_a_topic_no_member_reads_then_its_committed_offsets_are_removed() {
        let group = group_reading(&["orders"]);
        let offsets = offsets(&[tp("orders", 0), tp("audit", 0), tp("audit", 1)]);
        let asked = [
            tp("audit", 0),
            tp("audit", 1),
            tp("audit", 2),
            tp("orders", 0),
        ];
        let deletion = decide(Some(&group), Some(&offsets), &asked);
        assert_eq!(deletion.removed, [tp("audit", 0), tp("audit", 1)]);
        assert_eq!(
            deletion.results,
            [
                (tp("audit", 0), ErrorCode::None),
                (tp("audit", 1), ErrorCode::None),
                // No offset: nothing to remove, no error.
                (tp("audit", 2), ErrorCode::None),
                (tp("orders", 0), ErrorCode::GroupSubscribedToTopic),
            ]
        );
    }

    #[test]
    fn given_an_empty_group_then_every_committed_offset_asked_is_removed() {
        let offsets = offsets(&[tp("orders", 0)]);
        let deletion = decide(None, Some(&offsets), &[tp("orders", 0), tp("orders", 0)]);
        assert_eq!(deletion.removed, [tp("orders", 0)], "once");
        let subscribed: BTreeSet<_> = deletion.results.iter().map(|(_, c)| *c).collect();
        assert_eq!(subscribed, BTreeSet::from([ErrorCode::None]));
    }
}
