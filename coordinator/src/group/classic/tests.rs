use super::*;
use crate::group::membership::LEAVE_EPOCH;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn six(topic: &str) -> Option<i32> {
    (topic == "in").then_some(6)
}

fn tps(ps: &[i32]) -> BTreeSet<TopicPartition> {
    ps.iter()
        .map(|&partition| TopicPartition {
            topic: "in".into(),
            partition,
        })
        .collect()
}

/// A dynamic member's SyncGroup or Heartbeat.
fn by(member_id: &str) -> Sender<'_> {
    Sender {
        member_id,
        instance_id: None,
    }
}

fn join_of(member: &str, owned: &BTreeSet<TopicPartition>) -> Join {
    Join {
        member_id: member.into(),
        instance_id: None,
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocols: vec!["range".into(), "roundrobin".into()],
        subscribed: ["in".to_string()].into(),
        owned: owned.clone(),
    }
}

#[test]
fn given_a_first_classic_member_then_its_join_and_sync_give_every_partition_at_its_epoch() {
    let (g, joined) = join(&Group::default(), &join_of("a", &tps(&[])), &six).expect("joins");
    assert_eq!(joined.generation, 1);
    assert_eq!(joined.protocol_name, "range");
    assert_eq!(joined.assignment, tps(&[0, 1, 2, 3, 4, 5]));
    let synced = sync(&g, by("a"), 1, Some("consumer"), Some("range")).expect("syncs");
    assert_eq!(synced.assignment, joined.assignment);
    assert_eq!(g.classic["a"].session_timeout_ms, 10_000);
    let (_, beat) = heartbeat(&g, by("a"), 1, &six).expect("beats");
    assert_eq!(beat, Beat::Stay);
}

#[test]
fn given_a_second_member_then_the_first_is_told_to_rejoin_and_its_rejoin_releases_half() {
    let (g, a) = join(&Group::default(), &join_of("a", &tps(&[])), &six).expect("a joins");
    let (g, b) = join(&g, &join_of("b", &tps(&[])), &six).expect("b joins");
    // a holds everything still: b is at the new epoch with nothing.
    assert_eq!((b.generation, b.assignment.len()), (2, 0));
    // b's next heartbeat: partitions a releases are not free yet, so no rejoin.
    assert_eq!(
        heartbeat(&g, by("b"), 2, &six).expect("b beats").1,
        Beat::Stay
    );
    let (g, beat) = heartbeat(&g, by("a"), a.generation, &six).expect("a beats");
    assert_eq!(beat, Beat::Rejoin);
    assert_eq!(
        g.members["a"].assignment.state,
        MemberState::UnrevokedPartitions
    );
    // Cooperative: a rejoins still owning everything; it keeps its generation and
    // is given only what it keeps.
    let (g, a2) = join(&g, &join_of("a", &a.assignment), &six).expect("a rejoins");
    assert_eq!((a2.generation, a2.assignment.len()), (1, 3));
    assert_eq!(
        sync(&g, by("a"), 1, None, None)
            .expect("a syncs")
            .assignment,
        a2.assignment
    );
    // It revoked the rest and rejoins: now at the group's epoch.
    let (g, a3) = join(&g, &join_of("a", &a2.assignment), &six).expect("a rejoins");
    assert_eq!((a3.generation, &a3.assignment), (2, &a2.assignment));
    // b may take the rest now: its heartbeat says so, its rejoin gets them.
    let (g, beat) = heartbeat(&g, by("b"), 2, &six).expect("b beats");
    assert_eq!(beat, Beat::Rejoin);
    let (_, b2) = join(&g, &join_of("b", &tps(&[])), &six).expect("b rejoins");
    assert_eq!(b2.assignment.len(), 3);
    assert!(b2.assignment.is_disjoint(&a3.assignment));
}

#[test]
fn given_a_wrong_generation_or_member_then_heartbeat_and_sync_refuse_and_nothing_changes() {
    let (g, _) = join(&Group::default(), &join_of("a", &tps(&[])), &six).expect("joins");
    assert!(matches!(
        heartbeat(&g, by("a"), 7, &six),
        Err(ClassicError::IllegalGeneration {
            sent: 7,
            current: 1,
            ..
        })
    ));
    assert!(matches!(
        sync(&g, by("a"), 0, None, None),
        Err(ClassicError::IllegalGeneration { .. })
    ));
    assert!(matches!(
        heartbeat(&g, by("nobody"), 1, &six),
        Err(ClassicError::UnknownMemberId { .. })
    ));
    assert!(matches!(
        sync(&g, by("a"), 1, Some("connect"), None),
        Err(ClassicError::InconsistentGroupProtocol(_))
    ));
    assert!(matches!(
        sync(&g, by("a"), 1, Some("consumer"), Some("roundrobin")),
        Err(ClassicError::InconsistentGroupProtocol(_))
    ));
}

#[test]
fn given_a_bad_join_then_it_is_refused() {
    let mut short = join_of("a", &tps(&[]));
    short.session_timeout_ms = 1_000;
    assert_eq!(
        join(&Group::default(), &short, &six),
        Err(ClassicError::InvalidSessionTimeout(1_000))
    );
    let mut none = join_of("a", &tps(&[]));
    none.protocols.clear();
    assert!(matches!(
        join(&Group::default(), &none, &six),
        Err(ClassicError::InconsistentGroupProtocol(_))
    ));
    let mut nameless = join_of("", &tps(&[]));
    nameless.member_id.clear();
    assert!(matches!(
        join(&Group::default(), &nameless, &six),
        Err(ClassicError::InvalidRequest(_))
    ));
}

#[test]
fn given_a_kip848_member_then_classic_requests_do_not_take_its_id_nor_it_theirs() {
    let kip848 = Heartbeat {
        member_id: "k".into(),
        member_epoch: JOIN_EPOCH,
        instance_id: None,
        rebalance_timeout_ms: 30_000,
        subscribed: Some(["in".to_string()].into()),
        owned: Some(BTreeSet::new()),
    };
    let (g, _) = membership::heartbeat(&Group::default(), &kip848, &six).expect("k joins");
    assert!(matches!(
        join(&g, &join_of("k", &tps(&[])), &six),
        Err(ClassicError::UnknownMemberId { .. })
    ));
    let (g, _) = join(&g, &join_of("c", &tps(&[])), &six).expect("c joins");
    let mut as_kip848 = kip848.clone();
    as_kip848.member_id = "c".into();
    as_kip848.member_epoch = LEAVE_EPOCH;
    assert!(matches!(
        membership::heartbeat(&g, &as_kip848, &six),
        Err(HeartbeatError::UnknownMemberId { .. })
    ));
}

#[test]
fn given_a_leave_then_the_member_goes_and_another_id_is_unknown() {
    let (g, _) = join(&Group::default(), &join_of("a", &tps(&[])), &six).expect("joins");
    let (g, results) = leave(&g, &[by_id("a"), by_id("x")], &six);
    assert!(g.members.is_empty() && g.classic.is_empty());
    assert_eq!(results[0], ("a".to_string(), Ok(())));
    assert!(matches!(
        results[1].1,
        Err(ClassicError::UnknownMemberId { .. })
    ));
}

/// A LeaveGroup entry naming a member by id.
fn by_id(member_id: &str) -> Leaving {
    Leaving {
        member_id: member_id.into(),
        instance_id: None,
    }
}

#[test]
fn given_a_leave_by_instance_id_then_its_holder_goes_and_a_stale_member_id_is_fenced() {
    let (g, _) = join(&Group::default(), &static_join("a1", "box-a"), &six).expect("a joins");
    let (g, _) = join(&g, &join_of("b", &tps(&[])), &six).expect("b joins");
    let by_instance = |member_id: &str, instance: &str| Leaving {
        member_id: member_id.into(),
        instance_id: Some(instance.into()),
    };
    let (unchanged, results) = leave(
        &g,
        &[by_instance("a0", "box-a"), by_instance("", "box-z")],
        &six,
    );
    assert_eq!(unchanged, g, "refused leaves change nothing");
    assert!(matches!(
        &results[0].1,
        Err(ClassicError::FencedInstanceId { owner, .. }) if owner == "a1"
    ));
    assert!(matches!(
        results[1].1,
        Err(ClassicError::UnknownMemberId { .. })
    ));
    // The admin's removal: the instance id alone.
    let (g, results) = leave(&g, &[by_instance("", "box-a")], &six);
    assert_eq!(results, vec![("a1".to_string(), Ok(()))]);
    assert!(!g.members.contains_key("a1") && !g.classic.contains_key("a1"));
    assert!(g.members.contains_key("b"));
}

/// A static member's join.
fn static_join(member: &str, instance: &str) -> Join {
    Join {
        instance_id: Some(instance.into()),
        ..join_of(member, &tps(&[]))
    }
}

#[test]
fn given_a_static_member_restarted_under_a_new_id_then_it_takes_its_old_self_over_and_nobody_rebalances(
) {
    let (g, _) = join(&Group::default(), &static_join("a1", "box-a"), &six).expect("a joins");
    let (g, b) = join(&g, &join_of("b", &tps(&[])), &six).expect("b joins");
    // Settle: a gives half to b.
    let (g, a) = join(&g, &static_join("a1", "box-a"), &six).expect("a rejoins");
    let (g, a) = join(
        &g,
        &Join {
            owned: a.assignment.clone(),
            ..static_join("a1", "box-a")
        },
        &six,
    )
    .expect("a rejoins at the group's epoch");
    let (g, _) = heartbeat(&g, by("b"), b.generation, &six).expect("b beats");
    let (g, b) = join(&g, &join_of("b", &tps(&[])), &six).expect("b takes its half");
    assert_eq!((a.assignment.len(), b.assignment.len()), (3, 3));
    let epoch = g.group_epoch;

    // a's process dies without leaving; its restart joins as a2 with the same instance.
    let (g, a2) = join(&g, &static_join("a2", "box-a"), &six).expect("a2 replaces a1");
    assert_eq!(a2.assignment, a.assignment, "a2 owns what a1 owned");
    assert_eq!(a2.generation, a.generation, "at a1's generation");
    assert_eq!(g.group_epoch, epoch, "no rebalance");
    assert!(!g.members.contains_key("a1") && !g.classic.contains_key("a1"));
    assert_eq!(
        heartbeat(&g, by("b"), b.generation, &six)
            .expect("b beats")
            .1,
        Beat::Stay,
        "b is not asked to rejoin"
    );
    // The replaced instance is fenced, by its instance id; a1 without one is unknown.
    let fenced = Sender {
        member_id: "a1",
        instance_id: Some("box-a"),
    };
    assert!(matches!(
        heartbeat(&g, fenced, a.generation, &six),
        Err(ClassicError::FencedInstanceId { ref owner, .. }) if owner == "a2"
    ));
    assert!(matches!(
        sync(&g, fenced, a.generation, None, None),
        Err(ClassicError::FencedInstanceId { .. })
    ));
    assert!(matches!(
        heartbeat(&g, by("a1"), a.generation, &six),
        Err(ClassicError::UnknownMemberId { .. })
    ));
    let a2_sender = Sender {
        member_id: "a2",
        instance_id: Some("box-a"),
    };
    assert_eq!(
        sync(&g, a2_sender, a2.generation, None, None)
            .expect("a2 syncs")
            .assignment,
        a.assignment
    );
}

#[test]
fn given_an_instance_id_a_kip848_member_holds_then_a_classic_join_with_it_is_fenced() {
    let kip848 = Heartbeat {
        member_id: "k".into(),
        member_epoch: JOIN_EPOCH,
        instance_id: Some("box-k".into()),
        rebalance_timeout_ms: 30_000,
        subscribed: Some(["in".to_string()].into()),
        owned: Some(BTreeSet::new()),
    };
    let (g, _) = membership::heartbeat(&Group::default(), &kip848, &six).expect("k joins");
    assert!(matches!(
        join(&g, &static_join("c", "box-k"), &six),
        Err(ClassicError::FencedInstanceId { ref owner, .. }) if owner == "k"
    ));
}

// ---- property: KIP-848 and classic members mixed never share a partition ----------

/// A client as it behaves: what it owns and where it is in its protocol.
#[derive(Debug, Clone)]
enum Client {
    Kip848 {
        id: String,
        epoch: i32,
        owned: BTreeSet<TopicPartition>,
    },
    Classic {
        id: String,
        eager: bool,
        phase: Phase,
        owned: BTreeSet<TopicPartition>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// It must send a JoinGroup.
    Join,
    /// Joined at this generation; its SyncGroup is next.
    Sync(i32),
    /// Synced at this generation; it heartbeats.
    Beat(i32),
}

impl Client {
    fn owned(&self) -> &BTreeSet<TopicPartition> {
        match self {
            Client::Kip848 { owned, .. } | Client::Classic { owned, .. } => owned,
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// The client's next protocol step (join, sync, heartbeat).
    Act(usize),
    /// It leaves cleanly.
    Leave(usize),
    /// Its session expires (it is dead: it owns nothing any more).
    Expire(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0usize..4).prop_map(Step::Act),
        1 => (0usize..4).prop_map(Step::Leave),
        1 => (0usize..4).prop_map(Step::Expire),
    ]
}

fn fresh(kind: u8, n: usize) -> Client {
    let id = format!("m{n}");
    match kind % 3 {
        0 => Client::Kip848 {
            id,
            epoch: JOIN_EPOCH,
            owned: BTreeSet::new(),
        },
        k => Client::Classic {
            id,
            eager: k == 1,
            phase: Phase::Join,
            owned: BTreeSet::new(),
        },
    }
}

/// One step of client `c` against the group.
fn act(group: &Group, client: &mut Client) -> Group {
    match client {
        Client::Kip848 { id, epoch, owned } => {
            let request = Heartbeat {
                member_id: id.clone(),
                member_epoch: *epoch,
                instance_id: None,
                rebalance_timeout_ms: 30_000,
                subscribed: Some(["in".to_string()].into()),
                owned: Some(owned.clone()),
            };
            match membership::heartbeat(group, &request, &six) {
                Ok((next, answer)) => {
                    *epoch = answer.member_epoch;
                    // It gives up what it was not given and takes the rest at once.
                    *owned = answer.assignment.unwrap_or_default();
                    next
                }
                Err(_) => {
                    *epoch = JOIN_EPOCH;
                    owned.clear();
                    group.clone()
                }
            }
        }
        Client::Classic {
            id,
            eager,
            phase,
            owned,
        } => match *phase {
            Phase::Join => {
                if *eager {
                    // Eager protocols revoke everything before they join.
                    owned.clear();
                }
                match join(group, &join_of(id, owned), &six) {
                    Ok((next, joined)) => {
                        *phase = Phase::Sync(joined.generation);
                        next
                    }
                    Err(_) => group.clone(),
                }
            }
            Phase::Sync(generation) => match sync(group, by(id), generation, None, None) {
                Ok(synced) => {
                    let revoked = !owned.is_subset(&synced.assignment);
                    *owned = synced.assignment;
                    // Cooperative: a member that revoked something joins again.
                    *phase = if revoked && !*eager {
                        Phase::Join
                    } else {
                        Phase::Beat(generation)
                    };
                    group.clone()
                }
                Err(ClassicError::RebalanceInProgress) => {
                    *phase = Phase::Join;
                    group.clone()
                }
                Err(_) => {
                    owned.clear();
                    *phase = Phase::Join;
                    group.clone()
                }
            },
            Phase::Beat(generation) => match heartbeat(group, by(id), generation, &six) {
                Ok((next, Beat::Stay)) => next,
                Ok((next, Beat::Rejoin)) => {
                    *phase = Phase::Join;
                    next
                }
                Err(_) => {
                    owned.clear();
                    *phase = Phase::Join;
                    group.clone()
                }
            },
        },
    }
}

fn remove(group: &Group, client: &Client, clean: bool) -> Group {
    match client {
        Client::Classic { id, .. } if clean => leave(group, &[by_id(id)], &six).0,
        Client::Kip848 { id, .. } if clean => {
            let request = Heartbeat {
                member_id: id.clone(),
                member_epoch: LEAVE_EPOCH,
                instance_id: None,
                rebalance_timeout_ms: 30_000,
                subscribed: None,
                owned: None,
            };
            membership::heartbeat(group, &request, &six)
                .map(|(g, _)| g)
                .unwrap_or_else(|_| group.clone())
        }
        Client::Classic { id, .. } | Client::Kip848 { id, .. } => {
            membership::remove_member(group, id, &six)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn classic_and_kip848_members_never_own_one_partition_at_once_and_settle(
        kinds in proptest::collection::vec(0u8..3, 4),
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let mut group = Group::default();
        let mut next_id = 4;
        let mut clients: Vec<Client> = kinds.iter().enumerate().map(|(n, k)| fresh(*k, n)).collect();
        for step in steps {
            match step {
                Step::Act(i) => group = act(&group, &mut clients[i]),
                Step::Leave(i) | Step::Expire(i) => {
                    group = remove(&group, &clients[i], matches!(step, Step::Leave(_)));
                    clients[i] = fresh(kinds[i], next_id);
                    next_id += 1;
                }
            }
            let mut owner: BTreeMap<&TopicPartition, usize> = BTreeMap::new();
            for (i, c) in clients.iter().enumerate() {
                for tp in c.owned() {
                    if let Some(other) = owner.insert(tp, i) {
                        prop_assert!(false, "{tp:?} owned by {other} and {i}: {clients:?}\n{group:?}");
                    }
                }
            }
        }
        // Liveness: with nothing else happening, every client reaches its target.
        for _ in 0..12 {
            for c in clients.iter_mut() {
                group = act(&group, c);
            }
        }
        let owned: usize = clients.iter().map(|c| c.owned().len()).sum();
        prop_assert_eq!(owned, 6, "{:?}\n{:?}", clients, group);
    }
}
