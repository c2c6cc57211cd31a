//! DeleteGroups v0–v2: each group deleted by the GroupCoordinator owning it, with its
//! offsets; a group with members is NON_EMPTY_GROUP and an unknown one
//! GROUP_ID_NOT_FOUND, as the coordinator answers. Delete on the group is checked
//! first, as the coordinator checks SDK callers (else GROUP_AUTHORIZATION_FAILED for
//! that group, nothing forwarded).

use idem_proto::v1::DeleteGroupsRequest as IdemRequest;
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_protocol::messages::delete_groups_response::{
    DeletableGroupResult, DeleteGroupsResponse,
};
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use super::forward::to_group_coordinator;
use super::KafkaContext;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(request.groups_names.len());
    for group_id in request.groups_names {
        let id = group_id.0.to_string();
        let code = match context
            .service
            .check_all(principal, [(Operation::Delete, Resource::group(&id))])
        {
            Err(denied) => kafka_code(denied.error_code() as i32),
            Ok(()) => {
                let forwarded = IdemRequest {
                    group_ids: vec![id.clone()],
                };
                let deleted = to_group_coordinator(context, &id, |mut client| async move {
                    client.delete_groups(forwarded).await
                })
                .await;
                match deleted.map(|d| d.results.into_iter().next()) {
                    Ok(Some(result)) => kafka_code(result.error_code),
                    Ok(None) => ResponseError::UnknownServerError.code(),
                    Err(refusal) => refusal.code,
                }
            }
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(group_id)
                .with_error_code(code),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}
