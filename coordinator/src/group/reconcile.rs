//! Moving one member of a consumer group from its current assignment to its target
//! (KIP-848's reconciliation). Pure: the group coordinator calls it on each heartbeat
//! of the member with what the member says it owns.
//!
//! The invariant it keeps: a partition is given to a member only when no other member
//! holds it, where a member holds what it was assigned plus what it was asked to revoke
//! and has not yet reported revoked. So no two live members ever own one partition,
//! however heartbeats interleave and whichever responses are lost (property-tested
//! below on a simulated group). A member that revokes moves to the new epoch only once
//! it reported the revocation; one that waits for partitions others still hold takes
//! the new epoch at once and gets them on a later heartbeat.

use std::collections::BTreeSet;

use crate::txn::decide::TopicPartition;

/// Where a member stands against its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// It owns its target (at the target's epoch).
    Stable,
    /// It was asked to revoke partitions and has not reported them revoked; it stays at
    /// its epoch meanwhile.
    UnrevokedPartitions,
    /// It is at the target's epoch but waits for partitions other members still hold.
    UnreleasedPartitions,
}

/// What the coordinator keeps of a member's assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberAssignment {
    pub member_epoch: i32,
    pub state: MemberState,
    /// What the member may own: the assignment its heartbeats are answered with.
    pub assigned: BTreeSet<TopicPartition>,
    /// What it was asked to give up and may still own.
    pub pending_revocation: BTreeSet<TopicPartition>,
}

impl MemberAssignment {
    /// A member that just joined: nothing yet, at epoch 0.
    pub fn joining() -> MemberAssignment {
        MemberAssignment {
            member_epoch: 0,
            state: MemberState::Stable,
            assigned: BTreeSet::new(),
            pending_revocation: BTreeSet::new(),
        }
    }

    /// Whether the member may still own `tp` (no other member may get it meanwhile).
    pub fn holds(&self, tp: &TopicPartition) -> bool {
        self.assigned.contains(tp) || self.pending_revocation.contains(tp)
    }
}

/// The group's side of one reconciliation.
pub struct Target<'a> {
    /// The epoch of the group's current target assignment.
    pub epoch: i32,
    /// This member's partitions in that target.
    pub partitions: &'a BTreeSet<TopicPartition>,
    /// Whether a member other than this one holds the partition.
    pub held_by_others: &'a dyn Fn(&TopicPartition) -> bool,
}

/// The member's next assignment. `owned`: the partitions the member reported owning
/// in this heartbeat (`None` when it did not say, which counts as owning everything
/// it was given).
pub fn reconcile(
    member: &MemberAssignment,
    target: &Target<'_>,
    owned: Option<&BTreeSet<TopicPartition>>,
) -> MemberAssignment {
    match member.state {
        MemberState::Stable if member.member_epoch == target.epoch => member.clone(),
        MemberState::UnrevokedPartitions if still_owns_any(owned, &member.pending_revocation) => {
            member.clone()
        }
        _ => next_assignment(member, target, owned),
    }
}

/// Whether the member (as it reported) still owns any of `revoked`.
fn still_owns_any(
    owned: Option<&BTreeSet<TopicPartition>>,
    revoked: &BTreeSet<TopicPartition>,
) -> bool {
    match owned {
        None => !revoked.is_empty(),
        Some(owned) => !owned.is_disjoint(revoked),
    }
}

fn next_assignment(
    member: &MemberAssignment,
    target: &Target<'_>,
    owned: Option<&BTreeSet<TopicPartition>>,
) -> MemberAssignment {
    let kept: BTreeSet<TopicPartition> = member
        .assigned
        .intersection(target.partitions)
        .cloned()
        .collect();
    let to_revoke: BTreeSet<TopicPartition> = member.assigned.difference(&kept).cloned().collect();
    if still_owns_any(owned, &to_revoke) {
        // Revoke first, at the current epoch; nothing new until that is reported.
        return MemberAssignment {
            member_epoch: member.member_epoch,
            state: MemberState::UnrevokedPartitions,
            assigned: kept,
            pending_revocation: to_revoke,
        };
    }
    let mut assigned = kept;
    let mut unreleased = false;
    for tp in target.partitions {
        if assigned.contains(tp) {
            continue;
        }
        // A partition this member is itself revoking is free of others by construction.
        if (target.held_by_others)(tp) && !member.pending_revocation.contains(tp) {
            unreleased = true;
        } else {
            assigned.insert(tp.clone());
        }
    }
    MemberAssignment {
        member_epoch: target.epoch,
        state: if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        },
        assigned,
        pending_revocation: BTreeSet::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn tp(partition: i32) -> TopicPartition {
        TopicPartition {
            topic: "in".into(),
            partition,
        }
    }

    fn set(ps: &[i32]) -> BTreeSet<TopicPartition> {
        ps.iter().map(|&p| tp(p)).collect()
    }

    fn stable(epoch: i32, ps: &[i32]) -> MemberAssignment {
        MemberAssignment {
            member_epoch: epoch,
            state: MemberState::Stable,
            assigned: set(ps),
            pending_revocation: BTreeSet::new(),
        }
    }

    fn free(_: &TopicPartition) -> bool {
        false
    }

    #[test]
    fn given_partitions_to_revoke_then_the_member_keeps_its_epoch_until_it_reports_them_gone() {
        let member = stable(3, &[0, 1, 2]);
        let target_ps = set(&[0]);
        let target = Target {
            epoch: 4,
            partitions: &target_ps,
            held_by_others: &free,
        };
        let asked = reconcile(&member, &target, Some(&set(&[0, 1, 2])));
        assert_eq!(asked.state, MemberState::UnrevokedPartitions);
        assert_eq!((asked.member_epoch, &asked.assigned), (3, &set(&[0])));
        assert_eq!(asked.pending_revocation, set(&[1, 2]));
        // Still owning one of them: no progress.
        assert_eq!(reconcile(&asked, &target, Some(&set(&[0, 2]))), asked);
        // Not saying counts as owning.
        assert_eq!(reconcile(&asked, &target, None), asked);
        let done = reconcile(&asked, &target, Some(&set(&[0])));
        assert_eq!(done, stable(4, &[0]));
    }

    #[test]
    fn given_a_partition_another_member_still_holds_then_it_comes_on_a_later_heartbeat() {
        let member = stable(1, &[0]);
        let target_ps = set(&[0, 1]);
        let held = |p: &TopicPartition| p.partition == 1;
        let waiting = reconcile(
            &member,
            &Target {
                epoch: 2,
                partitions: &target_ps,
                held_by_others: &held,
            },
            Some(&set(&[0])),
        );
        assert_eq!(waiting.state, MemberState::UnreleasedPartitions);
        assert_eq!((waiting.member_epoch, &waiting.assigned), (2, &set(&[0])));
        let released = reconcile(
            &waiting,
            &Target {
                epoch: 2,
                partitions: &target_ps,
                held_by_others: &free,
            },
            Some(&set(&[0])),
        );
        assert_eq!(released, stable(2, &[0, 1]));
    }

    #[test]
    fn given_a_stable_member_at_the_target_epoch_then_nothing_changes() {
        let member = stable(5, &[1]);
        let target_ps = set(&[2]);
        let target = Target {
            epoch: 5,
            partitions: &target_ps,
            held_by_others: &free,
        };
        assert_eq!(reconcile(&member, &target, None), member);
    }

    /// A simulated group: the coordinator's view of each member and what each member
    /// actually owns (it owns what its last received answer assigned).
    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// A new target: partition p goes to member `owners[p] % members`.
        NewTarget([u8; PARTITIONS]),
        /// Member i heartbeats; its answer arrives unless `lost`.
        Heartbeat { member: usize, lost: bool },
    }

    const PARTITIONS: usize = 6;
    const MEMBERS: usize = 3;

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            1 => proptest::array::uniform6(0u8..MEMBERS as u8).prop_map(Step::NewTarget),
            5 => (0..MEMBERS, proptest::bool::weighted(0.2))
                .prop_map(|(member, lost)| Step::Heartbeat { member, lost }),
        ]
    }

    struct Group {
        target_epoch: i32,
        target: BTreeMap<usize, BTreeSet<TopicPartition>>,
        view: Vec<MemberAssignment>,
        owns: Vec<BTreeSet<TopicPartition>>,
    }

    impl Group {
        fn new() -> Group {
            Group {
                target_epoch: 0,
                target: (0..MEMBERS).map(|m| (m, BTreeSet::new())).collect(),
                view: vec![MemberAssignment::joining(); MEMBERS],
                owns: vec![BTreeSet::new(); MEMBERS],
            }
        }

        fn heartbeat(&mut self, member: usize, lost: bool) {
            let others: Vec<MemberAssignment> = self
                .view
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != member)
                .map(|(_, v)| v.clone())
                .collect();
            let held = move |p: &TopicPartition| others.iter().any(|o| o.holds(p));
            let next = reconcile(
                &self.view[member],
                &Target {
                    epoch: self.target_epoch,
                    partitions: &self.target[&member],
                    held_by_others: &held,
                },
                Some(&self.owns[member]),
            );
            self.view[member] = next;
            if !lost {
                // The member revokes what it was not given and starts on what it was.
                self.owns[member] = self.view[member].assigned.clone();
            }
        }

        fn check_safety(&self) -> Result<(), TestCaseError> {
            for a in 0..MEMBERS {
                for p in &self.owns[a] {
                    prop_assert!(
                        self.view[a].holds(p),
                        "member {a} owns {p:?} the coordinator forgot"
                    );
                    for b in a + 1..MEMBERS {
                        prop_assert!(!self.owns[b].contains(p), "{p:?} owned by {a} and {b}");
                    }
                }
            }
            Ok(())
        }
    }

    proptest! {
        #[test]
        fn no_partition_is_ever_owned_by_two_members_and_every_member_reaches_its_target(
            steps in proptest::collection::vec(step(), 0..80)
        ) {
            let mut group = Group::new();
            for s in steps {
                match s {
                    Step::NewTarget(owners) => {
                        group.target_epoch += 1;
                        for m in 0..MEMBERS {
                            group.target.insert(m, BTreeSet::new());
                        }
                        for (p, owner) in owners.iter().enumerate() {
                            group.target.get_mut(&(*owner as usize)).map(|t| t.insert(tp(p as i32)));
                        }
                    }
                    Step::Heartbeat { member, lost } => group.heartbeat(member, lost),
                }
                group.check_safety()?;
            }
            // With every answer arriving, a few rounds bring everyone to the target: a
            // member may need one round to learn what to revoke, one to report it
            // revoked (its old ask may be outdated: that is one more of each), and the
            // member waiting for the partition one more to get it.
            for _ in 0..5 {
                for m in 0..MEMBERS {
                    group.heartbeat(m, false);
                    group.check_safety()?;
                }
            }
            for m in 0..MEMBERS {
                prop_assert_eq!(group.view[m].state, MemberState::Stable);
                prop_assert_eq!(group.view[m].member_epoch, group.target_epoch);
                prop_assert_eq!(&group.owns[m], &group.target[&m]);
            }
        }
    }
}
