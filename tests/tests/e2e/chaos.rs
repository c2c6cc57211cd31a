//! Exactly-once through leader failures: an idempotent producer sends continuously with
//! acks=all to a 3-broker cluster while the leader of a partition is SIGKILLed and
//! restarted, three times. Afterwards every acknowledged record is read back exactly
//! once, in send order per partition, and every replica's log is identical. A
//! divergent tail (acks=1 writes only the dead leader had) is cut when it returns, and
//! a whole-cluster kill and restart brings back all data and producer state.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use idem_client::{Delivery, Producer, ProducerConfig, RecordMetadata};
use idem_proto::v1::{PartitionProduceData, ProduceRequest, TopicProduceData};
use idem_proto::ErrorCode;
use idem_tests::raw::{self, RawClient};
use idem_tests::wait::{seen_if, wait_until};
use idem_tests::{sdk, Cluster};

const RECORDS: usize = 3000;
const KILLS: usize = 3;
/// The producer's default delivery timeout: every record sent is acknowledged or failed
/// within it, so a producer that acknowledges nothing for that long is stuck.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn given_an_idempotent_producer_when_the_leader_is_killed_three_times_then_each_acked_record_is_read_once_in_order(
) {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_topic("orders", 3, 3).await;
    for partition in 0..3 {
        cluster.leader_of("orders", partition).await;
    }
    let config = ProducerConfig {
        linger: Duration::from_millis(2),
        batch_size: 2048,
        request_timeout: Duration::from_secs(5),
        retry_backoff: Duration::from_millis(50),
        ..ProducerConfig::new(cluster.broker(1).bootstrap()).with_delivery(Delivery::ExactlyOnce)
    };
    let producer = Producer::connect(config).await.expect("producer");
    let acked_count = Arc::new(AtomicUsize::new(0));
    let sending = {
        let producer = producer.clone();
        let acked_count = acked_count.clone();
        tokio::spawn(async move {
            let mut window = std::collections::VecDeque::new();
            let mut acked: Vec<(String, RecordMetadata)> = Vec::new();
            let mut failed = Vec::new();
            let mut settle =
                |value: String, result: Result<RecordMetadata, idem_client::ClientError>| {
                    match result {
                        Ok(written) => {
                            acked_count.fetch_add(1, Ordering::SeqCst);
                            acked.push((value, written));
                        }
                        Err(e) => failed.push(format!("{value}: {e}")),
                    }
                };
            for i in 0..RECORDS {
                let value = format!("{i:05}");
                let partition = (i % 3) as i32;
                let delivery = producer
                    .send_to("orders", partition, None, Bytes::from(value.clone()))
                    .await
                    .expect("send accepted");
                window.push_back((value, delivery));
                if window.len() > 30 {
                    let (value, delivery) = window.pop_front().expect("window");
                    settle(value, delivery.await);
                }
            }
            for (value, delivery) in window {
                settle(value, delivery.await);
            }
            (acked, failed)
        })
    };

    for kill in 0..KILLS {
        // Let some records through between faults.
        let target = (kill + 1) * RECORDS / (KILLS + 2);
        let what = format!("{target} records acknowledged");
        wait_until(DELIVERY_TIMEOUT, &what, || async {
            assert!(!sending.is_finished(), "the producer stopped early");
            let acked = acked_count.load(Ordering::SeqCst);
            seen_if(acked, acked >= target)
        })
        .await;
        let before = cluster.leader_of("orders", 0).await;
        cluster.kill(before.leader_id);
        cluster.new_leader("orders", 0, &before).await;
        cluster.restart(before.leader_id);
    }
    let (acked, failed) = sending.await.expect("sending task");
    producer.close().await;
    assert!(
        failed.is_empty(),
        "with a 120 s delivery timeout nothing fails: {failed:?}"
    );
    assert_eq!(acked.len(), RECORDS);

    let log = sdk::read_all(&cluster.broker(1).bootstrap(), "orders", &[0, 1, 2]).await;
    sdk::assert_exactly_once(&acked, &log);
    for partition in 0..3 {
        cluster.leader_of("orders", partition).await;
    }
    cluster.stop_all();
    for partition in 0..3 {
        let batches = cluster.compare_replicas("orders", partition, (RECORDS / 3) as i64);
        assert!(batches > 0, "partition {partition} holds batches");
    }
}

async fn produce_acks(client: &mut RawClient, acks: i32, seq: i32) -> (ErrorCode, i64) {
    let value = format!("r{seq}");
    let response = client
        .produce(ProduceRequest {
            acks,
            timeout_ms: 10_000,
            coordinator_epoch: None,
            topics: vec![TopicProduceData {
                name: "events".into(),
                partitions: vec![PartitionProduceData {
                    partition: 0,
                    records: raw::idempotent_batch(21, 0, seq, &[&value]),
                }],
            }],
        })
        .await
        .expect("Produce")
        .into_inner();
    let p = &response.topics[0].partitions[0];
    (p.error_code(), p.base_offset)
}

#[tokio::test]
async fn given_acks_1_writes_only_the_leader_had_when_it_dies_and_returns_then_its_tail_is_cut_and_replicas_agree(
) {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_topic("events", 1, 3).await;
    let old = cluster.leader_of("events", 0).await;
    let followers: Vec<i32> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != old.leader_id)
        .collect();
    let mut client = raw::connect(&cluster.broker(old.leader_id).bootstrap()).await;
    for seq in 0..5 {
        assert_eq!(
            produce_acks(&mut client, -1, seq).await,
            (ErrorCode::None, i64::from(seq))
        );
    }
    // Followers frozen (shorter than their lease and the ISR lag limit): the leader
    // takes two acks=1 writes nobody else gets, then dies.
    for f in &followers {
        cluster.pause(*f);
    }
    assert_eq!(produce_acks(&mut client, 1, 5).await, (ErrorCode::None, 5));
    assert_eq!(produce_acks(&mut client, 1, 6).await, (ErrorCode::None, 6));
    cluster.kill(old.leader_id);
    for f in &followers {
        cluster.resume(*f);
    }
    let new = cluster.new_leader("events", 0, &old).await;
    let mut client = raw::connect(&cluster.broker(new.leader_id).bootstrap()).await;
    // The new leader's log ends at 5; the producer's sequence 5 is the next one there.
    assert_eq!(produce_acks(&mut client, -1, 5).await, (ErrorCode::None, 5));
    cluster.restart(old.leader_id);
    cluster
        .wait_for(new.leader_id, "events", 0, |p| p.isr.len() == 3)
        .await;
    let values = raw::values(&raw::read_partition(&mut client, "events", 0).await);
    assert_eq!(values, vec!["r0", "r1", "r2", "r3", "r4", "r5"]);
    cluster.stop_all();
    assert_eq!(cluster.compare_replicas("events", 0, 6), 6);
    // Nothing of the cut tail survives on the old leader either.
    let dir = cluster.broker(old.leader_id).data_dir().join("events-0");
    assert_eq!(idem_tests::replicas::batches_on_disk(&dir).len(), 6);
}

#[tokio::test]
async fn given_the_whole_cluster_killed_when_restarted_then_all_acked_data_and_producer_state_are_back(
) {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_topic("events", 1, 3).await;
    let meta = cluster.leader_of("events", 0).await;
    let mut client = raw::connect(&cluster.broker(meta.leader_id).bootstrap()).await;
    for seq in 0..20 {
        assert_eq!(
            produce_acks(&mut client, -1, seq).await,
            (ErrorCode::None, i64::from(seq))
        );
    }
    for id in cluster.ids() {
        cluster.kill(id);
    }
    for id in cluster.ids() {
        cluster.restart(id);
    }
    let meta = cluster.leader_of("events", 0).await;
    let mut client = raw::connect(&cluster.broker(meta.leader_id).bootstrap()).await;
    // The last batch is still recognised as a duplicate: producer state came back.
    assert_eq!(
        produce_acks(&mut client, -1, 19).await,
        (ErrorCode::None, 19)
    );
    assert_eq!(
        produce_acks(&mut client, -1, 20).await,
        (ErrorCode::None, 20)
    );
    let values = raw::values(&raw::read_partition(&mut client, "events", 0).await);
    assert_eq!(values, (0..21).map(|i| format!("r{i}")).collect::<Vec<_>>());
}
