//! SyncGroup v0–v5 (the classic protocol): forwarded to the group's coordinator, which
//! answers the member's server-side assignment at its generation (ILLEGAL_GENERATION,
//! UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS otherwise); the broker encodes it as
//! Kafka's ConsumerProtocolAssignment. Assignments a leader sends are ignored: there
//! is no client-side assignor. Read on the group is checked first.

use idem_proto::v1::ClassicSyncGroupRequest;
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::sync_group_request::SyncGroupRequest;
use kafka_protocol::messages::sync_group_response::SyncGroupResponse;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::consumer_protocol::{encode_assignment, CONSUMER_PROTOCOL_TYPE};
use super::errors::kafka_code;
use super::forward::to_group_coordinator;
use super::KafkaContext;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: SyncGroupRequest,
) -> SyncGroupResponse {
    let group_id = request.group_id.0.to_string();
    let refused = |code: i16| SyncGroupResponse::default().with_error_code(code);
    if let Err(denied) = context
        .service
        .check_all(principal, [(Operation::Read, Resource::group(&group_id))])
    {
        return refused(kafka_code(denied.error_code() as i32));
    }
    let forwarded = ClassicSyncGroupRequest {
        group_id: group_id.clone(),
        member_id: request.member_id.to_string(),
        generation_id: request.generation_id,
        protocol_type: request.protocol_type.as_ref().map(ToString::to_string),
        protocol_name: request.protocol_name.as_ref().map(ToString::to_string),
        group_instance_id: request.group_instance_id.as_ref().map(ToString::to_string),
    };
    let answer = match to_group_coordinator(context, &group_id, |mut client| async move {
        client.classic_sync_group(forwarded).await
    })
    .await
    {
        Ok(answer) => answer,
        Err(refusal) => return refused(refusal.code),
    };
    if answer.error_code != 0 {
        return refused(kafka_code(answer.error_code));
    }
    let Ok(assignment) = encode_assignment(&answer.assignment) else {
        return refused(ResponseError::UnknownServerError.code());
    };
    SyncGroupResponse::default()
        .with_protocol_type(Some(StrBytes::from_static_str(CONSUMER_PROTOCOL_TYPE)))
        .with_protocol_name(Some(StrBytes::from_string(answer.protocol_name)))
        .with_assignment(assignment)
}
