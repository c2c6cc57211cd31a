//! Retention on real brokers: a replicated topic written far past its retention bytes
//! keeps a bounded log on every replica, all replicas move their log start alike, a
//! consumer below the start gets OFFSET_OUT_OF_RANGE (or resets when asked to), and an
//! idle idempotent producer whose records retention deleted sends again and has its
//! retry deduplicated, also across a restart and a leader change (KAFKA-7190).
//!
//! The brokers take the retention defaults as flags (`--log-retention-bytes`), which is
//! what a topic without its own `retention.bytes` gets.

use std::path::Path;
use std::time::Duration;

use idem_client::{
    Admin, Consumer, ConsumerConfig, Isolation, OffsetSpec, Producer, ProducerConfig,
    ProducerRecord,
};
use idem_proto::ErrorCode;
use idem_tests::raw;
use idem_tests::segments::stored_log_start;
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::{BrokerProcess, Cluster};

const SEGMENT_BYTES: u64 = 16 * 1024;
const RETENTION_BYTES: u64 = 64 * 1024;
const RECORD_BYTES: usize = 1024;

fn retention_flags() -> Vec<String> {
    [
        "--segment-bytes",
        &SEGMENT_BYTES.to_string(),
        "--log-retention-bytes",
        &RETENTION_BYTES.to_string(),
        "--log-retention-check-interval-ms",
        "100",
    ]
    .map(String::from)
    .to_vec()
}

/// Sizes of the segment files of `topic`-`partition` in a broker's data dir, oldest
/// first (file names are zero-padded base offsets).
fn segment_sizes(data_dir: &Path, topic: &str, partition: i32) -> Vec<u64> {
    let dir = data_dir.join(format!("{topic}-{partition}"));
    let mut segments: Vec<(String, u64)> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
                .filter_map(|e| {
                    Some((
                        e.file_name().to_string_lossy().into_owned(),
                        e.metadata().ok()?.len(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    segments.sort();
    segments.into_iter().map(|(_, len)| len).collect()
}

/// Whether size retention of `limit` bytes has nothing left to delete in partition 0 of
/// `topic`: the log without its oldest segment would be under the limit.
fn at_rest(data_dir: &Path, topic: &str, limit: u64) -> bool {
    let sizes = segment_sizes(data_dir, topic, 0);
    let total: u64 = sizes.iter().sum();
    total - sizes.first().copied().unwrap_or(0) < limit
}

fn log_bytes(data_dir: &Path, topic: &str, partition: i32) -> u64 {
    segment_sizes(data_dir, topic, partition).iter().sum()
}

fn value(n: usize) -> String {
    let head = format!("r{n:06}-");
    format!("{head}{}", "x".repeat(RECORD_BYTES - head.len()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_replicated_topic_written_ten_times_past_its_retention_then_every_replica_stays_bounded_and_starts_alike(
) {
    const TOPIC: &str = "bounded";
    let flags = retention_flags();
    let cluster = Cluster::start(3, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    cluster.create_topic(TOPIC, 1, 3).await;
    let bootstrap = cluster.bootstrap();
    let (offsets, largest) = write_ten_times_the_retention(&cluster, TOPIC).await;
    // Retention acts while the writes go on: no replica ever held half of what was
    // written. (3x the retention held in quiet runs; with the suite's other tests
    // running, a replica reached 242 KiB once: the duty's 100 ms ticks run late under
    // load, so the bound while writing is about volume, not timing.)
    assert!(
        largest <= 5 * RETENTION_BYTES,
        "a replica held {largest} bytes while 10x {RETENTION_BYTES} were written"
    );
    let end = offsets.last().copied().expect("records") + 1;
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    // At rest: no replica may drop another segment (the log without its oldest one
    // would be under the limit) and every replica starts where the leader does.
    let ((start, _), _) = wait_until(
        PATIENCE,
        "every replica at rest at the leader's start",
        || {
            let admin = &admin;
            let cluster = &cluster;
            async move {
                let leader = admin
                    .list_offsets(TOPIC, 0, OffsetSpec::Earliest, Isolation::ReadUncommitted)
                    .await
                    .unwrap_or(-1);
                let replicas: Vec<(i64, bool)> = cluster
                    .ids()
                    .iter()
                    .map(|id| {
                        let dir = cluster.broker(*id).data_dir();
                        (
                            stored_log_start(dir, TOPIC, 0),
                            at_rest(dir, TOPIC, RETENTION_BYTES),
                        )
                    })
                    .collect();
                let settled = replicas
                    .iter()
                    .all(|(start, rest)| *start == leader && *rest);
                seen_if((leader, replicas), leader > 0 && settled)
            }
        },
    )
    .await;
    for id in cluster.ids() {
        let bytes = log_bytes(cluster.broker(id).data_dir(), TOPIC, 0);
        assert!(
            bytes < RETENTION_BYTES + SEGMENT_BYTES,
            "broker {id} keeps {bytes} bytes at rest"
        );
    }

    // Below the start: an error that says so, the position kept.
    let strict = ConsumerConfig {
        isolation: Isolation::ReadUncommitted,
        max_wait: Duration::from_millis(50),
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::connect(&bootstrap, strict.clone())
        .await
        .expect("consumer");
    consumer.assign(vec![(TOPIC.to_string(), 0)]);
    consumer.seek(TOPIC, 0, 0).expect("seek");
    let refused = consumer
        .poll(Duration::from_secs(5))
        .await
        .expect_err("offset 0 was deleted");
    assert_eq!(
        refused.code(),
        Some(ErrorCode::OffsetOutOfRange),
        "{refused}"
    );
    assert_eq!(consumer.position(TOPIC, 0).await.expect("position"), 0);

    // Asked to reset: it reads exactly what is left, in order, once.
    let resetting = ConsumerConfig {
        auto_offset_reset: Some(OffsetSpec::Earliest),
        ..strict
    };
    let mut consumer = Consumer::connect(&bootstrap, resetting)
        .await
        .expect("consumer");
    consumer.assign(vec![(TOPIC.to_string(), 0)]);
    consumer.seek(TOPIC, 0, 0).expect("seek");
    let mut read = Vec::new();
    while read.len() < (end - start) as usize {
        let records = consumer.poll(Duration::from_secs(5)).await.expect("poll");
        assert!(!records.is_empty(), "stalled after {} records", read.len());
        read.extend(records);
    }
    assert_eq!(read.first().map(|r| r.offset), Some(start));
    for (i, record) in read.iter().enumerate() {
        let n = offsets
            .iter()
            .position(|o| *o == record.offset)
            .expect("an acknowledged offset");
        assert_eq!(record.offset, start + i as i64, "dense and in order");
        assert_eq!(record.value.as_deref(), Some(value(n).as_bytes()));
    }
}

/// Writes 10x the retention to partition 0 of `topic`, acked in rounds of 32 records;
/// returns each record's offset and the most bytes any replica held after a round.
async fn write_ten_times_the_retention(cluster: &Cluster, topic: &str) -> (Vec<i64>, u64) {
    // Batches below the segment size, so segments are what --segment-bytes says.
    let config = ProducerConfig {
        batch_size: 8 * 1024,
        ..ProducerConfig::new(cluster.bootstrap())
    };
    let producer = Producer::connect(config).await.expect("producer");
    let total = 10 * RETENTION_BYTES as usize / RECORD_BYTES;
    let mut offsets = Vec::with_capacity(total);
    let mut largest = 0;
    for round in 0..total / 32 {
        let mut deliveries = Vec::new();
        for n in round * 32..(round + 1) * 32 {
            let record = ProducerRecord::new(topic, value(n)).partition(0);
            deliveries.push(producer.send_record(record).await.expect("send"));
        }
        for d in deliveries {
            offsets.push(d.await.expect("acknowledged").offset);
        }
        for id in cluster.ids() {
            largest = largest.max(log_bytes(cluster.broker(id).data_dir(), topic, 0));
        }
    }
    producer.close().await;
    (offsets, largest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_new_replica_behind_the_leaders_log_start_then_it_starts_there_and_joins_the_isr() {
    const TOPIC: &str = "moved";
    let flags = retention_flags();
    let mut cluster = Cluster::start(3, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    cluster.create_topic(TOPIC, 1, 2).await;
    let (offsets, _) = write_ten_times_the_retention(&cluster, TOPIC).await;
    let end = offsets.last().copied().expect("records") + 1;
    let admin = Admin::connect(&cluster.bootstrap()).await.expect("admin");
    let (start, _) = wait_until(PATIENCE, "retention moved the leader's log start", || {
        let admin = &admin;
        async move {
            let start = admin
                .list_offsets(TOPIC, 0, OffsetSpec::Earliest, Isolation::ReadUncommitted)
                .await
                .unwrap_or(-1);
            seen_if(start, start > 0)
        }
    })
    .await;
    let added = cluster.add_broker().await;
    let leader = cluster.leader_of(TOPIC, 0).await.leader_id;
    // The new replica fetches from 0, which the leader deleted long ago.
    let target = vec![leader, added];
    admin
        .alter_partition_reassignment(TOPIC, 0, &target)
        .await
        .expect("reassignment accepted");
    let moved = cluster
        .wait_for(added, TOPIC, 0, |p| {
            p.adding_replicas.is_empty() && p.replicas == target && p.isr.contains(&added)
        })
        .await;
    assert!(moved.isr.contains(&added), "{moved:?}");
    let dir = cluster.broker(added).data_dir();
    let new_start = stored_log_start(dir, TOPIC, 0);
    assert!(
        new_start >= start && new_start < end,
        "the new replica starts at {new_start}; the leader started at {start}, ends at {end}"
    );
    assert!(log_bytes(dir, TOPIC, 0) < RETENTION_BYTES + 2 * SEGMENT_BYTES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_idle_producer_whose_records_retention_deleted_then_it_sends_again_and_its_retry_is_a_duplicate(
) {
    const IDLE: i64 = 71;
    const BUSY: i64 = 72;
    let mut broker = BrokerProcess::start_with(&[
        "--segment-bytes",
        "1024",
        "--log-retention-bytes",
        "2048",
        // Size retention only: the test is about what it deletes.
        "--log-retention-ms",
        "-1",
        "--log-retention-check-interval-ms",
        "50",
    ]);
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut client, "idle", 1).await,
        ErrorCode::None
    );
    let first = raw::produce(
        &mut client,
        "idle",
        0,
        raw::idempotent_batch(IDLE, 0, 0, &["a0"]),
    )
    .await;
    assert_eq!(
        (first.error_code(), first.base_offset),
        (ErrorCode::None, 0)
    );
    let filler = "f".repeat(200);
    for seq in 0..40 {
        let answer = raw::produce(
            &mut client,
            "idle",
            0,
            raw::idempotent_batch(BUSY, 0, seq, &[&filler]),
        )
        .await;
        assert_eq!(answer.error_code(), ErrorCode::None);
    }
    let admin = Admin::connect(&broker.bootstrap()).await.expect("admin");
    wait_until(
        PATIENCE,
        "retention deleted the idle producer's record",
        || {
            let admin = &admin;
            async move {
                let start = admin
                    .list_offsets("idle", 0, OffsetSpec::Earliest, Isolation::ReadUncommitted)
                    .await
                    .unwrap_or(-1);
                seen_if(start, start > 0)
            }
        },
    )
    .await;
    // The idle producer goes on: accepted, not UNKNOWN_PRODUCER_ID or out of order.
    let next = raw::produce(
        &mut client,
        "idle",
        0,
        raw::idempotent_batch(IDLE, 0, 1, &["a1"]),
    )
    .await;
    assert_eq!(next.error_code(), ErrorCode::None, "{}", next.error_message);
    // Its response was lost and it retries: the original offset, no second copy.
    let retry = raw::produce(
        &mut client,
        "idle",
        0,
        raw::idempotent_batch(IDLE, 0, 1, &["a1"]),
    )
    .await;
    assert_eq!(
        (retry.error_code(), retry.base_offset),
        (ErrorCode::None, next.base_offset)
    );
    // And after a hard kill, with the state rebuilt from what is left on disk.
    broker.kill();
    broker.restart();
    let mut client = raw::connect(&broker.bootstrap()).await;
    let retry = raw::produce(
        &mut client,
        "idle",
        0,
        raw::idempotent_batch(IDLE, 0, 1, &["a1"]),
    )
    .await;
    assert_eq!(
        (retry.error_code(), retry.base_offset),
        (ErrorCode::None, next.base_offset),
        "the retry after the restart is still a duplicate"
    );
    let after = raw::produce(
        &mut client,
        "idle",
        0,
        raw::idempotent_batch(IDLE, 0, 2, &["a2"]),
    )
    .await;
    assert_eq!(
        after.error_code(),
        ErrorCode::None,
        "{}",
        after.error_message
    );
    // Neither retry was appended: a2 directly follows a1.
    assert_eq!(after.base_offset, next.base_offset + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_idle_producer_whose_records_retention_deleted_when_its_leader_dies_then_the_new_leader_accepts_its_next_batch_and_dedups_the_retry(
) {
    // The replicas moved their log start past the idle producer's record too; the one
    // that takes over must know its sequence from a snapshot, not from the log.
    const TOPIC: &str = "idle-failover";
    const IDLE: i64 = 81;
    const BUSY: i64 = 82;
    let mut cluster = Cluster::start(
        3,
        &[
            "--segment-bytes",
            "1024",
            "--log-retention-bytes",
            "2048",
            "--log-retention-ms",
            "-1",
            "--log-retention-check-interval-ms",
            "50",
        ],
    );
    cluster.create_topic(TOPIC, 1, 3).await;
    let old = cluster.leader_of(TOPIC, 0).await;
    let mut client = raw::connect(&cluster.broker(old.leader_id).bootstrap()).await;
    let first = raw::produce(
        &mut client,
        TOPIC,
        0,
        raw::idempotent_batch(IDLE, 0, 0, &["a0"]),
    )
    .await;
    assert_eq!(
        (first.error_code(), first.base_offset),
        (ErrorCode::None, 0),
        "{}",
        first.error_message
    );
    let filler = "f".repeat(200);
    for seq in 0..40 {
        let answer = raw::produce(
            &mut client,
            TOPIC,
            0,
            raw::idempotent_batch(BUSY, 0, seq, &[&filler]),
        )
        .await;
        assert_eq!(
            answer.error_code(),
            ErrorCode::None,
            "{}",
            answer.error_message
        );
    }
    wait_until(
        PATIENCE,
        "every replica deleted the idle producer's record",
        || {
            let cluster = &cluster;
            async move {
                let starts: Vec<i64> = cluster
                    .ids()
                    .iter()
                    .map(|id| stored_log_start(cluster.broker(*id).data_dir(), TOPIC, 0))
                    .collect();
                let moved = starts.iter().all(|s| *s > 0);
                seen_if(starts, moved)
            }
        },
    )
    .await;

    cluster.kill(old.leader_id);
    let new = cluster.new_leader(TOPIC, 0, &old).await;
    let mut client = raw::connect(&cluster.broker(new.leader_id).bootstrap()).await;
    let next = raw::produce(
        &mut client,
        TOPIC,
        0,
        raw::idempotent_batch(IDLE, 0, 1, &["a1"]),
    )
    .await;
    assert_eq!(next.error_code(), ErrorCode::None, "{}", next.error_message);
    let retry = raw::produce(
        &mut client,
        TOPIC,
        0,
        raw::idempotent_batch(IDLE, 0, 1, &["a1"]),
    )
    .await;
    assert_eq!(
        (retry.error_code(), retry.base_offset),
        (ErrorCode::None, next.base_offset),
        "the retry to the new leader is a duplicate"
    );
    let after = raw::produce(
        &mut client,
        TOPIC,
        0,
        raw::idempotent_batch(IDLE, 0, 2, &["a2"]),
    )
    .await;
    assert_eq!(
        after.error_code(),
        ErrorCode::None,
        "{}",
        after.error_message
    );
    assert_eq!(
        after.base_offset,
        next.base_offset + 1,
        "the retry was not appended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_broker_killed_while_retention_deletes_then_it_restarts_serving_every_kept_record_once(
) {
    const TOPIC: &str = "killed";
    // Retention looks every 10 ms while 1 KiB records roll 4 KiB segments: deletions
    // run all the time, so the kills land in and around them.
    let mut broker = BrokerProcess::start_with(&[
        "--segment-bytes",
        "4096",
        "--log-retention-bytes",
        "16384",
        "--log-retention-check-interval-ms",
        "10",
    ]);
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut client, TOPIC, 1).await,
        ErrorCode::None
    );
    let mut acked: Vec<(i64, String)> = Vec::new();
    for round in 0..5 {
        let config = ProducerConfig {
            batch_size: 2048,
            ..ProducerConfig::new(broker.bootstrap())
        };
        let producer = Producer::connect(config).await.expect("producer");
        let mut deliveries = Vec::new();
        for n in round * 100..(round + 1) * 100 {
            let record = ProducerRecord::new(TOPIC, value(n)).partition(0);
            deliveries.push((n, producer.send_record(record).await.expect("send")));
        }
        for (n, d) in deliveries {
            acked.push((d.await.expect("acknowledged").offset, value(n)));
        }
        broker.kill();
        broker.restart();
        wait_until(PATIENCE, "retention at rest after the restart", || {
            let rest = at_rest(broker.data_dir(), TOPIC, 16384);
            async move { seen_if(rest, rest) }
        })
        .await;
        let mut client = raw::connect(&broker.bootstrap()).await;
        let kept = raw::read_batches(&mut client, TOPIC, 0).await;
        let records: Vec<(i64, String)> = kept
            .iter()
            .flat_map(|(_, records)| records)
            .map(|r| {
                let value = r.value.as_deref().map(String::from_utf8_lossy);
                (r.offset, value.unwrap_or_default().into_owned())
            })
            .collect();
        let start = records.first().map(|r| r.0).expect("something is kept");
        let expected: Vec<(i64, String)> =
            acked.iter().filter(|(o, _)| *o >= start).cloned().collect();
        assert_eq!(
            records, expected,
            "round {round}: from the start {start}, every acknowledged record once, in order"
        );
    }
}
