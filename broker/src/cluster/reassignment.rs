//! Partition reassignment (Kafka's KIP-455) as pure rules over a partition's catalog
//! state. A move starts by recording `replicas = target ∪ original` (target order
//! first) with `adding = target − original` and `removing = original − target`; the
//! new replicas then open the partition and fetch like any follower, and the leader's
//! ISR rule lets them in once caught up. When every target replica is in the ISR the
//! leader publishes the end: `replicas = target`, `isr = isr ∩ target`, nothing adding
//! or removing, and, if the leader itself is leaving, a target replica of the ISR leads
//! with `leader_epoch + 1`. Every step bumps `partition_epoch`; the invariant kept is
//! that no state names a leader outside its ISR or an ISR member outside its replicas.

use std::collections::HashSet;

use crate::cluster::catalog::PartitionState;

/// Why a reassignment request is refused (nothing is written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReassignmentRefusal {
    #[error("the target replica list is empty")]
    EmptyReplicas,
    #[error("broker {0} is named twice in the target replicas")]
    DuplicateReplica(i32),
    #[error("broker {0} is not registered in the cluster")]
    UnregisteredBroker(i32),
    #[error("{replicas} target replica(s) are fewer than min.insync.replicas = {min}")]
    BelowMinInsync { replicas: usize, min: i32 },
    #[error("already being reassigned to {target:?}; wait until that move has finished")]
    InProgress { target: Vec<i32> },
}

/// What a reassignment request leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Nothing to write: this target is already the replica set, or already the
    /// target of the move in progress.
    Unchanged,
    /// Publish this state by compare-and-swap.
    Publish(PartitionState),
}

/// Whether a move is in progress.
pub fn is_reassigning(state: &PartitionState) -> bool {
    !state.adding_replicas.is_empty() || !state.removing_replicas.is_empty()
}

/// The replicas the partition ends with: `replicas` less those leaving, in order (the
/// target's order, since a move records the target first).
pub fn target(state: &PartitionState) -> Vec<i32> {
    state
        .replicas
        .iter()
        .copied()
        .filter(|b| !state.removing_replicas.contains(b))
        .collect()
}

/// Checks a request to move a partition to `target` and says what to write.
/// `registered`: the broker ids registered now; `min_insync_replicas`: the topic's.
pub fn start(
    state: &PartitionState,
    target_replicas: &[i32],
    registered: &[i32],
    min_insync_replicas: i32,
) -> Result<Start, ReassignmentRefusal> {
    check_target(target_replicas, registered, min_insync_replicas)?;
    if is_reassigning(state) {
        let current = target(state);
        return if current == target_replicas {
            Ok(Start::Unchanged)
        } else {
            Err(ReassignmentRefusal::InProgress { target: current })
        };
    }
    if state.replicas == target_replicas {
        return Ok(Start::Unchanged);
    }
    let adding: Vec<i32> = target_replicas
        .iter()
        .copied()
        .filter(|b| !state.replicas.contains(b))
        .collect();
    let removing: Vec<i32> = state
        .replicas
        .iter()
        .copied()
        .filter(|b| !target_replicas.contains(b))
        .collect();
    let mut replicas = target_replicas.to_vec();
    replicas.extend(&removing);
    Ok(Start::Publish(PartitionState {
        replicas,
        adding_replicas: adding,
        removing_replicas: removing,
        partition_epoch: state.partition_epoch + 1,
        ..state.clone()
    }))
}

fn check_target(
    target_replicas: &[i32],
    registered: &[i32],
    min_insync_replicas: i32,
) -> Result<(), ReassignmentRefusal> {
    if target_replicas.is_empty() {
        return Err(ReassignmentRefusal::EmptyReplicas);
    }
    let mut seen = HashSet::new();
    for b in target_replicas {
        if !seen.insert(*b) {
            return Err(ReassignmentRefusal::DuplicateReplica(*b));
        }
    }
    if let Some(b) = target_replicas.iter().find(|b| !registered.contains(b)) {
        return Err(ReassignmentRefusal::UnregisteredBroker(*b));
    }
    if (target_replicas.len() as i64) < i64::from(min_insync_replicas) {
        return Err(ReassignmentRefusal::BelowMinInsync {
            replicas: target_replicas.len(),
            min: min_insync_replicas,
        });
    }
    Ok(())
}

/// The leader's step: once every target replica is in the ISR of `state` (the state
/// the leader is about to publish anyway, ISR change included), the final state;
/// `None` while the move must wait or when none runs. A leaving leader hands over to
/// the first target replica of the ISR that is `live`, else the first of the ISR.
pub fn completion(state: &PartitionState, live: &[i32]) -> Option<PartitionState> {
    if !is_reassigning(state) {
        return None;
    }
    let target = target(state);
    if target.is_empty() || !target.iter().all(|b| state.isr.contains(b)) {
        return None;
    }
    let isr: Vec<i32> = state
        .isr
        .iter()
        .copied()
        .filter(|b| target.contains(b))
        .collect();
    let (leader, leader_epoch) = if target.contains(&state.leader) {
        (state.leader, state.leader_epoch)
    } else {
        let next = target
            .iter()
            .copied()
            .find(|b| live.contains(b))
            .unwrap_or(target[0]);
        (next, state.leader_epoch + 1)
    };
    Some(PartitionState {
        replicas: target,
        leader,
        leader_epoch,
        isr,
        partition_epoch: state.partition_epoch + 1,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    })
}

/// What the partition's leader publishes next, if anything: the ISR its replica set
/// asks for (`isr`, when it differs from the catalog's), else the end of the move once
/// the catalog's ISR holds every target replica.
///
/// Never both in one step: the move may end only on an ISR this leader already
/// applies. Its high watermark counts exactly the ISR it applies, and it keeps
/// acknowledging in its epoch until it reads its own final state; were a new replica
/// joining and taking over in one step, the leader could acknowledge a batch the
/// others confirmed but the new leader never fetched, which the new leader's epoch
/// then cuts from every replica.
pub fn leader_step(
    current: &PartitionState,
    isr: Option<Vec<i32>>,
    live: &[i32],
) -> Option<PartitionState> {
    match isr {
        Some(isr) => Some(PartitionState {
            isr,
            partition_epoch: current.partition_epoch + 1,
            ..current.clone()
        }),
        None => completion(current, live),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn settled(replicas: &[i32], leader: i32, isr: &[i32]) -> PartitionState {
        PartitionState {
            replicas: replicas.to_vec(),
            leader,
            leader_epoch: 3,
            isr: isr.to_vec(),
            partition_epoch: 10,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    fn published(start: Result<Start, ReassignmentRefusal>) -> PartitionState {
        match start {
            Ok(Start::Publish(state)) => state,
            other => panic!("expected a state to publish, got {other:?}"),
        }
    }

    const REGISTERED: [i32; 5] = [1, 2, 3, 4, 5];

    #[test]
    fn given_a_move_then_replicas_hold_target_first_and_adding_and_removing_are_the_differences() {
        let state = settled(&[1, 2, 3], 1, &[1, 2, 3]);
        let moving = published(start(&state, &[2, 3, 4], &REGISTERED, 2));
        assert_eq!(moving.replicas, vec![2, 3, 4, 1]);
        assert_eq!(moving.adding_replicas, vec![4]);
        assert_eq!(moving.removing_replicas, vec![1]);
        assert_eq!(
            (moving.leader, moving.leader_epoch, moving.isr.clone()),
            (1, 3, vec![1, 2, 3]),
            "leadership and ISR are untouched"
        );
        assert_eq!(moving.partition_epoch, 11);
        assert_eq!(target(&moving), vec![2, 3, 4]);
    }

    #[test]
    fn given_bad_targets_then_each_is_refused_with_its_reason() {
        let state = settled(&[1, 2, 3], 1, &[1, 2, 3]);
        assert_eq!(
            start(&state, &[], &REGISTERED, 2),
            Err(ReassignmentRefusal::EmptyReplicas)
        );
        assert_eq!(
            start(&state, &[2, 3, 2], &REGISTERED, 2),
            Err(ReassignmentRefusal::DuplicateReplica(2))
        );
        assert_eq!(
            start(&state, &[2, 3, 9], &REGISTERED, 2),
            Err(ReassignmentRefusal::UnregisteredBroker(9))
        );
        assert_eq!(
            start(&state, &[4], &REGISTERED, 2),
            Err(ReassignmentRefusal::BelowMinInsync {
                replicas: 1,
                min: 2
            })
        );
    }

    #[test]
    fn given_a_move_in_progress_then_the_same_target_is_unchanged_and_another_is_refused() {
        let state = settled(&[1, 2, 3], 1, &[1, 2, 3]);
        let moving = published(start(&state, &[2, 3, 4], &REGISTERED, 2));
        assert_eq!(
            start(&moving, &[2, 3, 4], &REGISTERED, 2),
            Ok(Start::Unchanged)
        );
        assert_eq!(
            start(&moving, &[3, 4, 5], &REGISTERED, 2),
            Err(ReassignmentRefusal::InProgress {
                target: vec![2, 3, 4]
            })
        );
        assert_eq!(
            start(&state, &[1, 2, 3], &REGISTERED, 2),
            Ok(Start::Unchanged),
            "already the replica set"
        );
    }

    #[test]
    fn given_a_reordering_then_it_is_published_at_once_with_nothing_to_move() {
        let state = settled(&[1, 2, 3], 1, &[1, 2, 3]);
        let reordered = published(start(&state, &[3, 1, 2], &REGISTERED, 2));
        assert_eq!(reordered.replicas, vec![3, 1, 2]);
        assert!(!is_reassigning(&reordered));
        assert_eq!(completion(&reordered, &REGISTERED), None);
    }

    #[test]
    fn given_a_target_replica_not_yet_in_sync_then_the_move_waits() {
        let state = settled(&[1, 2, 3], 1, &[1, 2, 3]);
        let moving = published(start(&state, &[2, 3, 4], &REGISTERED, 2));
        assert_eq!(completion(&moving, &REGISTERED), None);
        let caught_up = PartitionState {
            isr: vec![1, 2, 3, 4],
            ..moving
        };
        let done = completion(&caught_up, &REGISTERED).expect("every target replica in sync");
        assert_eq!(done.replicas, vec![2, 3, 4]);
        assert_eq!(done.isr, vec![2, 3, 4]);
        assert_eq!(
            (done.leader, done.leader_epoch),
            (2, 4),
            "the leaving leader hands over with a new epoch"
        );
        assert!(!is_reassigning(&done));
        assert_eq!(done.partition_epoch, caught_up.partition_epoch + 1);
    }

    #[test]
    fn given_a_leader_that_stays_then_it_keeps_its_epoch_and_only_the_leavers_go() {
        let state = settled(&[1, 2, 3], 2, &[1, 2, 3]);
        let moving = published(start(&state, &[2, 3, 4], &REGISTERED, 2));
        let caught_up = PartitionState {
            isr: vec![2, 1, 3, 4],
            ..moving
        };
        let done = completion(&caught_up, &REGISTERED).expect("done");
        assert_eq!((done.leader, done.leader_epoch), (2, 3));
        assert_eq!(done.isr, vec![2, 3, 4]);
    }

    #[test]
    fn given_a_shrink_only_then_it_completes_at_the_next_leader_step() {
        let state = settled(&[1, 2, 3], 1, &[1, 2, 3]);
        let moving = published(start(&state, &[2, 3], &REGISTERED, 2));
        assert!(moving.adding_replicas.is_empty());
        let done = completion(&moving, &REGISTERED).expect("nothing to wait for");
        assert_eq!((done.replicas.clone(), done.leader), (vec![2, 3], 2));
    }

    #[test]
    fn given_a_dead_first_target_replica_then_a_live_one_takes_over() {
        let state = settled(&[1, 2, 3], 1, &[1, 2, 3]);
        let moving = published(start(&state, &[2, 3, 4], &REGISTERED, 2));
        let caught_up = PartitionState {
            isr: vec![1, 2, 3, 4],
            ..moving
        };
        let done = completion(&caught_up, &[1, 3, 4]).expect("done");
        assert_eq!(done.leader, 3);
    }

    #[test]
    fn given_the_last_target_replica_joining_the_isr_then_the_move_ends_only_at_the_next_step() {
        let state = settled(&[1, 2, 3], 1, &[1, 2, 3]);
        let moving = published(start(&state, &[4, 2, 3], &REGISTERED, 2));
        assert_eq!(
            leader_step(&moving, None, &REGISTERED),
            None,
            "4 not in sync"
        );
        let joined = leader_step(&moving, Some(vec![1, 2, 3, 4]), &REGISTERED).expect("step");
        assert_eq!(
            (joined.isr.clone(), joined.leader, joined.leader_epoch),
            (vec![1, 2, 3, 4], 1, moving.leader_epoch),
            "first only the ISR: the leader must apply it before 4 may take over"
        );
        assert!(is_reassigning(&joined));
        assert_eq!(joined.partition_epoch, moving.partition_epoch + 1);
        let done = leader_step(&joined, None, &REGISTERED).expect("then the end");
        assert_eq!(
            (done.replicas.clone(), done.isr.clone(), done.leader),
            (vec![4, 2, 3], vec![2, 3, 4], 4)
        );
        assert_eq!(done.leader_epoch, moving.leader_epoch + 1);
        let shrunk = leader_step(&moving, Some(vec![1, 2]), &REGISTERED).expect("ISR change");
        assert_eq!(shrunk.isr, vec![1, 2]);
        assert!(is_reassigning(&shrunk), "the move goes on");
        assert_eq!(
            leader_step(&state, None, &REGISTERED),
            None,
            "nothing to say without a move or an ISR change"
        );
    }

    fn replica_ids() -> impl Strategy<Value = Vec<i32>> {
        proptest::sample::subsequence((1..=7).collect::<Vec<i32>>(), 1..=5).prop_shuffle()
    }

    proptest! {
        /// Whatever the original and target sets, and whichever ISR the followers
        /// reach: every state the rules produce has its leader in its ISR and its ISR
        /// within its replicas; a move ends exactly on the target with only target
        /// replicas in sync; epochs never go back.
        #[test]
        fn reassignment_keeps_leader_in_isr_and_ends_on_the_target(
            original in replica_ids(),
            wanted in replica_ids(),
            leader_pick in 0usize..5,
            in_sync_picks in proptest::collection::vec(any::<bool>(), 12),
            live_picks in proptest::collection::vec(any::<bool>(), 8),
        ) {
            let leader = original[leader_pick % original.len()];
            let state = settled(&original, leader, &original);
            let registered: Vec<i32> = (1..=7).collect();
            let moving = match start(&state, &wanted, &registered, 1) {
                Ok(Start::Publish(s)) => s,
                Ok(Start::Unchanged) => {
                    prop_assert_eq!(&original, &wanted);
                    return Ok(());
                }
                Err(e) => return Err(TestCaseError::fail(format!("refused {e}"))),
            };
            let mut all: Vec<i32> = moving.replicas.clone();
            all.sort_unstable();
            let mut union: Vec<i32> = original.iter().chain(&wanted).copied().collect();
            union.sort_unstable();
            union.dedup();
            prop_assert_eq!(all, union, "replicas = target ∪ original, each once");
            prop_assert_eq!(&moving.replicas[..wanted.len()], &wanted[..]);
            prop_assert!(moving.isr.contains(&moving.leader));
            if !is_reassigning(&moving) {
                // The same replicas in another order: nothing to move.
                prop_assert_eq!(&moving.replicas, &wanted);
                return Ok(());
            }
            // Some replicas join the ISR (the leader is always in it).
            let isr: Vec<i32> = moving.replicas.iter().copied().enumerate()
                .filter(|(i, b)| *b == moving.leader || in_sync_picks[*i])
                .map(|(_, b)| b)
                .collect();
            let live: Vec<i32> = (1..=7).filter(|b| live_picks[(*b - 1) as usize]).collect();
            // An ISR change is published on its own, never with the end of the move.
            let changed = leader_step(&moving, Some(isr.clone()), &live).expect("a change");
            prop_assert!(is_reassigning(&changed));
            prop_assert_eq!((changed.leader, changed.leader_epoch), (moving.leader, moving.leader_epoch));
            let stepped = PartitionState { isr: isr.clone(), ..moving.clone() };
            match completion(&stepped, &live) {
                None => prop_assert!(!wanted.iter().all(|b| isr.contains(b))),
                Some(done) => {
                    prop_assert!(wanted.iter().all(|b| isr.contains(b)));
                    prop_assert_eq!(&done.replicas, &wanted);
                    prop_assert!(!is_reassigning(&done));
                    prop_assert!(done.isr.contains(&done.leader), "leader in ISR");
                    prop_assert!(done.isr.iter().all(|b| wanted.contains(b) && isr.contains(b)));
                    prop_assert!(done.partition_epoch > stepped.partition_epoch);
                    if wanted.contains(&leader) {
                        prop_assert_eq!((done.leader, done.leader_epoch), (leader, stepped.leader_epoch));
                    } else {
                        prop_assert_eq!(done.leader_epoch, stepped.leader_epoch + 1);
                    }
                }
            }
        }
    }
}
