//! ListGroups v0–v5: every group of the cluster, from every coordinator owning a slice
//! (`fan_out`), whichever broker is asked; a coordinator that cannot list is the
//! top-level error, never a shorter list. Each listed group is one the Kafka client
//! (the connection's principal) may describe. idem's groups are KIP-848 groups: protocol type and
//! group type `consumer`. The v4 states filter and the v5 types filter match names
//! case-insensitively, as Kafka's do. Every broker answering the whole cluster, a client
//! that asks each broker (librdkafka ≥ 2.14.2, the Java admin client) merges the answers
//! by group id.

use std::collections::BTreeMap;

use idem_proto::v1::GroupListing;
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
use kafka_protocol::messages::list_groups_response::{ListGroupsResponse, ListedGroup};
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;

use super::consumer_protocol::CONSUMER_PROTOCOL_TYPE;
use super::fan_out;
use super::KafkaContext;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: ListGroupsRequest,
) -> ListGroupsResponse {
    let lists = match fan_out::list_groups(context).await {
        Ok(lists) => lists,
        Err(refused) => {
            tracing::debug!(code = refused.code, error = %refused, "ListGroups refused");
            return ListGroupsResponse::default().with_error_code(refused.code);
        }
    };
    let groups = lists.into_iter().flat_map(|l| l.groups);
    let may_describe = |group_id: &str| {
        context
            .service
            .check_all(
                principal,
                [(Operation::Describe, Resource::group(group_id))],
            )
            .is_ok()
    };
    ListGroupsResponse::default().with_groups(listed(
        groups,
        &request.states_filter,
        &request.types_filter,
        may_describe,
    ))
}

/// The Kafka listing of `groups` (each once, by id) in one of `states` and `types` (an
/// empty filter matches all), that `may_describe` allows.
pub fn listed(
    groups: impl IntoIterator<Item = GroupListing>,
    states: &[StrBytes],
    types: &[StrBytes],
    may_describe: impl Fn(&str) -> bool,
) -> Vec<ListedGroup> {
    let matches = |filter: &[StrBytes], name: &str| {
        filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(name))
    };
    let unique: BTreeMap<String, String> =
        groups.into_iter().map(|g| (g.group_id, g.state)).collect();
    unique
        .into_iter()
        .filter(|(group_id, state)| {
            matches(states, state)
                && matches(types, CONSUMER_PROTOCOL_TYPE)
                && may_describe(group_id)
        })
        .map(|(group_id, state)| {
            ListedGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(group_id)))
                .with_protocol_type(StrBytes::from_static_str(CONSUMER_PROTOCOL_TYPE))
                .with_group_state(StrBytes::from_string(state))
                .with_group_type(StrBytes::from_static_str(CONSUMER_PROTOCOL_TYPE))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(id: &str, state: &str) -> GroupListing {
        GroupListing {
            group_id: id.into(),
            state: state.into(),
        }
    }

    fn names(listed: &[ListedGroup]) -> Vec<String> {
        listed.iter().map(|g| g.group_id.0.to_string()).collect()
    }

    fn filter(names: &[&'static str]) -> Vec<StrBytes> {
        names.iter().map(|n| StrBytes::from_static_str(n)).collect()
    }

    fn groups() -> Vec<GroupListing> {
        vec![
            group("orders", "Stable"),
            group("billing", "Empty"),
            group("audit", "Reconciling"),
            // Listed by two coordinators while a slice moves.
            group("orders", "Stable"),
        ]
    }

    #[test]
    fn given_no_filter_then_every_group_once_sorted() {
        let listed = listed(groups(), &[], &[], |_| true);
        assert_eq!(names(&listed), ["audit", "billing", "orders"]);
        assert_eq!(listed[1].group_state.as_str(), "Empty");
        assert_eq!(listed[1].protocol_type.as_str(), "consumer");
        assert_eq!(listed[1].group_type.as_str(), "consumer");
    }

    #[test]
    fn given_a_states_filter_then_only_those_states_in_any_case() {
        let stable = listed(groups(), &filter(&["stable"]), &[], |_| true);
        assert_eq!(names(&stable), ["orders"]);
        let two = listed(groups(), &filter(&["Empty", "Reconciling"]), &[], |_| true);
        assert_eq!(names(&two), ["audit", "billing"]);
        let none = listed(groups(), &filter(&["PreparingRebalance"]), &[], |_| true);
        assert!(none.is_empty());
    }

    #[test]
    fn given_a_types_filter_then_consumer_groups_match_and_classic_does_not() {
        assert_eq!(
            listed(groups(), &[], &filter(&["Consumer"]), |_| true).len(),
            3
        );
        assert!(listed(groups(), &[], &filter(&["classic"]), |_| true).is_empty());
    }

    #[test]
    fn given_groups_the_caller_may_not_describe_then_they_are_left_out() {
        let listed = listed(groups(), &[], &[], |id| id != "billing");
        assert_eq!(names(&listed), ["audit", "orders"]);
    }
}
