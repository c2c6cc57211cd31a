//! Replicated partitions: followers copy the leader's batches at the leader's offsets;
//! acks=all answers only once every in-sync replica has the batch; a follower that
//! stops fetching leaves the ISR, and with fewer in-sync replicas than
//! min.insync.replicas an acks=all produce is refused before anything is written; a
//! follower that comes back catches up and rejoins. Afterwards every replica's log is
//! identical up to the high watermark.

use std::time::{Duration, Instant};

use idem_proto::v1::{CreatableTopic, CreateTopicsRequest, MetadataRequest, PartitionMetadata};
use idem_proto::ErrorCode;
use idem_tests::etcd::EtcdServer;
use idem_tests::raw::{self, RawClient};
use idem_tests::replicas::{compare_replicas, stop_all};
use idem_tests::BrokerProcess;

fn cluster(etcd: &EtcdServer) -> Vec<BrokerProcess> {
    (1..=3)
        .map(|id| {
            let id = id.to_string();
            BrokerProcess::start_with(&[
                "--id",
                &id,
                "--etcd",
                &etcd.endpoint(),
                "--lease-ttl-ms",
                "2000",
                "--replica-lag-time-max-ms",
                "1000",
            ])
        })
        .collect()
}

async fn partition_metadata(client: &mut RawClient) -> PartitionMetadata {
    let answer = client
        .metadata(MetadataRequest {
            topics: vec!["orders".into()],
        })
        .await
        .expect("Metadata")
        .into_inner();
    answer.topics[0]
        .partitions
        .first()
        .cloned()
        .expect("partition 0")
}

/// Waits (bounded) until the leader reports an ISR of `size`: ISR changes are decided
/// on the leader's clock and published through etcd.
async fn wait_for_isr(client: &mut RawClient, size: usize) -> PartitionMetadata {
    let started = Instant::now();
    loop {
        let p = partition_metadata(client).await;
        if p.isr.len() == size {
            return p;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "ISR never reached {size}: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create_replicated_topic(client: &mut RawClient) {
    let answer = client
        .create_topics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: "orders".into(),
                num_partitions: 1,
                replication_factor: 3,
            }],
        })
        .await
        .expect("CreateTopics")
        .into_inner();
    assert_eq!(
        answer.topics[0].error_code(),
        ErrorCode::None,
        "{}",
        answer.topics[0].error_message
    );
}

async fn produce_range(leader: &mut RawClient, producer_id: i64, from: i32, to: i32) {
    for seq in from..to {
        let value = format!("r{seq}");
        let answer = raw::produce(
            leader,
            "orders",
            0,
            raw::idempotent_batch(producer_id, 0, seq, &[&value]),
        )
        .await;
        assert_eq!(
            (answer.error_code(), answer.error_message.as_str()),
            (ErrorCode::None, ""),
            "seq {seq}"
        );
        assert_eq!(answer.base_offset, i64::from(seq));
    }
}

#[tokio::test]
async fn given_three_replicas_when_acks_all_produce_then_every_replica_holds_the_same_log() {
    let etcd = EtcdServer::start();
    let mut brokers = cluster(&etcd);
    let mut any = raw::connect(&brokers[0].bootstrap()).await;
    create_replicated_topic(&mut any).await;
    let meta = wait_for_isr(&mut any, 3).await;
    assert_eq!(meta.replicas.len(), 3);
    let leader_index = (meta.leader_id - 1) as usize;
    let mut leader = raw::connect(&brokers[leader_index].bootstrap()).await;
    produce_range(&mut leader, 5, 0, 100).await;
    let meta = partition_metadata(&mut leader).await;
    assert_eq!(
        meta.high_watermark, 100,
        "acks=all answered only after every ISR member had it"
    );
    assert_eq!(
        raw::read_partition(&mut leader, "orders", 0).await.len(),
        100
    );
    stop_all(&mut brokers);
    assert_eq!(compare_replicas(&brokers, "orders", 0, 100), 100);
}

#[tokio::test]
async fn given_followers_down_then_the_isr_shrinks_acks_all_is_refused_below_min_isr_and_returning_followers_rejoin(
) {
    let etcd = EtcdServer::start();
    let mut brokers = cluster(&etcd);
    let mut any = raw::connect(&brokers[0].bootstrap()).await;
    create_replicated_topic(&mut any).await;
    let meta = wait_for_isr(&mut any, 3).await;
    let leader_index = (meta.leader_id - 1) as usize;
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader_index).collect();
    let mut leader = raw::connect(&brokers[leader_index].bootstrap()).await;
    produce_range(&mut leader, 7, 0, 10).await;

    brokers[followers[0]].kill();
    let meta = wait_for_isr(&mut leader, 2).await;
    assert!(!meta.isr.contains(&(followers[0] as i32 + 1)));
    produce_range(&mut leader, 7, 10, 20).await; // 2 in sync = min.insync.replicas

    brokers[followers[1]].kill();
    let meta = wait_for_isr(&mut leader, 1).await;
    let before = (meta.high_watermark, meta.log_end_offset);
    let refused = raw::produce(
        &mut leader,
        "orders",
        0,
        raw::idempotent_batch(7, 0, 20, &["r20"]),
    )
    .await;
    assert_eq!(
        refused.error_code(),
        ErrorCode::NotEnoughReplicas,
        "{}",
        refused.error_message
    );
    let meta = partition_metadata(&mut leader).await;
    assert_eq!(
        (meta.high_watermark, meta.log_end_offset),
        before,
        "nothing was appended or made visible"
    );

    brokers[followers[0]].restart();
    brokers[followers[1]].restart();
    wait_for_isr(&mut leader, 3).await;
    produce_range(&mut leader, 7, 20, 30).await; // the refused sequence 20 was never written
    let values = raw::values(&raw::read_partition(&mut leader, "orders", 0).await);
    let expected: Vec<String> = (0..30).map(|i| format!("r{i}")).collect();
    assert_eq!(values, expected);
    stop_all(&mut brokers);
    assert_eq!(compare_replicas(&brokers, "orders", 0, 30), 30);
}
