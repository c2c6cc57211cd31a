use super::*;
use crate::group::membership::{heartbeat, Heartbeat, JOIN_EPOCH};
use proptest::prelude::*;
use std::collections::BTreeSet;

fn tp(partition: i32) -> TopicPartition {
    TopicPartition {
        topic: "in".into(),
        partition,
    }
}

fn sizes(topic: &str) -> Option<i32> {
    (topic == "in").then_some(4)
}

fn value(offset: i64, record_offset: i64) -> OffsetAndMetadata {
    OffsetAndMetadata {
        offset,
        leader_epoch: None,
        metadata: String::new(),
        commit_ms: 0,
        record_offset,
    }
}

/// A group where member "a" holds every partition at epoch 1.
fn group_of_one() -> Group {
    let join = Heartbeat {
        member_id: "a".into(),
        member_epoch: JOIN_EPOCH,
        instance_id: None,
        rebalance_timeout_ms: 30_000,
        subscribed: Some(["in".to_string()].into_iter().collect()),
        owned: Some(BTreeSet::new()),
    };
    heartbeat(&Group::default(), &join, &sizes)
        .expect("joins")
        .0
}

fn member(id: &str, epoch: i32) -> Committer {
    Committer::Member {
        member_id: id.into(),
        member_epoch: epoch,
    }
}

#[test]
fn given_the_member_at_its_epoch_then_its_commit_is_accepted() {
    let g = group_of_one();
    assert_eq!(
        check_commit(&g, &member("a", 1), &tp(0), 10, "", &sizes),
        Ok(())
    );
}

#[test]
fn given_bad_commits_then_each_is_refused_by_name() {
    let g = group_of_one();
    let check = |c: &Committer, p: i32, offset: i64, metadata: &str| {
        check_commit(&g, c, &tp(p), offset, metadata, &sizes)
    };
    assert!(matches!(
        check(&member("a", 0), 0, 1, ""),
        Err(CommitRefusal::StaleMemberEpoch {
            sent: 0,
            current: 1,
            ..
        })
    ));
    assert!(matches!(
        check(&member("b", 1), 0, 1, ""),
        Err(CommitRefusal::UnknownMemberId { .. })
    ));
    assert!(matches!(
        check(&Committer::Nobody, 0, 1, ""),
        Err(CommitRefusal::UnknownMemberId { .. })
    ));
    assert!(matches!(
        check(&member("a", 1), 9, 1, ""),
        Err(CommitRefusal::NotOwned { partition: 9, .. })
    ));
    assert!(matches!(
        check(&member("a", 1), 0, -1, ""),
        Err(CommitRefusal::InvalidOffset { offset: -1, .. })
    ));
    let big = "x".repeat(MAX_METADATA_BYTES + 1);
    assert!(matches!(
        check(&member("a", 1), 0, 1, &big),
        Err(CommitRefusal::MetadataTooLarge { .. })
    ));
}

#[test]
fn given_a_group_without_members_then_commits_without_a_member_are_accepted_for_existing_partitions(
) {
    let g = Group::default();
    assert_eq!(
        check_commit(&g, &Committer::Nobody, &tp(3), 0, "", &sizes),
        Ok(())
    );
    assert!(matches!(
        check_commit(&g, &Committer::Nobody, &tp(4), 0, "", &sizes),
        Err(CommitRefusal::UnknownPartition { partition: 4, .. })
    ));
}

#[test]
fn given_offsets_in_an_open_transaction_then_a_stable_fetch_waits_and_abort_discards_them() {
    let mut offsets = GroupOffsets::default();
    offsets.commit(tp(0), value(5, 1));
    offsets.stage(77, tp(0), value(9, 2));
    assert_eq!(
        offsets.fetch(&tp(0), true),
        Err(Unstable {
            producer_ids: vec![77]
        })
    );
    assert_eq!(offsets.fetch(&tp(0), false), Ok(Some(&value(5, 1))));
    assert_eq!(offsets.fetch(&tp(1), true), Ok(None));
    offsets.complete(77, false);
    assert_eq!(offsets.fetch(&tp(0), true), Ok(Some(&value(5, 1))));
    offsets.stage(77, tp(0), value(12, 3));
    offsets.complete(77, true);
    assert_eq!(offsets.fetch(&tp(0), true), Ok(Some(&value(12, 3))));
}

/// A record of a group's `__consumer_offsets` partition, in log order.
#[derive(Debug, Clone)]
enum Record {
    Commit {
        partition: i32,
        offset: i64,
    },
    Stage {
        producer: i64,
        partition: i32,
        offset: i64,
    },
    Marker {
        producer: i64,
        commit: bool,
    },
}

fn record() -> impl Strategy<Value = Record> {
    prop_oneof![
        (0i32..3, 0i64..100).prop_map(|(partition, offset)| Record::Commit { partition, offset }),
        (0i64..3, 0i32..3, 0i64..100).prop_map(|(producer, partition, offset)| Record::Stage {
            producer,
            partition,
            offset
        }),
        (0i64..3, any::<bool>()).prop_map(|(producer, commit)| Record::Marker { producer, commit }),
    ]
}

proptest! {
    /// Replaying the log gives, per partition, the value of the last record in the log
    /// among plain commits and records of transactions whose COMMIT was read; and a
    /// stable fetch is refused exactly while a transaction not yet ended holds one.
    #[test]
    fn replay_keeps_the_latest_committed_record_per_partition(log in proptest::collection::vec(record(), 0..60)) {
        let mut offsets = GroupOffsets::default();
        for (at, r) in log.iter().enumerate() {
            let at = at as i64;
            match r {
                Record::Commit { partition, offset } => offsets.commit(tp(*partition), value(*offset, at)),
                Record::Stage { producer, partition, offset } => offsets.stage(*producer, tp(*partition), value(*offset, at)),
                Record::Marker { producer, commit } => offsets.complete(*producer, *commit),
            }
        }
        for p in 0..3 {
            let mut expected: Option<(i64, i64)> = None;
            let mut open = false;
            for (at, r) in log.iter().enumerate() {
                let counted = match r {
                    Record::Commit { partition, offset } if *partition == p => Some(*offset),
                    Record::Stage { producer, partition, offset } if *partition == p => {
                        // Counts if the producer's next marker after it commits.
                        match log[at + 1..].iter().find_map(|r| match r {
                            Record::Marker { producer: q, commit } if q == producer => Some(*commit),
                            _ => None,
                        }) {
                            Some(true) => Some(*offset),
                            Some(false) => None,
                            None => { open = true; None }
                        }
                    }
                    _ => None,
                };
                if let Some(offset) = counted {
                    expected = Some((offset, at as i64));
                }
            }
            let got = offsets.fetch(&tp(p), false).expect("unstable fetch always answers").map(|v| (v.offset, v.record_offset));
            prop_assert_eq!(got, expected);
            prop_assert_eq!(offsets.fetch(&tp(p), true).is_err(), open);
        }
    }
}
