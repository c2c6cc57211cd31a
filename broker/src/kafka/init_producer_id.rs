//! InitProducerId for idempotent Kafka producers: the broker's own producer-id
//! allocation (`BrokerService::serve_init_producer_id`, the leased block and KIP-360
//! epoch bumps) with the same checks as the gRPC call: IDEMPOTENT_WRITE for
//! `User:ANONYMOUS` (else CLUSTER_AUTHORIZATION_FAILED) and the cap of new ids per
//! principal. A transactional id is refused (NOT_COORDINATOR): transactions over the
//! Kafka protocol are a later slice (docs/kafka.md).

use idem_proto::v1::InitProducerIdRequest as IdemRequest;
use idem_runtime::acl::ANONYMOUS;
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse;
use kafka_protocol::messages::ProducerId;
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use crate::service::BrokerService;

pub async fn serve(
    service: &BrokerService,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let transactional_id = request
        .transactional_id
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    if transactional_id.is_empty() && service.require_idempotent_write(ANONYMOUS).is_err() {
        return refused(ResponseError::ClusterAuthorizationFailed.code());
    }
    // v3+: a producer that has an id asks for its next epoch (-1: a new id).
    let producer_id = (request.producer_id.0 >= 0).then_some(request.producer_id.0);
    let idem = IdemRequest {
        transactional_id,
        transaction_timeout_ms: request.transaction_timeout_ms,
        producer_id,
        producer_epoch: i32::from(request.producer_epoch),
    };
    let answer = match (idem.transactional_id.is_empty() && producer_id.is_none())
        .then(|| service.over_producer_id_cap(ANONYMOUS))
        .flatten()
    {
        Some(refusal) => refusal,
        None => service.serve_init_producer_id(idem).await,
    };
    let Ok(producer_epoch) = i16::try_from(answer.producer_epoch) else {
        return refused(ResponseError::UnknownServerError.code());
    };
    InitProducerIdResponse::default()
        .with_error_code(kafka_code(answer.error_code))
        .with_producer_id(ProducerId(answer.producer_id))
        .with_producer_epoch(producer_epoch)
}

fn refused(error_code: i16) -> InitProducerIdResponse {
    InitProducerIdResponse::default()
        .with_error_code(error_code)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}
