//! DescribeTransactions v0 (KIP-664): each transactional id as the coordinator owning
//! it holds it (forwarded: state, timeout, start time, producer id and epoch, the
//! partitions of the open transaction). Describe on the transactional id is checked
//! first (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, nothing forwarded); partitions of
//! topics the client may not describe are left out, as Kafka leaves them out. An id the
//! coordinator does not hold is TRANSACTIONAL_ID_NOT_FOUND.

use idem_proto::v1::{DescribeTransactionRequest, TransactionDescription};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::describe_transactions_request::DescribeTransactionsRequest;
use kafka_protocol::messages::describe_transactions_response::{
    DescribeTransactionsResponse, TopicData, TransactionState,
};
use kafka_protocol::messages::{ProducerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use super::forward::to_txn_coordinator;
use super::KafkaContext;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let mut states = Vec::with_capacity(request.transactional_ids.len());
    for transactional_id in request.transactional_ids {
        let id = transactional_id.0.to_string();
        let answer = TransactionState::default().with_transactional_id(transactional_id);
        let state = match describe(context, principal, &id).await {
            Ok(described) => {
                let may_describe_topic = |topic: &str| {
                    context
                        .service
                        .authorize_topic(principal, Operation::Describe, topic)
                        .is_ok()
                };
                described_state(answer, described, may_describe_topic)
            }
            Err(code) => answer
                .with_error_code(code)
                .with_transaction_state(StrBytes::default())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1),
        };
        states.push(state);
    }
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

/// The transactional id as its coordinator holds it, or the Kafka code refusing it.
async fn describe(
    context: &KafkaContext,
    principal: &str,
    id: &str,
) -> Result<TransactionDescription, i16> {
    context
        .service
        .check_all(
            principal,
            [(Operation::Describe, Resource::transactional_id(id))],
        )
        .map_err(|denied| kafka_code(denied.error_code() as i32))?;
    let forwarded = DescribeTransactionRequest {
        transactional_id: id.to_string(),
    };
    let described = to_txn_coordinator(context, id, |mut client| async move {
        client.describe_transaction(forwarded).await
    })
    .await
    .map_err(|refused| refused.code)?;
    if described.error_code != 0 {
        return Err(kafka_code(described.error_code));
    }
    described
        .transaction
        .ok_or(ResponseError::UnknownServerError.code())
}

/// `answer` filled from `described`, with the partitions of topics `may_describe_topic`.
pub fn described_state(
    answer: TransactionState,
    described: TransactionDescription,
    may_describe_topic: impl Fn(&str) -> bool,
) -> TransactionState {
    let topics = described
        .topics
        .into_iter()
        .filter(|t| may_describe_topic(&t.topic))
        .map(|t| {
            TopicData::default()
                .with_topic(TopicName(StrBytes::from_string(t.topic)))
                .with_partitions(t.partitions)
        })
        .collect();
    answer
        .with_transaction_state(StrBytes::from_string(described.state))
        .with_transaction_timeout_ms(described.timeout_ms)
        .with_transaction_start_time_ms(described.txn_start_ms)
        .with_producer_id(ProducerId(described.producer_id))
        // An epoch beyond Kafka's i16 cannot be: the coordinator bumps within it.
        .with_producer_epoch(i16::try_from(described.producer_epoch).unwrap_or(-1))
        .with_topics(topics)
}

#[cfg(test)]
mod tests {
    use idem_proto::v1::TxnTopicPartitions;

    use super::*;

    #[test]
    fn given_an_open_transaction_then_its_fields_and_describable_partitions() {
        let described = TransactionDescription {
            transactional_id: "checkout".into(),
            producer_id: 4000,
            producer_epoch: 3,
            state: "Ongoing".into(),
            timeout_ms: 60_000,
            topics: vec![
                TxnTopicPartitions {
                    topic: "orders".into(),
                    partitions: vec![0, 2],
                },
                TxnTopicPartitions {
                    topic: "secret".into(),
                    partitions: vec![1],
                },
            ],
            txn_start_ms: 1_700_000_000_000,
            ..TransactionDescription::default()
        };
        let state = described_state(TransactionState::default(), described, |t| t != "secret");
        assert_eq!(state.error_code, 0);
        assert_eq!(state.transaction_state.as_str(), "Ongoing");
        assert_eq!(state.transaction_timeout_ms, 60_000);
        assert_eq!(state.transaction_start_time_ms, 1_700_000_000_000);
        assert_eq!(state.producer_id, ProducerId(4000));
        assert_eq!(state.producer_epoch, 3);
        assert_eq!(state.topics.len(), 1);
        assert_eq!(state.topics[0].topic.0.as_str(), "orders");
        assert_eq!(state.topics[0].partitions, [0, 2]);
    }
}
