//! OffsetFetch v1–v9: each group's committed offsets from the GroupCoordinator owning
//! it. v8+ asks for several groups at once (KIP-709), each forwarded to its own owner
//! and answered on its own; before v8 one group. Describe on the group is checked first,
//! as the coordinator checks SDK callers (else GROUP_AUTHORIZATION_FAILED for that group,
//! nothing forwarded). `require_stable` (KIP-447) passes through: a partition an open
//! transaction holds offsets for is UNSTABLE_OFFSET_COMMIT, which the client retries.
//! No topics named (null): every partition the group has an offset for.

use idem_proto::v1::{GroupTopicPartitions, OffsetFetchRequest as IdemRequest, OffsetFetchTopic};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequest;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponse, OffsetFetchResponseGroup, OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions, OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::protocol::StrBytes;

use super::errors::kafka_code;
use super::forward::to_group_coordinator;
use super::KafkaContext;

/// One group's answer: a group-level code, or its topics.
struct Fetched {
    error_code: i16,
    topics: Vec<OffsetFetchTopic>,
}

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    if version >= 8 {
        let mut groups = Vec::with_capacity(request.groups.len());
        for group in request.groups {
            let wanted = group.topics.map(|topics| {
                topics
                    .into_iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes))
                    .collect()
            });
            let group_id = group.group_id.0.to_string();
            let fetched = fetch(
                context,
                principal,
                &group_id,
                wanted,
                request.require_stable,
            )
            .await;
            groups.push(
                OffsetFetchResponseGroup::default()
                    .with_group_id(group.group_id)
                    .with_error_code(fetched.error_code)
                    .with_topics(
                        fetched
                            .topics
                            .into_iter()
                            .map(|t| {
                                OffsetFetchResponseTopics::default()
                                    .with_name(StrBytes::from_string(t.name).into())
                                    .with_partitions(
                                        t.partitions
                                            .into_iter()
                                            .map(|p| {
                                                OffsetFetchResponsePartitions::default()
                                                    .with_partition_index(p.partition)
                                                    .with_committed_offset(p.offset)
                                                    .with_committed_leader_epoch(
                                                        p.leader_epoch.unwrap_or(-1),
                                                    )
                                                    .with_metadata(Some(StrBytes::from_string(
                                                        p.metadata,
                                                    )))
                                                    .with_error_code(kafka_code(p.error_code))
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
            );
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let wanted = request.topics.map(|topics| {
        topics
            .into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect::<Vec<_>>()
    });
    let group_id = request.group_id.0.to_string();
    let fetched = fetch(
        context,
        principal,
        &group_id,
        wanted.clone(),
        request.require_stable,
    )
    .await;
    let partition =
        |partition: i32, offset: i64, leader_epoch: i32, metadata: String, code: i16| {
            OffsetFetchResponsePartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(leader_epoch)
                .with_metadata(Some(StrBytes::from_string(metadata)))
                .with_error_code(code)
        };
    let topics = if fetched.error_code != 0 {
        // v1 has no top-level code: the group's refusal is each partition's.
        wanted
            .unwrap_or_default()
            .into_iter()
            .map(|(name, partitions)| {
                OffsetFetchResponseTopic::default()
                    .with_name(StrBytes::from_string(name).into())
                    .with_partitions(
                        partitions
                            .into_iter()
                            .map(|p| partition(p, -1, -1, String::new(), fetched.error_code))
                            .collect(),
                    )
            })
            .collect()
    } else {
        fetched
            .topics
            .into_iter()
            .map(|t| {
                OffsetFetchResponseTopic::default()
                    .with_name(StrBytes::from_string(t.name).into())
                    .with_partitions(
                        t.partitions
                            .into_iter()
                            .map(|p| {
                                partition(
                                    p.partition,
                                    p.offset,
                                    p.leader_epoch.unwrap_or(-1),
                                    p.metadata,
                                    kafka_code(p.error_code),
                                )
                            })
                            .collect(),
                    )
            })
            .collect()
    };
    OffsetFetchResponse::default()
        .with_error_code(fetched.error_code)
        .with_topics(topics)
}

/// `group_id`'s offsets for `wanted` (`None`: all it has).
async fn fetch(
    context: &KafkaContext,
    principal: &str,
    group_id: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Fetched {
    if let Err(denied) = context.service.check_all(
        principal,
        [(Operation::Describe, Resource::group(group_id))],
    ) {
        tracing::debug!(group_id, error = %denied, "OffsetFetch refused");
        return Fetched {
            error_code: kafka_code(denied.error_code() as i32),
            topics: Vec::new(),
        };
    }
    let forwarded = IdemRequest {
        group_id: group_id.to_string(),
        topics: wanted
            .unwrap_or_default()
            .into_iter()
            .map(|(topic, partitions)| GroupTopicPartitions { topic, partitions })
            .collect(),
        require_stable,
    };
    match to_group_coordinator(context, group_id, |mut client| async move {
        client.offset_fetch(forwarded).await
    })
    .await
    {
        Ok(answer) => {
            if answer.error_code != 0 {
                tracing::debug!(group_id, message = %answer.error_message, "OffsetFetch refused by the coordinator");
            }
            Fetched {
                error_code: kafka_code(answer.error_code),
                topics: answer.topics,
            }
        }
        Err(refusal) => {
            tracing::debug!(group_id, message = %refusal.message, "OffsetFetch not forwarded");
            Fetched {
                error_code: refusal.code,
                topics: Vec::new(),
            }
        }
    }
}
