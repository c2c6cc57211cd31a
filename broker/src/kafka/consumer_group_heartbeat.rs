//! ConsumerGroupHeartbeat v0–v1 (KIP-848): forwarded to the GroupCoordinator owning the
//! group, which computes assignments server-side and moves a partition only after its
//! old owner revoked it. Kafka names subscriptions by topic name but owned and assigned
//! partitions by topic id; idem's coordinator names all by topic name, so the broker
//! translates (`topic_ids.rs`). Read on the group is checked first, as the coordinator
//! checks SDK callers (else GROUP_AUTHORIZATION_FAILED, nothing forwarded). A v0 member
//! joining without an id gets one here (v1 members choose their own, KIP-1082). Regex
//! subscriptions are not served: idem's coordinator takes topic names only.

use idem_proto::v1::{
    ConsumerGroupHeartbeatRequest as IdemRequest, GroupTopicPartitions, OwnedPartitions,
    SubscribedTopics,
};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::consumer_group_heartbeat_request::ConsumerGroupHeartbeatRequest;
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment, ConsumerGroupHeartbeatResponse, TopicPartitions,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::consumer_protocol::new_member_id;
use super::errors::kafka_code;
use super::forward::to_group_coordinator;
use super::topic_ids::{nullable, TopicIds};
use super::KafkaContext;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let group_id = request.group_id.0.to_string();
    let member_id = if request.member_id.is_empty() && request.member_epoch == 0 {
        new_member_id()
    } else {
        request.member_id.to_string()
    };
    let refused = |code: i16, message: String| {
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(code)
            .with_error_message(nullable(message))
            .with_member_id(Some(StrBytes::from_string(member_id.clone())))
            .with_member_epoch(request.member_epoch)
    };
    if let Err(denied) = context
        .service
        .check_all(principal, [(Operation::Read, Resource::group(&group_id))])
    {
        return refused(kafka_code(denied.error_code() as i32), denied.to_string());
    }
    if request
        .subscribed_topic_regex
        .as_ref()
        .is_some_and(|regex| !regex.is_empty())
    {
        return refused(
            ResponseError::InvalidRequest.code(),
            "regex subscriptions are not served; subscribe to topic names".into(),
        );
    }
    let ids = TopicIds::of(&context.service);
    let owned = request
        .topic_partitions
        .as_ref()
        .map(|owned| OwnedPartitions {
            // A topic id nobody knows any more (a deleted topic) is owned by nobody.
            topics: owned
                .iter()
                .filter_map(|t| {
                    Some(GroupTopicPartitions {
                        topic: ids.name(&t.topic_id)?.to_string(),
                        partitions: t.partitions.clone(),
                    })
                })
                .collect(),
        });
    let forwarded = IdemRequest {
        group_id: group_id.clone(),
        member_id: member_id.clone(),
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.as_ref().map(ToString::to_string),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed: request
            .subscribed_topic_names
            .as_ref()
            .map(|names| SubscribedTopics {
                topics: names.iter().map(|n| n.0.to_string()).collect(),
            }),
        owned,
        server_assignor: request.server_assignor.as_ref().map(ToString::to_string),
    };
    let answer = match to_group_coordinator(context, &group_id, |mut client| async move {
        client.consumer_group_heartbeat(forwarded).await
    })
    .await
    {
        Ok(answer) => answer,
        Err(refusal) => return refused(refusal.code, refusal.message),
    };
    let error_code = kafka_code(answer.error_code);
    let assignment = answer.assignment.filter(|_| error_code == 0).map(|a| {
        Assignment::default().with_topic_partitions(
            a.topics
                .into_iter()
                .filter_map(|t| {
                    Some(
                        TopicPartitions::default()
                            .with_topic_id(ids.id(&t.topic)?)
                            .with_partitions(t.partitions),
                    )
                })
                .collect(),
        )
    });
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(error_code)
        .with_error_message(nullable(answer.error_message))
        .with_member_id(Some(StrBytes::from_string(answer.member_id)))
        .with_member_epoch(answer.member_epoch)
        .with_heartbeat_interval_ms(answer.heartbeat_interval_ms)
        .with_assignment(assignment)
}
