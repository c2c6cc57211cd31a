//! A group member's side of KIP-848 (docs/groups.md), pure: what the next
//! ConsumerGroupHeartbeat says, and what an answer changes. The coordinator decides the
//! assignment; the member only follows it, revoking first: an answer that takes
//! partitions away yields [`Event::Revoked`] before anything else, and the member
//! reports them gone (by no longer listing them as owned) only in the heartbeat after
//! the caller has handled the event. So a pipeline commits (or aborts) what it did with
//! a partition before another member may get it.
//!
//! A fenced or forgotten member (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) has already
//! lost its partitions to others: [`Event::Lost`] (nothing may be committed for them),
//! then it joins again at epoch 0 under the same member id.

use std::collections::BTreeSet;

use idem_proto::ErrorCode;

/// A partition of a subscribed topic.
pub type TopicPartition = (String, i32);

/// What changed for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Partitions to stop on; handle (commit, abort) before the next heartbeat, which
    /// tells the coordinator they are released.
    Revoked(BTreeSet<TopicPartition>),
    /// Partitions now this member's.
    Assigned(BTreeSet<TopicPartition>),
    /// Partitions the coordinator already gave away (this member was fenced or timed
    /// out): nothing may be committed for them.
    Lost(BTreeSet<TopicPartition>),
}

/// The fields of the next heartbeat that the member state decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextHeartbeat {
    pub member_epoch: i32,
    /// The subscription, sent when joining and after it changed.
    pub subscribed: Option<BTreeSet<String>>,
    pub owned: BTreeSet<TopicPartition>,
}

/// A heartbeat answer as the member needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub error: ErrorCode,
    pub member_epoch: i32,
    /// `None`: unchanged (or none after a leave).
    pub assignment: Option<BTreeSet<TopicPartition>>,
}

/// What a refused heartbeat means for the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Try again later (coordinator moving, loading, unreachable).
    Retry,
    /// Lost its membership: partitions lost, joins again.
    Rejoin,
    /// Nothing will fix it (invalid group id, another instance took the instance id).
    Fatal,
}

pub fn refusal(code: ErrorCode) -> Refusal {
    use ErrorCode as E;
    match code {
        E::FencedMemberEpoch | E::UnknownMemberId => Refusal::Rejoin,
        E::CoordinatorLoadInProgress
        | E::CoordinatorNotAvailable
        | E::NotCoordinator
        | E::UnreleasedInstanceId
        | E::RequestTimedOut
        | E::UnknownServerError => Refusal::Retry,
        _ => Refusal::Fatal,
    }
}

/// One member's view of its membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    subscription: BTreeSet<String>,
    /// Epoch of the last accepted answer; 0 until joined (and after a fence).
    epoch: i32,
    owned: BTreeSet<TopicPartition>,
    /// The subscription has not reached the coordinator yet.
    subscription_unsent: bool,
    /// How many times it lost its partitions and joined again: a commit asked for
    /// before a loss must not be sent after it (its positions may be older than what
    /// another member committed meanwhile).
    rejoins: u64,
}

impl Membership {
    /// A member about to join with `subscription`.
    pub fn joining(subscription: BTreeSet<String>) -> Membership {
        Membership {
            subscription,
            epoch: 0,
            owned: BTreeSet::new(),
            subscription_unsent: true,
            rejoins: 0,
        }
    }

    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// How many times this member lost its partitions and joined again.
    pub fn rejoins(&self) -> u64 {
        self.rejoins
    }

    pub fn owned(&self) -> &BTreeSet<TopicPartition> {
        &self.owned
    }

    pub fn subscription(&self) -> &BTreeSet<String> {
        &self.subscription
    }

    /// Changes the subscription; the next heartbeat carries it.
    pub fn subscribe(&mut self, subscription: BTreeSet<String>) {
        if subscription != self.subscription {
            self.subscription = subscription;
            self.subscription_unsent = true;
        }
    }

    pub fn next_heartbeat(&self) -> NextHeartbeat {
        NextHeartbeat {
            member_epoch: self.epoch,
            subscribed: (self.subscription_unsent || self.epoch == 0)
                .then(|| self.subscription.clone()),
            owned: self.owned.clone(),
        }
    }

    /// Applies an answer to the heartbeat [`Membership::next_heartbeat`] described.
    /// Revocations come first in the events.
    pub fn on_answer(&mut self, answer: &HeartbeatAnswer) -> Result<Vec<Event>, Refusal> {
        if answer.error != ErrorCode::None {
            let refusal = refusal(answer.error);
            return match refusal {
                Refusal::Rejoin => Ok(self.rejoin()),
                other => Err(other),
            };
        }
        self.epoch = answer.member_epoch;
        self.subscription_unsent = false;
        let Some(assigned) = &answer.assignment else {
            return Ok(Vec::new());
        };
        let revoked: BTreeSet<TopicPartition> = self.owned.difference(assigned).cloned().collect();
        let added: BTreeSet<TopicPartition> = assigned.difference(&self.owned).cloned().collect();
        self.owned = assigned.clone();
        let mut events = Vec::new();
        if !revoked.is_empty() {
            events.push(Event::Revoked(revoked));
        }
        if !added.is_empty() {
            events.push(Event::Assigned(added));
        }
        Ok(events)
    }

    /// Gives everything up and starts over at epoch 0 (same member id).
    fn rejoin(&mut self) -> Vec<Event> {
        self.epoch = 0;
        self.subscription_unsent = true;
        self.rejoins += 1;
        let lost = std::mem::take(&mut self.owned);
        if lost.is_empty() {
            Vec::new()
        } else {
            vec![Event::Lost(lost)]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tps(ps: &[i32]) -> BTreeSet<TopicPartition> {
        ps.iter().map(|&p| ("in".to_string(), p)).collect()
    }

    fn ok(epoch: i32, assignment: Option<&[i32]>) -> HeartbeatAnswer {
        HeartbeatAnswer {
            error: ErrorCode::None,
            member_epoch: epoch,
            assignment: assignment.map(tps),
        }
    }

    fn member() -> Membership {
        Membership::joining(["in".to_string()].into_iter().collect())
    }

    #[test]
    fn given_a_join_then_the_subscription_goes_out_and_the_assignment_comes_back() {
        let mut m = member();
        let first = m.next_heartbeat();
        assert_eq!(first.member_epoch, 0);
        assert!(first.subscribed.is_some());
        assert_eq!(
            m.on_answer(&ok(1, Some(&[0, 1]))),
            Ok(vec![Event::Assigned(tps(&[0, 1]))])
        );
        let next = m.next_heartbeat();
        assert_eq!((next.member_epoch, next.subscribed), (1, None));
        assert_eq!(next.owned, tps(&[0, 1]));
    }

    #[test]
    fn given_an_answer_taking_and_giving_then_revocation_comes_first_and_is_reported_next() {
        let mut m = member();
        m.on_answer(&ok(1, Some(&[0, 1, 2]))).expect("joined");
        assert_eq!(
            m.on_answer(&ok(2, Some(&[2, 3]))),
            Ok(vec![
                Event::Revoked(tps(&[0, 1])),
                Event::Assigned(tps(&[3]))
            ])
        );
        assert_eq!(m.next_heartbeat().owned, tps(&[2, 3]));
    }

    #[test]
    fn given_an_answer_without_an_assignment_then_nothing_changes_but_the_epoch() {
        let mut m = member();
        m.on_answer(&ok(1, Some(&[0]))).expect("joined");
        assert_eq!(m.on_answer(&ok(3, None)), Ok(Vec::new()));
        assert_eq!((m.epoch(), m.owned().clone()), (3, tps(&[0])));
    }

    #[test]
    fn given_a_fence_then_everything_is_lost_and_the_member_joins_again() {
        for code in [ErrorCode::FencedMemberEpoch, ErrorCode::UnknownMemberId] {
            let mut m = member();
            m.on_answer(&ok(4, Some(&[1, 2]))).expect("joined");
            let fenced = HeartbeatAnswer {
                error: code,
                member_epoch: -1,
                assignment: None,
            };
            assert_eq!(m.on_answer(&fenced), Ok(vec![Event::Lost(tps(&[1, 2]))]));
            assert_eq!(m.rejoins(), 1);
            let next = m.next_heartbeat();
            assert_eq!(next.member_epoch, 0);
            assert!(next.owned.is_empty());
            assert!(next.subscribed.is_some());
        }
    }

    #[test]
    fn given_retriable_or_fatal_refusals_then_the_membership_is_unchanged() {
        let mut m = member();
        m.on_answer(&ok(2, Some(&[0]))).expect("joined");
        let before = m.clone();
        for (code, expected) in [
            (ErrorCode::NotCoordinator, Refusal::Retry),
            (ErrorCode::CoordinatorLoadInProgress, Refusal::Retry),
            (ErrorCode::InvalidGroupId, Refusal::Fatal),
            (ErrorCode::FencedInstanceId, Refusal::Fatal),
        ] {
            let refused = HeartbeatAnswer {
                error: code,
                member_epoch: -1,
                assignment: None,
            };
            assert_eq!(m.on_answer(&refused), Err(expected));
            assert_eq!(m, before);
        }
    }

    #[test]
    fn given_a_new_subscription_then_the_next_heartbeat_carries_it_until_answered() {
        let mut m = member();
        m.on_answer(&ok(1, Some(&[0]))).expect("joined");
        m.subscribe(["in".to_string(), "more".to_string()].into_iter().collect());
        assert!(m.next_heartbeat().subscribed.is_some());
        m.on_answer(&ok(2, None)).expect("answered");
        assert!(m.next_heartbeat().subscribed.is_none());
    }
}
