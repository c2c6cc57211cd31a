//! The uniform assignor: the group coordinator's target assignment of a consumer
//! group's subscribed partitions to its members (KIP-848's server-side `uniform`
//! assignor). Pure.
//!
//! Invariants (property-tested below):
//! - every partition of every existing topic some member subscribes to goes to exactly
//!   one member subscribed to that topic, and nothing else is assigned;
//! - balance: no single move of a partition to another member subscribed to its topic
//!   would narrow the gap between the two, so with identical subscriptions the counts
//!   differ by at most one;
//! - stickiness: a partition stays with its previous owner unless balance needs it
//!   elsewhere, so a member joining or leaving moves only the partitions it must, and
//!   assigning again what the assignor returned changes nothing.

use std::collections::{BTreeMap, BTreeSet};

use crate::txn::decide::TopicPartition;

/// A member of a consumer group, as the coordinator names it.
pub type MemberId = String;

/// Partitions per member.
pub type Assignment = BTreeMap<MemberId, BTreeSet<TopicPartition>>;

/// What the assignor decides from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssignmentSpec {
    /// Each member's subscribed topic names.
    pub subscriptions: BTreeMap<MemberId, BTreeSet<String>>,
    /// Partition count of each existing topic (a subscribed topic that does not exist
    /// is simply not assigned).
    pub partition_counts: BTreeMap<String, i32>,
    /// The previous target assignment, kept where balance allows.
    pub previous: Assignment,
}

/// The new target assignment: an entry for every member, empty if it gets nothing.
pub fn assign(spec: &AssignmentSpec) -> Assignment {
    let mut assignment: Assignment = spec
        .subscriptions
        .keys()
        .map(|member| (member.clone(), BTreeSet::new()))
        .collect();
    let eligible = eligible_members(spec);

    // Sticky: a partition that still exists stays with a previous owner that still
    // subscribes to its topic.
    let mut unassigned: BTreeSet<&TopicPartition> = eligible.keys().collect();
    for (member, partitions) in &spec.previous {
        for tp in partitions {
            let still_eligible = eligible.get(tp).is_some_and(|m| m.contains(member));
            if still_eligible && unassigned.remove(tp) {
                if let Some(owned) = assignment.get_mut(member) {
                    owned.insert(tp.clone());
                }
            }
        }
    }

    // The rest: the most constrained partitions first, each to its least loaded
    // eligible member.
    let mut rest: Vec<&TopicPartition> = unassigned.into_iter().collect();
    rest.sort_by_key(|tp| (eligible.get(*tp).map_or(0, BTreeSet::len), *tp));
    for tp in rest {
        if let Some(member) = least_loaded(&assignment, &eligible[tp]) {
            if let Some(owned) = assignment.get_mut(&member) {
                owned.insert(tp.clone());
            }
        }
    }

    balance(&mut assignment, &eligible);
    assignment
}

/// The members subscribed to each existing partition's topic (partitions nobody
/// subscribes to are absent).
fn eligible_members(spec: &AssignmentSpec) -> BTreeMap<TopicPartition, BTreeSet<MemberId>> {
    let mut by_topic: BTreeMap<&str, BTreeSet<MemberId>> = BTreeMap::new();
    for (member, topics) in &spec.subscriptions {
        for topic in topics {
            by_topic
                .entry(topic.as_str())
                .or_default()
                .insert(member.clone());
        }
    }
    let mut eligible = BTreeMap::new();
    for (topic, members) in by_topic {
        let Some(&count) = spec.partition_counts.get(topic) else {
            continue;
        };
        for partition in 0..count.max(0) {
            let tp = TopicPartition {
                topic: topic.to_string(),
                partition,
            };
            eligible.insert(tp, members.clone());
        }
    }
    eligible
}

/// The member of `candidates` with the fewest partitions (the smallest id on a tie).
fn least_loaded(assignment: &Assignment, candidates: &BTreeSet<MemberId>) -> Option<MemberId> {
    candidates
        .iter()
        .min_by_key(|m| (assignment.get(*m).map_or(0, BTreeSet::len), *m))
        .cloned()
}

/// Moves partitions from a member to an eligible member with at least two fewer until
/// no such move is left. Each move lowers the sum of squared counts, so this ends; it
/// moves from the most loaded member first, so partitions only leave members above
/// their share.
fn balance(assignment: &mut Assignment, eligible: &BTreeMap<TopicPartition, BTreeSet<MemberId>>) {
    loop {
        let mut by_load: Vec<(usize, MemberId)> = assignment
            .iter()
            .map(|(m, owned)| (owned.len(), m.clone()))
            .collect();
        // Most loaded first; among equals, the largest id gives first (deterministic).
        by_load.sort_by(|a, b| b.cmp(a));
        let mut moved = None;
        'search: for (load, from) in &by_load {
            // From the highest partition down, so the low ones stay put.
            for tp in assignment[from].iter().rev() {
                let Some(to) = least_loaded(assignment, &eligible[tp]) else {
                    continue;
                };
                if assignment[&to].len() + 2 <= *load {
                    moved = Some((from.clone(), to, tp.clone()));
                    break 'search;
                }
            }
        }
        let Some((from, to, tp)) = moved else {
            return;
        };
        if let Some(owned) = assignment.get_mut(&from) {
            owned.remove(&tp);
        }
        if let Some(owned) = assignment.get_mut(&to) {
            owned.insert(tp);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// A group of `members` (id, subscribed topics) over `topics` (name, partitions),
    /// with no previous assignment. The range assignor's tests use it too.
    pub(crate) fn spec(members: &[(&str, &[&str])], topics: &[(&str, i32)]) -> AssignmentSpec {
        AssignmentSpec {
            subscriptions: members
                .iter()
                .map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect()))
                .collect(),
            partition_counts: topics.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
            previous: Assignment::new(),
        }
    }

    fn counts(assignment: &Assignment) -> Vec<usize> {
        assignment.values().map(BTreeSet::len).collect()
    }

    #[test]
    fn given_six_partitions_and_three_members_then_each_gets_two() {
        let s = spec(
            &[("a", &["in"]), ("b", &["in"]), ("c", &["in"])],
            &[("in", 6)],
        );
        assert_eq!(counts(&assign(&s)), vec![2, 2, 2]);
    }

    #[test]
    fn given_a_member_joins_then_only_its_share_moves_to_it() {
        let mut s = spec(&[("a", &["in"]), ("b", &["in"])], &[("in", 6)]);
        let before = assign(&s);
        s.subscriptions
            .insert("c".into(), ["in".to_string()].into_iter().collect());
        s.previous = before.clone();
        let after = assign(&s);
        assert_eq!(counts(&after), vec![2, 2, 2]);
        for m in ["a", "b"] {
            assert!(after[m].is_subset(&before[m]), "{m} only gave: {after:?}");
        }
    }

    #[test]
    fn given_a_topic_that_does_not_exist_then_nothing_of_it_is_assigned() {
        let s = spec(&[("a", &["in", "missing"])], &[("in", 2)]);
        assert_eq!(
            assign(&s)["a"],
            [tp("in", 0), tp("in", 1)].into_iter().collect()
        );
    }

    #[test]
    fn given_different_subscriptions_then_a_topic_goes_only_to_its_subscribers() {
        let s = spec(
            &[("a", &["x"]), ("b", &["x", "y"]), ("c", &["y"])],
            &[("x", 4), ("y", 2)],
        );
        let out = assign(&s);
        // x has 4 partitions for a and b; y 2 for b and c: 2/2 on x, then y to c.
        assert_eq!(counts(&out), vec![2, 2, 2], "{out:?}");
        assert!(out["c"].iter().all(|p| p.topic == "y"));
        assert!(out["a"].iter().all(|p| p.topic == "x"));
    }

    #[test]
    fn given_no_members_then_the_assignment_is_empty() {
        assert!(assign(&spec(&[], &[("in", 3)])).is_empty());
    }

    /// A group: members 0..n with subscriptions drawn from 3 topics, topic sizes, and a
    /// previous assignment that may be anything (even invalid: stale topics, a
    /// partition given twice, members gone).
    fn any_spec() -> impl Strategy<Value = AssignmentSpec> {
        spec_of(&["x", "y", "z"], 7, 9, 30)
    }

    /// Up to `members - 1` members subscribing to some of `topics`, each topic of
    /// `0..max_size` partitions (0: it does not exist), and up to `previous - 1`
    /// previous owners of any partition, valid or not. The range assignor's tests use
    /// it too.
    pub(crate) fn spec_of(
        topics: &'static [&'static str],
        members: usize,
        max_size: i32,
        previous: usize,
    ) -> impl Strategy<Value = AssignmentSpec> {
        let member_subs = proptest::collection::vec(
            proptest::sample::subsequence(topics.to_vec(), 0..=topics.len()),
            0..members,
        );
        let sizes = proptest::collection::vec(0i32..max_size, topics.len());
        let previous = proptest::collection::vec(
            (0usize..8, 0usize..topics.len(), 0i32..max_size + 1),
            0..previous,
        );
        (member_subs, sizes, previous).prop_map(move |(subs, sizes, previous)| {
            let mut s = AssignmentSpec::default();
            for (i, ts) in subs.iter().enumerate() {
                s.subscriptions
                    .insert(format!("m{i}"), ts.iter().map(|t| t.to_string()).collect());
            }
            for (t, n) in topics.iter().zip(sizes) {
                if n > 0 {
                    s.partition_counts.insert(t.to_string(), n);
                }
            }
            for (m, t, p) in previous {
                s.previous
                    .entry(format!("m{m}"))
                    .or_default()
                    .insert(tp(topics[t], p));
            }
            s
        })
    }

    proptest! {
        #[test]
        fn every_subscribed_partition_goes_to_exactly_one_subscriber(s in any_spec()) {
            let out = assign(&s);
            let eligible = eligible_members(&s);
            let mut seen = BTreeSet::new();
            for (member, owned) in &out {
                for p in owned {
                    prop_assert!(eligible.get(p).is_some_and(|m| m.contains(member)), "{p:?} to {member}");
                    prop_assert!(seen.insert(p.clone()), "{p:?} twice");
                }
            }
            prop_assert_eq!(seen.len(), eligible.len());
            prop_assert_eq!(out.keys().collect::<Vec<_>>(), s.subscriptions.keys().collect::<Vec<_>>());
        }

        #[test]
        fn no_single_move_would_narrow_a_gap(s in any_spec()) {
            let out = assign(&s);
            let eligible = eligible_members(&s);
            for (member, owned) in &out {
                for p in owned {
                    for other in &eligible[p] {
                        prop_assert!(out[other].len() + 1 >= owned.len(), "{p:?}: {member} {} vs {other} {}", owned.len(), out[other].len());
                    }
                }
            }
        }

        #[test]
        fn assigning_again_changes_nothing(s in any_spec()) {
            let out = assign(&s);
            let again = assign(&AssignmentSpec { previous: out.clone(), ..s });
            prop_assert_eq!(again, out);
        }

        /// With identical subscriptions, a membership change moves only what it must:
        /// every member that stays loses exactly what it has above its new share and
        /// gains only partitions of members that left or partitions nobody had.
        #[test]
        fn members_coming_and_going_move_only_what_they_must(
            before in 1usize..7, after in 1usize..7, shift in 0usize..7, partitions in 1i32..30,
        ) {
            let members = |range: std::ops::Range<usize>| -> BTreeMap<MemberId, BTreeSet<String>> {
                range.map(|i| (format!("m{i:02}"), ["t".to_string()].into_iter().collect())).collect()
            };
            let counts = [("t".to_string(), partitions)].into_iter().collect::<BTreeMap<_, _>>();
            let first = assign(&AssignmentSpec { subscriptions: members(0..before), partition_counts: counts.clone(), previous: Assignment::new() });
            let second = assign(&AssignmentSpec { subscriptions: members(shift..shift + after), partition_counts: counts, previous: first.clone() });
            for (member, now) in &second {
                let Some(was) = first.get(member) else { continue };
                let lost = was.difference(now).count();
                let gained: Vec<_> = now.difference(was).collect();
                prop_assert_eq!(lost, was.len().saturating_sub(now.len()), "{} lost too much", member);
                for p in gained {
                    let prior = first.iter().find(|(_, o)| o.contains(p)).map(|(m, _)| m);
                    prop_assert!(prior.is_none_or(|m| !second.contains_key(m)), "{p:?} taken from a member that stayed");
                }
            }
        }
    }
}
