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
use idem_runtime::acl::{Operation, Resource};
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
    principal: &str,
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
    if let Err(denied) = service.check_all(principal, id_write) {
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
                    principal,
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

#[cfg(test)]
mod tests {
    use idem_runtime::acl::ResourceType;
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::{ProducerId, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    use idem_runtime::acl::ANONYMOUS;

    use super::*;
    use crate::kafka::test_broker::{allow, context, service};

    fn request(topics: &[(&'static str, &[i32])]) -> AddPartitionsToTxnRequest {
        AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_static_str("tx")))
            .with_v3_and_below_producer_id(ProducerId(5))
            .with_v3_and_below_producer_epoch(0)
            .with_v3_and_below_topics(
                topics
                    .iter()
                    .map(|(name, partitions)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(StrBytes::from_static_str(name).into())
                            .with_partitions(partitions.to_vec())
                    })
                    .collect(),
            )
    }

    /// `(topic, partition, code)` of every result, in order.
    fn codes(response: &AddPartitionsToTxnResponse) -> Vec<(String, i32, i16)> {
        response
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| {
                t.results_by_partition.iter().map(|p| {
                    (
                        t.name.0.to_string(),
                        p.partition_index,
                        p.partition_error_code,
                    )
                })
            })
            .collect()
    }

    fn owned(rows: &[(&str, i32, i16)]) -> Vec<(String, i32, i16)> {
        rows.iter()
            .map(|(t, p, c)| (t.to_string(), *p, *c))
            .collect()
    }

    #[tokio::test]
    async fn given_no_write_on_the_transactional_id_then_every_partition_is_refused_53() {
        let dir = tempfile::tempdir().expect("tempdir");
        let acls = vec![allow(ResourceType::Topic, "orders", Operation::Write)];
        let context = context(service(dir.path(), Some("127.0.0.1:1"), Some(acls)));
        let answer = serve(&context, ANONYMOUS, request(&[("orders", &[0, 1])]), 3).await;
        assert_eq!(
            codes(&answer),
            owned(&[("orders", 0, 53), ("orders", 1, 53)])
        );
    }

    #[tokio::test]
    async fn given_a_topic_not_writable_then_its_partitions_29_the_others_55_and_nothing_forwarded()
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let acls = vec![
            allow(ResourceType::TransactionalId, "tx", Operation::Write),
            allow(ResourceType::Topic, "orders", Operation::Write),
        ];
        // The coordinator's address is unreachable: a forwarded request would answer 15.
        let context = context(service(dir.path(), Some("127.0.0.1:1"), Some(acls)));
        let answer = serve(
            &context,
            ANONYMOUS,
            request(&[("orders", &[0, 1]), ("secrets", &[0])]),
            3,
        )
        .await;
        assert_eq!(
            codes(&answer),
            owned(&[("orders", 0, 55), ("orders", 1, 55), ("secrets", 0, 29)])
        );
        assert_eq!(context.link.channel_count(), 0, "nothing was dialled");
    }

    #[tokio::test]
    async fn given_an_unreachable_coordinator_then_every_partition_is_coordinator_not_available() {
        let dir = tempfile::tempdir().expect("tempdir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        drop(listener);
        let context = context(service(dir.path(), Some(&address), None));
        let answer = serve(&context, ANONYMOUS, request(&[("orders", &[0])]), 3).await;
        assert_eq!(codes(&answer), owned(&[("orders", 0, 15)]));
    }
}
