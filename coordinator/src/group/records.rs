//! Records of `__consumer_offsets` (docs/groups.md): key and value are JSON; a group's
//! whole state under `{"group": g}`, each committed offset under `{"group": g, "topic":
//! t, "partition": p}`, the fence a new owner writes first under the empty key (the
//! same record as the transaction log's). No value is a tombstone. Keys are written
//! with their fields in one order, so the cleaner sees one key per group or partition.
//! Decoding is strict, as the transaction log's: skipping a record a coordinator wrote
//! could forget a member's partitions or a committed offset.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::classic_member::ClassicMember;
use super::membership::{Group, Member};
use super::offsets::OffsetAndMetadata;
use super::reconcile::{MemberAssignment, MemberState};
use crate::log::record::{LogRecord, RecordError};
use crate::txn::decide::TopicPartition;

/// One record of a `__consumer_offsets` partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRecord {
    /// A new owner took the partition over at this coordinator epoch.
    Fence {
        coordinator_epoch: i32,
    },
    Group {
        group_id: String,
        group: Group,
    },
    /// The group was deleted or expired.
    GroupRemoved {
        group_id: String,
    },
    /// `value.record_offset` is not stored: it is where the record is read from.
    Offset {
        group_id: String,
        tp: TopicPartition,
        value: OffsetAndMetadata,
    },
    OffsetRemoved {
        group_id: String,
        tp: TopicPartition,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Key {
    group: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    topic: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    partition: Option<i32>,
}

#[derive(Debug, Serialize, Deserialize)]
struct GroupValue {
    group_epoch: i32,
    target_epoch: i32,
    partition_counts: BTreeMap<String, i32>,
    members: Vec<MemberValue>,
    /// Absent from records written before offset expiry existed; such a group with no
    /// members counts as empty since the load that reads it (`expiry::empty_since_load`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    empty_since_ms: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct MemberValue {
    member_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    instance_id: Option<String>,
    subscribed: BTreeSet<String>,
    rebalance_timeout_ms: i32,
    member_epoch: i32,
    previous_epoch: i32,
    state: String,
    assigned: Vec<PartitionValue>,
    pending_revocation: Vec<PartitionValue>,
    target: Vec<PartitionValue>,
    #[serde(default)]
    left_temporarily: bool,
    /// The server-side assignor the member asked for; absent in records written before
    /// members could ask (they asked for none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    server_assignor: Option<String>,
    /// A member speaking Kafka's classic protocol; absent for KIP-848 members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    classic: Option<ClassicValue>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassicValue {
    session_timeout_ms: i32,
    protocols: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct PartitionValue {
    topic: String,
    partition: i32,
}

#[derive(Debug, Serialize, Deserialize)]
struct OffsetValue {
    offset: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    leader_epoch: Option<i32>,
    metadata: String,
    commit_ms: i64,
}

impl GroupRecord {
    /// The record's key and value bytes (no value: a tombstone).
    pub fn encode(&self) -> (Bytes, Option<Bytes>) {
        match self {
            GroupRecord::Fence { coordinator_epoch } => LogRecord::Fence {
                coordinator_epoch: *coordinator_epoch,
            }
            .encode(),
            GroupRecord::Group { group_id, group } => {
                (group_key(group_id), Some(json(&group_value(group))))
            }
            GroupRecord::GroupRemoved { group_id } => (group_key(group_id), None),
            GroupRecord::Offset {
                group_id,
                tp,
                value,
            } => (
                offset_key(group_id, tp),
                Some(json(&OffsetValue {
                    offset: value.offset,
                    leader_epoch: value.leader_epoch,
                    metadata: value.metadata.clone(),
                    commit_ms: value.commit_ms,
                })),
            ),
            GroupRecord::OffsetRemoved { group_id, tp } => (offset_key(group_id, tp), None),
        }
    }

    /// Reads the record stored at `record_offset` back.
    pub fn decode(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        record_offset: i64,
    ) -> Result<GroupRecord, RecordError> {
        let key = key.unwrap_or_default();
        if key.is_empty() {
            return match LogRecord::decode(None, value)? {
                LogRecord::Fence { coordinator_epoch } => {
                    Ok(GroupRecord::Fence { coordinator_epoch })
                }
                other => Err(RecordError::BadValue(format!(
                    "the empty key holds only fences, not {other:?}"
                ))),
            };
        }
        let key: Key = serde_json::from_slice(key).map_err(|e| bad("key", e))?;
        let group_id = key.group;
        match (key.topic, key.partition, value) {
            (None, None, None) => Ok(GroupRecord::GroupRemoved { group_id }),
            (None, None, Some(value)) => {
                let v: GroupValue = serde_json::from_slice(value).map_err(|e| bad("group", e))?;
                Ok(GroupRecord::Group {
                    group_id,
                    group: group_from(v)?,
                })
            }
            (Some(topic), Some(partition), value) => {
                let tp = TopicPartition { topic, partition };
                let Some(value) = value else {
                    return Ok(GroupRecord::OffsetRemoved { group_id, tp });
                };
                let v: OffsetValue = serde_json::from_slice(value).map_err(|e| bad("offset", e))?;
                Ok(GroupRecord::Offset {
                    group_id,
                    tp,
                    value: OffsetAndMetadata {
                        offset: v.offset,
                        leader_epoch: v.leader_epoch,
                        metadata: v.metadata,
                        commit_ms: v.commit_ms,
                        record_offset,
                    },
                })
            }
            _ => Err(RecordError::BadValue(
                "a key names both a topic and a partition, or neither".into(),
            )),
        }
    }
}

fn bad(what: &str, e: serde_json::Error) -> RecordError {
    RecordError::BadValue(format!("{what}: {e}"))
}

fn json(value: &impl Serialize) -> Bytes {
    // Plain integers, strings, maps and bools: serialising cannot fail.
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

fn group_key(group_id: &str) -> Bytes {
    json(&Key {
        group: group_id.to_string(),
        topic: None,
        partition: None,
    })
}

fn offset_key(group_id: &str, tp: &TopicPartition) -> Bytes {
    json(&Key {
        group: group_id.to_string(),
        topic: Some(tp.topic.clone()),
        partition: Some(tp.partition),
    })
}

fn state_name(state: MemberState) -> &'static str {
    match state {
        MemberState::Stable => "Stable",
        MemberState::UnrevokedPartitions => "UnrevokedPartitions",
        MemberState::UnreleasedPartitions => "UnreleasedPartitions",
    }
}

fn state_from(name: &str) -> Result<MemberState, RecordError> {
    match name {
        "Stable" => Ok(MemberState::Stable),
        "UnrevokedPartitions" => Ok(MemberState::UnrevokedPartitions),
        "UnreleasedPartitions" => Ok(MemberState::UnreleasedPartitions),
        other => Err(RecordError::UnknownState(other.to_string())),
    }
}

fn partition_values<'a>(tps: impl IntoIterator<Item = &'a TopicPartition>) -> Vec<PartitionValue> {
    tps.into_iter()
        .map(|tp| PartitionValue {
            topic: tp.topic.clone(),
            partition: tp.partition,
        })
        .collect()
}

fn topic_partitions(values: Vec<PartitionValue>) -> BTreeSet<TopicPartition> {
    values
        .into_iter()
        .map(|p| TopicPartition {
            topic: p.topic,
            partition: p.partition,
        })
        .collect()
}

fn group_value(group: &Group) -> GroupValue {
    let empty = BTreeSet::new();
    GroupValue {
        group_epoch: group.group_epoch,
        target_epoch: group.target_epoch,
        partition_counts: group.partition_counts.clone(),
        empty_since_ms: group.empty_since_ms,
        members: group
            .members
            .iter()
            .map(|(id, m)| MemberValue {
                member_id: id.clone(),
                instance_id: m.instance_id.clone(),
                subscribed: m.subscribed.clone(),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                member_epoch: m.assignment.member_epoch,
                previous_epoch: m.previous_epoch,
                state: state_name(m.assignment.state).to_string(),
                assigned: partition_values(&m.assignment.assigned),
                pending_revocation: partition_values(&m.assignment.pending_revocation),
                target: partition_values(group.target.get(id).unwrap_or(&empty)),
                left_temporarily: m.left_temporarily,
                server_assignor: group.server_assignors.get(id).cloned(),
                classic: group.classic.get(id).map(|c| ClassicValue {
                    session_timeout_ms: c.session_timeout_ms,
                    protocols: c.protocols.clone(),
                }),
            })
            .collect(),
    }
}

fn group_from(value: GroupValue) -> Result<Group, RecordError> {
    let mut group = Group {
        group_epoch: value.group_epoch,
        target_epoch: value.target_epoch,
        partition_counts: value.partition_counts,
        empty_since_ms: value.empty_since_ms,
        ..Group::default()
    };
    for m in value.members {
        group
            .target
            .insert(m.member_id.clone(), topic_partitions(m.target));
        if let Some(asked) = m.server_assignor {
            group.server_assignors.insert(m.member_id.clone(), asked);
        }
        if let Some(c) = m.classic {
            if c.protocols.is_empty() {
                return Err(RecordError::BadValue(format!(
                    "classic member {} offers no protocol",
                    m.member_id
                )));
            }
            group.classic.insert(
                m.member_id.clone(),
                ClassicMember {
                    session_timeout_ms: c.session_timeout_ms,
                    protocols: c.protocols,
                },
            );
        }
        group.members.insert(
            m.member_id,
            Member {
                instance_id: m.instance_id,
                subscribed: m.subscribed,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                assignment: MemberAssignment {
                    member_epoch: m.member_epoch,
                    state: state_from(&m.state)?,
                    assigned: topic_partitions(m.assigned),
                    pending_revocation: topic_partitions(m.pending_revocation),
                },
                previous_epoch: m.previous_epoch,
                left_temporarily: m.left_temporarily,
            },
        );
    }
    Ok(group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_tps() -> impl Strategy<Value = BTreeSet<TopicPartition>> {
        proptest::collection::btree_set(
            ("[a-c]{1,3}", 0i32..8)
                .prop_map(|(topic, partition)| TopicPartition { topic, partition }),
            0..5,
        )
    }

    fn any_member() -> impl Strategy<Value = (Member, BTreeSet<TopicPartition>)> {
        (
            proptest::option::of("[a-z0-9-]{1,12}"),
            proptest::collection::btree_set("[a-c]{1,3}", 1..3),
            (1i32..100_000, -2i32..50, 0i32..50, 0usize..3),
            (any_tps(), any_tps(), any_tps(), any::<bool>()),
        )
            .prop_map(
                |(
                    instance_id,
                    subscribed,
                    (timeout, epoch, previous, state),
                    (assigned, pending, target, left),
                )| {
                    let state = [
                        MemberState::Stable,
                        MemberState::UnrevokedPartitions,
                        MemberState::UnreleasedPartitions,
                    ][state];
                    (
                        Member {
                            instance_id,
                            subscribed,
                            rebalance_timeout_ms: timeout,
                            assignment: MemberAssignment {
                                member_epoch: epoch,
                                state,
                                assigned,
                                pending_revocation: pending,
                            },
                            previous_epoch: previous,
                            left_temporarily: left,
                        },
                        target,
                    )
                },
            )
    }

    fn any_group() -> impl Strategy<Value = Group> {
        (
            0i32..1000,
            0i32..1000,
            proptest::collection::btree_map("[a-c]{1,3}", 0i32..64, 0..4),
            proptest::collection::btree_map(
                "[a-z0-9-]{1,36}",
                (
                    any_member(),
                    proptest::option::of("uniform|range|[a-z]{1,8}"),
                    proptest::option::of((
                        1i32..100_000,
                        proptest::collection::vec("range|roundrobin|[a-z-]{1,20}", 1..3),
                    )),
                ),
                0..4,
            ),
            proptest::option::of(0i64..i64::MAX),
        )
            .prop_map(
                |(group_epoch, target_epoch, partition_counts, members, empty_since_ms)| {
                    let mut g = Group {
                        group_epoch,
                        target_epoch,
                        partition_counts,
                        empty_since_ms,
                        ..Group::default()
                    };
                    for (id, ((member, target), asked, classic)) in members {
                        g.target.insert(id.clone(), target);
                        if let Some((session_timeout_ms, protocols)) = classic {
                            g.classic.insert(
                                id.clone(),
                                ClassicMember {
                                    session_timeout_ms,
                                    protocols,
                                },
                            );
                        }
                        if let Some(asked) = asked {
                            g.server_assignors.insert(id.clone(), asked);
                        }
                        g.members.insert(id, member);
                    }
                    g
                },
            )
    }

    fn round_trip(record: &GroupRecord, record_offset: i64) -> GroupRecord {
        let (key, value) = record.encode();
        GroupRecord::decode(Some(&key), value.as_deref(), record_offset).expect("decodes")
    }

    proptest! {
        #[test]
        fn a_group_reads_back_as_written(group_id in "\\PC{1,40}", group in any_group()) {
            let record = GroupRecord::Group { group_id, group };
            prop_assert_eq!(round_trip(&record, 0), record);
        }

        #[test]
        fn an_offset_reads_back_with_where_it_was_read(
            group_id in "\\PC{1,40}", topic in "[a-z._-]{1,20}", partition in 0i32..1000,
            offset in 0i64..i64::MAX, leader_epoch in proptest::option::of(0i32..100),
            metadata in "\\PC{0,30}", commit_ms in 0i64..i64::MAX, at in 0i64..i64::MAX,
        ) {
            let value = OffsetAndMetadata { offset, leader_epoch, metadata, commit_ms, record_offset: at };
            let tp = TopicPartition { topic, partition };
            let record = GroupRecord::Offset { group_id: group_id.clone(), tp: tp.clone(), value };
            prop_assert_eq!(round_trip(&record, at), record);
            let removed = GroupRecord::OffsetRemoved { group_id, tp };
            prop_assert_eq!(round_trip(&removed, at), removed);
        }
    }

    #[test]
    fn given_a_group_and_its_tombstone_then_they_share_one_key() {
        let group = GroupRecord::Group {
            group_id: "g".into(),
            group: Group::default(),
        };
        let removed = GroupRecord::GroupRemoved {
            group_id: "g".into(),
        };
        assert_eq!(group.encode().0, removed.encode().0);
        assert_eq!(round_trip(&removed, 3), removed);
        let fence = GroupRecord::Fence {
            coordinator_epoch: 4,
        };
        assert_eq!(round_trip(&fence, 0), fence);
    }

    /// A group record written before members could name an assignor reads back with
    /// none asked for.
    #[test]
    fn given_a_member_record_without_an_assignor_then_it_asked_for_none() {
        let key = br#"{"group":"g"}"#;
        let value = br#"{"group_epoch":2,"target_epoch":2,"partition_counts":{"t":1},"members":[{"member_id":"a","subscribed":["t"],"rebalance_timeout_ms":1000,"member_epoch":2,"previous_epoch":1,"state":"Stable","assigned":[{"topic":"t","partition":0}],"pending_revocation":[],"target":[{"topic":"t","partition":0}]}]}"#;
        let Ok(GroupRecord::Group { group, .. }) = GroupRecord::decode(Some(key), Some(value), 0)
        else {
            panic!("an old record decodes");
        };
        assert!(group.members.contains_key("a"));
        assert!(group.server_assignors.is_empty());
        let mut asked = group.clone();
        asked.server_assignors.insert("a".into(), "range".into());
        let record = GroupRecord::Group {
            group_id: "g".into(),
            group: asked,
        };
        assert_eq!(round_trip(&record, 0), record);
    }

    #[test]
    fn given_a_group_record_written_before_expiry_then_it_reads_back_with_no_empty_since() {
        let old = br#"{"group_epoch":3,"target_epoch":3,"partition_counts":{"t":2},"members":[]}"#;
        let read = GroupRecord::decode(Some(&group_key("g")), Some(old), 0).expect("decodes");
        let GroupRecord::Group { group, .. } = read else {
            panic!("a group record: {read:?}");
        };
        assert_eq!((group.group_epoch, group.empty_since_ms), (3, None));
        // And a group with members writes no field for it, as before.
        let (_, value) = GroupRecord::Group {
            group_id: "g".into(),
            group: Group::default(),
        }
        .encode();
        let value = String::from_utf8(value.expect("a value").to_vec()).expect("utf-8");
        assert!(!value.contains("empty_since_ms"), "{value}");
    }

    #[test]
    fn given_records_no_coordinator_wrote_then_they_are_refused() {
        for (key, value) in [
            (&b"not json"[..], Some(&b"{}"[..])),
            (br#"{"group":"g","topic":"t"}"#, Some(b"{}")),
            (br#"{"group":"g"}"#, Some(b"{\"group_epoch\":1}")),
            (br#"{"group":"g","x":1}"#, None),
            (b"", None),
        ] {
            assert!(
                GroupRecord::decode(Some(key), value, 0).is_err(),
                "{:?}",
                String::from_utf8_lossy(key)
            );
        }
    }
}
