//! Leader failover: when a leader's lease lapses, an in-sync follower takes over with
//! `leader_epoch + 1` by compare-and-swap; every acknowledged record survives, a retry
//! of a batch the dead leader had replicated is answered with its original offset, a
//! paused leader that comes back accepts no write for its old epoch, and a returning
//! replica cuts any tail the new leader lacks so all replicas agree.

use idem_proto::v1::{
    FetchPartition, FetchRequest, FetchTopic, PartitionProduceData, ProduceRequest,
    TopicProduceData,
};
use idem_proto::ErrorCode;
use idem_tests::raw::{self, RawClient};
use idem_tests::{Cluster, FaultyProxy};

const PRODUCER: i64 = 11;

async fn replicated_cluster() -> Cluster {
    let cluster = Cluster::start(3, &[]);
    cluster.create_topic("orders", 1, 3).await;
    cluster
}

async fn produce(client: &mut RawClient, seq: i32) -> (ErrorCode, i64) {
    let value = format!("r{seq}");
    let answer = raw::produce(
        client,
        "orders",
        0,
        raw::idempotent_batch(PRODUCER, 0, seq, &[&value]),
    )
    .await;
    (answer.error_code(), answer.base_offset)
}

async fn fetch_naming_epoch(client: &mut RawClient, leader_epoch: i32) -> ErrorCode {
    let answer = client
        .fetch(FetchRequest {
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 1 << 20,
            isolation_level: 0,
            topics: vec![FetchTopic {
                name: "orders".into(),
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    partition_max_bytes: 1 << 20,
                    current_leader_epoch: Some(leader_epoch),
                }],
            }],
            replica_id: None,
            include_control_batches: false,
        })
        .await
        .expect("Fetch")
        .into_inner();
    answer.topics[0].partitions[0].error_code()
}

fn expected(n: i32) -> Vec<String> {
    (0..n).map(|i| format!("r{i}")).collect()
}

#[tokio::test]
async fn given_the_leader_killed_then_an_isr_follower_takes_over_and_nothing_acknowledged_is_lost()
{
    let mut cluster = replicated_cluster().await;
    let old = cluster.leader_of("orders", 0).await;
    let mut leader = raw::connect(&cluster.broker(old.leader_id).bootstrap()).await;
    for seq in 0..20 {
        assert_eq!(
            produce(&mut leader, seq).await,
            (ErrorCode::None, i64::from(seq))
        );
    }
    cluster.kill(old.leader_id);
    let new = cluster.new_leader("orders", 0, &old).await;
    assert_eq!(new.leader_epoch, old.leader_epoch + 1);
    assert!(
        old.isr.contains(&new.leader_id),
        "only an in-sync replica takes over"
    );
    let mut leader = raw::connect(&cluster.broker(new.leader_id).bootstrap()).await;
    for seq in 20..30 {
        assert_eq!(
            produce(&mut leader, seq).await,
            (ErrorCode::None, i64::from(seq))
        );
    }
    assert_eq!(
        raw::values(&raw::read_partition(&mut leader, "orders", 0).await),
        expected(30)
    );
    // A fetcher still naming the old epoch is fenced; one naming the new epoch is served.
    assert_eq!(
        fetch_naming_epoch(&mut leader, old.leader_epoch).await,
        ErrorCode::FencedLeaderEpoch
    );
    assert_eq!(
        fetch_naming_epoch(&mut leader, new.leader_epoch).await,
        ErrorCode::None
    );

    cluster.restart(old.leader_id);
    cluster
        .wait_for(new.leader_id, "orders", 0, |p| p.isr.len() == 3)
        .await;
    cluster.stop_all();
    assert_eq!(cluster.compare_replicas("orders", 0, 30), 30);
}

#[tokio::test]
async fn given_a_replicated_batch_whose_leader_died_before_answering_then_the_retry_on_the_new_leader_gets_the_original_offset(
) {
    let mut cluster = replicated_cluster().await;
    let old = cluster.leader_of("orders", 0).await;
    let mut leader = raw::connect(&cluster.broker(old.leader_id).bootstrap()).await;
    for seq in 0..5 {
        assert_eq!(
            produce(&mut leader, seq).await,
            (ErrorCode::None, i64::from(seq))
        );
    }
    // The answer to seq 5 is lost on the way back; acks=all means it was replicated.
    let proxy = FaultyProxy::start(cluster.broker(old.leader_id).addr()).await;
    let mut through_proxy = raw::connect(&proxy.bootstrap()).await;
    proxy.lose_next_responses(1);
    let batch = raw::idempotent_batch(PRODUCER, 0, 5, &["r5"]);
    let lost = through_proxy
        .produce(ProduceRequest {
            coordinator_epoch: None,
            acks: -1,
            timeout_ms: 30_000,
            topics: vec![TopicProduceData {
                name: "orders".into(),
                partitions: vec![PartitionProduceData {
                    partition: 0,
                    records: batch.clone(),
                }],
            }],
        })
        .await;
    assert!(lost.is_err(), "the response was lost");
    assert_eq!(proxy.lost_responses(), 1);
    cluster.kill(old.leader_id);
    let new = cluster.new_leader("orders", 0, &old).await;
    let mut leader = raw::connect(&cluster.broker(new.leader_id).bootstrap()).await;
    let retry = raw::produce(&mut leader, "orders", 0, batch).await;
    assert_eq!(
        (retry.error_code(), retry.base_offset),
        (ErrorCode::None, 5),
        "answered with the original offset"
    );
    assert_eq!(produce(&mut leader, 6).await, (ErrorCode::None, 6));
    assert_eq!(
        raw::values(&raw::read_partition(&mut leader, "orders", 0).await),
        expected(7),
        "r5 once"
    );
}

#[tokio::test]
async fn given_a_paused_leader_when_it_resumes_then_it_accepts_no_write_for_its_old_epoch_and_nothing_is_lost(
) {
    let mut cluster = replicated_cluster().await;
    let old = cluster.leader_of("orders", 0).await;
    let mut old_leader = raw::connect(&cluster.broker(old.leader_id).bootstrap()).await;
    for seq in 0..10 {
        assert_eq!(
            produce(&mut old_leader, seq).await,
            (ErrorCode::None, i64::from(seq))
        );
    }
    cluster.pause(old.leader_id);
    let new = cluster.new_leader("orders", 0, &old).await;
    let mut leader = raw::connect(&cluster.broker(new.leader_id).bootstrap()).await;
    for seq in 10..20 {
        assert_eq!(
            produce(&mut leader, seq).await,
            (ErrorCode::None, i64::from(seq))
        );
    }
    cluster.resume(old.leader_id);
    // Straight after waking up, the old leader must refuse: its lease is known lapsed.
    let zombie = raw::produce(
        &mut old_leader,
        "orders",
        0,
        raw::idempotent_batch(PRODUCER + 1, 0, 0, &["zombie"]),
    )
    .await;
    assert_eq!(
        zombie.error_code(),
        ErrorCode::NotLeaderOrFollower,
        "{}",
        zombie.error_message
    );
    cluster
        .wait_for(new.leader_id, "orders", 0, |p| p.isr.len() == 3)
        .await;
    assert_eq!(
        raw::values(&raw::read_partition(&mut leader, "orders", 0).await),
        expected(20)
    );
    cluster.stop_all();
    assert_eq!(cluster.compare_replicas("orders", 0, 20), 20);
}
