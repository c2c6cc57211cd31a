//! OffsetCommit v2–v9: forwarded to the GroupCoordinator owning the group. v9's
//! `generation_id_or_member_epoch` is the KIP-848 member epoch the coordinator fences
//! with (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID); an empty member id with -1 is a commit
//! outside membership, taken only by a group without members. Checked first as the
//! coordinator checks SDK callers: read on the group (else every partition is
//! GROUP_AUTHORIZATION_FAILED and nothing is forwarded) and on each topic (that topic's
//! partitions are TOPIC_AUTHORIZATION_FAILED and left out; the others are committed,
//! as Kafka does). A refusal of the whole request lands on each of its partitions:
//! Kafka's OffsetCommit has no request-level code.

use std::collections::HashMap;

use idem_proto::v1::{
    OffsetCommitPartition, OffsetCommitRequest as IdemRequest, OffsetCommitTopic,
};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::offset_commit_request::OffsetCommitRequest;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponse, OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::protocol::StrBytes;

use super::errors::kafka_code;
use super::forward::to_group_coordinator;
use super::KafkaContext;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    let group_id = request.group_id.0.to_string();
    let asked: Vec<(String, Vec<i32>)> = request
        .topics
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .collect();
    // The code of each (topic, partition) already decided here.
    let mut decided: HashMap<(String, i32), i16> = HashMap::new();
    let every = |code: i16, decided: &mut HashMap<(String, i32), i16>| {
        for (topic, partitions) in &asked {
            for p in partitions {
                decided.entry((topic.clone(), *p)).or_insert(code);
            }
        }
    };
    let service = &context.service;
    if let Err(denied) =
        service.check_all(principal, [(Operation::Read, Resource::group(&group_id))])
    {
        every(kafka_code(denied.error_code() as i32), &mut decided);
        return answer(&asked, &decided);
    }
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.name.0.to_string();
        if let Err(denied) =
            service.check_all(principal, [(Operation::Read, Resource::topic(&name))])
        {
            let code = kafka_code(denied.error_code() as i32);
            for p in &topic.partitions {
                decided.insert((name.clone(), p.partition_index), code);
            }
            continue;
        }
        topics.push(OffsetCommitTopic {
            name,
            partitions: topic
                .partitions
                .into_iter()
                .map(|p| {
                    committed_partition(
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.committed_metadata,
                    )
                })
                .collect(),
        });
    }
    if !topics.is_empty() {
        let forwarded = IdemRequest {
            group_id: group_id.clone(),
            member_id: request.member_id.to_string(),
            member_epoch: request.generation_id_or_member_epoch,
            topics,
        };
        match to_group_coordinator(context, &group_id, |mut client| async move {
            client.offset_commit(forwarded).await
        })
        .await
        {
            Ok(idem) if idem.error_code == 0 => {
                for topic in idem.topics {
                    for p in topic.partitions {
                        decided.insert(
                            (topic.name.clone(), p.partition),
                            generation_code(p.error_code, version),
                        );
                    }
                }
            }
            Ok(idem) => every(generation_code(idem.error_code, version), &mut decided),
            Err(refusal) => every(refusal.code, &mut decided),
        }
    }
    // A partition the coordinator did not mention was not committed.
    every(
        kafka_protocol::ResponseError::UnknownServerError.code(),
        &mut decided,
    );
    answer(&asked, &decided)
}

/// A coordinator's code for a client of `version`: before v9 (KIP-848's member
/// epoch) the number is a classic generation, so a stale one is ILLEGAL_GENERATION.
fn generation_code(code: i32, version: i16) -> i16 {
    if version < 9 && code == idem_proto::ErrorCode::StaleMemberEpoch as i32 {
        return kafka_protocol::ResponseError::IllegalGeneration.code();
    }
    kafka_code(code)
}

/// One answer per partition asked, in the request's order.
fn answer(
    asked: &[(String, Vec<i32>)],
    decided: &HashMap<(String, i32), i16>,
) -> OffsetCommitResponse {
    OffsetCommitResponse::default().with_topics(
        asked
            .iter()
            .map(|(topic, partitions)| {
                OffsetCommitResponseTopic::default()
                    .with_name(StrBytes::from_string(topic.clone()).into())
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|p| {
                                OffsetCommitResponsePartition::default()
                                    .with_partition_index(*p)
                                    .with_error_code(
                                        decided.get(&(topic.clone(), *p)).copied().unwrap_or(0),
                                    )
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// One partition of a Kafka OffsetCommit or TxnOffsetCommit as idem's coordinator
/// takes it (the two Kafka requests name the same fields in types of their own).
pub fn committed_partition(
    partition: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: Option<StrBytes>,
) -> OffsetCommitPartition {
    OffsetCommitPartition {
        partition,
        offset,
        // -1: the client knows no leader epoch.
        leader_epoch: (leader_epoch >= 0).then_some(leader_epoch),
        metadata: metadata.map(|m| m.to_string()).unwrap_or_default(),
    }
}
