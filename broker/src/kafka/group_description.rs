//! One group as its coordinator describes it, for the two Kafka describe APIs
//! (ConsumerGroupDescribe and the classic DescribeGroups): describe on the group is
//! checked first for the Kafka client, as the coordinator checks SDK callers (the
//! forwarded call carries the broker's credential); then the group's coordinator is
//! asked. Each API renders the description, or the refusal, in its own schema.

use idem_proto::v1::{DescribeGroupsRequest, GroupDescription};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use super::forward::{to_group_coordinator, Refused};
use super::KafkaContext;

/// The description of `group_id`, or the Kafka code and message refusing it
/// (GROUP_AUTHORIZATION_FAILED, the coordinator's GROUP_ID_NOT_FOUND, an unreachable
/// coordinator's COORDINATOR_NOT_AVAILABLE...).
pub async fn describe(
    context: &KafkaContext,
    principal: &str,
    group_id: &str,
) -> Result<GroupDescription, Refused> {
    context
        .service
        .check_all(
            principal,
            [(Operation::Describe, Resource::group(group_id))],
        )
        .map_err(|denied| {
            Refused::new(kafka_code(denied.error_code() as i32), denied.to_string())
        })?;
    let forwarded = DescribeGroupsRequest {
        group_ids: vec![group_id.to_string()],
    };
    let described = to_group_coordinator(context, group_id, |mut client| async move {
        client.describe_groups(forwarded).await
    })
    .await?;
    match described.groups.into_iter().next() {
        Some(group) if group.error_code == 0 => Ok(group),
        Some(group) => Err(Refused::new(
            kafka_code(group.error_code),
            group.error_message,
        )),
        None => Err(Refused::new(
            ResponseError::UnknownServerError.code(),
            "the coordinator described no group",
        )),
    }
}
