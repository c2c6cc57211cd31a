//! The range assignor: KIP-848's server-side `range`, chosen per group by its members'
//! `server_assignor` (see [`server_assignor`](super::server_assignor)). Pure.
//!
//! Per topic, the members subscribed to it, sorted by member id, get contiguous ranges
//! of its partitions: with `n` partitions and `m` subscribers each gets `n / m`, the
//! first `n % m` one more. The rule looks at nothing but the topic's subscribers and
//! partition count, so members with identical subscriptions to topics with equal
//! partition counts get the same partition numbers of each (co-partitioning: partition
//! `p` of `orders` and of `payments` land on one member, which a join by key needs).
//! It is not sticky: the previous target is ignored, and a member joining shifts the
//! ranges after it. Moves still go through [`reconcile`](super::reconcile), so a
//! partition is revoked before it is given to another member.
//!
//! Invariants (property-tested below): every partition of every existing subscribed
//! topic goes to exactly one of its subscribers; per topic the subscribers' counts
//! differ by at most one; co-partitioning; the same group always gets the same target.

use std::collections::{BTreeMap, BTreeSet};

use super::assignor::{Assignment, AssignmentSpec, MemberId};
use crate::txn::decide::TopicPartition;

/// The target assignment: an entry for every member, empty if it gets nothing.
pub fn assign(spec: &AssignmentSpec) -> Assignment {
    let mut assignment: Assignment = spec
        .subscriptions
        .keys()
        .map(|member| (member.clone(), BTreeSet::new()))
        .collect();
    for (topic, subscribers) in subscribers_by_topic(spec) {
        let Some(&count) = spec.partition_counts.get(topic) else {
            continue;
        };
        for (member, partitions) in subscribers
            .iter()
            .zip(ranges(count.max(0), subscribers.len()))
        {
            if let Some(owned) = assignment.get_mut(*member) {
                owned.extend(partitions.map(|partition| TopicPartition {
                    topic: topic.to_string(),
                    partition,
                }));
            }
        }
    }
    assignment
}

/// Each topic's subscribers, sorted by member id (the map's order).
fn subscribers_by_topic(spec: &AssignmentSpec) -> BTreeMap<&str, Vec<&MemberId>> {
    let mut by_topic: BTreeMap<&str, Vec<&MemberId>> = BTreeMap::new();
    for (member, topics) in &spec.subscriptions {
        for topic in topics {
            by_topic.entry(topic.as_str()).or_default().push(member);
        }
    }
    by_topic
}

/// `partitions` split into `members` contiguous ranges, the first `partitions %
/// members` one longer.
fn ranges(partitions: i32, members: usize) -> impl Iterator<Item = std::ops::Range<i32>> {
    let members = i32::try_from(members).unwrap_or(i32::MAX).max(1);
    let (each, extra) = (partitions / members, partitions % members);
    (0..members).map(move |i| {
        let start = i * each + i.min(extra);
        let len = each + i32::from(i < extra);
        start..start + len
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::assignor::tests::spec;
    use proptest::prelude::*;

    fn numbers(assignment: &Assignment, member: &str, topic: &str) -> Vec<i32> {
        assignment[member]
            .iter()
            .filter(|tp| tp.topic == topic)
            .map(|tp| tp.partition)
            .collect()
    }

    #[test]
    fn given_two_members_on_two_topics_of_four_then_each_gets_the_same_range_of_both() {
        let out = assign(&spec(
            &[("a", &["x", "y"]), ("b", &["x", "y"])],
            &[("x", 4), ("y", 4)],
        ));
        for topic in ["x", "y"] {
            assert_eq!(numbers(&out, "a", topic), [0, 1]);
            assert_eq!(numbers(&out, "b", topic), [2, 3]);
        }
    }

    #[test]
    fn given_seven_partitions_and_three_members_then_the_first_gets_the_extra_one() {
        let out = assign(&spec(
            &[("c", &["t"]), ("a", &["t"]), ("b", &["t"])],
            &[("t", 7)],
        ));
        assert_eq!(numbers(&out, "a", "t"), [0, 1, 2]);
        assert_eq!(numbers(&out, "b", "t"), [3, 4]);
        assert_eq!(numbers(&out, "c", "t"), [5, 6]);
    }

    #[test]
    fn given_more_members_than_partitions_or_a_missing_topic_then_the_rest_get_nothing() {
        let out = assign(&spec(
            &[("a", &["t", "gone"]), ("b", &["t"]), ("c", &["t"])],
            &[("t", 2)],
        ));
        assert_eq!(numbers(&out, "a", "t"), [0]);
        assert_eq!(numbers(&out, "b", "t"), [1]);
        assert!(out["c"].is_empty());
    }

    /// Members 0..7 subscribing to some of 4 topics whose sizes are drawn from a few
    /// values (so equal counts are common), and any previous target.
    fn any_spec() -> impl Strategy<Value = AssignmentSpec> {
        crate::group::assignor::tests::spec_of(&["w", "x", "y", "z"], 8, 7, 20)
    }

    proptest! {
        #[test]
        fn every_subscribed_partition_goes_to_exactly_one_subscriber(s in any_spec()) {
            let out = assign(&s);
            prop_assert_eq!(out.keys().collect::<Vec<_>>(), s.subscriptions.keys().collect::<Vec<_>>());
            let mut seen = BTreeSet::new();
            for (member, owned) in &out {
                for tp in owned {
                    prop_assert!(s.subscriptions[member].contains(&tp.topic), "{tp:?} to non-subscriber {member}");
                    prop_assert!((0..s.partition_counts.get(&tp.topic).copied().unwrap_or(0)).contains(&tp.partition), "{tp:?} does not exist");
                    prop_assert!(seen.insert(tp.clone()), "{tp:?} twice");
                }
            }
            let subscribed: BTreeSet<&String> = s.subscriptions.values().flatten().collect();
            let expected: i32 = subscribed.iter().filter_map(|t| s.partition_counts.get(*t)).sum();
            prop_assert_eq!(seen.len(), expected as usize);
        }

        #[test]
        fn per_topic_the_subscribers_counts_differ_by_at_most_one(s in any_spec()) {
            let out = assign(&s);
            for topic in s.partition_counts.keys() {
                let counts: Vec<usize> = s.subscriptions.iter()
                    .filter(|(_, ts)| ts.contains(topic))
                    .map(|(m, _)| out[m].iter().filter(|tp| &tp.topic == topic).count())
                    .collect();
                if let (Some(lo), Some(hi)) = (counts.iter().min(), counts.iter().max()) {
                    prop_assert!(hi - lo <= 1, "{topic}: {counts:?}");
                }
            }
        }

        /// Two topics with the same subscribers and the same partition count give each
        /// member the same partition numbers.
        #[test]
        fn topics_of_equal_size_and_subscribers_are_co_partitioned(s in any_spec()) {
            let out = assign(&s);
            let subscribers = |topic: &str| -> BTreeSet<&MemberId> {
                s.subscriptions.iter().filter(|(_, ts)| ts.contains(topic)).map(|(m, _)| m).collect()
            };
            for (a, na) in &s.partition_counts {
                for (b, nb) in &s.partition_counts {
                    if a >= b || na != nb || subscribers(a) != subscribers(b) {
                        continue;
                    }
                    for member in subscribers(a) {
                        prop_assert_eq!(numbers(&out, member, a), numbers(&out, member, b), "{} on {} and {}", member, a, b);
                    }
                }
            }
        }

        /// The target depends on nothing but the subscriptions and the sizes: not on the
        /// previous target, nor on a former computation.
        #[test]
        fn the_same_group_always_gets_the_same_target(s in any_spec()) {
            let out = assign(&s);
            prop_assert_eq!(assign(&s), out.clone());
            prop_assert_eq!(assign(&AssignmentSpec { previous: Assignment::new(), ..s.clone() }), out.clone());
            prop_assert_eq!(assign(&AssignmentSpec { previous: out.clone(), ..s }), out);
        }
    }
}
