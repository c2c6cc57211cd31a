use super::*;
use proptest::prelude::*;

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition {
        topic: topic.into(),
        partition,
    }
}

fn topics(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|t| t.to_string()).collect()
}

fn six(topic: &str) -> Option<i32> {
    (topic == "in").then_some(6)
}

fn join_request(member: &str) -> Heartbeat {
    Heartbeat {
        member_id: member.into(),
        member_epoch: JOIN_EPOCH,
        instance_id: None,
        rebalance_timeout_ms: 30_000,
        subscribed: Some(topics(&["in"])),
        owned: Some(BTreeSet::new()),
    }
}

fn beat(member: &str, epoch: i32, owned: &BTreeSet<TopicPartition>) -> Heartbeat {
    Heartbeat {
        member_id: member.into(),
        member_epoch: epoch,
        instance_id: None,
        rebalance_timeout_ms: 30_000,
        subscribed: None,
        owned: Some(owned.clone()),
    }
}

#[test]
fn given_a_first_member_then_it_gets_every_partition_at_epoch_one() {
    let (group, answer) = heartbeat(&Group::default(), &join_request("a"), &six).expect("joins");
    assert_eq!(answer.member_epoch, 1);
    assert_eq!(answer.assignment.map(|a| a.len()), Some(6));
    assert_eq!((group.group_epoch, group.target_epoch), (1, 1));
}

#[test]
fn given_a_second_member_then_the_first_revokes_half_before_the_second_gets_them() {
    let (g, a) = heartbeat(&Group::default(), &join_request("a"), &six).expect("a joins");
    let a_owns = a.assignment.expect("assigned");
    let (g, b) = heartbeat(&g, &join_request("b"), &six).expect("b joins");
    // a still holds everything: b is at the new epoch with nothing yet.
    assert_eq!(b.member_epoch, 2);
    assert_eq!(b.assignment, Some(BTreeSet::new()));
    let (g, a2) = heartbeat(&g, &beat("a", 1, &a_owns), &six).expect("a beats");
    assert_eq!(a2.member_epoch, 1, "a revokes at its epoch");
    let a_now = a2.assignment.expect("assigned");
    assert_eq!(a_now.len(), 3);
    // b asks again before a reported the revocation: still nothing.
    let (g, b2) = heartbeat(&g, &beat("b", 2, &BTreeSet::new()), &six).expect("b beats");
    assert_eq!(b2.assignment, Some(BTreeSet::new()));
    let (g, a3) = heartbeat(&g, &beat("a", 1, &a_now), &six).expect("a acks");
    assert_eq!(a3.member_epoch, 2);
    let (_, b3) = heartbeat(&g, &beat("b", 2, &BTreeSet::new()), &six).expect("b beats");
    let b_now = b3.assignment.expect("assigned");
    assert_eq!(b_now.len(), 3);
    assert!(b_now.is_disjoint(&a_now));
}

#[test]
fn given_a_stale_or_future_epoch_then_the_member_is_fenced_and_nothing_changes() {
    let (g, _) = heartbeat(&Group::default(), &join_request("a"), &six).expect("a joins");
    for sent in [7, -5] {
        let refused = heartbeat(&g, &beat("a", sent, &BTreeSet::new()), &six);
        assert_eq!(
            refused,
            Err(HeartbeatError::FencedMemberEpoch {
                member_id: "a".into(),
                sent,
                current: 1
            })
        );
    }
    assert_eq!(
        heartbeat(&g, &beat("zombie", 1, &BTreeSet::new()), &six),
        Err(HeartbeatError::UnknownMemberId {
            member_id: "zombie".into()
        })
    );
}

#[test]
fn given_a_lost_answer_then_the_previous_epoch_is_accepted_once_owning_no_more() {
    let (g, a) = heartbeat(&Group::default(), &join_request("a"), &six).expect("a joins");
    let all = a.assignment.expect("assigned");
    // The join's answer was lost: the member still says epoch 0, owning nothing.
    let (_, again) = heartbeat(&g, &join_request("a"), &six).expect("accepted");
    assert_eq!(
        (again.member_epoch, again.assignment),
        (1, Some(all.clone()))
    );
    // Owning more than it is assigned at the previous epoch is a zombie's claim.
    let (g, _) = heartbeat(&g, &join_request("b"), &six).expect("b joins");
    let (g, _) = heartbeat(&g, &beat("a", 1, &all), &six).expect("a revokes");
    let (g, moved) = heartbeat(&g, &beat("a", 1, &BTreeSet::new()), &six).expect("a acks");
    assert_eq!(moved.member_epoch, 2);
    assert!(matches!(
        heartbeat(&g, &beat("a", 1, &all), &six),
        Err(HeartbeatError::FencedMemberEpoch { .. })
    ));
}

#[test]
fn given_a_static_member_restarting_then_its_new_id_gets_its_partitions_without_a_rebalance() {
    let static_join = |member: &str| Heartbeat {
        instance_id: Some("pod-0".into()),
        ..join_request(member)
    };
    let (g, first) = heartbeat(&Group::default(), &static_join("a"), &six).expect("joins");
    let (g, _) = heartbeat(&g, &join_request("b"), &six).expect("b joins");
    let (g, _) = heartbeat(
        &g,
        &beat("a", 1, &first.assignment.clone().expect("a")),
        &six,
    )
    .expect("a revokes");
    let a_share = g.members["a"].assignment.assigned.clone();
    // While it is there, its instance id cannot be taken.
    assert!(matches!(
        heartbeat(&g, &static_join("a2"), &six),
        Err(HeartbeatError::UnreleasedInstanceId { .. })
    ));
    let leave = Heartbeat {
        member_epoch: STATIC_LEAVE_EPOCH,
        instance_id: Some("pod-0".into()),
        ..beat("a", 1, &a_share)
    };
    let (g, _) = heartbeat(&g, &leave, &six).expect("leaves for a while");
    let epoch = g.group_epoch;
    let (g, back) = heartbeat(&g, &static_join("a2"), &six).expect("back");
    assert_eq!(g.group_epoch, epoch, "no rebalance");
    assert_eq!(back.assignment, Some(a_share));
    assert!(!g.members.contains_key("a"));
}

#[test]
fn given_a_topic_growing_then_the_new_partitions_are_assigned_at_a_new_epoch() {
    let (g, _) = heartbeat(&Group::default(), &join_request("a"), &six).expect("joins");
    let eight = |t: &str| (t == "in").then_some(8);
    let (g, answer) = heartbeat(&g, &beat("a", 1, &BTreeSet::new()), &eight).expect("beats");
    assert_eq!(answer.member_epoch, 2);
    assert!(answer.assignment.expect("assigned").contains(&tp("in", 7)));
    assert_eq!(g.partition_counts["in"], 8);
}

#[test]
fn given_a_join_without_topics_or_an_empty_member_id_then_it_is_refused() {
    let no_topics = Heartbeat {
        subscribed: Some(BTreeSet::new()),
        ..join_request("a")
    };
    assert!(matches!(
        heartbeat(&Group::default(), &no_topics, &six),
        Err(HeartbeatError::InvalidRequest(_))
    ));
    assert!(matches!(
        heartbeat(&Group::default(), &join_request(""), &six),
        Err(HeartbeatError::InvalidRequest(_))
    ));
}

fn two_topics_of_four(topic: &str) -> Option<i32> {
    ["x", "y"].contains(&topic).then_some(4)
}

fn join_two_topics(member: &str) -> Heartbeat {
    Heartbeat {
        subscribed: Some(topics(&["x", "y"])),
        ..join_request(member)
    }
}

fn numbers(owned: &BTreeSet<TopicPartition>, topic: &str) -> Vec<i32> {
    owned
        .iter()
        .filter(|tp| tp.topic == topic)
        .map(|tp| tp.partition)
        .collect()
}

/// Heartbeats every member (owning what it was last given) until all are at the group
/// epoch and own their targets; asserts no partition is owned twice on the way.
fn settle(
    mut group: Group,
    owned: &mut BTreeMap<String, (i32, BTreeSet<TopicPartition>)>,
    assignor: Option<&str>,
    sizes: TopicSizes<'_>,
) -> Group {
    for _ in 0..6 {
        let ids: Vec<String> = owned.keys().cloned().collect();
        for id in ids {
            let (epoch, mine) = owned[&id].clone();
            let (g, answer) =
                heartbeat_naming_assignor(&group, &beat(&id, epoch, &mine), assignor, sizes)
                    .expect("beats");
            group = g;
            owned.insert(
                id.clone(),
                (answer.member_epoch, answer.assignment.unwrap_or_default()),
            );
            let mut seen = BTreeSet::new();
            for (_, ps) in owned.values() {
                for p in ps {
                    assert!(seen.insert(p.clone()), "{p:?} owned twice: {owned:?}");
                }
            }
        }
    }
    group
}

#[test]
fn given_members_asking_for_range_then_each_gets_the_same_range_of_both_topics() {
    let mut group = Group::default();
    let mut owned = BTreeMap::new();
    for id in ["a", "b"] {
        let (g, answer) = heartbeat_naming_assignor(
            &group,
            &join_two_topics(id),
            Some("range"),
            &two_topics_of_four,
        )
        .expect("joins");
        group = g;
        owned.insert(
            id.to_string(),
            (answer.member_epoch, answer.assignment.unwrap_or_default()),
        );
    }
    let group = settle(group, &mut owned, None, &two_topics_of_four);
    assert_eq!(group_assignor(&group), ServerAssignor::Range);
    for topic in ["x", "y"] {
        assert_eq!(numbers(&owned["a"].1, topic), [0, 1]);
        assert_eq!(numbers(&owned["b"].1, topic), [2, 3]);
    }
}

#[test]
fn given_the_group_switching_to_range_then_it_reaches_the_range_target_revoking_first() {
    let mut group = Group::default();
    let mut owned = BTreeMap::new();
    for id in ["a", "b", "c"] {
        let (g, answer) =
            heartbeat(&group, &join_two_topics(id), &two_topics_of_four).expect("joins");
        group = g;
        owned.insert(
            id.to_string(),
            (answer.member_epoch, answer.assignment.unwrap_or_default()),
        );
    }
    let group = settle(group, &mut owned, None, &two_topics_of_four);
    assert_eq!(group_assignor(&group), ServerAssignor::Uniform);
    let before = group.group_epoch;
    let group = settle(group, &mut owned, Some("range"), &two_topics_of_four);
    assert!(
        group.group_epoch > before,
        "the assignor change moved the epoch"
    );
    assert_eq!(group_assignor(&group), ServerAssignor::Range);
    for topic in ["x", "y"] {
        assert_eq!(numbers(&owned["a"].1, topic), [0, 1]);
        assert_eq!(numbers(&owned["b"].1, topic), [2]);
        assert_eq!(numbers(&owned["c"].1, topic), [3]);
    }
    // Withdrawing the request brings the default back.
    let group = settle(group, &mut owned, Some(""), &two_topics_of_four);
    assert_eq!(group_assignor(&group), ServerAssignor::Uniform);
    assert!(group.server_assignors.is_empty());
}

#[test]
fn given_an_unknown_assignor_then_it_is_unsupported_and_nothing_changes() {
    let (g, a) = heartbeat(&Group::default(), &join_request("a"), &six).expect("joins");
    let owned = a.assignment.expect("assigned");
    assert_eq!(
        heartbeat_naming_assignor(&g, &beat("a", 1, &owned), Some("sticky"), &six),
        Err(HeartbeatError::UnsupportedAssignor {
            name: "sticky".into()
        })
    );
    assert!(matches!(
        heartbeat_naming_assignor(&g, &join_request("b"), Some("sticky"), &six),
        Err(HeartbeatError::UnsupportedAssignor { .. })
    ));
}

#[test]
fn given_a_member_leaving_then_its_assignor_request_goes_with_it() {
    let (g, _) =
        heartbeat_naming_assignor(&Group::default(), &join_request("a"), Some("range"), &six)
            .expect("joins");
    assert_eq!(group_assignor(&g), ServerAssignor::Range);
    let g = remove_member(&g, "a", &six);
    assert!(g.server_assignors.is_empty());
    assert_eq!(group_assignor(&g), ServerAssignor::Uniform);
}

/// A simulated group of up to 4 members (clients that own what their last answer
/// assigned) under random joins, heartbeats (some asking for another assignor, which
/// switches the group between uniform and range), lost answers, leaves, session
/// expiries and topic growth.
#[derive(Debug, Clone)]
enum Step {
    Join(usize),
    Beat {
        member: usize,
        lost: bool,
        assignor: Option<&'static str>,
    },
    Leave(usize),
    Expire(usize),
    Grow,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (0usize..4).prop_map(Step::Join),
        8 => (
            0usize..4,
            proptest::bool::weighted(0.2),
            prop_oneof![4 => Just(None), 1 => Just(Some("range")), 1 => Just(Some("uniform")), 1 => Just(Some(""))],
        )
            .prop_map(|(member, lost, assignor)| Step::Beat { member, lost, assignor }),
        1 => (0usize..4).prop_map(Step::Leave),
        1 => (0usize..4).prop_map(Step::Expire),
        1 => Just(Step::Grow),
    ]
}

struct Client {
    epoch: i32,
    owns: BTreeSet<TopicPartition>,
}

proptest! {
    #[test]
    fn live_members_never_share_a_partition_and_all_reach_the_target(
        steps in proptest::collection::vec(step(), 0..80)
    ) {
        let mut size = 6;
        let mut group = Group::default();
        let mut clients: BTreeMap<usize, Client> = BTreeMap::new();
        let name = |i: usize| format!("m{i}");
        for s in steps {
            let sizes = |t: &str| (t == "in").then_some(size);
            match s {
                Step::Join(i) if !clients.contains_key(&i) => {
                    if let Ok((g, answer)) = heartbeat(&group, &join_request(&name(i)), &sizes) {
                        group = g;
                        clients.insert(i, Client { epoch: answer.member_epoch, owns: answer.assignment.unwrap_or_default() });
                    }
                }
                Step::Beat { member, lost, assignor } => {
                    let Some(c) = clients.get(&member) else { continue };
                    match heartbeat_naming_assignor(&group, &beat(&name(member), c.epoch, &c.owns), assignor, &sizes) {
                        Ok((g, answer)) => {
                            group = g;
                            if !lost {
                                clients.insert(member, Client { epoch: answer.member_epoch, owns: answer.assignment.unwrap_or_default() });
                            }
                        }
                        // Fenced or forgotten: it gives everything up and joins again.
                        Err(_) => {
                            clients.remove(&member);
                            if let Ok((g, answer)) = heartbeat(&group, &join_request(&name(member)), &sizes) {
                                group = g;
                                clients.insert(member, Client { epoch: answer.member_epoch, owns: answer.assignment.unwrap_or_default() });
                            }
                        }
                    }
                }
                Step::Leave(i) => {
                    if let Some(c) = clients.remove(&i) {
                        let leave = Heartbeat { member_epoch: LEAVE_EPOCH, ..beat(&name(i), c.epoch, &BTreeSet::new()) };
                        group = heartbeat(&group, &leave, &sizes).expect("leave").0;
                    }
                }
                Step::Expire(i) => {
                    // The coordinator drops it; the client only learns on its next beat,
                    // and until then is a zombie whose writes fencing refuses: it no
                    // longer counts as live.
                    group = remove_member(&group, &name(i), &sizes);
                    clients.remove(&i);
                }
                Step::Grow => {
                    size += 1;
                }
                Step::Join(_) => {}
            }
            // Safety, from the clients' own view and the coordinator's.
            let mut seen = BTreeMap::new();
            for (i, c) in &clients {
                let member = &group.members[&name(*i)];
                for p in &c.owns {
                    prop_assert!(member.assignment.holds(p), "m{i} owns {p:?} unknown to the coordinator");
                    if let Some(other) = seen.insert(p.clone(), *i) {
                        prop_assert!(false, "{p:?} owned by m{other} and m{i}");
                    }
                }
            }
            prop_assert!(group.members.values().all(|m| m.assignment.member_epoch <= group.group_epoch));
        }
        // Liveness: with every answer arriving, everyone gets its target.
        let sizes = |t: &str| (t == "in").then_some(size);
        for _ in 0..6 {
            let ids: Vec<usize> = clients.keys().copied().collect();
            for i in ids {
                let c = &clients[&i];
                // A member that lost two answers in a row is fenced: it joins again.
                let (g, answer) = heartbeat(&group, &beat(&name(i), c.epoch, &c.owns), &sizes)
                    .or_else(|_| heartbeat(&group, &join_request(&name(i)), &sizes))
                    .expect("a live member beats or joins again");
                group = g;
                clients.insert(i, Client { epoch: answer.member_epoch, owns: answer.assignment.unwrap_or_default() });
            }
        }
        let mut all = BTreeSet::new();
        for (i, c) in &clients {
            prop_assert_eq!(c.epoch, group.group_epoch);
            prop_assert_eq!(&c.owns, &group.target[&name(*i)]);
            all.extend(c.owns.iter().cloned());
        }
        if !clients.is_empty() {
            prop_assert_eq!(all.len(), size as usize, "every partition owned");
        }
    }
}
