use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::group::membership::Member;
use crate::group::offsets::OffsetAndMetadata;
use crate::group::reconcile::MemberAssignment;
use crate::group::slice::SliceState;

fn tp(partition: i32) -> TopicPartition {
    TopicPartition {
        topic: "in".into(),
        partition,
    }
}

fn member() -> Member {
    Member {
        instance_id: None,
        subscribed: ["in".to_string()].into_iter().collect(),
        rebalance_timeout_ms: 30_000,
        assignment: MemberAssignment::joining(),
        previous_epoch: 0,
        left_temporarily: false,
    }
}

fn group(members: usize, empty_since_ms: Option<i64>) -> Group {
    let mut g = Group {
        group_epoch: 3,
        empty_since_ms,
        ..Group::default()
    };
    for i in 0..members {
        g.members.insert(format!("m{i}"), member());
    }
    g
}

fn value(commit_ms: i64, record_offset: i64) -> OffsetAndMetadata {
    OffsetAndMetadata {
        offset: 10,
        leader_epoch: None,
        metadata: String::new(),
        commit_ms,
        record_offset,
    }
}

/// Committed offsets of partitions 0.. with these commit times; `pending` partitions
/// also have an offset in producer 7's open transaction.
fn offsets(commits: &[i64], pending: &BTreeSet<i32>) -> GroupOffsets {
    let mut o = GroupOffsets::default();
    for (p, commit_ms) in commits.iter().enumerate() {
        o.commit(tp(p as i32), value(*commit_ms, p as i64));
    }
    for p in pending {
        o.stage(7, tp(*p), value(0, 100 + i64::from(*p)));
    }
    o
}

const RETENTION: i64 = 1_000;

#[test]
fn given_the_last_member_left_then_offsets_expire_a_retention_after_it_left() {
    let g = group(0, Some(5_000));
    let o = offsets(&[1_000, 5_500], &BTreeSet::new());
    // Committed long before the group emptied: the clock starts when it emptied.
    assert!(expired(Some(&g), Some(&o), RETENTION, 5_999).is_empty());
    let at_6000 = expired(Some(&g), Some(&o), RETENTION, 6_000);
    assert_eq!(at_6000.offsets, [tp(0)]);
    assert!(!at_6000.remove_group, "partition 1 is still kept");
    // Committed after it emptied (an operator's reset): from its own commit.
    let at_6500 = expired(Some(&g), Some(&o), RETENTION, 6_500);
    assert_eq!(at_6500.offsets, [tp(0), tp(1)]);
    assert!(at_6500.remove_group);
    assert_eq!(
        at_6500.records("g"),
        [
            GroupRecord::OffsetRemoved {
                group_id: "g".into(),
                tp: tp(0)
            },
            GroupRecord::OffsetRemoved {
                group_id: "g".into(),
                tp: tp(1)
            },
            GroupRecord::GroupRemoved {
                group_id: "g".into()
            },
        ]
    );
}

#[test]
fn given_offsets_committed_without_members_then_they_expire_from_their_commit() {
    let o = offsets(&[1_000, 2_000], &BTreeSet::new());
    assert!(expired(None, Some(&o), RETENTION, 1_999).is_empty());
    assert_eq!(
        expired(None, Some(&o), RETENTION, 2_000),
        Expired {
            offsets: vec![tp(0)],
            remove_group: false
        }
    );
    // No group record: the last offset's tombstone is all there is to write.
    let all = expired(None, Some(&o), RETENTION, 3_000);
    assert_eq!(all.records("g").len(), 2);
    assert!(!all.remove_group);
}

#[test]
fn given_a_group_that_emptied_without_offsets_then_it_is_removed() {
    let removed = expired(Some(&group(0, Some(5_000))), None, RETENTION, 5_000);
    assert_eq!(
        removed.records("g"),
        [GroupRecord::GroupRemoved {
            group_id: "g".into()
        }]
    );
}

#[test]
fn given_members_come_and_go_then_empty_since_is_when_the_last_one_went() {
    let two = group(2, None);
    let one = group(1, None);
    let none = group(0, None);
    assert_eq!(note_emptiness(&two, one.clone(), 10).empty_since_ms, None);
    let emptied = note_emptiness(&one, none.clone(), 20);
    assert_eq!(emptied.empty_since_ms, Some(20));
    // Staying empty keeps the first time; a new member clears it.
    assert_eq!(
        note_emptiness(&emptied, emptied.clone(), 30).empty_since_ms,
        Some(20)
    );
    assert_eq!(note_emptiness(&emptied, one, 40).empty_since_ms, None);
    // A group never seen, still empty after a refused or no-op request: nothing to note.
    assert_eq!(note_emptiness(&none, none.clone(), 50), none);
}

#[test]
fn given_an_empty_group_loaded_from_an_old_record_then_it_is_empty_since_the_load() {
    let mut old = group(0, None);
    empty_since_load(&mut old, 77);
    assert_eq!(old.empty_since_ms, Some(77));
    let mut kept = group(0, Some(5));
    empty_since_load(&mut kept, 77);
    assert_eq!(kept.empty_since_ms, Some(5));
    let mut busy = group(1, None);
    empty_since_load(&mut busy, 77);
    assert_eq!(busy.empty_since_ms, None);
}

fn any_case() -> impl Strategy<Value = (Option<Group>, GroupOffsets, i64, i64)> {
    (
        proptest::option::weighted(0.8, (0usize..3, proptest::option::of(0i64..3_000))),
        proptest::collection::vec(0i64..3_000, 0..6),
        proptest::collection::btree_set(0i32..7, 0..3),
        1i64..2_000,
        0i64..6_000,
    )
        .prop_map(|(g, commits, pending, retention, now)| {
            let g = g.map(|(members, since)| group(members, since));
            (g, offsets(&commits, &pending), retention, now)
        })
}

fn base(g: Option<&Group>, commit_ms: i64) -> i64 {
    g.and_then(|g| g.empty_since_ms)
        .map_or(commit_ms, |since| since.max(commit_ms))
}

proptest! {
    #[test]
    fn a_group_with_members_never_loses_an_offset_or_its_record(
        (g, o, retention, now) in any_case(),
    ) {
        prop_assume!(g.as_ref().is_some_and(|g| !g.members.is_empty()));
        prop_assert_eq!(expired(g.as_ref(), Some(&o), retention, now), Expired::default());
    }

    #[test]
    fn no_offset_expires_before_its_retention_and_each_does_once_it_passed(
        (g, o, retention, now) in any_case(),
    ) {
        prop_assume!(g.as_ref().is_none_or(|g| g.members.is_empty()));
        let out = expired(g.as_ref(), Some(&o), retention, now);
        for (tp, value) in o.committed() {
            let due = now >= base(g.as_ref(), value.commit_ms) + retention;
            prop_assert_eq!(out.offsets.contains(tp), due && !o.is_pending(tp), "{:?}", tp);
            prop_assert!(now >= value.commit_ms + retention || !out.offsets.contains(tp));
        }
    }

    #[test]
    fn an_offset_an_open_transaction_holds_never_expires_nor_does_its_group(
        (g, o, retention, now) in any_case(),
    ) {
        let out = expired(g.as_ref(), Some(&o), retention, now);
        prop_assert!(out.offsets.iter().all(|tp| !o.is_pending(tp)));
        if o.has_pending() {
            prop_assert!(!out.remove_group);
        }
    }

    #[test]
    fn a_group_is_removed_only_when_empty_and_every_offset_expired(
        (g, o, retention, now) in any_case(),
    ) {
        let out = expired(g.as_ref(), Some(&o), retention, now);
        let all_expired = out.offsets.len() == o.committed().len() && !o.has_pending();
        let empty = g.as_ref().is_some_and(|g| g.members.is_empty());
        prop_assert_eq!(out.remove_group, empty && all_expired);
    }

    /// What ListGroups, DescribeGroups and OffsetFetch read: once the tombstones are
    /// applied, a group with nothing left is gone and the rest is untouched.
    #[test]
    fn applying_the_tombstones_leaves_exactly_what_did_not_expire(
        (g, o, retention, now) in any_case(),
    ) {
        let mut slice = SliceState::default();
        if let Some(g) = &g {
            slice.groups.insert("g".into(), g.clone());
        }
        if o.committed().len() + usize::from(o.has_pending()) > 0 {
            slice.offsets.insert("g".into(), o.clone());
        }
        let out = expired(g.as_ref(), Some(&o), retention, now);
        for record in out.records("g") {
            slice.apply(record);
        }
        let left: Vec<&TopicPartition> = slice
            .offsets
            .get("g")
            .map(|o| o.committed().keys().collect())
            .unwrap_or_default();
        let kept: Vec<&TopicPartition> =
            o.committed().keys().filter(|tp| !out.offsets.contains(tp)).collect();
        prop_assert_eq!(left, kept);
        let gone = out.remove_group || (g.is_none() && out.offsets.len() == o.committed().len() && !o.has_pending());
        prop_assert_eq!(slice.knows("g"), !gone);
    }
}
