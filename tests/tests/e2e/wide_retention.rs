//! Retention at 200 partitions: a replicated topic of 200 partitions, each written past
//! its `retention.bytes`, moves every partition's log start on every replica, and a
//! consumer of all 200 from earliest reads exactly each partition's retained suffix, in
//! order, as written.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use idem_client::{
    Admin, Consumer, ConsumerConfig, Isolation, NewTopic, OffsetSpec, Producer, ProducerConfig,
    ProducerRecord,
};
use idem_tests::segments::stored_log_start;
use idem_tests::wait::{seen_if, wait_until};
use idem_tests::Cluster;

const TOPIC: &str = "wide-retention";
const PARTITIONS: i32 = 200;
const REPLICAS: i32 = 3;
const RECORD_BYTES: usize = 512;
/// About 7 records a segment, a retention of about 3 segments; 40 records a partition
/// is about 2.5 times the retention.
const SEGMENT_BYTES: u64 = 4096;
const RETENTION_BYTES: u64 = 3 * SEGMENT_BYTES;
const RECORDS: i64 = 40;

/// `p{partition}-{n}` padded to [`RECORD_BYTES`].
fn value(partition: i32, n: i64) -> String {
    let head = format!("p{partition:03}-{n:06}-");
    format!("{head}{}", "x".repeat(RECORD_BYTES - head.len()))
}

/// Writes [`RECORDS`] records to every partition (idempotent, acks=all, one producer, so
/// record `n` of a partition is at offset `n`), partition by partition interleaved.
async fn write_past_retention(bootstrap: &str) {
    // Batches below the segment size, so segments are what `segment.bytes` says.
    let config = ProducerConfig {
        batch_size: 2 * RECORD_BYTES,
        ..ProducerConfig::new(bootstrap)
    };
    let producer = Producer::connect(config).await.expect("producer connects");
    let mut deliveries = Vec::new();
    for n in 0..RECORDS {
        for p in 0..PARTITIONS {
            let record = ProducerRecord::new(TOPIC, value(p, n)).partition(p);
            deliveries.push((p, n, producer.send_record(record).await.expect("send")));
        }
    }
    for (p, n, delivery) in deliveries {
        let offset = delivery.await.expect("acknowledged").offset;
        assert_eq!(offset, n, "partition {p}: record {n} at offset {offset}");
    }
    producer.close().await;
}

/// Each partition's log start once every replica persisted the one the leader answers
/// to ListOffsets(earliest), all past 0.
async fn log_starts_on_every_replica(cluster: &Cluster, admin: &Admin) -> Vec<i64> {
    let (starts, _) = wait_until(
        Duration::from_secs(30),
        "every partition's log start moved alike on every replica",
        || async move {
            let mut starts = Vec::with_capacity(PARTITIONS as usize);
            let mut behind = Vec::new();
            for p in 0..PARTITIONS {
                let earliest = admin
                    .list_offsets(TOPIC, p, OffsetSpec::Earliest, Isolation::ReadUncommitted)
                    .await
                    .unwrap_or(-1);
                let stored: Vec<i64> = cluster
                    .ids()
                    .iter()
                    .map(|id| stored_log_start(cluster.broker(*id).data_dir(), TOPIC, p))
                    .collect();
                if earliest <= 0 || stored.iter().any(|s| *s != earliest) {
                    behind.push((p, earliest, stored));
                }
                starts.push(earliest);
            }
            let first_few: Vec<_> = behind.iter().take(5).collect();
            seen_if(
                (
                    starts,
                    format!("{} behind, e.g. {first_few:?}", behind.len()),
                ),
                behind.is_empty(),
            )
        },
    )
    .await;
    starts.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_200_replicated_partitions_written_past_their_retention_then_every_replica_moves_every_log_start_and_a_consumer_reads_exactly_the_retained_suffixes(
) {
    let started = Instant::now();
    let cluster = Cluster::start(REPLICAS, &["--log-retention-check-interval-ms", "100"]);
    let bootstrap = cluster.bootstrap();
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    admin
        .create_topic_with(
            NewTopic::new(TOPIC, PARTITIONS)
                .replication_factor(REPLICAS)
                .config("segment.bytes", &SEGMENT_BYTES.to_string())
                .config("retention.bytes", &RETENTION_BYTES.to_string()),
        )
        .await
        .expect("create");
    write_past_retention(&bootstrap).await;
    let written = started.elapsed();

    let starts = log_starts_on_every_replica(&cluster, &admin).await;
    let settled = started.elapsed();
    for (p, start) in starts.iter().enumerate() {
        assert!(
            *start < RECORDS,
            "partition {p}: retention deleted the active segment too (start {start})"
        );
    }

    let config = ConsumerConfig {
        isolation: Isolation::ReadUncommitted,
        max_wait: Duration::from_millis(50),
        start: OffsetSpec::Earliest,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::connect(&bootstrap, config)
        .await
        .expect("consumer connects");
    consumer.assign((0..PARTITIONS).map(|p| (TOPIC.to_string(), p)).collect());
    let wanted: i64 = starts.iter().map(|start| RECORDS - start).sum();
    let mut next: HashMap<i32, i64> = (0..PARTITIONS).map(|p| (p, starts[p as usize])).collect();
    let mut read = 0;
    while read < wanted {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "read {read} of {wanted} retained records"
        );
        for record in consumer.poll(Duration::from_secs(5)).await.expect("poll") {
            let p = record.partition;
            let expected = next.get_mut(&p).expect("an assigned partition");
            assert_eq!(
                record.offset, *expected,
                "partition {p}: dense, in order, from its log start"
            );
            assert_eq!(
                idem_tests::sdk::value(&record),
                value(p, record.offset),
                "partition {p} offset {}",
                record.offset
            );
            *expected += 1;
            read += 1;
        }
    }
    let extra = consumer
        .poll(Duration::from_millis(200))
        .await
        .expect("poll");
    assert!(extra.is_empty(), "read past the end: {extra:?}");
    assert!((0..PARTITIONS).all(|p| next.get(&p) == Some(&RECORDS)));
    eprintln!(
        "{PARTITIONS} partitions x {REPLICAS} replicas: written {written:?}, log starts settled \
         {settled:?}, retained suffixes ({wanted} records) read by {:?}",
        started.elapsed()
    );
}
