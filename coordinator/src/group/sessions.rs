//! Session deadlines of the members of one slice's groups: a member that sends no
//! heartbeat within the session timeout is removed, as is a static member that left
//! for a restart (-2) and did not come back within it. Pure (the caller passes the
//! time); deadlines are not persisted, so a coordinator that loads a slice gives every
//! member a fresh session (Kafka does the same).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::membership::Group;

/// A member of a group: (group id, member id).
pub type MemberKey = (String, String);

#[derive(Debug, Clone)]
pub struct Sessions {
    timeout: Duration,
    deadlines: BTreeMap<MemberKey, Instant>,
}

impl Sessions {
    pub fn new(timeout: Duration) -> Self {
        Sessions {
            timeout,
            deadlines: BTreeMap::new(),
        }
    }

    /// Brings the deadlines of `group_id` in line with `group` after it changed: a
    /// member new to the table gets a full session, one gone from the group is
    /// forgotten; `heartbeat_from` (a member that just heartbeated, not one that left
    /// for a restart) starts a full session again.
    pub fn sync(
        &mut self,
        group_id: &str,
        group: Option<&Group>,
        heartbeat_from: Option<&str>,
        now: Instant,
    ) {
        let members: BTreeSet<&String> = group
            .map(|g| g.members.keys().collect())
            .unwrap_or_default();
        self.deadlines
            .retain(|(g, m), _| g != group_id || members.contains(m));
        for member in members {
            self.deadlines
                .entry((group_id.to_string(), member.clone()))
                .or_insert(now + self.timeout);
        }
        if let (Some(member), Some(group)) = (heartbeat_from, group) {
            if group.members.contains_key(member) {
                self.deadlines.insert(
                    (group_id.to_string(), member.to_string()),
                    now + self.timeout,
                );
            }
        }
    }

    /// Members whose session ended by `now`, oldest deadline first.
    pub fn expired(&self, now: Instant) -> Vec<MemberKey> {
        let mut due: Vec<(&MemberKey, &Instant)> =
            self.deadlines.iter().filter(|(_, d)| **d <= now).collect();
        due.sort_by_key(|(_, d)| **d);
        due.into_iter().map(|(k, _)| k.clone()).collect()
    }

    /// Whether `member`'s session ended by `now` (it may have heartbeated since it was
    /// listed as expired).
    pub fn is_expired(&self, member: &MemberKey, now: Instant) -> bool {
        self.deadlines.get(member).is_some_and(|d| *d <= now)
    }

    pub fn forget(&mut self, member: &MemberKey) {
        self.deadlines.remove(member);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::membership::Member;
    use crate::group::reconcile::MemberAssignment;

    fn group(members: &[&str]) -> Group {
        let mut g = Group::default();
        for m in members {
            g.members.insert(
                (*m).to_string(),
                Member {
                    instance_id: None,
                    subscribed: BTreeSet::new(),
                    rebalance_timeout_ms: 1000,
                    assignment: MemberAssignment::joining(),
                    previous_epoch: 0,
                    left_temporarily: false,
                },
            );
        }
        g
    }

    fn key(g: &str, m: &str) -> MemberKey {
        (g.to_string(), m.to_string())
    }

    #[test]
    fn given_no_heartbeat_within_the_timeout_then_the_member_expires_and_a_heartbeat_renews() {
        let start = Instant::now();
        let timeout = Duration::from_secs(10);
        let mut sessions = Sessions::new(timeout);
        sessions.sync("g", Some(&group(&["a", "b"])), Some("a"), start);
        assert!(sessions.expired(start + timeout / 2).is_empty());
        sessions.sync(
            "g",
            Some(&group(&["a", "b"])),
            Some("a"),
            start + timeout / 2,
        );
        assert_eq!(sessions.expired(start + timeout), vec![key("g", "b")]);
        assert!(!sessions.is_expired(&key("g", "a"), start + timeout));
        assert!(sessions.is_expired(&key("g", "a"), start + timeout * 3 / 2));
    }

    #[test]
    fn given_a_member_gone_from_the_group_then_its_session_is_forgotten() {
        let start = Instant::now();
        let mut sessions = Sessions::new(Duration::from_secs(1));
        sessions.sync("g", Some(&group(&["a", "b"])), None, start);
        sessions.sync("h", Some(&group(&["a"])), None, start);
        sessions.sync("g", Some(&group(&["a"])), None, start);
        let later = start + Duration::from_secs(2);
        assert_eq!(sessions.expired(later), vec![key("g", "a"), key("h", "a")]);
        sessions.sync("g", None, None, start);
        assert_eq!(sessions.expired(later), vec![key("h", "a")]);
    }

    #[test]
    fn given_a_member_that_left_for_a_restart_then_its_session_is_not_renewed_by_others() {
        let start = Instant::now();
        let timeout = Duration::from_secs(10);
        let mut sessions = Sessions::new(timeout);
        sessions.sync("g", Some(&group(&["a", "s"])), Some("s"), start);
        // "s" left with -2 (no renewal); "a" heartbeats on.
        sessions.sync(
            "g",
            Some(&group(&["a", "s"])),
            Some("a"),
            start + timeout / 2,
        );
        assert_eq!(sessions.expired(start + timeout), vec![key("g", "s")]);
    }
}
