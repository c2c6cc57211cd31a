//! DescribeGroups v0–v6, the classic describe, answered from idem's DescribeGroups for
//! the KIP-848 groups idem has: state, the consumer protocol type, the assignor as
//! protocol data, each member's id and instance id (classic metadata and assignment
//! bytes stay empty: the members do not speak the classic protocol). Describe on the
//! group is checked first, as the coordinator checks SDK callers (else
//! GROUP_AUTHORIZATION_FAILED). An unknown group is state "Dead" with no error before
//! v6 and GROUP_ID_NOT_FOUND from v6 on (KIP-1043), as Kafka answers.

use kafka_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_protocol::messages::describe_groups_response::{
    DescribeGroupsResponse, DescribedGroup, DescribedGroupMember,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::consumer_protocol::CONSUMER_PROTOCOL_TYPE;
use super::group_description::describe;
use super::topic_ids::nullable;
use super::KafkaContext;

/// The version that answers an unknown group GROUP_ID_NOT_FOUND (KIP-1043).
const NOT_FOUND_SINCE: i16 = 6;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let mut groups = Vec::with_capacity(request.groups.len());
    for group_id in request.groups {
        let id = group_id.0.to_string();
        let refused = |code: i16, message: String| {
            DescribedGroup::default()
                .with_group_id(group_id.clone())
                .with_error_code(code)
                .with_error_message(nullable(message))
        };
        let group = match describe(context, principal, &id).await {
            Ok(group) => DescribedGroup::default()
                .with_group_id(group_id.clone())
                .with_group_state(StrBytes::from_string(group.state))
                .with_protocol_type(StrBytes::from_static_str(CONSUMER_PROTOCOL_TYPE))
                .with_protocol_data(StrBytes::from_string(group.assignor_name))
                .with_members(
                    group
                        .members
                        .into_iter()
                        .map(|m| {
                            DescribedGroupMember::default()
                                .with_member_id(StrBytes::from_string(m.member_id))
                                .with_group_instance_id(m.instance_id.map(StrBytes::from_string))
                        })
                        .collect(),
                )
                .with_authorized_operations(i32::MIN),
            Err(refusal)
                if refusal.code == ResponseError::GroupIdNotFound.code()
                    && version < NOT_FOUND_SINCE =>
            {
                DescribedGroup::default()
                    .with_group_id(group_id.clone())
                    .with_group_state(StrBytes::from_static_str("Dead"))
            }
            Err(refusal) => refused(refusal.code, refusal.message),
        };
        groups.push(group);
    }
    DescribeGroupsResponse::default().with_groups(groups)
}
