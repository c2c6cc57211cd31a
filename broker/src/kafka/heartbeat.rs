//! Heartbeat v0–v4 (the classic protocol): forwarded to the group's coordinator. No
//! error: carry on; REBALANCE_IN_PROGRESS: join again (the member has partitions to give
//! up, or to take); ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID: its generation or
//! membership is gone. Read on the group is checked first.

use idem_proto::v1::ClassicHeartbeatRequest;
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::heartbeat_request::HeartbeatRequest;
use kafka_protocol::messages::heartbeat_response::HeartbeatResponse;

use super::errors::kafka_code;
use super::forward::to_group_coordinator;
use super::KafkaContext;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: HeartbeatRequest,
) -> HeartbeatResponse {
    let group_id = request.group_id.0.to_string();
    let answer = |code: i16| HeartbeatResponse::default().with_error_code(code);
    if let Err(denied) = context
        .service
        .check_all(principal, [(Operation::Read, Resource::group(&group_id))])
    {
        return answer(kafka_code(denied.error_code() as i32));
    }
    let forwarded = ClassicHeartbeatRequest {
        group_id: group_id.clone(),
        member_id: request.member_id.to_string(),
        generation_id: request.generation_id,
        group_instance_id: request.group_instance_id.as_ref().map(ToString::to_string),
    };
    match to_group_coordinator(context, &group_id, |mut client| async move {
        client.classic_heartbeat(forwarded).await
    })
    .await
    {
        Ok(beat) => answer(kafka_code(beat.error_code)),
        Err(refusal) => answer(refusal.code),
    }
}
