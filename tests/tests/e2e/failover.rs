//! Leader failover: when a leader's lease lapses, an in-sync follower takes over with
//! `leader_epoch + 1` by compare-and-swap; every acknowledged record survives, a retry
//! of a batch the dead leader had replicated is answered with its original offset, a
//! paused leader that comes back accepts no write for its old epoch, and a returning
//! replica cuts any tail the new leader lacks so all replicas agree.

use std::time::{Duration, Instant};

use idem_proto::v1::{CreatableTopic, CreateTopicsRequest, MetadataRequest, PartitionMetadata};
use idem_proto::ErrorCode;
use idem_tests::etcd::EtcdServer;
use idem_tests::raw::{self, RawClient};
use idem_tests::replicas::{compare_replicas, stop_all};
use idem_tests::{BrokerProcess, FaultyProxy};

const PRODUCER: i64 = 11;

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
            ])
        })
        .collect()
}

async fn metadata_from(broker: &BrokerProcess) -> Option<PartitionMetadata> {
    let mut client = raw::connect(&broker.bootstrap()).await;
    let answer = client
        .metadata(MetadataRequest {
            topics: vec!["orders".into()],
        })
        .await
        .ok()?
        .into_inner();
    answer.topics.first()?.partitions.first().cloned()
}

/// Waits (bounded) until `observer` reports a leader other than `old` with an epoch
/// above `old_epoch`: the lease lapses on etcd's clock, then a follower takes over.
async fn wait_for_new_leader(
    observer: &BrokerProcess,
    old: i32,
    old_epoch: i32,
) -> PartitionMetadata {
    let started = Instant::now();
    loop {
        if let Some(p) = metadata_from(observer).await {
            if p.leader_id != old && p.leader_epoch > old_epoch {
                return p;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no new leader was elected"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_for_isr(observer: &BrokerProcess, size: usize) -> PartitionMetadata {
    let started = Instant::now();
    loop {
        if let Some(p) = metadata_from(observer).await {
            if p.isr.len() == size {
                return p;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "ISR never reached {size}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn setup() -> (EtcdServer, Vec<BrokerProcess>, PartitionMetadata) {
    let etcd = EtcdServer::start();
    let brokers = cluster(&etcd);
    let mut any = raw::connect(&brokers[0].bootstrap()).await;
    let answer = any
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
    assert_eq!(answer.topics[0].error_code(), ErrorCode::None);
    let meta = wait_for_isr(&brokers[0], 3).await;
    (etcd, brokers, meta)
}

fn index_of(broker_id: i32) -> usize {
    (broker_id - 1) as usize
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

#[tokio::test]
async fn given_the_leader_killed_then_an_isr_follower_takes_over_and_nothing_acknowledged_is_lost()
{
    let (_etcd, mut brokers, meta) = setup().await;
    let old = meta.leader_id;
    let mut leader = raw::connect(&brokers[index_of(old)].bootstrap()).await;
    for seq in 0..20 {
        assert_eq!(
            produce(&mut leader, seq).await,
            (ErrorCode::None, i64::from(seq))
        );
    }
    brokers[index_of(old)].kill();
    let observer = brokers
        .iter()
        .position(|b| b.is_running())
        .expect("a live broker");
    let new = wait_for_new_leader(&brokers[observer], old, meta.leader_epoch).await;
    assert_eq!(new.leader_epoch, meta.leader_epoch + 1);
    let mut leader = raw::connect(&brokers[index_of(new.leader_id)].bootstrap()).await;
    for seq in 20..30 {
        assert_eq!(
            produce(&mut leader, seq).await,
            (ErrorCode::None, i64::from(seq))
        );
    }
    let values = raw::values(&raw::read_partition(&mut leader, "orders", 0).await);
    assert_eq!(values, (0..30).map(|i| format!("r{i}")).collect::<Vec<_>>());

    brokers[index_of(old)].restart();
    wait_for_isr(&brokers[index_of(new.leader_id)], 3).await;
    stop_all(&mut brokers);
    assert_eq!(compare_replicas(&brokers, "orders", 0, 30), 30);
}

#[tokio::test]
async fn given_a_replicated_batch_whose_leader_died_before_answering_then_the_retry_on_the_new_leader_gets_the_original_offset(
) {
    let (_etcd, mut brokers, meta) = setup().await;
    let old = meta.leader_id;
    let mut leader = raw::connect(&brokers[index_of(old)].bootstrap()).await;
    for seq in 0..5 {
        assert_eq!(
            produce(&mut leader, seq).await,
            (ErrorCode::None, i64::from(seq))
        );
    }
    // The answer to seq 5 is lost on the way back; acks=all means it was replicated.
    let proxy = FaultyProxy::start(brokers[index_of(old)].addr()).await;
    let mut through_proxy = raw::connect(&proxy.bootstrap()).await;
    proxy.lose_next_responses(1);
    let batch = raw::idempotent_batch(PRODUCER, 0, 5, &["r5"]);
    let lost = through_proxy
        .produce(idem_proto::v1::ProduceRequest {
            acks: -1,
            timeout_ms: 30_000,
            transactional_id: String::new(),
            topics: vec![idem_proto::v1::TopicProduceData {
                name: "orders".into(),
                partitions: vec![idem_proto::v1::PartitionProduceData {
                    partition: 0,
                    records: batch.clone(),
                }],
            }],
        })
        .await;
    assert!(lost.is_err(), "the response was lost");
    assert_eq!(proxy.lost_responses(), 1);
    brokers[index_of(old)].kill();
    let observer = brokers
        .iter()
        .position(|b| b.is_running())
        .expect("a live broker");
    let new = wait_for_new_leader(&brokers[observer], old, meta.leader_epoch).await;
    let mut leader = raw::connect(&brokers[index_of(new.leader_id)].bootstrap()).await;
    let retry = raw::produce(&mut leader, "orders", 0, batch).await;
    assert_eq!(
        (retry.error_code(), retry.base_offset),
        (ErrorCode::None, 5),
        "answered with the original offset"
    );
    assert_eq!(produce(&mut leader, 6).await, (ErrorCode::None, 6));
    let values = raw::values(&raw::read_partition(&mut leader, "orders", 0).await);
    assert_eq!(
        values,
        (0..7).map(|i| format!("r{i}")).collect::<Vec<_>>(),
        "r5 exactly once"
    );
}

#[tokio::test]
async fn given_a_paused_leader_when_it_resumes_then_it_accepts_no_write_for_its_old_epoch_and_nothing_is_lost(
) {
    let (_etcd, mut brokers, meta) = setup().await;
    let old = meta.leader_id;
    let mut old_leader = raw::connect(&brokers[index_of(old)].bootstrap()).await;
    for seq in 0..10 {
        assert_eq!(
            produce(&mut old_leader, seq).await,
            (ErrorCode::None, i64::from(seq))
        );
    }
    brokers[index_of(old)].pause();
    let observer = (0..3)
        .find(|i| *i != index_of(old))
        .expect("another broker");
    let new = wait_for_new_leader(&brokers[observer], old, meta.leader_epoch).await;
    let mut leader = raw::connect(&brokers[index_of(new.leader_id)].bootstrap()).await;
    for seq in 10..20 {
        assert_eq!(
            produce(&mut leader, seq).await,
            (ErrorCode::None, i64::from(seq))
        );
    }
    brokers[index_of(old)].resume();
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
    wait_for_isr(&brokers[index_of(new.leader_id)], 3).await;
    let values = raw::values(&raw::read_partition(&mut leader, "orders", 0).await);
    assert_eq!(values, (0..20).map(|i| format!("r{i}")).collect::<Vec<_>>());
    stop_all(&mut brokers);
    assert_eq!(compare_replicas(&brokers, "orders", 0, 20), 20);
}
