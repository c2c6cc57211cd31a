//! AddPartitionsToTxn v0–v3 (the client's form; v4+ is Kafka's broker-to-broker
//! verification, not served): forwarded to the TxnCoordinator owning the transactional
//! id, which answers once every partition's leader has begun the transaction (a BEGIN
//! marker), so a transactional batch can only land in a partition the coordinator will
//! end. First the coordinator's own checks for the Kafka client: write on the
//! transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition)
//! and write on each topic (a refused topic's partitions TOPIC_AUTHORIZATION_FAILED,
//! the others OPERATION_NOT_ATTEMPTED, as Kafka answers; nothing is forwarded). The
//! coordinator's answer is all or nothing: its code goes to every partition.

use idem_proto::v1::{
    AddPartitionsToTxnRequest as IdemRequest, TxnTopicPartitions as IdemTopicPartitions,
};
use idem_runtime::acl::{Operation, Resource, ANONYMOUS};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnRequest;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResponse, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use super::forward::{for_version, to_txn_coordinator};
use super::KafkaContext;

/// KIP-588: PRODUCER_FENCED from AddPartitionsToTxn v2 on.
const FENCED_SINCE: i16 = 2;

pub async fn serve(
    context: &KafkaContext,
    request: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    let transactional_id = request.v3_and_below_transactional_id.0.to_string();
    let topics = request.v3_and_below_topics;
    let service = &context.service;
    let id_write = [(
        Operation::Write,
        Resource::transactional_id(&transactional_id),
    )];
    if let Err(denied) = service.check_all(ANONYMOUS, id_write) {
        let code = kafka_code(denied.error_code() as i32);
        return answer(
            topics
                .iter()
                .map(|t| (t.name.0.as_str(), &t.partitions[..], code)),
        );
    }
    let refused: Vec<bool> = topics
        .iter()
        .map(|t| {
            service
                .check_all(
                    ANONYMOUS,
                    [(Operation::Write, Resource::topic(t.name.0.as_str()))],
                )
                .is_err()
        })
        .collect();
    if refused.iter().any(|r| *r) {
        return answer(topics.iter().zip(&refused).map(|(t, refused)| {
            let code = if *refused {
                ResponseError::TopicAuthorizationFailed
            } else {
                ResponseError::OperationNotAttempted
            };
            (t.name.0.as_str(), &t.partitions[..], code.code())
        }));
    }
    let forwarded = IdemRequest {
        transactional_id: transactional_id.clone(),
        producer_id: request.v3_and_below_producer_id.0,
        producer_epoch: i32::from(request.v3_and_below_producer_epoch),
        topics: topics
            .iter()
            .map(|t| IdemTopicPartitions {
                topic: t.name.0.to_string(),
                partitions: t.partitions.clone(),
            })
            .collect(),
    };
    let answered = to_txn_coordinator(context, &transactional_id, |mut client| async move {
        client.add_partitions_to_txn(forwarded).await
    })
    .await;
    let code = match answered {
        Ok(answer) => for_version(answer.error_code, version, FENCED_SINCE),
        Err(refusal) => {
            tracing::debug!(%transactional_id, code = refusal.code, reason = %refusal.message, "AddPartitionsToTxn not forwarded");
            refusal.code
        }
    };
    answer(
        topics
            .iter()
            .map(|t| (t.name.0.as_str(), &t.partitions[..], code)),
    )
}

/// One result per partition asked, in the request's order.
fn answer<'a>(
    topics: impl Iterator<Item = (&'a str, &'a [i32], i16)>,
) -> AddPartitionsToTxnResponse {
    let results = topics
        .map(|(name, partitions, code)| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(kafka_protocol::protocol::StrBytes::from_string(name.to_string()).into())
                .with_results_by_partition(
                    partitions
                        .iter()
                        .map(|p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect();
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results)
}
