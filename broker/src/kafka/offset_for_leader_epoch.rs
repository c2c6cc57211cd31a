//! OffsetForLeaderEpoch v2–v4 for consumers (KIP-320): a Kafka consumer that resumes
//! at a committed offset carrying a leader epoch (OffsetFetch answers the one it
//! committed) asks where that epoch ends before it fetches, to detect a log truncated
//! under it; librdkafka waits for this answer before fetching. Answered from the
//! partition's leader-epoch history, as a follower is (`Partition::epoch_end`); a
//! current leader epoch of -1 is "unknown" and not checked. Describe on the topic is
//! checked, as for ListOffsets (else TOPIC_AUTHORIZATION_FAILED).

use idem_runtime::acl::Operation;
use kafka_protocol::messages::offset_for_leader_epoch_request::OffsetForLeaderEpochRequest;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderEpochResponse, OffsetForLeaderTopicResult,
};
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use crate::service::BrokerService;

pub fn serve(
    service: &BrokerService,
    principal: &str,
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.topic.0.to_string();
            let authorized = service
                .authorize_topic(principal, Operation::Describe, &name)
                .is_ok();
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let answer = EpochEndOffset::default().with_partition(p.partition);
                    if !authorized {
                        return answer
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                            .with_leader_epoch(-1)
                            .with_end_offset(-1);
                    }
                    let current = (p.current_leader_epoch >= 0).then_some(p.current_leader_epoch);
                    match service.epoch_end_offset(&name, p.partition, current, p.leader_epoch) {
                        Ok((leader_epoch, end_offset)) => answer
                            .with_leader_epoch(leader_epoch)
                            .with_end_offset(end_offset),
                        Err(e) => answer
                            .with_error_code(kafka_code(e.code() as i32))
                            .with_leader_epoch(-1)
                            .with_end_offset(-1),
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
