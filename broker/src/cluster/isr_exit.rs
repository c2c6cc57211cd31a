//! A restarted broker leaves every ISR it was in before it may lead anything.
//!
//! Its log may have lost its tail in the crash (a torn write, data the disk never got):
//! records the leader acknowledged because this replica had fetched them. While the
//! catalog still lists it as in sync, it could win the next election with a shorter log
//! and every other replica would truncate to it, losing acknowledged records. So before
//! it registers its elections it takes itself out of the ISR, as Kafka's controller
//! fences a restarted broker; it rejoins once it has fetched up to the high watermark
//! again. Where it is the last ISR member it stays: no other replica is known to hold
//! more, and leaving would leave the partition with no electable replica at all.

use crate::cluster::catalog::PartitionState;

/// The state to publish so that `me` is out of `state`'s ISR, if it must leave: it is
/// in the ISR with at least one other member. Where `me` was the leader of record, the
/// partition becomes leaderless (leader -1, a new leader epoch) so that an in-sync
/// replica takes over by the usual election.
pub fn leave_isr(me: i32, state: &PartitionState) -> Option<PartitionState> {
    if !state.isr.contains(&me) || state.isr.iter().all(|b| *b == me) {
        return None;
    }
    let isr: Vec<i32> = state.isr.iter().copied().filter(|b| *b != me).collect();
    let (leader, leader_epoch) = if state.leader == me {
        (-1, state.leader_epoch + 1)
    } else {
        (state.leader, state.leader_epoch)
    };
    Some(PartitionState {
        leader,
        leader_epoch,
        isr,
        partition_epoch: state.partition_epoch + 1,
        ..state.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state(leader: i32, isr: &[i32]) -> PartitionState {
        PartitionState {
            replicas: vec![1, 2, 3],
            leader,
            leader_epoch: 4,
            isr: isr.to_vec(),
            partition_epoch: 9,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    #[test]
    fn a_follower_leaves_and_the_leader_stays() {
        let next = leave_isr(2, &state(1, &[1, 2, 3])).expect("leaves");
        assert_eq!(next.isr, vec![1, 3]);
        assert_eq!((next.leader, next.leader_epoch), (1, 4));
        assert_eq!(next.partition_epoch, 10);
        assert_eq!(next.replicas, vec![1, 2, 3]);
    }

    #[test]
    fn the_leader_of_record_leaves_the_partition_leaderless_in_a_new_epoch() {
        let next = leave_isr(1, &state(1, &[1, 3])).expect("leaves");
        assert_eq!(next.isr, vec![3]);
        assert_eq!((next.leader, next.leader_epoch), (-1, 5));
    }

    #[test]
    fn the_last_isr_member_and_replicas_outside_the_isr_change_nothing() {
        assert_eq!(leave_isr(1, &state(1, &[1])), None);
        assert_eq!(leave_isr(2, &state(1, &[1, 3])), None);
    }

    proptest! {
        #[test]
        fn what_is_left_is_a_nonempty_isr_without_me_with_a_leader_from_it_or_none(
            me in 1..4i32,
            leader in -1..4i32,
            isr in proptest::sample::subsequence(vec![1, 2, 3], 0..=3),
        ) {
            let before = state(leader, &isr);
            match leave_isr(me, &before) {
                None => prop_assert!(!isr.contains(&me) || isr == vec![me]),
                Some(after) => {
                    prop_assert!(!after.isr.contains(&me));
                    prop_assert!(!after.isr.is_empty());
                    prop_assert_eq!(after.isr.len() + 1, isr.len());
                    prop_assert!(after.leader == -1 || after.leader == leader);
                    prop_assert!(after.leader != me);
                    prop_assert!(after.leader_epoch >= before.leader_epoch);
                    prop_assert_eq!(after.partition_epoch, before.partition_epoch + 1);
                }
            }
        }
    }
}
