//! JoinGroup v0–v9 (the classic protocol): forwarded to the GroupCoordinator owning the
//! group, where the member joins the group's KIP-848 membership (docs/kafka.md,
//! "Classic members"). The coordinator assigns, so the answer never makes the member a
//! leader with members to assign (leader is empty, the members list too): SyncGroup
//! brings the server's assignment. The first protocol's ConsumerProtocolSubscription
//! gives the topics and, for cooperative protocols, the partitions still owned. A v4+
//! member without an id gets MEMBER_ID_REQUIRED and a fresh id (KIP-394); before v4 it
//! is named here. A static member (group.instance.id, KIP-345) that joins under a new
//! member id replaces the member holding its instance id without a rebalance; the old
//! one is then FENCED_INSTANCE_ID.
//! Read on the group is checked first (else GROUP_AUTHORIZATION_FAILED).

use idem_proto::v1::{ClassicJoinGroupRequest, GroupTopicPartitions};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::join_group_request::JoinGroupRequest;
use kafka_protocol::messages::join_group_response::JoinGroupResponse;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::consumer_protocol::{new_member_id, subscription, CONSUMER_PROTOCOL_TYPE};
use super::errors::kafka_code;
use super::forward::to_group_coordinator;
use super::KafkaContext;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: JoinGroupRequest,
    version: i16,
) -> JoinGroupResponse {
    let group_id = request.group_id.0.to_string();
    let refused = |code: i16, member_id: &str| {
        JoinGroupResponse::default()
            .with_error_code(code)
            .with_generation_id(-1)
            .with_member_id(StrBytes::from_string(member_id.to_string()))
    };
    let asked_id = request.member_id.to_string();
    if let Err(denied) = context
        .service
        .check_all(principal, [(Operation::Read, Resource::group(&group_id))])
    {
        return refused(kafka_code(denied.error_code() as i32), &asked_id);
    }
    let member_id = if asked_id.is_empty() {
        let fresh = new_member_id();
        if version >= 4 {
            return refused(ResponseError::MemberIdRequired.code(), &fresh);
        }
        fresh
    } else {
        asked_id
    };
    if request.protocol_type.as_str() != CONSUMER_PROTOCOL_TYPE || request.protocols.is_empty() {
        return refused(ResponseError::InconsistentGroupProtocol.code(), &member_id);
    }
    let Some(subscription) = request
        .protocols
        .first()
        .and_then(|p| subscription(&p.metadata))
    else {
        return refused(ResponseError::InconsistentGroupProtocol.code(), &member_id);
    };
    let forwarded = ClassicJoinGroupRequest {
        group_id: group_id.clone(),
        member_id: member_id.clone(),
        session_timeout_ms: request.session_timeout_ms,
        // v0 has none: the session timeout stands in, as in Kafka.
        rebalance_timeout_ms: if version == 0 {
            request.session_timeout_ms
        } else {
            request.rebalance_timeout_ms
        },
        protocols: request
            .protocols
            .iter()
            .map(|p| p.name.to_string())
            .collect(),
        subscribed_topics: subscription
            .topics
            .iter()
            .map(ToString::to_string)
            .collect(),
        owned: subscription
            .owned_partitions
            .iter()
            .map(|t| GroupTopicPartitions {
                topic: t.topic.0.to_string(),
                partitions: t.partitions.clone(),
            })
            .collect(),
        group_instance_id: request.group_instance_id.as_ref().map(ToString::to_string),
    };
    let answer = match to_group_coordinator(context, &group_id, |mut client| async move {
        client.classic_join_group(forwarded).await
    })
    .await
    {
        Ok(answer) => answer,
        Err(refusal) => return refused(refusal.code, &member_id),
    };
    if answer.error_code != 0 {
        return refused(kafka_code(answer.error_code), &member_id);
    }
    JoinGroupResponse::default()
        .with_generation_id(answer.generation_id)
        .with_protocol_type(Some(StrBytes::from_static_str(CONSUMER_PROTOCOL_TYPE)))
        .with_protocol_name(Some(StrBytes::from_string(answer.protocol_name)))
        // No leader: nobody runs a client-side assignor (Kafka answers the same).
        .with_leader(StrBytes::default())
        .with_member_id(StrBytes::from_string(answer.member_id))
}
