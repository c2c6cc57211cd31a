//! DescribeProducers v0 (KIP-664): each partition's producer state as its leader keeps
//! it, read in-process from the partition (`BrokerService::producers_of`): producer id
//! and epoch, the last sequence and timestamp of its cached batches (-1 when none),
//! the coordinator epoch of its last marker, the BEGIN offset of its open transaction
//! (-1 when none). A replica that does not lead the partition is NOT_LEADER_OR_FOLLOWER
//! (its state may lag), an unknown one UNKNOWN_TOPIC_OR_PARTITION; read on the topic is
//! checked, as Kafka checks it (else TOPIC_AUTHORIZATION_FAILED for its partitions).

use idem_runtime::acl::Operation;
use kafka_protocol::messages::describe_producers_request::DescribeProducersRequest;
use kafka_protocol::messages::describe_producers_response::{
    DescribeProducersResponse, PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::ProducerId;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use crate::producer_state::ProducerEntry;
use crate::service::BrokerService;

pub fn serve(
    service: &BrokerService,
    principal: &str,
    request: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let authorized = service
                .authorize_topic(principal, Operation::Read, &name)
                .is_ok();
            let partitions = topic
                .partition_indexes
                .iter()
                .map(|&index| {
                    let answer = PartitionResponse::default().with_partition_index(index);
                    if !authorized {
                        return answer
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code());
                    }
                    match service.producers_of(&name, index) {
                        Ok(producers) => answer.with_active_producers(
                            producers
                                .iter()
                                .map(|(producer_id, entry)| producer_state(*producer_id, entry))
                                .collect(),
                        ),
                        Err(e) => answer
                            .with_error_code(kafka_code(e.code() as i32))
                            .with_error_message(Some(StrBytes::from_string(e.to_string()))),
                    }
                })
                .collect();
            TopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}

/// One producer's state on Kafka's wire.
pub fn producer_state(producer_id: i64, entry: &ProducerEntry) -> ProducerState {
    let last = entry.batches.back();
    ProducerState::default()
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(i32::from(entry.producer_epoch))
        .with_last_sequence(last.map_or(-1, |b| b.last_seq))
        .with_last_timestamp(last.map_or(-1, |b| b.timestamp_ms))
        .with_coordinator_epoch(entry.coordinator_epoch)
        .with_current_txn_start_offset(entry.txn_first_offset.unwrap_or(-1))
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::producer_state::{BatchMetadata, NO_COORDINATOR_EPOCH};

    fn batch(first_seq: i32, last_seq: i32, timestamp_ms: i64) -> BatchMetadata {
        BatchMetadata {
            first_seq,
            last_seq,
            first_offset: i64::from(first_seq),
            last_offset: i64::from(last_seq),
            timestamp_ms,
        }
    }

    #[test]
    fn given_cached_batches_then_the_last_ones_sequence_and_timestamp() {
        let entry = ProducerEntry {
            producer_epoch: 2,
            batches: VecDeque::from([batch(0, 4, 100), batch(5, 9, 200)]),
            last_update_ms: 5,
            txn_first_offset: Some(42),
            coordinator_epoch: 3,
        };
        let state = producer_state(1000, &entry);
        assert_eq!(state.producer_id, ProducerId(1000));
        assert_eq!(state.producer_epoch, 2);
        assert_eq!(state.last_sequence, 9);
        assert_eq!(state.last_timestamp, 200);
        assert_eq!(state.coordinator_epoch, 3);
        assert_eq!(state.current_txn_start_offset, 42);
    }

    #[test]
    fn given_no_batch_and_no_transaction_then_minus_one() {
        let entry = ProducerEntry {
            producer_epoch: 0,
            batches: VecDeque::new(),
            last_update_ms: 5,
            txn_first_offset: None,
            coordinator_epoch: NO_COORDINATOR_EPOCH,
        };
        let state = producer_state(7, &entry);
        assert_eq!(state.last_sequence, -1);
        assert_eq!(state.last_timestamp, -1);
        assert_eq!(state.coordinator_epoch, -1);
        assert_eq!(state.current_txn_start_offset, -1);
    }
}
