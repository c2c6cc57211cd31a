//! A lost answer to TxnOffsetCommit or to EndTxn (the fault proxy closes the
//! connection instead of forwarding it, after the coordinator acted): the retried call
//! is answered as the first was, and the transaction's offsets count once — committed
//! with the commit, gone with the abort.

use idem_proto::v1::group_coordinator_client::GroupCoordinatorClient;
use idem_proto::v1::txn_coordinator_client::TxnCoordinatorClient;
use idem_proto::v1::{
    AddOffsetsToTxnRequest, EndTxnRequest, OffsetCommitPartition, OffsetCommitTopic,
    TxnInitProducerIdRequest, TxnOffsetCommitRequest,
};
use idem_proto::ErrorCode;
use idem_tests::groups::{drive_until, GroupClient, Member};
use idem_tests::{Cluster, FaultyProxy};
use tonic::transport::Channel;

const TOPIC: &str = "in";
const GROUP: &str = "pipeline";
const TID: &str = "pipeline-0";

async fn channel(bootstrap: &str) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{bootstrap}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect to the proxy")
}

fn offsets_request(producer: (i64, i32), member: &Member, offset: i64) -> TxnOffsetCommitRequest {
    TxnOffsetCommitRequest {
        transactional_id: TID.into(),
        producer_id: producer.0,
        producer_epoch: producer.1,
        group_id: GROUP.into(),
        member_id: member.member_id.clone(),
        member_epoch: member.epoch,
        topics: vec![OffsetCommitTopic {
            name: TOPIC.into(),
            partitions: (0..2)
                .map(|partition| OffsetCommitPartition {
                    partition,
                    offset,
                    leader_epoch: None,
                    metadata: String::new(),
                })
                .collect(),
        }],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_lost_answers_to_txn_offset_commit_and_end_txn_then_retries_are_answered_alike_and_offsets_count_once(
) {
    // One coordinator: it owns every slice, so the proxy stands before the one that
    // serves both the transactional id and the group.
    let cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, 2, 3).await;
    let group = GroupClient::new(&cluster.bootstrap(), GROUP);
    let mut members = vec![Member::new("m", &[TOPIC])];
    drive_until(&group, &mut members, 20, |m| m[0].owned.len() == 2).await;
    let member = members[0].clone();

    let proxy = FaultyProxy::start(cluster.coordinator(1).addr()).await;
    let through = channel(&proxy.bootstrap()).await;
    let mut txn = TxnCoordinatorClient::new(through.clone());
    let mut groups = GroupCoordinatorClient::new(through);
    let init = txn
        .init_producer_id(TxnInitProducerIdRequest {
            transactional_id: TID.into(),
            transaction_timeout_ms: 60_000,
            producer_id: None,
            producer_epoch: 0,
        })
        .await
        .expect("InitProducerId")
        .into_inner();
    assert_eq!(init.error_code(), ErrorCode::None, "{}", init.error_message);
    let mut producer = (init.producer_id, init.producer_epoch);

    // Round 1 commits offsets 10; round 2 stages 20 and aborts.
    for (offset, commit) in [(10, true), (20, false)] {
        let added = txn
            .add_offsets_to_txn(AddOffsetsToTxnRequest {
                transactional_id: TID.into(),
                producer_id: producer.0,
                producer_epoch: producer.1,
                group_id: GROUP.into(),
            })
            .await
            .expect("AddOffsetsToTxn")
            .into_inner();
        assert_eq!(
            added.error_code(),
            ErrorCode::None,
            "{}",
            added.error_message
        );

        let lost_before = proxy.lost_responses();
        proxy.lose_next_responses(1);
        let request = offsets_request(producer, &member, offset);
        assert!(
            groups.txn_offset_commit(request.clone()).await.is_err(),
            "the answer was lost"
        );
        assert_eq!(proxy.lost_responses(), lost_before + 1);
        groups = GroupCoordinatorClient::new(channel(&proxy.bootstrap()).await);
        let retried = groups
            .txn_offset_commit(request)
            .await
            .expect("TxnOffsetCommit retried")
            .into_inner();
        assert_eq!(
            retried.error_code(),
            ErrorCode::None,
            "{}",
            retried.error_message
        );
        assert!(
            retried
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .all(|p| p.error_code() == ErrorCode::None),
            "{retried:?}"
        );
        // Pending: a stable read waits, a plain one still sees the last committed.
        let stable = group.fetch(TOPIC, 2, true).await;
        assert!(
            stable
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .all(|p| p.error_code() == ErrorCode::UnstableOffsetCommit),
            "{stable:?}"
        );

        proxy.lose_next_responses(1);
        let end = EndTxnRequest {
            transactional_id: TID.into(),
            producer_id: producer.0,
            producer_epoch: producer.1,
            commit,
            keep_epoch: false,
        };
        txn = TxnCoordinatorClient::new(channel(&proxy.bootstrap()).await);
        assert!(
            txn.end_txn(end.clone()).await.is_err(),
            "the answer was lost"
        );
        txn = TxnCoordinatorClient::new(channel(&proxy.bootstrap()).await);
        let ended = txn.end_txn(end).await.expect("EndTxn retried").into_inner();
        assert_eq!(
            ended.error_code(),
            ErrorCode::None,
            "{}",
            ended.error_message
        );
        assert_eq!(
            ended.producer_epoch,
            producer.1 + 1,
            "the first answer again"
        );
        producer.1 = ended.producer_epoch;

        // Once the marker is read, the offsets are the commit's (or the abort left the
        // round before's), once.
        let expected = if commit { offset } else { 10 };
        let committed = wait_stable(&group).await;
        assert_eq!(committed, vec![expected, expected], "after round {offset}");
    }
}

/// The committed offsets of both partitions once no transaction holds them.
async fn wait_stable(group: &GroupClient) -> Vec<i64> {
    let (offsets, _) = idem_tests::wait::wait_until(
        idem_tests::wait::PATIENCE,
        "the offsets are stable",
        || async {
            let answer = group.fetch(TOPIC, 2, true).await;
            let partitions: Vec<_> = answer.topics.iter().flat_map(|t| &t.partitions).collect();
            if partitions.iter().all(|p| p.error_code() == ErrorCode::None) {
                Some(partitions.iter().map(|p| p.offset).collect::<Vec<i64>>())
            } else {
                None
            }
        },
    )
    .await;
    offsets
}
