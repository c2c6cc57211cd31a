//! The SDK's member side (`idem_client::group::member`) against the group coordinator's
//! rules (`idem_coordinator::group::membership`), both pure, composed the way the wire
//! composes them: random joins, heartbeats, lost answers, leaves, session expiries and
//! topic growth; each member asks for an assignor (none, uniform or range) as the SDK
//! does on every heartbeat, so the group switches assignors as members come and go. Whatever the interleaving, no partition is ever fetched by two live
//! members (each owns what its last handled answer gave it, and stops on a revocation
//! before it reports it), and once every answer arrives each member ends at its share.

use std::collections::{BTreeMap, BTreeSet};

use idem_client::group::member::{Event, HeartbeatAnswer, Membership};
use idem_coordinator::group::membership::{self, Group, Heartbeat, LEAVE_EPOCH};
use idem_coordinator::txn::decide::TopicPartition;
use idem_proto::ErrorCode;
use proptest::prelude::*;

const TOPIC: &str = "in";

fn to_coordinator(owned: &BTreeSet<(String, i32)>) -> BTreeSet<TopicPartition> {
    owned
        .iter()
        .map(|(topic, partition)| TopicPartition {
            topic: topic.clone(),
            partition: *partition,
        })
        .collect()
}

fn to_member(assigned: &BTreeSet<TopicPartition>) -> BTreeSet<(String, i32)> {
    assigned
        .iter()
        .map(|tp| (tp.topic.clone(), tp.partition))
        .collect()
}

fn error_code(e: &membership::HeartbeatError) -> ErrorCode {
    use membership::HeartbeatError as H;
    match e {
        H::UnknownMemberId { .. } => ErrorCode::UnknownMemberId,
        H::FencedMemberEpoch { .. } => ErrorCode::FencedMemberEpoch,
        H::UnreleasedInstanceId { .. } => ErrorCode::UnreleasedInstanceId,
        H::FencedInstanceId { .. } => ErrorCode::FencedInstanceId,
        H::UnsupportedAssignor { .. } => ErrorCode::UnsupportedAssignor,
        H::InvalidRequest(_) => ErrorCode::InvalidRequest,
    }
}

/// One heartbeat of member `name` as the SDK builds it, through the coordinator's
/// rules; the answer as the SDK reads it (None: the answer was lost).
fn exchange(
    group: &mut Group,
    name: &str,
    (member, assignor): &(Membership, Option<&str>),
    partitions: i32,
) -> HeartbeatAnswer {
    let next = member.next_heartbeat();
    let request = Heartbeat {
        member_id: name.into(),
        member_epoch: next.member_epoch,
        instance_id: None,
        rebalance_timeout_ms: 30_000,
        subscribed: next.subscribed.clone(),
        owned: Some(to_coordinator(&next.owned)),
    };
    let sizes = |t: &str| (t == TOPIC).then_some(partitions);
    match membership::heartbeat_naming_assignor(group, &request, *assignor, &sizes) {
        Ok((g, answer)) => {
            *group = g;
            HeartbeatAnswer {
                error: ErrorCode::None,
                member_epoch: answer.member_epoch,
                assignment: answer.assignment.as_ref().map(to_member),
            }
        }
        Err(e) => HeartbeatAnswer {
            error: error_code(&e),
            member_epoch: -1,
            assignment: None,
        },
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// Member i joins asking for this assignor.
    Join(usize, Option<&'static str>),
    Beat {
        member: usize,
        lost: bool,
    },
    Leave(usize),
    Expire(usize),
    Grow,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (0usize..4, prop_oneof![Just(None), Just(Some("uniform")), Just(Some("range"))])
            .prop_map(|(i, assignor)| Step::Join(i, assignor)),
        8 => (0usize..4, proptest::bool::weighted(0.2))
            .prop_map(|(member, lost)| Step::Beat { member, lost }),
        1 => (0usize..4).prop_map(Step::Leave),
        1 => (0usize..4).prop_map(Step::Expire),
        1 => Just(Step::Grow),
    ]
}

/// Applies an answer the member received; its events are handled at once (a revoked
/// partition is no longer fetched from here on).
fn receive(member: &mut Membership, answer: &HeartbeatAnswer) {
    if let Ok(events) = member.on_answer(answer) {
        for event in events {
            if let Event::Lost(lost) = event {
                assert!(member.owned().is_disjoint(&lost));
            }
        }
    }
}

fn check_disjoint(
    members: &BTreeMap<usize, (Membership, Option<&str>)>,
) -> Result<(), TestCaseError> {
    let mut seen: BTreeMap<(String, i32), usize> = BTreeMap::new();
    for (i, (m, _)) in members {
        for p in m.owned() {
            if let Some(other) = seen.insert(p.clone(), *i) {
                prop_assert!(false, "{p:?} fetched by m{other} and m{i}");
            }
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn no_partition_is_fetched_by_two_live_members_and_every_member_reaches_its_share(
        steps in proptest::collection::vec(step(), 0..80)
    ) {
        let mut partitions = 6;
        let mut group = Group::default();
        let mut members: BTreeMap<usize, (Membership, Option<&str>)> = BTreeMap::new();
        let name = |i: usize| format!("m{i}");
        let subscription: BTreeSet<String> = [TOPIC.to_string()].into_iter().collect();
        for s in steps {
            match s {
                Step::Join(i, assignor) => {
                    if let std::collections::btree_map::Entry::Vacant(slot) = members.entry(i) {
                        let mut m = (Membership::joining(subscription.clone()), assignor);
                        let answer = exchange(&mut group, &name(i), &m, partitions);
                        receive(&mut m.0, &answer);
                        slot.insert(m);
                    }
                }
                Step::Beat { member, lost } => {
                    if let Some(m) = members.get_mut(&member) {
                        let answer = exchange(&mut group, &name(member), m, partitions);
                        if !lost {
                            receive(&mut m.0, &answer);
                        }
                    }
                }
                Step::Leave(i) => {
                    if let Some((m, _)) = members.remove(&i) {
                        let leave = Heartbeat {
                            member_id: name(i),
                            member_epoch: LEAVE_EPOCH,
                            instance_id: None,
                            rebalance_timeout_ms: 30_000,
                            subscribed: None,
                            owned: Some(to_coordinator(m.owned())),
                        };
                        let sizes = |t: &str| (t == TOPIC).then_some(partitions);
                        group = membership::heartbeat(&group, &leave, &sizes).expect("leave").0;
                    }
                }
                Step::Expire(i) => {
                    // Its session ran out: the coordinator removes it; the process is a
                    // zombie whose commits are fenced from now on, no longer live.
                    let sizes = |t: &str| (t == TOPIC).then_some(partitions);
                    group = membership::remove_member(&group, &name(i), &sizes);
                    members.remove(&i);
                }
                Step::Grow => partitions += 1,
            }
            check_disjoint(&members)?;
        }
        for _ in 0..8 {
            let ids: Vec<usize> = members.keys().copied().collect();
            for i in ids {
                if let Some(m) = members.get_mut(&i) {
                    let answer = exchange(&mut group, &name(i), m, partitions);
                    receive(&mut m.0, &answer);
                }
                check_disjoint(&members)?;
            }
        }
        let mut all = BTreeSet::new();
        for (i, (m, _)) in &members {
            prop_assert_eq!(m.epoch(), group.group_epoch, "m{}", i);
            prop_assert_eq!(&to_coordinator(m.owned()), &group.target[&name(*i)]);
            all.extend(m.owned().iter().cloned());
        }
        if !members.is_empty() {
            prop_assert_eq!(all.len(), partitions as usize);
        }
    }
}
