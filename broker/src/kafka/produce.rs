//! Produce: each partition's Kafka batch becomes an idem batch (`records.rs`) and goes
//! through the same path as a gRPC Produce (`BrokerService::serve_produce`: ACLs,
//! internal-topic ownership, the partition's producer state and replication), so an
//! idempotent Kafka producer's retry is deduplicated exactly as an SDK retry is. acks
//! 0, 1 and -1 mean what they mean to idem; with acks=0 the client expects no answer.

use std::collections::HashMap;

use idem_proto::v1::{
    PartitionProduceData as IdemPartition, ProduceRequest as IdemProduceRequest,
    TopicProduceData as IdemTopic,
};
use kafka_protocol::messages::produce_request::ProduceRequest;
use kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use super::records::{produced_to_idem, ConversionError};
use crate::service::{BrokerService, ProduceInFlight};

/// `request`'s batches converted and appended in order (`BrokerService::begin_produce`);
/// [`Appended::settle`] gives the answer once they are durable.
pub async fn begin(service: &BrokerService, principal: &str, request: ProduceRequest) -> Appended {
    let acks = request.acks;
    // Batches that did not convert, answered without reaching a partition.
    let mut refused: HashMap<(String, i32), ConversionError> = HashMap::new();
    let mut topics = Vec::with_capacity(request.topic_data.len());
    let mut order = Vec::new();
    for topic in &request.topic_data {
        let name = topic.name.0.to_string();
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in &topic.partition_data {
            order.push((name.clone(), data.index));
            let converted = match &data.records {
                Some(records) => produced_to_idem(records),
                None => Err(ConversionError::Truncated(0)),
            };
            match converted {
                Ok(records) => partitions.push(IdemPartition {
                    partition: data.index,
                    records,
                }),
                Err(e) => {
                    tracing::debug!(topic = %name, partition = data.index, error = %e, "Kafka batch refused");
                    refused.insert((name.clone(), data.index), e);
                }
            }
        }
        topics.push(IdemTopic { name, partitions });
    }
    let in_flight = service
        .begin_produce(
            principal,
            IdemProduceRequest {
                acks: i32::from(acks),
                timeout_ms: request.timeout_ms,
                topics,
                coordinator_epoch: None,
            },
        )
        .await;
    Appended {
        acks,
        refused,
        order,
        in_flight,
    }
}

/// A Kafka produce request whose batches are in their logs, not yet durable.
pub struct Appended {
    acks: i16,
    /// Batches that did not convert, answered without reaching a partition.
    refused: HashMap<(String, i32), ConversionError>,
    /// (topic, partition) in the request's order: the answer's order.
    order: Vec<(String, i32)>,
    in_flight: ProduceInFlight,
}

impl Appended {
    /// The answer, once every appended batch is durable; `None` when the client asked
    /// for none (acks=0).
    pub async fn settle(self) -> Option<ProduceResponse> {
        let Appended {
            acks,
            mut refused,
            order,
            in_flight,
        } = self;
        let idem = in_flight.settle().await;
        if acks == 0 {
            return None;
        }
        let throttle_time_ms = idem.throttle_time_ms;
        let mut answered: HashMap<(String, i32), PartitionProduceResponse> = HashMap::new();
        for topic in idem.topics {
            for p in topic.partitions {
                let response = PartitionProduceResponse::default()
                    .with_index(p.partition)
                    .with_error_code(kafka_code(p.error_code))
                    .with_base_offset(p.base_offset)
                    .with_log_append_time_ms(-1)
                    .with_log_start_offset(p.log_start_offset)
                    .with_error_message(
                        (!p.error_message.is_empty())
                            .then(|| StrBytes::from_string(p.error_message)),
                    );
                answered.insert((topic.name.clone(), p.partition), response);
            }
        }
        // In the request's order, one answer per partition asked.
        let mut responses: Vec<TopicProduceResponse> = Vec::new();
        for (name, index) in order {
            let key = (name.clone(), index);
            let partition = match (answered.remove(&key), refused.remove(&key)) {
                (Some(answer), _) => answer,
                (None, Some(e)) => refusal(index, &e),
                (None, None) => refusal(index, &ConversionError::Truncated(0)),
            };
            match responses.last_mut() {
                Some(topic) if topic.name.0.as_str() == name => {
                    topic.partition_responses.push(partition)
                }
                _ => responses.push(
                    TopicProduceResponse::default()
                        .with_name(StrBytes::from_string(name).into())
                        .with_partition_responses(vec![partition]),
                ),
            }
        }
        // A quota hold (`--quota-file`) already happened; the client is told its length.
        Some(
            ProduceResponse::default()
                .with_responses(responses)
                .with_throttle_time_ms(throttle_time_ms),
        )
    }
}

fn refusal(index: i32, e: &ConversionError) -> PartitionProduceResponse {
    let code = match e {
        ConversionError::Magic(_) => ResponseError::UnsupportedForMessageFormat,
        _ => ResponseError::CorruptMessage,
    };
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code.code())
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
        .with_error_message(Some(StrBytes::from_string(e.to_string())))
}
