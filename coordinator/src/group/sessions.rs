//! Session deadlines of the members of one slice's groups: a member that sends no
//! heartbeat within the session timeout is removed, as is a static member that left
//! for a restart (-2) and did not come back within it, and a member that keeps
//! partitions pending revocation longer than its rebalance timeout (it heartbeats but
//! never releases them, so the members waiting for them would wait forever). Pure (the
//! caller passes the time); deadlines are not persisted, so a coordinator that loads a
//! slice gives every member a fresh session and revocation time (Kafka does the same).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::membership::Group;
use super::reconcile::MemberState;

/// A member of a group: (group id, member id).
pub type MemberKey = (String, String);

#[derive(Debug, Clone)]
pub struct Sessions {
    timeout: Duration,
    deadlines: BTreeMap<MemberKey, Instant>,
    /// Members asked to revoke partitions: by when they must have reported them gone.
    revoke_by: BTreeMap<MemberKey, Instant>,
}

impl Sessions {
    pub fn new(timeout: Duration) -> Self {
        Sessions {
            timeout,
            deadlines: BTreeMap::new(),
            revoke_by: BTreeMap::new(),
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
        // The rebalance timeout runs from the answer that first asked for a revocation
        // until the member reports it done (its state moves on).
        let revoking: BTreeMap<&String, i32> = group
            .map(|g| {
                g.members
                    .iter()
                    .filter(|(_, m)| m.assignment.state == MemberState::UnrevokedPartitions)
                    .map(|(id, m)| (id, m.rebalance_timeout_ms))
                    .collect()
            })
            .unwrap_or_default();
        self.revoke_by
            .retain(|(g, m), _| g != group_id || revoking.contains_key(m));
        for (member, timeout_ms) in revoking {
            let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
            self.revoke_by
                .entry((group_id.to_string(), member.clone()))
                .or_insert(now + timeout);
        }
        for member in members {
            let timeout = self.timeout_of(group, member);
            self.deadlines
                .entry((group_id.to_string(), member.clone()))
                .or_insert(now + timeout);
        }
        if let (Some(member), Some(group)) = (heartbeat_from, group) {
            if group.members.contains_key(member) {
                let timeout = self.timeout_of(Some(group), member);
                self.deadlines
                    .insert((group_id.to_string(), member.to_string()), now + timeout);
            }
        }
    }

    /// A classic member's own session timeout (from its JoinGroup), else the
    /// coordinator's.
    fn timeout_of(&self, group: Option<&Group>, member: &str) -> Duration {
        group
            .and_then(|g| g.classic.get(member))
            .map(|c| Duration::from_millis(u64::try_from(c.session_timeout_ms).unwrap_or(0)))
            .unwrap_or(self.timeout)
    }

    /// Members whose session or revocation time ended by `now`, oldest deadline first.
    pub fn expired(&self, now: Instant) -> Vec<MemberKey> {
        let mut due: BTreeMap<&MemberKey, Instant> = BTreeMap::new();
        for (member, deadline) in self.deadlines.iter().chain(self.revoke_by.iter()) {
            if *deadline <= now {
                let earliest = due.entry(member).or_insert(*deadline);
                *earliest = (*earliest).min(*deadline);
            }
        }
        let mut due: Vec<(&MemberKey, Instant)> = due.into_iter().collect();
        due.sort_by_key(|(_, d)| *d);
        due.into_iter().map(|(k, _)| k.clone()).collect()
    }

    /// Whether `member`'s session or revocation time ended by `now` (it may have
    /// heartbeated, or released its partitions, since it was listed as expired).
    pub fn is_expired(&self, member: &MemberKey, now: Instant) -> bool {
        let due = |d: Option<&Instant>| d.is_some_and(|d| *d <= now);
        due(self.deadlines.get(member)) || due(self.revoke_by.get(member))
    }

    pub fn forget(&mut self, member: &MemberKey) {
        self.deadlines.remove(member);
        self.revoke_by.remove(member);
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
    fn given_a_classic_member_then_its_own_session_timeout_applies() {
        let start = Instant::now();
        let mut sessions = Sessions::new(Duration::from_secs(45));
        let mut g = group(&["classic", "kip848"]);
        g.classic.insert(
            "classic".into(),
            crate::group::classic_member::ClassicMember {
                session_timeout_ms: 6_000,
                protocols: vec!["range".into()],
            },
        );
        sessions.sync("g", Some(&g), None, start);
        assert_eq!(
            sessions.expired(start + Duration::from_secs(6)),
            vec![key("g", "classic")]
        );
        sessions.sync(
            "g",
            Some(&g),
            Some("classic"),
            start + Duration::from_secs(5),
        );
        assert!(!sessions.is_expired(&key("g", "classic"), start + Duration::from_secs(10)));
        assert!(sessions.is_expired(&key("g", "classic"), start + Duration::from_secs(11)));
        assert!(!sessions.is_expired(&key("g", "kip848"), start + Duration::from_secs(44)));
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
    fn given_a_member_that_heartbeats_but_never_revokes_then_it_expires_after_its_rebalance_timeout(
    ) {
        let start = Instant::now();
        let mut sessions = Sessions::new(Duration::from_secs(60));
        let mut g = group(&["a", "b"]);
        sessions.sync("g", Some(&g), Some("a"), start);
        // "a" is asked to revoke (rebalance timeout 1 s) and keeps heartbeating.
        if let Some(a) = g.members.get_mut("a") {
            a.assignment.state = MemberState::UnrevokedPartitions;
        }
        sessions.sync("g", Some(&g), Some("a"), start);
        let half = start + Duration::from_millis(500);
        sessions.sync("g", Some(&g), Some("a"), half);
        assert!(
            sessions.expired(half).is_empty(),
            "the clock did not restart"
        );
        let late = start + Duration::from_millis(1000);
        assert_eq!(sessions.expired(late), vec![key("g", "a")]);
        assert!(sessions.is_expired(&key("g", "a"), late));
        // Had it released them in time, nothing would be due.
        if let Some(a) = g.members.get_mut("a") {
            a.assignment.state = MemberState::Stable;
        }
        sessions.sync("g", Some(&g), Some("a"), half);
        assert!(sessions.expired(late).is_empty());
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
