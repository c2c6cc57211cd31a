//! ConsumerGroupDescribe v0–v1 (KIP-848's describe): each group from the
//! GroupCoordinator owning it, members with their current and target assignments named
//! by topic id and name. Describe on the group is checked first, as the coordinator
//! checks SDK callers (else GROUP_AUTHORIZATION_FAILED for that group, nothing
//! forwarded); an unknown group is the coordinator's GROUP_ID_NOT_FOUND.

use idem_proto::v1::{GroupDescription, GroupTopicPartitions};
use kafka_protocol::messages::consumer_group_describe_request::ConsumerGroupDescribeRequest;
use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, ConsumerGroupDescribeResponse, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;

use super::group_description::describe;
use super::topic_ids::{nullable, TopicIds};
use super::KafkaContext;

/// KIP-848's member type of a consumer-protocol member (v1).
const CONSUMER_MEMBER: i8 = 1;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let ids = TopicIds::of(&context.service);
    let mut groups = Vec::with_capacity(request.group_ids.len());
    for group_id in request.group_ids {
        let id = group_id.0.to_string();
        let refused = |code: i16, message: String| {
            DescribedGroup::default()
                .with_group_id(group_id.clone())
                .with_error_code(code)
                .with_error_message(nullable(message))
        };
        let group = match describe(context, principal, &id).await {
            Ok(group) => described_group(group_id, group, &ids),
            Err(refusal) => refused(refusal.code, refusal.message),
        };
        groups.push(group);
    }
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}

fn assignment(topics: Vec<GroupTopicPartitions>, ids: &TopicIds) -> Assignment {
    Assignment::default().with_topic_partitions(
        topics
            .into_iter()
            .map(|t| {
                TopicPartitions::default()
                    .with_topic_id(ids.id(&t.topic).unwrap_or_default())
                    .with_topic_name(StrBytes::from_string(t.topic).into())
                    .with_partitions(t.partitions)
            })
            .collect(),
    )
}

fn described_group(group_id: GroupId, group: GroupDescription, ids: &TopicIds) -> DescribedGroup {
    DescribedGroup::default()
        .with_group_id(group_id)
        .with_group_state(StrBytes::from_string(group.state))
        .with_group_epoch(group.group_epoch)
        .with_assignment_epoch(group.target_epoch)
        .with_assignor_name(StrBytes::from_string(group.assignor_name))
        .with_members(
            group
                .members
                .into_iter()
                .map(|m| {
                    Member::default()
                        .with_member_id(StrBytes::from_string(m.member_id))
                        .with_instance_id(m.instance_id.map(StrBytes::from_string))
                        .with_member_epoch(m.member_epoch)
                        .with_subscribed_topic_names(
                            m.subscribed_topics
                                .into_iter()
                                .map(|t| StrBytes::from_string(t).into())
                                .collect(),
                        )
                        .with_assignment(assignment(m.assignment, ids))
                        .with_target_assignment(assignment(m.target_assignment, ids))
                        .with_member_type(CONSUMER_MEMBER)
                })
                .collect(),
        )
        // Not computed: Kafka's "not asked" value.
        .with_authorized_operations(i32::MIN)
}
