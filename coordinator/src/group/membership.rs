//! A consumer group's membership as a pure decider (KIP-848's ConsumerGroupHeartbeat):
//! a heartbeat of one member, a removal (leave, missed session), or a change of the
//! subscribed topics' partitions turns one [`Group`] into the next. The shell persists
//! the new group before it answers, keeps the session timers, and answers with
//! [`Answer`].
//!
//! Epochs: the group epoch moves when members, subscriptions or the subscribed topics'
//! partition counts change; the target assignment is recomputed for the new epoch; a
//! member reaches it through [`reconcile`](super::reconcile). A heartbeat names the
//! member's epoch: the current one, or the previous one when the member lost the answer
//! that moved it (then it must own no more than it is assigned now); anything else is
//! fenced, as is an unknown member id. Epoch 0 joins (again), -1 leaves, -2 leaves for
//! a while keeping a static member's partitions for its instance id to come back to.
//!
//! A heartbeat may name a server-side assignor ([`heartbeat_naming_assignor`]); the
//! group's target is computed by the one most members name
//! ([`server_assignor::chosen`]). A name the coordinator does not have is refused
//! before anything changes.

use std::collections::{BTreeMap, BTreeSet};

use super::assignor::{Assignment, AssignmentSpec, MemberId};
use super::classic_member::ClassicMember;
use super::reconcile::{self, MemberAssignment, Target};
use super::server_assignor::{self, ServerAssignor};
use crate::txn::decide::TopicPartition;

/// Member epoch of a heartbeat that joins, or joins again.
pub const JOIN_EPOCH: i32 = 0;
/// Member epoch of a heartbeat that leaves the group.
pub const LEAVE_EPOCH: i32 = -1;
/// Member epoch of a static member leaving for a while (a restart) and keeping its
/// partitions for its instance id until its session times out.
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// One member as the coordinator keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub instance_id: Option<String>,
    pub subscribed: BTreeSet<String>,
    pub rebalance_timeout_ms: i32,
    pub assignment: MemberAssignment,
    /// The epoch before the last move, accepted once from a member that lost the
    /// answer that moved it.
    pub previous_epoch: i32,
    /// A static member that left for a while: it keeps its partitions (and nobody
    /// heartbeats for it) until its instance id joins again or its session ends.
    pub left_temporarily: bool,
}

/// A consumer group's membership and assignment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Group {
    pub group_epoch: i32,
    pub members: BTreeMap<MemberId, Member>,
    pub target_epoch: i32,
    pub target: Assignment,
    /// The partition count of each subscribed topic when the target was computed.
    pub partition_counts: BTreeMap<String, i32>,
    /// When the group last lost its last member (wall clock, ms): its offsets' retention
    /// runs from here (Kafka's `currentStateTimestamp`). `None` while it has members, and
    /// for a group that never had any. The deciders carry it; the shell sets it
    /// ([`expiry::note_emptiness`](super::expiry::note_emptiness)).
    pub empty_since_ms: Option<i64>,
    /// The server-side assignor each member asked for (a member naming none is absent).
    /// Persisted with the member, so a takeover chooses the same assignor.
    pub server_assignors: BTreeMap<MemberId, String>,
    /// The members that speak Kafka's classic protocol ([`classic`](super::classic)),
    /// with their session timeout and protocols. Persisted with the member.
    pub classic: BTreeMap<MemberId, ClassicMember>,
}

/// A ConsumerGroupHeartbeat as the decider needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub member_id: MemberId,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    /// The subscription, when the member sends it (on joining, and when it changes).
    pub subscribed: Option<BTreeSet<String>>,
    /// What the member owns, when it says.
    pub owned: Option<BTreeSet<TopicPartition>>,
}

/// The answer to a heartbeat that was accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The member's epoch now (`LEAVE_EPOCH` / `STATIC_LEAVE_EPOCH` after a leave).
    pub member_epoch: i32,
    /// The partitions the member may own now; `None` after a leave.
    pub assignment: Option<BTreeSet<TopicPartition>>,
}

/// Why a heartbeat was refused; the group is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    #[error("member {member_id} is not a member of the group (it left or its session expired): join again with epoch 0")]
    UnknownMemberId { member_id: MemberId },
    #[error("member {member_id} sent epoch {sent} but is at epoch {current}: it must give up its partitions and join again")]
    FencedMemberEpoch {
        member_id: MemberId,
        sent: i32,
        current: i32,
    },
    #[error("instance id {instance_id} belongs to member {owner}, which has not left")]
    UnreleasedInstanceId {
        instance_id: String,
        owner: MemberId,
    },
    #[error("instance id {instance_id} is now member {owner}'s: this member was replaced")]
    FencedInstanceId {
        instance_id: String,
        owner: MemberId,
    },
    #[error("the coordinator has no server assignor {name:?} (it has \"uniform\" and \"range\")")]
    UnsupportedAssignor { name: String },
    #[error("{0}")]
    InvalidRequest(String),
}

/// The subscribed topics' partition counts (`None`: no such topic), as the coordinator
/// last learned them.
pub type TopicSizes<'a> = &'a dyn Fn(&str) -> Option<i32>;

/// Applies one heartbeat that names no assignor (the member's request is unchanged).
pub fn heartbeat(
    group: &Group,
    request: &Heartbeat,
    sizes: TopicSizes<'_>,
) -> Result<(Group, Answer), HeartbeatError> {
    heartbeat_naming_assignor(group, request, None, sizes)
}

/// Applies one heartbeat. `server_assignor`: `None` leaves the member's request as it
/// was (none for a joining member), `Some("")` withdraws it, a name asks for that
/// assignor; a name the coordinator does not have is UNSUPPORTED_ASSIGNOR.
pub fn heartbeat_naming_assignor(
    group: &Group,
    request: &Heartbeat,
    server_assignor: Option<&str>,
    sizes: TopicSizes<'_>,
) -> Result<(Group, Answer), HeartbeatError> {
    if request.member_id.is_empty() {
        return Err(HeartbeatError::InvalidRequest(
            "member id is empty: a member names itself (a UUID) before it joins".into(),
        ));
    }
    if group.classic.contains_key(&request.member_id) {
        // A classic member speaks JoinGroup/Heartbeat; its id is not a KIP-848 member's.
        return Err(HeartbeatError::UnknownMemberId {
            member_id: request.member_id.clone(),
        });
    }
    if let Some(name) = server_assignor.filter(|n| !n.is_empty()) {
        if ServerAssignor::named(name).is_none() {
            return Err(HeartbeatError::UnsupportedAssignor {
                name: name.to_string(),
            });
        }
    }
    let mut next = match request.member_epoch {
        LEAVE_EPOCH | STATIC_LEAVE_EPOCH => return leave(group, request, sizes),
        JOIN_EPOCH => join(group, request)?,
        _ => carry_on(group, request)?,
    };
    // The member's assignor request is part of its membership: a change moves the group
    // epoch (the assignor may change), as a subscription change does.
    if let Some(name) = server_assignor {
        let asked = (!name.is_empty()).then(|| name.to_string());
        if next.server_assignors.get(&request.member_id) != asked.as_ref() {
            match asked {
                Some(name) => next
                    .server_assignors
                    .insert(request.member_id.clone(), name),
                None => next.server_assignors.remove(&request.member_id),
            };
            if next.group_epoch == group.group_epoch {
                next.group_epoch += 1;
            }
        }
    }
    Ok(advance(next, request, sizes))
}

fn leave(
    group: &Group,
    request: &Heartbeat,
    sizes: TopicSizes<'_>,
) -> Result<(Group, Answer), HeartbeatError> {
    let Some(member) = group.members.get(&request.member_id) else {
        // Leaving twice (a lost answer) is done already.
        return Ok((group.clone(), left(request.member_epoch)));
    };
    let mut next = group.clone();
    if request.member_epoch == STATIC_LEAVE_EPOCH && member.instance_id.is_some() {
        if let Some(m) = next.members.get_mut(&request.member_id) {
            m.left_temporarily = true;
        }
        return Ok((next, left(STATIC_LEAVE_EPOCH)));
    }
    next = remove_member(&next, &request.member_id, sizes);
    Ok((next, left(LEAVE_EPOCH)))
}

fn left(epoch: i32) -> Answer {
    Answer {
        member_epoch: epoch,
        assignment: None,
    }
}

/// The group with the member joined (again); the caller advances it.
fn join(group: &Group, request: &Heartbeat) -> Result<Group, HeartbeatError> {
    let Some(subscribed) = request.subscribed.clone().filter(|s| !s.is_empty()) else {
        return Err(HeartbeatError::InvalidRequest(
            "a joining member must subscribe to at least one topic".into(),
        ));
    };
    let mut next = group.clone();
    if let Some(instance_id) = &request.instance_id {
        let holder = group.members.iter().find(|(id, m)| {
            m.instance_id.as_ref() == Some(instance_id) && **id != request.member_id
        });
        if let Some((old_id, old)) = holder {
            if !old.left_temporarily {
                return Err(HeartbeatError::UnreleasedInstanceId {
                    instance_id: instance_id.clone(),
                    owner: old_id.clone(),
                });
            }
            // A static member back from a restart takes its old self's place, epoch and
            // partitions: no rebalance.
            let mut back = old.clone();
            back.left_temporarily = false;
            next.members.remove(old_id);
            next.members.insert(request.member_id.clone(), back);
            if let Some(target) = next.target.remove(old_id) {
                next.target.insert(request.member_id.clone(), target);
            }
            if let Some(asked) = next.server_assignors.remove(old_id) {
                next.server_assignors
                    .insert(request.member_id.clone(), asked);
            }
        }
    }
    match next.members.get_mut(&request.member_id) {
        // Joining again (its answer was lost, or it was told to): it keeps what it has.
        Some(member) => {
            member.rebalance_timeout_ms = request.rebalance_timeout_ms;
            if member.subscribed != subscribed {
                member.subscribed = subscribed;
                next.group_epoch += 1;
            }
        }
        None => {
            next.members.insert(
                request.member_id.clone(),
                Member {
                    instance_id: request.instance_id.clone(),
                    subscribed,
                    rebalance_timeout_ms: request.rebalance_timeout_ms,
                    assignment: MemberAssignment::joining(),
                    previous_epoch: JOIN_EPOCH,
                    left_temporarily: false,
                },
            );
            next.group_epoch += 1;
        }
    }
    Ok(next)
}

/// The group after a heartbeat of a member at its epoch; the caller advances it.
fn carry_on(group: &Group, request: &Heartbeat) -> Result<Group, HeartbeatError> {
    let Some(member) = group.members.get(&request.member_id) else {
        return Err(HeartbeatError::UnknownMemberId {
            member_id: request.member_id.clone(),
        });
    };
    if let Some(instance_id) = &request.instance_id {
        if member.instance_id.as_ref() != Some(instance_id) {
            let owner = group
                .members
                .iter()
                .find(|(_, m)| m.instance_id.as_ref() == Some(instance_id))
                .map(|(id, _)| id.clone())
                .unwrap_or_default();
            return Err(HeartbeatError::FencedInstanceId {
                instance_id: instance_id.clone(),
                owner,
            });
        }
    }
    let current = member.assignment.member_epoch;
    let lost_answer = request.member_epoch == member.previous_epoch
        && request
            .owned
            .as_ref()
            .is_some_and(|owned| owned.is_subset(&member.assignment.assigned));
    if request.member_epoch != current && !lost_answer {
        return Err(HeartbeatError::FencedMemberEpoch {
            member_id: request.member_id.clone(),
            sent: request.member_epoch,
            current,
        });
    }
    let mut next = group.clone();
    if let Some(m) = next.members.get_mut(&request.member_id) {
        m.rebalance_timeout_ms = request.rebalance_timeout_ms;
        if let Some(subscribed) = request.subscribed.clone().filter(|s| !s.is_empty()) {
            if m.subscribed != subscribed {
                m.subscribed = subscribed;
                next.group_epoch += 1;
            }
        }
    }
    Ok(next)
}

/// Where `member_id` moves from `current` toward its share of the group's target,
/// given what it says it `owned` (None: not said), taking no partition another member
/// still holds.
pub(super) fn step_toward_target(
    group: &Group,
    member_id: &str,
    current: &MemberAssignment,
    owned: Option<&BTreeSet<TopicPartition>>,
) -> MemberAssignment {
    let held_by_others = |tp: &TopicPartition| {
        group
            .members
            .iter()
            .any(|(id, m)| id != member_id && m.assignment.holds(tp))
    };
    let empty = BTreeSet::new();
    reconcile::reconcile(
        current,
        &Target {
            epoch: group.target_epoch,
            partitions: group.target.get(member_id).unwrap_or(&empty),
            held_by_others: &held_by_others,
        },
        owned,
    )
}

/// Moves the group to a target for its epoch (bumping it first if the subscribed
/// topics' sizes changed), then the member toward its share.
fn advance(mut group: Group, request: &Heartbeat, sizes: TopicSizes<'_>) -> (Group, Answer) {
    group = refresh_target(group, sizes);
    let member_id = &request.member_id;
    let Some(member) = group.members.get(member_id) else {
        return (group, left(LEAVE_EPOCH));
    };
    let next = step_toward_target(
        &group,
        member_id,
        &member.assignment,
        request.owned.as_ref(),
    );
    let answer = Answer {
        member_epoch: next.member_epoch,
        assignment: Some(next.assigned.clone()),
    };
    if let Some(m) = group.members.get_mut(member_id) {
        if next.member_epoch != m.assignment.member_epoch {
            m.previous_epoch = m.assignment.member_epoch;
        }
        m.assignment = next;
    }
    (group, answer)
}

/// Removes a member (it left, or its session or rebalance time ran out): its
/// partitions are free for the next target.
pub fn remove_member(group: &Group, member_id: &str, sizes: TopicSizes<'_>) -> Group {
    let mut next = group.clone();
    if next.members.remove(member_id).is_some() {
        next.target.remove(member_id);
        next.server_assignors.remove(member_id);
        next.classic.remove(member_id);
        next.group_epoch += 1;
        next = refresh_target(next, sizes);
    }
    next
}

/// Bumps the group epoch if a subscribed topic's partition count changed, and computes
/// the target for the group epoch if it is behind.
pub fn refresh_target(mut group: Group, sizes: TopicSizes<'_>) -> Group {
    let counts = subscribed_sizes(&group, sizes);
    // A membership change moved the epoch already; a size change alone moves it here.
    if group.target_epoch == group.group_epoch && counts != group.partition_counts {
        group.group_epoch += 1;
    }
    if group.target_epoch != group.group_epoch {
        group.target = group_assignor(&group).assign(&AssignmentSpec {
            subscriptions: group
                .members
                .iter()
                .map(|(id, m)| (id.clone(), m.subscribed.clone()))
                .collect(),
            partition_counts: counts.clone(),
            previous: group.target.clone(),
        });
        group.target_epoch = group.group_epoch;
    }
    group.partition_counts = counts;
    group
}

/// The assignor the group's members ask for most (uniform when none asks).
pub fn group_assignor(group: &Group) -> ServerAssignor {
    server_assignor::chosen(
        group
            .server_assignors
            .iter()
            .filter(|(id, _)| group.members.contains_key(*id))
            .map(|(_, name)| Some(name.as_str())),
    )
}

fn subscribed_sizes(group: &Group, sizes: TopicSizes<'_>) -> BTreeMap<String, i32> {
    let topics: BTreeSet<&String> = group.members.values().flat_map(|m| &m.subscribed).collect();
    topics
        .into_iter()
        .filter_map(|t| sizes(t).map(|n| (t.clone(), n)))
        .collect()
}

#[cfg(test)]
mod tests;
