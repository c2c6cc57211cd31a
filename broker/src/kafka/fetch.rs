//! Fetch: the gRPC Fetch's long-poll and reads (`BrokerService::serve_fetch`: ACLs,
//! isolation level, max_wait/min_bytes, size budgets), with each partition's idem
//! batches converted to Kafka v2 (`records.rs`). read_committed needs no aborted
//! transactions list: idem's broker already leaves aborted batches and control batches
//! out, so the list is empty; where it skipped batches past the last one returned, an
//! empty batch spanning them moves the client's position past them (Kafka has no
//! `next_fetch_offset`). No fetch sessions: session id 0 asks for a full fetch each time.

use bytes::BytesMut;
use idem_proto::v1::{
    FetchPartition as IdemPartition, FetchRequest as IdemFetchRequest, FetchTopic as IdemTopic,
    IsolationLevel,
};
use kafka_protocol::messages::fetch_request::FetchRequest;
use kafka_protocol::messages::fetch_response::{
    FetchResponse, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use super::records::{skipped_range, stored_to_kafka};
use crate::service::BrokerService;

pub async fn serve(
    service: &BrokerService,
    principal: &str,
    request: FetchRequest,
) -> FetchResponse {
    let read_committed = request.isolation_level == 1;
    let idem = IdemFetchRequest {
        max_wait_ms: request.max_wait_ms,
        min_bytes: request.min_bytes,
        max_bytes: request.max_bytes,
        isolation_level: if read_committed {
            IsolationLevel::ReadCommitted
        } else {
            IsolationLevel::ReadUncommitted
        } as i32,
        topics: request
            .topics
            .iter()
            .map(|t| IdemTopic {
                name: t.topic.0.to_string(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| IdemPartition {
                        partition: p.partition,
                        fetch_offset: p.fetch_offset,
                        partition_max_bytes: p.partition_max_bytes,
                        // Kafka's -1: the client does not know the leader epoch.
                        current_leader_epoch: (p.current_leader_epoch >= 0)
                            .then_some(p.current_leader_epoch),
                    })
                    .collect(),
            })
            .collect(),
        // A Kafka consumer, never a follower: idem's replicas fetch over gRPC.
        replica_id: None,
        include_control_batches: false,
    };
    let fetched = service.serve_fetch(principal, idem.clone()).await;
    let throttle_time_ms = fetched.throttle_time_ms;
    let responses = fetched
        .topics
        .into_iter()
        .zip(&idem.topics)
        .map(|(topic, asked)| {
            let partitions = topic
                .partitions
                .into_iter()
                .zip(&asked.partitions)
                .map(|(p, wanted)| {
                    let mut records = BytesMut::new();
                    let mut error_code = kafka_code(p.error_code);
                    if let Err(e) = stored_to_kafka(&p.records, &mut records) {
                        tracing::error!(topic = %topic.name, partition = p.partition, error = %e, "stored batches did not convert for a Kafka fetch");
                        records.clear();
                        error_code = ResponseError::CorruptMessage.code();
                    }
                    let returned_to = last_next_offset(&p.records).unwrap_or(wanted.fetch_offset);
                    if error_code == 0 && p.next_fetch_offset > returned_to {
                        skipped_range(returned_to, p.next_fetch_offset, &mut records);
                    }
                    PartitionData::default()
                        .with_partition_index(p.partition)
                        .with_error_code(error_code)
                        .with_high_watermark(p.high_watermark)
                        .with_last_stable_offset(p.last_stable_offset)
                        .with_log_start_offset(p.log_start_offset)
                        .with_aborted_transactions(read_committed.then(Vec::new))
                        .with_preferred_read_replica(BrokerId(-1))
                        .with_records(Some(records.freeze()))
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_string(topic.name)))
                .with_partitions(partitions)
        })
        .collect();
    FetchResponse::default()
        .with_session_id(0)
        .with_throttle_time_ms(throttle_time_ms)
        .with_responses(responses)
}

/// The offset after the last whole batch in `stored`.
fn last_next_offset(stored: &[u8]) -> Option<i64> {
    idem_proto::batch::Batches::new(stored)
        .map_while(Result::ok)
        .last()
        .map(|(h, _)| h.next_offset())
}
