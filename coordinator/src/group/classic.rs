//! Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) for
//! members of a KIP-848 group, as Kafka 4.0 serves "classic members in a consumer
//! group": the assignment is the group's server-side target (no client-side assignor
//! runs), the generation is the member epoch, and a classic member gives partitions up
//! only by joining again, its JoinGroup listing what it still owns (cooperative
//! protocols; eager ones revoked everything first). Pure, on top of [`membership`].
//!
//! Invariant (kept by [`reconcile`](super::reconcile), property-tested below with
//! KIP-848 and classic members mixed): a partition is delivered to a member only when
//! no other member holds it. A classic member is asked to join again (Heartbeat's
//! REBALANCE_IN_PROGRESS) when it has partitions to revoke, is behind the group's
//! epoch, or can take partitions others released.

use std::collections::BTreeSet;

use super::assignor::MemberId;
pub use super::classic_member::ClassicMember;
use super::membership::{self, Group, Heartbeat, HeartbeatError, TopicSizes, JOIN_EPOCH};
use super::reconcile::{MemberAssignment, MemberState};
use crate::txn::decide::TopicPartition;

/// The only protocol type a classic member of a consumer group may name.
pub const PROTOCOL_TYPE: &str = "consumer";
/// A classic member's session timeout bounds (Kafka's defaults for
/// `group.min.session.timeout.ms` and `group.max.session.timeout.ms`).
pub const MIN_SESSION_TIMEOUT_MS: i32 = 6_000;
pub const MAX_SESSION_TIMEOUT_MS: i32 = 1_800_000;

/// A JoinGroup as the decider needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Join {
    pub member_id: MemberId,
    /// `group.instance.id`: a static member (KIP-345).
    pub instance_id: Option<String>,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocols: Vec<String>,
    pub subscribed: BTreeSet<String>,
    /// What the member still owns (its subscription's owned partitions).
    pub owned: BTreeSet<TopicPartition>,
}

/// The answer to a JoinGroup (and, with the same assignment, to the SyncGroup after).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    pub generation: i32,
    pub protocol_name: String,
    pub assignment: BTreeSet<TopicPartition>,
}

/// The answer to a Heartbeat that was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    Stay,
    /// REBALANCE_IN_PROGRESS: the member must join again.
    Rejoin,
}

/// Why a classic request was refused; the group is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassicError {
    #[error("member {member_id} is not a classic member of the group (it left, its session expired, or it speaks KIP-848): join again")]
    UnknownMemberId { member_id: MemberId },
    #[error(
        "member {member_id} sent generation {sent} but is at generation {current}: join again"
    )]
    IllegalGeneration {
        member_id: MemberId,
        sent: i32,
        current: i32,
    },
    #[error("{0}")]
    InconsistentGroupProtocol(String),
    #[error(
        "session timeout {0} ms is outside {MIN_SESSION_TIMEOUT_MS}..={MAX_SESSION_TIMEOUT_MS} ms"
    )]
    InvalidSessionTimeout(i32),
    #[error("the group moved to a new assignment: join again")]
    RebalanceInProgress,
    #[error("{0}")]
    InvalidRequest(String),
    #[error("instance id {instance_id} is member {owner}'s now: this member was replaced by a newer instance")]
    FencedInstanceId {
        instance_id: String,
        owner: MemberId,
    },
}

/// A JoinGroup: joins the member, or takes its rejoin as its report of what it still
/// owns, and answers with what it may own now at its (possibly new) epoch.
pub fn join(
    group: &Group,
    request: &Join,
    sizes: TopicSizes<'_>,
) -> Result<(Group, Joined), ClassicError> {
    if request.member_id.is_empty() {
        return Err(ClassicError::InvalidRequest(
            "member id is empty: the broker names a member before it joins".into(),
        ));
    }
    let Some(protocol_name) = request.protocols.first().cloned() else {
        return Err(ClassicError::InconsistentGroupProtocol(
            "a JoinGroup must offer at least one protocol".into(),
        ));
    };
    if !(MIN_SESSION_TIMEOUT_MS..=MAX_SESSION_TIMEOUT_MS).contains(&request.session_timeout_ms) {
        return Err(ClassicError::InvalidSessionTimeout(
            request.session_timeout_ms,
        ));
    }
    if group.members.contains_key(&request.member_id)
        && !group.classic.contains_key(&request.member_id)
    {
        return Err(ClassicError::UnknownMemberId {
            member_id: request.member_id.clone(),
        });
    }
    // Without the classic entry the KIP-848 rules would refuse the member's own id.
    let mut base = group.clone();
    base.classic.remove(&request.member_id);
    if let Some(instance_id) = &request.instance_id {
        replace_static_member(&mut base, &request.member_id, instance_id)?;
    }
    let heartbeat = Heartbeat {
        member_id: request.member_id.clone(),
        member_epoch: JOIN_EPOCH,
        instance_id: request.instance_id.clone(),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed: Some(request.subscribed.clone()),
        owned: Some(request.owned.clone()),
    };
    let (mut next, answer) =
        membership::heartbeat(&base, &heartbeat, sizes).map_err(|e| match e {
            HeartbeatError::InvalidRequest(m) => ClassicError::InvalidRequest(m),
            other => ClassicError::InvalidRequest(other.to_string()),
        })?;
    next.classic.insert(
        request.member_id.clone(),
        ClassicMember {
            session_timeout_ms: request.session_timeout_ms,
            protocols: request.protocols.clone(),
        },
    );
    Ok((
        next,
        Joined {
            generation: answer.member_epoch,
            protocol_name,
            assignment: answer.assignment.unwrap_or_default(),
        },
    ))
}

/// KIP-345: a classic static member that joins under a new member id (its process
/// restarted, without leaving: static members do not) replaces the member holding its
/// instance id, which is fenced. Marked as gone for now, the old member is what the
/// join then takes over (`membership`'s static rejoin): its epoch and partitions, so
/// the group does not rebalance. An instance id a KIP-848 member holds is that
/// member's until it leaves.
fn replace_static_member(
    group: &mut Group,
    member_id: &str,
    instance_id: &str,
) -> Result<(), ClassicError> {
    let holder = group
        .members
        .iter()
        .find(|(id, m)| m.instance_id.as_deref() == Some(instance_id) && id.as_str() != member_id)
        .map(|(id, _)| id.clone());
    let Some(old) = holder else {
        return Ok(());
    };
    if group.classic.remove(&old).is_none() {
        return Err(ClassicError::FencedInstanceId {
            instance_id: instance_id.to_string(),
            owner: old,
        });
    }
    if let Some(m) = group.members.get_mut(&old) {
        m.left_temporarily = true;
    }
    Ok(())
}

/// The classic member `member_id` at `generation`, or why not. A member id the group
/// lost to a newer instance of its static member is FENCED_INSTANCE_ID.
fn classic_member<'a>(
    group: &'a Group,
    member_id: &str,
    instance_id: Option<&str>,
    generation: i32,
) -> Result<(&'a MemberAssignment, &'a ClassicMember), ClassicError> {
    let unknown = || match instance_id.and_then(|i| owner_of_instance(group, i)) {
        Some((instance_id, owner)) if owner != member_id => {
            ClassicError::FencedInstanceId { instance_id, owner }
        }
        _ => ClassicError::UnknownMemberId {
            member_id: member_id.to_string(),
        },
    };
    let classic = group.classic.get(member_id).ok_or_else(unknown)?;
    let member = group.members.get(member_id).ok_or_else(unknown)?;
    let current = member.assignment.member_epoch;
    if generation != current {
        return Err(ClassicError::IllegalGeneration {
            member_id: member_id.to_string(),
            sent: generation,
            current,
        });
    }
    Ok((&member.assignment, classic))
}

/// `(instance id, member holding it)`, if a member holds `instance_id`.
fn owner_of_instance(group: &Group, instance_id: &str) -> Option<(String, MemberId)> {
    group
        .members
        .iter()
        .find(|(_, m)| m.instance_id.as_deref() == Some(instance_id))
        .map(|(id, _)| (instance_id.to_string(), id.clone()))
}

/// Who sends a SyncGroup or Heartbeat: its member id, and its instance id if static.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sender<'a> {
    pub member_id: &'a str,
    pub instance_id: Option<&'a str>,
}

/// A SyncGroup: the member's assignment at its generation. A member behind the group's
/// epoch (and not in the middle of revoking) must join again first.
pub fn sync(
    group: &Group,
    sender: Sender<'_>,
    generation: i32,
    protocol_type: Option<&str>,
    protocol_name: Option<&str>,
) -> Result<Joined, ClassicError> {
    let (assignment, classic) =
        classic_member(group, sender.member_id, sender.instance_id, generation)?;
    if let Some(t) = protocol_type.filter(|t| *t != PROTOCOL_TYPE) {
        return Err(ClassicError::InconsistentGroupProtocol(format!(
            "protocol type {t:?} is not {PROTOCOL_TYPE:?}"
        )));
    }
    if let Some(n) = protocol_name.filter(|n| *n != classic.protocol_name()) {
        return Err(ClassicError::InconsistentGroupProtocol(format!(
            "protocol {n:?} is not {:?}, the one the JoinGroup answered",
            classic.protocol_name()
        )));
    }
    if group.group_epoch > assignment.member_epoch
        && assignment.state != MemberState::UnrevokedPartitions
    {
        return Err(ClassicError::RebalanceInProgress);
    }
    Ok(Joined {
        generation: assignment.member_epoch,
        protocol_name: classic.protocol_name().to_string(),
        assignment: assignment.assigned.clone(),
    })
}

/// A Heartbeat: whether the member must join again. The group may change: its target
/// follows the subscribed topics' sizes, and a member that must revoke is marked so
/// (at its epoch), which starts its rebalance timeout.
pub fn heartbeat(
    group: &Group,
    sender: Sender<'_>,
    generation: i32,
    sizes: TopicSizes<'_>,
) -> Result<(Group, Beat), ClassicError> {
    let member_id = sender.member_id;
    classic_member(group, member_id, sender.instance_id, generation)?;
    let mut next = membership::refresh_target(group.clone(), sizes);
    let Some(member) = next.members.get(member_id) else {
        return Err(ClassicError::UnknownMemberId {
            member_id: member_id.to_string(),
        });
    };
    let current = member.assignment.clone();
    // What the member would move to if it said it owns everything it holds.
    let holding: BTreeSet<TopicPartition> = current
        .assigned
        .union(&current.pending_revocation)
        .cloned()
        .collect();
    let step = membership::step_toward_target(&next, member_id, &current, Some(&holding));
    let rejoin = current.state == MemberState::UnrevokedPartitions
        || current.member_epoch < next.target_epoch
        || (current.state == MemberState::UnreleasedPartitions && step != current);
    if !rejoin {
        return Ok((next, Beat::Stay));
    }
    // Only a revocation is recorded now (same epoch, so the generation stays valid);
    // anything else the member learns from its JoinGroup.
    if step.state == MemberState::UnrevokedPartitions && step.member_epoch == current.member_epoch {
        if let Some(m) = next.members.get_mut(member_id) {
            m.assignment = step;
        }
    }
    Ok((next, Beat::Rejoin))
}

/// One member's outcome of a LeaveGroup.
pub type LeaveResult = (String, Result<(), ClassicError>);

/// A member a LeaveGroup names: by member id, or (v3+, the admin client's
/// `removeMembersFromConsumerGroup`) by a static member's instance id, with or
/// without its member id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaving {
    /// Empty: named by its instance id alone.
    pub member_id: MemberId,
    pub instance_id: Option<String>,
}

/// A LeaveGroup: each member named leaves (its partitions are free for the next
/// target). By member id, only a classic member may (another id is
/// UNKNOWN_MEMBER_ID); by instance id, the member holding it, of either protocol
/// (none: UNKNOWN_MEMBER_ID; a member id that is not the holder's:
/// FENCED_INSTANCE_ID, as Kafka answers a replaced instance).
pub fn leave(
    group: &Group,
    leaving: &[Leaving],
    sizes: TopicSizes<'_>,
) -> (Group, Vec<LeaveResult>) {
    let mut next = group.clone();
    let mut results = Vec::with_capacity(leaving.len());
    for named in leaving {
        let chosen = match &named.instance_id {
            Some(instance_id) => match owner_of_instance(&next, instance_id) {
                None => Err(ClassicError::UnknownMemberId {
                    member_id: named.member_id.clone(),
                }),
                Some((instance_id, owner))
                    if !named.member_id.is_empty() && named.member_id != owner =>
                {
                    Err(ClassicError::FencedInstanceId { instance_id, owner })
                }
                Some((_, owner)) => Ok(owner),
            },
            None if next.classic.contains_key(&named.member_id)
                && next.members.contains_key(&named.member_id) =>
            {
                Ok(named.member_id.clone())
            }
            None => Err(ClassicError::UnknownMemberId {
                member_id: named.member_id.clone(),
            }),
        };
        match chosen {
            Ok(member_id) => {
                next = membership::remove_member(&next, &member_id, sizes);
                results.push((member_id, Ok(())));
            }
            Err(refused) => results.push((named.member_id.clone(), Err(refused))),
        }
    }
    (next, results)
}

#[cfg(test)]
mod tests;
