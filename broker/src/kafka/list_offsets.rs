//! ListOffsets through the gRPC path (`BrokerService::serve_list_offsets`): earliest (-2:
//! the log start offset), latest (-1: the high watermark, or the last stable offset for
//! read_committed), the largest timestamp (-3, v7), and by timestamp (a consumer's
//! `offsetsForTimes`: the first record at or after it, with its timestamp; offset -1 and
//! timestamp -1 when there is none); a topic the connection's principal may not
//! describe is TOPIC_AUTHORIZATION_FAILED.

use idem_proto::v1::{
    IsolationLevel, ListOffsetsPartition as IdemPartition, ListOffsetsRequest as IdemRequest,
    ListOffsetsTopic as IdemTopic,
};
use idem_runtime::acl::Operation;
use kafka_protocol::messages::list_offsets_request::ListOffsetsRequest;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use crate::service::BrokerService;

pub fn serve(
    service: &BrokerService,
    principal: &str,
    request: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let isolation = if request.isolation_level == 1 {
        IsolationLevel::ReadCommitted
    } else {
        IsolationLevel::ReadUncommitted
    };
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let partitions = match service.authorize_topic(principal, Operation::Describe, &name) {
                Err(_) => topic
                    .partitions
                    .iter()
                    .map(|p| {
                        answer(
                            p.partition_index,
                            ResponseError::TopicAuthorizationFailed.code(),
                            -1,
                            -1,
                        )
                    })
                    .collect(),
                Ok(()) => {
                    let idem = service.serve_list_offsets(IdemRequest {
                        isolation_level: isolation as i32,
                        topics: vec![IdemTopic {
                            name: name.clone(),
                            partitions: topic
                                .partitions
                                .iter()
                                .map(|p| IdemPartition {
                                    partition: p.partition_index,
                                    timestamp: p.timestamp,
                                })
                                .collect(),
                        }],
                    });
                    idem.topics
                        .into_iter()
                        .flat_map(|t| t.partitions)
                        .map(|p| {
                            answer(p.partition, kafka_code(p.error_code), p.offset, p.timestamp)
                        })
                        .collect()
                }
            };
            ListOffsetsTopicResponse::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

fn answer(
    partition: i32,
    error_code: i16,
    offset: i64,
    timestamp: i64,
) -> ListOffsetsPartitionResponse {
    ListOffsetsPartitionResponse::default()
        .with_partition_index(partition)
        .with_error_code(error_code)
        .with_timestamp(timestamp)
        .with_offset(offset)
        .with_leader_epoch(-1)
}
