//! JoinGroup v0–v9 (the classic protocol): forwarded to the GroupCoordinator owning the
//! group, where the member joins the group's KIP-848 membership (docs/kafka.md,
//! "Classic members"). The coordinator assigns, so the answer never makes the member a
//! leader with members to assign (leader is empty, the members list too): SyncGroup
//! brings the server's assignment. The first protocol's ConsumerProtocolSubscription
//! gives the topics and, for cooperative protocols, the partitions still owned. A v4+
//! member without an id gets MEMBER_ID_REQUIRED and a fresh id (KIP-394); before v4 it
//! is named here. Static membership (group.instance.id) is refused (INVALID_REQUEST).
//! Read on the group is checked first (else GROUP_AUTHORIZATION_FAILED).

use bytes::{Buf, Bytes};
use idem_proto::v1::{ClassicJoinGroupRequest, GroupTopicPartitions};
use idem_runtime::acl::{Operation, Resource, ANONYMOUS};
use kafka_protocol::messages::join_group_request::JoinGroupRequest;
use kafka_protocol::messages::join_group_response::JoinGroupResponse;
use kafka_protocol::messages::ConsumerProtocolSubscription;
use kafka_protocol::protocol::{Decodable, Message, StrBytes};
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use super::forward::to_group_coordinator;
use super::KafkaContext;

/// The only protocol type a consumer group's members may name.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

pub async fn serve(
    context: &KafkaContext,
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
        .check_all(ANONYMOUS, [(Operation::Read, Resource::group(&group_id))])
    {
        return refused(kafka_code(denied.error_code() as i32), &asked_id);
    }
    if request.group_instance_id.is_some() {
        tracing::info!(%group_id, "classic static membership (group.instance.id) refused");
        return refused(ResponseError::InvalidRequest.code(), &asked_id);
    }
    let member_id = if asked_id.is_empty() {
        let fresh = uuid::Uuid::from_bytes(rand::random()).to_string();
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

/// A ConsumerProtocolSubscription (version prefix, then the body); a version newer
/// than the codec's is read as its newest (later versions only add fields).
pub fn subscription(metadata: &Bytes) -> Option<ConsumerProtocolSubscription> {
    let mut buf = metadata.clone();
    if buf.remaining() < 2 {
        return None;
    }
    let version = buf.get_i16();
    if version < 0 {
        return None;
    }
    let version = version.min(ConsumerProtocolSubscription::VERSIONS.max);
    ConsumerProtocolSubscription::decode(&mut buf, version).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn a_subscription_reads_back_at_every_version_and_junk_does_not() {
        for version in 0..=3 {
            let sub = ConsumerProtocolSubscription::default()
                .with_topics(vec![StrBytes::from_static_str("orders")])
                .with_owned_partitions(if version >= 1 {
                    vec![TopicPartition::default()
                        .with_topic(TopicName(StrBytes::from_static_str("orders")))
                        .with_partitions(vec![1, 4])]
                } else {
                    Vec::new()
                });
            let mut out = BytesMut::new();
            out.put_i16(version);
            sub.encode(&mut out, version).expect("encodes");
            let read = subscription(&out.freeze()).expect("decodes");
            assert_eq!(read.topics, sub.topics, "v{version}");
            assert_eq!(read.owned_partitions, sub.owned_partitions, "v{version}");
        }
        assert!(subscription(&Bytes::from_static(&[0])).is_none());
        assert!(subscription(&Bytes::from_static(&[0xff, 0xff, 1])).is_none());
        assert!(subscription(&Bytes::from_static(&[0, 0, 0, 9, b'x'])).is_none());
    }
}
