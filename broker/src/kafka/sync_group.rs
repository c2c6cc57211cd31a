//! SyncGroup v0–v5 (the classic protocol): forwarded to the group's coordinator, which
//! answers the member's server-side assignment at its generation (ILLEGAL_GENERATION,
//! UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS otherwise); the broker encodes it as
//! Kafka's ConsumerProtocolAssignment. Assignments a leader sends are ignored: there
//! is no client-side assignor. Read on the group is checked first.

use bytes::{BufMut, Bytes, BytesMut};
use idem_proto::v1::{ClassicSyncGroupRequest, GroupTopicPartitions};
use idem_runtime::acl::{Operation, Resource, ANONYMOUS};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
use kafka_protocol::messages::sync_group_request::SyncGroupRequest;
use kafka_protocol::messages::sync_group_response::SyncGroupResponse;
use kafka_protocol::messages::{ConsumerProtocolAssignment, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use super::forward::to_group_coordinator;
use super::join_group::CONSUMER_PROTOCOL_TYPE;
use super::KafkaContext;

/// The ConsumerProtocolAssignment version written: v0's fields are every version's.
const ASSIGNMENT_VERSION: i16 = 0;

pub async fn serve(context: &KafkaContext, request: SyncGroupRequest) -> SyncGroupResponse {
    let group_id = request.group_id.0.to_string();
    let refused = |code: i16| SyncGroupResponse::default().with_error_code(code);
    if let Err(denied) = context
        .service
        .check_all(ANONYMOUS, [(Operation::Read, Resource::group(&group_id))])
    {
        return refused(kafka_code(denied.error_code() as i32));
    }
    let forwarded = ClassicSyncGroupRequest {
        group_id: group_id.clone(),
        member_id: request.member_id.to_string(),
        generation_id: request.generation_id,
        protocol_type: request.protocol_type.as_ref().map(ToString::to_string),
        protocol_name: request.protocol_name.as_ref().map(ToString::to_string),
    };
    let answer = match to_group_coordinator(context, &group_id, |mut client| async move {
        client.classic_sync_group(forwarded).await
    })
    .await
    {
        Ok(answer) => answer,
        Err(refusal) => return refused(refusal.code),
    };
    if answer.error_code != 0 {
        return refused(kafka_code(answer.error_code));
    }
    let Ok(assignment) = encode_assignment(&answer.assignment) else {
        return refused(ResponseError::UnknownServerError.code());
    };
    SyncGroupResponse::default()
        .with_protocol_type(Some(StrBytes::from_static_str(CONSUMER_PROTOCOL_TYPE)))
        .with_protocol_name(Some(StrBytes::from_string(answer.protocol_name)))
        .with_assignment(assignment)
}

/// Kafka's ConsumerProtocolAssignment bytes (version prefix, then the body).
pub fn encode_assignment(topics: &[GroupTopicPartitions]) -> anyhow::Result<Bytes> {
    let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
        topics
            .iter()
            .map(|t| {
                TopicPartition::default()
                    .with_topic(TopicName(StrBytes::from_string(t.topic.clone())))
                    .with_partitions(t.partitions.clone())
            })
            .collect(),
    );
    let mut out = BytesMut::new();
    out.put_i16(ASSIGNMENT_VERSION);
    assignment.encode(&mut out, ASSIGNMENT_VERSION)?;
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;
    use kafka_protocol::protocol::Decodable;

    #[test]
    fn an_assignment_reads_back_as_kafka_clients_read_it() {
        let topics = vec![GroupTopicPartitions {
            topic: "orders".into(),
            partitions: vec![0, 3],
        }];
        let mut bytes = encode_assignment(&topics).expect("encodes");
        let version = bytes.get_i16();
        let read = ConsumerProtocolAssignment::decode(&mut bytes, version).expect("decodes");
        assert_eq!(read.assigned_partitions.len(), 1);
        assert_eq!(read.assigned_partitions[0].topic.0.as_str(), "orders");
        assert_eq!(read.assigned_partitions[0].partitions, vec![0, 3]);
    }
}
