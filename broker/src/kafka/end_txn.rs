//! EndTxn v0–v4: forwarded to the TxnCoordinator owning the transactional id with
//! `keep_epoch` (Kafka's transaction version 1). Kafka clients without KIP-890
//! (librdkafka) keep their epoch for the producer's life and never read one from
//! EndTxn, so the coordinator must not move it: its markers carry the transaction's
//! own epoch and a retry of that epoch is answered again (docs/kafka.md, "Transactions
//! and epochs"). v5, whose answer carries the next epoch (KIP-890), is not advertised.
//! Write on the transactional id is checked first (else
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED).

use idem_proto::v1::EndTxnRequest as IdemRequest;
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::end_txn_request::EndTxnRequest;
use kafka_protocol::messages::end_txn_response::EndTxnResponse;

use super::errors::kafka_code;
use super::forward::{for_version, to_txn_coordinator};
use super::KafkaContext;

/// KIP-588: PRODUCER_FENCED from EndTxn v2 on.
const FENCED_SINCE: i16 = 2;
/// The first EndTxn version of KIP-890's transaction version 2 (the answer carries the
/// producer's next epoch). Below it the client keeps its epoch.
const TRANSACTION_VERSION_2: i16 = 5;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: EndTxnRequest,
    version: i16,
) -> EndTxnResponse {
    let transactional_id = request.transactional_id.0.to_string();
    let needs = [(
        Operation::Write,
        Resource::transactional_id(&transactional_id),
    )];
    if let Err(denied) = context.service.check_all(principal, needs) {
        return EndTxnResponse::default().with_error_code(kafka_code(denied.error_code() as i32));
    }
    let forwarded = IdemRequest {
        transactional_id: transactional_id.clone(),
        producer_id: request.producer_id.0,
        producer_epoch: i32::from(request.producer_epoch),
        commit: request.committed,
        keep_epoch: version < TRANSACTION_VERSION_2,
    };
    let answered = to_txn_coordinator(context, &transactional_id, |mut client| async move {
        client.end_txn(forwarded).await
    })
    .await;
    let code = match answered {
        Ok(answer) => for_version(answer.error_code, version, FENCED_SINCE),
        Err(refusal) => {
            tracing::debug!(%transactional_id, code = refusal.code, reason = %refusal.message, "EndTxn not forwarded");
            refusal.code
        }
    };
    EndTxnResponse::default().with_error_code(code)
}

#[cfg(test)]
mod tests {
    use idem_runtime::acl::ResourceType;
    use kafka_protocol::messages::{ProducerId, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    use idem_runtime::acl::ANONYMOUS;

    use super::*;
    use crate::kafka::test_broker::{allow, context, service};

    #[tokio::test]
    async fn given_only_describe_on_the_transactional_id_then_end_txn_is_refused_53() {
        let dir = tempfile::tempdir().expect("tempdir");
        let acls = vec![allow(
            ResourceType::TransactionalId,
            "tx",
            Operation::Describe,
        )];
        let context = context(service(dir.path(), Some("127.0.0.1:1"), Some(acls)));
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_static_str("tx")))
            .with_producer_id(ProducerId(5))
            .with_committed(true);
        let answer = serve(&context, ANONYMOUS, request, 3).await;
        assert_eq!(answer.error_code, 53);
        assert_eq!(context.link.channel_count(), 0, "nothing was dialled");
    }
}
