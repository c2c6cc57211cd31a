//! Which server-side assignor computes a group's target (KIP-848's `server_assignor`).
//! Pure.
//!
//! Each member may name one in its heartbeats; the group uses the one named by the
//! most members (a tie goes to the smallest name, so every coordinator that loads the
//! group picks the same), and `uniform` when no member names one, as Kafka's
//! coordinator does with its first configured assignor. The choice is derived from the
//! members' persisted requests, never stored on its own: a takeover computes the same
//! target.

use std::collections::BTreeMap;

use super::assignor::{self, Assignment, AssignmentSpec};
use super::range_assignor;

/// The assignors the coordinator has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ServerAssignor {
    /// Uniform and sticky ([`assignor`]): the default.
    Uniform,
    /// Contiguous ranges per topic, co-partitioned ([`range_assignor`]).
    Range,
}

/// The assignor of a group none of whose members names one.
pub const DEFAULT: ServerAssignor = ServerAssignor::Uniform;

impl ServerAssignor {
    /// The assignor called `name`; `None` for a name the coordinator does not have.
    pub fn named(name: &str) -> Option<ServerAssignor> {
        match name {
            "uniform" => Some(ServerAssignor::Uniform),
            "range" => Some(ServerAssignor::Range),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ServerAssignor::Uniform => "uniform",
            ServerAssignor::Range => "range",
        }
    }

    pub fn assign(self, spec: &AssignmentSpec) -> Assignment {
        match self {
            ServerAssignor::Uniform => assignor::assign(spec),
            ServerAssignor::Range => range_assignor::assign(spec),
        }
    }
}

/// The group's assignor from its members' requests (`None`: the member names none).
/// A name the coordinator does not have counts for nothing (a heartbeat naming one is
/// refused, so only a record written by a newer coordinator could hold one).
pub fn chosen<'a>(requests: impl IntoIterator<Item = Option<&'a str>>) -> ServerAssignor {
    let mut votes: BTreeMap<ServerAssignor, usize> = BTreeMap::new();
    for assignor in requests
        .into_iter()
        .flatten()
        .filter_map(ServerAssignor::named)
    {
        *votes.entry(assignor).or_default() += 1;
    }
    // Most votes first; among equals the smallest name.
    votes
        .into_iter()
        .max_by(|(a, n), (b, m)| n.cmp(m).then_with(|| b.name().cmp(a.name())))
        .map_or(DEFAULT, |(assignor, _)| assignor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn given_no_member_naming_one_then_the_group_uses_uniform() {
        assert_eq!(chosen([None, None]), ServerAssignor::Uniform);
        assert_eq!(chosen([]), ServerAssignor::Uniform);
    }

    #[test]
    fn given_more_members_naming_range_then_the_group_uses_range() {
        assert_eq!(
            chosen([Some("range"), Some("uniform"), Some("range"), None]),
            ServerAssignor::Range
        );
        assert_eq!(chosen([Some("range"), None, None]), ServerAssignor::Range);
    }

    #[test]
    fn given_a_tie_then_the_smallest_name_wins() {
        assert_eq!(
            chosen([Some("uniform"), Some("range")]),
            ServerAssignor::Range
        );
    }

    #[test]
    fn given_a_name_the_coordinator_lacks_then_it_is_unknown_and_counts_for_nothing() {
        assert_eq!(ServerAssignor::named("sticky"), None);
        assert_eq!(ServerAssignor::named("Range"), None);
        assert_eq!(
            chosen([Some("sticky"), Some("sticky"), Some("uniform")]),
            ServerAssignor::Uniform
        );
    }

    proptest! {
        /// The order members are listed in does not change the choice, and the choice
        /// has at least as many votes as any other assignor.
        #[test]
        fn the_choice_is_the_most_named_whatever_the_order(
            requests in proptest::collection::vec(proptest::option::of(prop_oneof![Just("uniform"), Just("range"), Just("x")]), 0..9),
            seed in any::<u64>(),
        ) {
            let choice = chosen(requests.iter().copied());
            let mut shuffled = requests.clone();
            let n = shuffled.len().max(1) as u64;
            shuffled.rotate_left((seed % n) as usize);
            shuffled.reverse();
            prop_assert_eq!(chosen(shuffled.iter().copied()), choice);
            let votes = |name: &str| requests.iter().filter(|r| **r == Some(name)).count();
            for other in ["uniform", "range"] {
                prop_assert!(votes(choice.name()) >= votes(other));
            }
        }
    }
}
