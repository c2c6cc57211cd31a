//! LeaveGroup v0–v5 (the classic protocol): forwarded to the group's coordinator; the
//! members named leave (v0–v2 one member id, v3+ a batch), their partitions free for
//! the group's next target. A member the group does not have as a classic member is
//! UNKNOWN_MEMBER_ID (v3+ per member). v3+ may name a static member by its
//! group.instance.id, with or without its member id (the admin client's
//! `removeMembersFromConsumerGroup`): a member id that is not the instance's holder is
//! FENCED_INSTANCE_ID. Read on the group is checked first.

use idem_proto::v1::{ClassicLeaveGroupRequest, ClassicLeavingMember};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::leave_group_request::LeaveGroupRequest;
use kafka_protocol::messages::leave_group_response::{LeaveGroupResponse, MemberResponse};
use kafka_protocol::protocol::StrBytes;

use super::errors::kafka_code;
use super::forward::to_group_coordinator;
use super::KafkaContext;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let group_id = request.group_id.0.to_string();
    let refused = |code: i16| LeaveGroupResponse::default().with_error_code(code);
    if let Err(denied) = context
        .service
        .check_all(principal, [(Operation::Read, Resource::group(&group_id))])
    {
        return refused(kafka_code(denied.error_code() as i32));
    }
    let members: Vec<ClassicLeavingMember> = if version >= 3 {
        request
            .members
            .iter()
            .map(|m| ClassicLeavingMember {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(ToString::to_string),
            })
            .collect()
    } else {
        vec![ClassicLeavingMember {
            member_id: request.member_id.to_string(),
            group_instance_id: None,
        }]
    };
    let forwarded = ClassicLeaveGroupRequest {
        group_id: group_id.clone(),
        member_ids: Vec::new(),
        members,
    };
    let answer = match to_group_coordinator(context, &group_id, |mut client| async move {
        client.classic_leave_group(forwarded).await
    })
    .await
    {
        Ok(answer) => answer,
        Err(refusal) => return refused(refusal.code),
    };
    if answer.error_code != 0 {
        return refused(kafka_code(answer.error_code));
    }
    if version < 3 {
        // One member: its code is the request's.
        let code = answer
            .members
            .first()
            .map_or(0, |m| kafka_code(m.error_code));
        return refused(code);
    }
    let instance_of = |i: usize| {
        request
            .members
            .get(i)
            .and_then(|m| m.group_instance_id.clone())
    };
    LeaveGroupResponse::default().with_members(
        answer
            .members
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                MemberResponse::default()
                    .with_member_id(StrBytes::from_string(m.member_id))
                    .with_group_instance_id(instance_of(i))
                    .with_error_code(kafka_code(m.error_code))
            })
            .collect(),
    )
}
