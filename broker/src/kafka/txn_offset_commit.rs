//! TxnOffsetCommit v0–v3: forwarded to the GroupCoordinator owning the group, which
//! stores the offsets inside the producer's open transaction (KIP-447: they become the
//! group's with the COMMIT marker and vanish with the ABORT). v3's member id and
//! generation are the consumer's membership, which fences a zombie consumer; before v3
//! (or without them) the commit is a member-less one (member epoch -1). Checked first
//! as the coordinator checks SDK callers: write on the transactional id (else
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED), read on the group (else
//! GROUP_AUTHORIZATION_FAILED) and on each topic (else TOPIC_AUTHORIZATION_FAILED),
//! each for every partition, and then nothing is forwarded. v4+ (KIP-890) is not
//! served: v5 would add the group's partition to the transaction implicitly.

use idem_proto::v1::{OffsetCommitTopic, TxnOffsetCommitRequest as IdemRequest};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequest;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponse, TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::protocol::StrBytes;

use super::errors::kafka_code;
use super::forward::{for_version, to_group_coordinator};
use super::offset_commit::committed_partition;
use super::KafkaContext;

/// KIP-588: PRODUCER_FENCED from TxnOffsetCommit v3 on.
const FENCED_SINCE: i16 = 3;
/// The member epoch of a commit made outside group membership.
const NO_MEMBER_EPOCH: i32 = -1;

pub async fn serve(
    context: &KafkaContext,
    principal: &str,
    request: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let transactional_id = request.transactional_id.0.to_string();
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
    let needs = [
        (
            Operation::Write,
            Resource::transactional_id(&transactional_id),
        ),
        (Operation::Read, Resource::group(&group_id)),
    ]
    .into_iter()
    .chain(
        asked
            .iter()
            .map(|(topic, _)| (Operation::Read, Resource::topic(topic))),
    );
    if let Err(denied) = context.service.check_all(principal, needs) {
        let code = kafka_code(denied.error_code() as i32);
        return answer(asked.iter().map(|(topic, partitions)| {
            let codes = partitions.iter().map(|p| (*p, code)).collect();
            (topic.clone(), codes)
        }));
    }
    let (member_id, member_epoch) = if request.member_id.is_empty() {
        (String::new(), NO_MEMBER_EPOCH)
    } else {
        (request.member_id.to_string(), request.generation_id)
    };
    let forwarded = IdemRequest {
        transactional_id,
        producer_id: request.producer_id.0,
        producer_epoch: i32::from(request.producer_epoch),
        group_id: group_id.clone(),
        member_id,
        member_epoch,
        topics: request
            .topics
            .into_iter()
            .map(|t| OffsetCommitTopic {
                name: t.name.0.to_string(),
                partitions: t
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
            })
            .collect(),
    };
    let answered = to_group_coordinator(context, &group_id, |mut client| async move {
        client.txn_offset_commit(forwarded).await
    })
    .await;
    match answered {
        // A code for the whole request goes to every partition; otherwise each
        // partition's own.
        Ok(answered) if answered.error_code != 0 || answered.topics.is_empty() => {
            let code = for_version(answered.error_code, version, FENCED_SINCE);
            answer_all(&asked, code)
        }
        Ok(answered) => answer(answered.topics.into_iter().map(|t| {
            let codes = t
                .partitions
                .into_iter()
                .map(|p| {
                    (
                        p.partition,
                        for_version(p.error_code, version, FENCED_SINCE),
                    )
                })
                .collect();
            (t.name, codes)
        })),
        Err(refusal) => {
            tracing::debug!(%group_id, code = refusal.code, reason = %refusal.message, "TxnOffsetCommit not forwarded");
            answer_all(&asked, refusal.code)
        }
    }
}

fn answer_all(asked: &[(String, Vec<i32>)], code: i16) -> TxnOffsetCommitResponse {
    answer(asked.iter().map(|(topic, partitions)| {
        (
            topic.clone(),
            partitions.iter().map(|p| (*p, code)).collect(),
        )
    }))
}

fn answer(topics: impl Iterator<Item = (String, Vec<(i32, i16)>)>) -> TxnOffsetCommitResponse {
    TxnOffsetCommitResponse::default().with_topics(
        topics
            .map(|(name, codes)| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(StrBytes::from_string(name).into())
                    .with_partitions(
                        codes
                            .into_iter()
                            .map(|(partition, code)| {
                                TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(partition)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}
