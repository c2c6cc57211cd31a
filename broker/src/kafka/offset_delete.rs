//! OffsetDelete v0: removes a group's committed offsets of partitions whose topic no
//! member subscribes to, forwarded to the group's coordinator (a subscribed topic's
//! partitions: GROUP_SUBSCRIBED_TO_TOPIC; an unknown group GROUP_ID_NOT_FOUND). Delete
//! on the group is checked first (else GROUP_AUTHORIZATION_FAILED, nothing forwarded),
//! and read on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions, which
//! are not forwarded), as Kafka checks them.

use std::collections::BTreeMap;

use idem_proto::v1::{GroupTopicPartitions, OffsetDeleteRequest as IdemRequest};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::offset_delete_request::OffsetDeleteRequest;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponse, OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use super::forward::to_group_coordinator;
use super::KafkaContext;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let group_id = request.group_id.0.to_string();
    if let Err(denied) = context
        .service
        .check_all(principal, [(Operation::Delete, Resource::group(&group_id))])
    {
        return OffsetDeleteResponse::default()
            .with_error_code(kafka_code(denied.error_code() as i32));
    }
    let readable = |topic: &str| {
        context
            .service
            .authorize_topic(principal, Operation::Read, topic)
            .is_ok()
    };
    let forwarded = IdemRequest {
        group_id: group_id.clone(),
        topics: request
            .topics
            .iter()
            .filter(|t| readable(&t.name))
            .map(|t| GroupTopicPartitions {
                topic: t.name.0.to_string(),
                partitions: t.partitions.iter().map(|p| p.partition_index).collect(),
            })
            .collect(),
    };
    let answer = to_group_coordinator(context, &group_id, |mut client| async move {
        client.offset_delete(forwarded).await
    })
    .await;
    let codes: BTreeMap<(String, i32), i16> = match answer {
        Err(refused) => return OffsetDeleteResponse::default().with_error_code(refused.code),
        Ok(answer) if answer.error_code != 0 => {
            return OffsetDeleteResponse::default().with_error_code(kafka_code(answer.error_code))
        }
        Ok(answer) => answer
            .results
            .into_iter()
            .map(|r| ((r.topic, r.partition), kafka_code(r.error_code)))
            .collect(),
    };
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.to_string();
            let refused =
                (!readable(&name)).then_some(ResponseError::TopicAuthorizationFailed.code());
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let code = refused.unwrap_or_else(|| {
                        codes
                            .get(&(name.clone(), p.partition_index))
                            .copied()
                            .unwrap_or(ResponseError::UnknownServerError.code())
                    });
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
