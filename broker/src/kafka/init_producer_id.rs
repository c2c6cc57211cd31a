//! InitProducerId. Without a transactional id (idempotent producers): the broker's own
//! producer-id allocation (`BrokerService::serve_init_producer_id`, the leased block
//! and KIP-360 epoch bumps) with the same checks as the gRPC call: IDEMPOTENT_WRITE for
//! the connection's principal (else CLUSTER_AUTHORIZATION_FAILED) and the cap of new ids per
//! principal. With one: forwarded to the TxnCoordinator owning the id (`forward.rs`)
//! after the coordinator's own check, write on the transactional id (else
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED); v3+ carries the producer's current id and
//! epoch (KIP-360), which the coordinator renews only if they are still current.

use idem_proto::v1::{InitProducerIdRequest as IdemRequest, TxnInitProducerIdRequest};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse;
use kafka_protocol::messages::ProducerId;
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use super::forward::{for_version, to_txn_coordinator};
use super::KafkaContext;

/// KIP-588: PRODUCER_FENCED from InitProducerId v4 on.
const FENCED_SINCE: i16 = 4;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let service = &context.service;
    let transactional_id = request
        .transactional_id
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    // v3+: a producer that has an id asks for its next epoch (-1: a new id).
    let producer_id = (request.producer_id.0 >= 0).then_some(request.producer_id.0);
    if !transactional_id.is_empty() {
        return transactional(
            context,
            principal,
            transactional_id,
            request,
            producer_id,
            version,
        )
        .await;
    }
    if service.require_idempotent_write(principal).is_err() {
        return refused(ResponseError::ClusterAuthorizationFailed.code());
    }
    let idem = IdemRequest {
        transactional_id,
        transaction_timeout_ms: request.transaction_timeout_ms,
        producer_id,
        producer_epoch: i32::from(request.producer_epoch),
    };
    let answer = match producer_id
        .is_none()
        .then(|| service.over_producer_id_cap(principal))
        .flatten()
    {
        Some(refusal) => refusal,
        None => service.serve_init_producer_id(idem).await,
    };
    answered(
        kafka_code(answer.error_code),
        answer.producer_id,
        answer.producer_epoch,
    )
}

async fn transactional(
    context: &KafkaContext,
    principal: &str,
    transactional_id: String,
    request: InitProducerIdRequest,
    producer_id: Option<i64>,
    version: i16,
) -> InitProducerIdResponse {
    let needs = [(
        Operation::Write,
        Resource::transactional_id(&transactional_id),
    )];
    if let Err(denied) = context.service.check_all(principal, needs) {
        return refused(kafka_code(denied.error_code() as i32));
    }
    let forwarded = TxnInitProducerIdRequest {
        transactional_id: transactional_id.clone(),
        transaction_timeout_ms: request.transaction_timeout_ms,
        producer_id,
        producer_epoch: i32::from(request.producer_epoch),
    };
    let answer = to_txn_coordinator(context, &transactional_id, |mut client| async move {
        client.init_producer_id(forwarded).await
    })
    .await;
    match answer {
        Ok(answer) => answered(
            for_version(answer.error_code, version, FENCED_SINCE),
            answer.producer_id,
            answer.producer_epoch,
        ),
        Err(refusal) => {
            tracing::debug!(%transactional_id, code = refusal.code, reason = %refusal.message, "InitProducerId not forwarded");
            refused(refusal.code)
        }
    }
}

fn answered(error_code: i16, producer_id: i64, producer_epoch: i32) -> InitProducerIdResponse {
    let Ok(producer_epoch) = i16::try_from(producer_epoch) else {
        return refused(ResponseError::UnknownServerError.code());
    };
    InitProducerIdResponse::default()
        .with_error_code(error_code)
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(producer_epoch)
}

fn refused(error_code: i16) -> InitProducerIdResponse {
    InitProducerIdResponse::default()
        .with_error_code(error_code)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}
