//! AddOffsetsToTxn: forwarded to the TxnCoordinator owning the transactional id, which
//! adds the group's `__consumer_offsets` partition to the open transaction (KIP-447's
//! send_offsets_to_transaction, first step). Checked first as the coordinator checks
//! SDK callers: write on the transactional id (else
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED), read on the group (else
//! GROUP_AUTHORIZATION_FAILED).

use idem_proto::v1::AddOffsetsToTxnRequest as IdemRequest;
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::add_offsets_to_txn_request::AddOffsetsToTxnRequest;
use kafka_protocol::messages::add_offsets_to_txn_response::AddOffsetsToTxnResponse;

use super::errors::kafka_code;
use super::forward::{for_version, to_txn_coordinator};
use super::KafkaContext;

/// KIP-588: PRODUCER_FENCED from AddOffsetsToTxn v2 on.
const FENCED_SINCE: i16 = 2;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let transactional_id = request.transactional_id.0.to_string();
    let group_id = request.group_id.0.to_string();
    let needs = [
        (
            Operation::Write,
            Resource::transactional_id(&transactional_id),
        ),
        (Operation::Read, Resource::group(&group_id)),
    ];
    if let Err(denied) = context.service.check_all(principal, needs) {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(kafka_code(denied.error_code() as i32));
    }
    let forwarded = IdemRequest {
        transactional_id: transactional_id.clone(),
        producer_id: request.producer_id.0,
        producer_epoch: i32::from(request.producer_epoch),
        group_id,
    };
    let answered = to_txn_coordinator(context, &transactional_id, |mut client| async move {
        client.add_offsets_to_txn(forwarded).await
    })
    .await;
    let code = match answered {
        Ok(answer) => for_version(answer.error_code, version, FENCED_SINCE),
        Err(refusal) => {
            tracing::debug!(%transactional_id, code = refusal.code, reason = %refusal.message, "AddOffsetsToTxn not forwarded");
            refusal.code
        }
    };
    AddOffsetsToTxnResponse::default().with_error_code(code)
}
