//! Guarantee: the log's lifecycle keeps exactly-once. DeleteRecords moves a partition's
//! log start on its leader and every replica, never past what may go; a topic grown with
//! CreatePartitions takes records on its new partitions while an exactly-once producer
//! keeps every acknowledged record once, in order. Bad input is refused by name and
//! changes nothing.

use std::time::Duration;

use idem_client::{
    Admin, ClientError, ConsumerRecord, Isolation, OffsetSpec, Producer, ProducerConfig,
    ProducerRecord, RecordMetadata,
};
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::v1::{
    ControlType, CreatePartitionsRequest, CreatePartitionsTopic, DeleteRecordsPartition,
    DeleteRecordsPartitionResult, DeleteRecordsRequest, DeleteRecordsTopic,
};
use idem_proto::ErrorCode;
use idem_tests::cli::idem;
use idem_tests::raw::{self, RawClient};
use idem_tests::sdk::{assert_exactly_once, read_all};
use idem_tests::segments::stored_log_start;
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::{BrokerProcess, Cluster};

/// One DeleteRecords of one partition, sent to exactly this broker.
async fn delete_records_at(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    offset: i64,
) -> DeleteRecordsPartitionResult {
    let answer = client
        .delete_records(DeleteRecordsRequest {
            topics: vec![DeleteRecordsTopic {
                name: topic.into(),
                partitions: vec![DeleteRecordsPartition { partition, offset }],
            }],
        })
        .await
        .expect("DeleteRecords")
        .into_inner();
    answer.topics[0].partitions[0].clone()
}

fn code(result: &Result<impl std::fmt::Debug, ClientError>) -> Option<ErrorCode> {
    match result {
        Ok(_) => Some(ErrorCode::None),
        Err(ClientError::UnknownTopic { .. }) => Some(ErrorCode::UnknownTopicOrPartition),
        Err(e) => e.code(),
    }
}

async fn earliest(admin: &Admin, topic: &str, partition: i32) -> i64 {
    admin
        .list_offsets(
            topic,
            partition,
            OffsetSpec::Earliest,
            Isolation::ReadUncommitted,
        )
        .await
        .expect("list offsets")
}

/// Sends `values` to `topic`-`partition` one acknowledged record at a time.
async fn produce_values(bootstrap: &str, topic: &str, partition: i32, values: &[String]) {
    let producer = Producer::connect(ProducerConfig {
        linger: Duration::ZERO,
        ..ProducerConfig::new(bootstrap)
    })
    .await
    .expect("producer");
    for v in values {
        let record = ProducerRecord::new(topic, v.clone()).partition(partition);
        producer
            .send_record(record)
            .await
            .expect("send")
            .await
            .expect("acknowledged");
    }
    producer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_replicated_partition_when_records_are_deleted_then_every_replica_starts_there_and_bad_requests_change_nothing(
) {
    const TOPIC: &str = "trimmed";
    let cluster = Cluster::start(3, &[]);
    cluster.create_topic(TOPIC, 1, 3).await;
    let leader = cluster.leader_of(TOPIC, 0).await.leader_id;
    let follower = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let bootstrap = cluster.bootstrap();
    let values: Vec<String> = (0..20).map(|n| format!("v{n:02}")).collect();
    produce_values(&bootstrap, TOPIC, 0, &values).await;
    let admin = Admin::connect(&bootstrap).await.expect("admin");

    assert_eq!(admin.delete_records(TOPIC, 0, 8).await.expect("deleted"), 8);
    assert_eq!(earliest(&admin, TOPIC, 0).await, 8);
    let every_replica_at = |start: i64| {
        let cluster = &cluster;
        async move {
            wait_until(
                PATIENCE,
                &format!("every replica starts at {start}"),
                || async {
                    let starts: Vec<i64> = cluster
                        .ids()
                        .iter()
                        .map(|id| stored_log_start(cluster.broker(*id).data_dir(), TOPIC, 0))
                        .collect();
                    seen_if(starts.clone(), starts.iter().all(|s| *s == start))
                },
            )
            .await;
        }
    };
    every_replica_at(8).await;

    // Below the start: refused, naming the start; from it: exactly the rest.
    let mut at_leader = raw::connect(&cluster.broker(leader).bootstrap()).await;
    let below = raw::fetch(&mut at_leader, TOPIC, 0, 3).await;
    assert_eq!(below.error_code(), ErrorCode::OffsetOutOfRange);
    assert_eq!(below.log_start_offset, 8);
    let rest = raw::read_partition(&mut at_leader, TOPIC, 0).await;
    assert_eq!(
        rest.iter().map(|r| r.offset).collect::<Vec<_>>(),
        (8..20).collect::<Vec<_>>()
    );
    assert_eq!(raw::values(&rest), values[8..]);

    // Bad input: each refused with its code; the start stays 8 everywhere.
    let refused = [
        (
            admin.delete_records(TOPIC, 0, 21).await,
            ErrorCode::OffsetOutOfRange,
            "high watermark 20",
        ),
        (
            admin.delete_records(TOPIC, 0, -5).await,
            ErrorCode::OffsetOutOfRange,
            "-5",
        ),
        (
            admin.delete_records("missing", 0, 1).await,
            ErrorCode::UnknownTopicOrPartition,
            "missing",
        ),
        (
            admin.delete_records(TOPIC, 7, 1).await,
            ErrorCode::UnknownTopicOrPartition,
            "7",
        ),
    ];
    for (result, expected, named) in &refused {
        assert_eq!(code(result), Some(*expected), "{result:?}");
        let message = format!("{:?}", result.as_ref().expect_err("refused"));
        assert!(message.contains(named), "{named:?} missing from {message}");
    }
    // An internal topic, asked of a broker directly (the SDK finds no leader for one
    // no coordinator created).
    let internal = delete_records_at(&mut at_leader, TXN_LOG_TOPIC, 0, 1).await;
    assert_eq!(
        internal.error_code(),
        ErrorCode::InvalidTopicException,
        "{}",
        internal.error_message
    );
    assert!(
        internal.error_message.contains("internal"),
        "{}",
        internal.error_message
    );
    // The broker's own answer for what the SDK's metadata already refuses.
    for (topic, partition) in [("missing", 0), (TOPIC, 7)] {
        let unknown = delete_records_at(&mut at_leader, topic, partition, 1).await;
        assert_eq!(unknown.error_code(), ErrorCode::UnknownTopicOrPartition);
    }
    let mut at_follower = raw::connect(&cluster.broker(follower).bootstrap()).await;
    let misrouted = delete_records_at(&mut at_follower, TOPIC, 0, 12).await;
    assert_eq!(
        misrouted.error_code(),
        ErrorCode::NotLeaderOrFollower,
        "{}",
        misrouted.error_message
    );
    assert_eq!(misrouted.low_watermark, -1);
    // Less than is gone: nothing moves, the answer is the start.
    assert_eq!(admin.delete_records(TOPIC, 0, 3).await.expect("no-op"), 8);
    assert_eq!(earliest(&admin, TOPIC, 0).await, 8);
    for id in cluster.ids() {
        assert_eq!(
            stored_log_start(cluster.broker(id).data_dir(), TOPIC, 0),
            8,
            "broker {id}"
        );
    }

    // -1: everything replicated.
    assert_eq!(
        admin.delete_records(TOPIC, 0, -1).await.expect("deleted"),
        20
    );
    every_replica_at(20).await;
    let none = raw::fetch(&mut at_leader, TOPIC, 0, 20).await;
    assert_eq!(none.error_code(), ErrorCode::None);
    assert!(none.records.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_open_transaction_when_records_are_deleted_then_its_records_stay_until_it_ends() {
    const TOPIC: &str = "txn-trimmed";
    const PRODUCER: i64 = 91;
    let broker = BrokerProcess::start();
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut client, TOPIC, 1).await,
        ErrorCode::None
    );
    for seq in 0..4 {
        let plain = raw::produce(
            &mut client,
            TOPIC,
            0,
            raw::idempotent_batch(7, 0, seq, &["p"]),
        )
        .await;
        assert_eq!(plain.error_code(), ErrorCode::None);
    }
    let (began, _) =
        raw::write_marker_at_0(&mut client, TOPIC, PRODUCER, ControlType::Begin, 0).await;
    assert_eq!(began, ErrorCode::None);
    let open = raw::produce(
        &mut client,
        TOPIC,
        0,
        raw::transactional_batch(PRODUCER, 0, 0, &["t0", "t1"]),
    )
    .await;
    assert_eq!(open.error_code(), ErrorCode::None, "{}", open.error_message);
    let admin = Admin::connect(&broker.bootstrap()).await.expect("admin");
    let stable = admin
        .list_offsets(TOPIC, 0, OffsetSpec::Latest, Isolation::ReadCommitted)
        .await
        .expect("last stable offset");
    let high_watermark = admin
        .list_offsets(TOPIC, 0, OffsetSpec::Latest, Isolation::ReadUncommitted)
        .await
        .expect("high watermark");
    assert!(stable < high_watermark, "{stable} < {high_watermark}");

    let refused = admin.delete_records(TOPIC, 0, high_watermark).await;
    assert_eq!(code(&refused), Some(ErrorCode::OffsetOutOfRange));
    let message = format!("{:?}", refused.expect_err("refused"));
    assert!(
        message.contains(&format!("last stable offset {stable}")),
        "{message}"
    );
    assert_eq!(earliest(&admin, TOPIC, 0).await, 0, "nothing moved");
    assert_eq!(
        admin
            .delete_records(TOPIC, 0, -1)
            .await
            .expect("up to the open transaction"),
        stable
    );

    let (committed, _) =
        raw::write_marker_at_0(&mut client, TOPIC, PRODUCER, ControlType::Commit, 1).await;
    assert_eq!(committed, ErrorCode::None);
    wait_until(PATIENCE, "the last stable offset passes the commit", || {
        let admin = &admin;
        async move {
            let stable = admin
                .list_offsets(TOPIC, 0, OffsetSpec::Latest, Isolation::ReadCommitted)
                .await
                .unwrap_or(-1);
            seen_if(stable, stable > high_watermark)
        }
    })
    .await;
    assert_eq!(
        admin
            .delete_records(TOPIC, 0, high_watermark)
            .await
            .expect("the transaction ended"),
        high_watermark
    );
}

/// Sends `count` records numbered from `first` (every third unkeyed, the rest keyed by
/// one of 16 keys, which map to each of 4 partitions) without naming a partition;
/// returns each with its acknowledgement.
async fn send_numbered(
    producer: &Producer,
    topic: &str,
    first: usize,
    count: usize,
) -> Vec<(String, RecordMetadata)> {
    let mut pending = Vec::with_capacity(count);
    for n in first..first + count {
        let value = format!("v{n:06}");
        let record = ProducerRecord::new(topic, value.clone());
        let record = if n % 3 == 0 {
            record
        } else {
            record.key(format!("key-{}", n % 16))
        };
        pending.push((value, producer.send_record(record).await.expect("send")));
    }
    let mut acked = Vec::with_capacity(count);
    for (value, delivery) in pending {
        acked.push((value, delivery.await.expect("acknowledged")));
    }
    acked
}

/// The partitions of `topic` that the broker at `bootstrap` lists with a leader.
async fn led_partitions(bootstrap: &str, topic: &str) -> Vec<i32> {
    let admin = Admin::connect(bootstrap).await.expect("admin");
    let Ok(metadata) = admin.metadata(&[topic]).await else {
        return Vec::new();
    };
    let mut led: Vec<i32> = metadata
        .topic(topic)
        .map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.leader_id >= 0)
                .map(|p| p.partition)
                .collect()
        })
        .unwrap_or_default();
    led.sort_unstable();
    led
}

/// What growth must keep, on `bootstraps` (every broker): an exactly-once producer
/// sending through the change reaches the new partitions and every acknowledged record
/// is read back once, in order; then bad requests change nothing.
async fn grow_while_producing(bootstraps: &[String], max_partitions: i32) {
    const TOPIC: &str = "growing";
    let bootstrap = bootstraps.join(",");
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    // Small batches, so unkeyed records move on from their sticky partition.
    let producer = Producer::connect(ProducerConfig {
        linger: Duration::from_millis(1),
        batch_size: 512,
        metadata_max_age: Duration::from_millis(200),
        ..ProducerConfig::new(bootstrap.clone())
    })
    .await
    .expect("producer");
    let acked = send_numbered(&producer, TOPIC, 0, 300).await;
    assert!(acked.iter().all(|(_, m)| m.partition < 2));

    admin.create_partitions(TOPIC, 4).await.expect("grown");
    for b in bootstraps {
        wait_until(PATIENCE, &format!("{b} lists 4 led partitions"), || async {
            let led = led_partitions(b, TOPIC).await;
            seen_if(led.clone(), led == [0, 1, 2, 3])
        })
        .await;
    }
    // The producer keeps going; its metadata refresh brings the new partitions in.
    let sent = std::sync::Mutex::new(acked);
    let (_, took) = wait_until(PATIENCE, "records reach partitions 2 and 3", || {
        let (producer, sent) = (&producer, &sent);
        async move {
            let first = sent.lock().expect("acks").len();
            let more = send_numbered(producer, TOPIC, first, 50).await;
            let mut acked = sent.lock().expect("acks");
            acked.extend(more);
            let reached: Vec<i32> = [2, 3]
                .into_iter()
                .filter(|p| acked.iter().any(|(_, m)| m.partition == *p))
                .collect();
            seen_if(reached.clone(), reached == [2, 3])
        }
    })
    .await;
    let mut acked = sent.into_inner().expect("acks");
    let first = acked.len();
    acked.extend(send_numbered(&producer, TOPIC, first, 200).await);
    producer.close().await;
    eprintln!(
        "new partitions in use after {took:?}; {} records acknowledged",
        acked.len()
    );

    let log: Vec<ConsumerRecord> = read_all(&bootstrap, TOPIC, &[0, 1, 2, 3]).await;
    assert_exactly_once(&acked, &log);
    for p in 0..4 {
        assert!(
            log.iter().any(|r| r.partition == p),
            "partition {p} holds records"
        );
    }

    // Bad input: refused by name, the count stays 4.
    let refusals = [
        (
            admin.create_partitions(TOPIC, 2).await,
            ErrorCode::InvalidPartitions,
            "has 4 partitions",
        ),
        (
            admin.create_partitions(TOPIC, 4).await,
            ErrorCode::InvalidPartitions,
            "has 4 partitions",
        ),
        (
            admin.create_partitions(TOPIC, max_partitions + 1).await,
            ErrorCode::InvalidPartitions,
            "between 1 and",
        ),
        (
            admin.create_partitions(TXN_LOG_TOPIC, 64).await,
            ErrorCode::InvalidTopicException,
            "internal",
        ),
        (
            admin.create_partitions("missing", 4).await,
            ErrorCode::UnknownTopicOrPartition,
            "missing",
        ),
    ];
    for (result, expected, named) in &refusals {
        assert_eq!(code(result), Some(*expected), "{result:?}");
        let message = format!("{:?}", result.as_ref().expect_err("refused"));
        assert!(message.contains(named), "{named:?} missing from {message}");
    }
    admin
        .validate_create_partitions(TOPIC, 6)
        .await
        .expect("6 would do");
    for b in bootstraps {
        assert_eq!(led_partitions(b, TOPIC).await, [0, 1, 2, 3], "broker {b}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_three_brokers_when_a_topic_grows_under_an_exactly_once_producer_then_new_partitions_take_records_and_each_is_read_once(
) {
    let cluster = Cluster::start(3, &["--max-partitions-per-topic", "8"]);
    cluster.create_topic("growing", 2, 3).await;
    cluster.leader_of("growing", 0).await;
    cluster.leader_of("growing", 1).await;
    let bootstraps: Vec<String> = cluster
        .ids()
        .into_iter()
        .map(|id| cluster.broker(id).bootstrap())
        .collect();
    grow_while_producing(&bootstraps, 8).await;
    // Laid out like creation: every new partition on all three brokers.
    for p in [2, 3] {
        let seen = cluster.leader_of("growing", p).await;
        assert_eq!(seen.replicas.len(), 3, "{seen:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_single_broker_when_a_topic_grows_under_an_exactly_once_producer_then_new_partitions_take_records_and_a_restart_keeps_them(
) {
    let mut broker = BrokerProcess::start_with(&["--max-partitions-per-topic", "8"]);
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut client, "growing", 2).await,
        ErrorCode::None
    );
    grow_while_producing(&[broker.bootstrap()], 8).await;
    broker.kill();
    broker.restart();
    let led = led_partitions(&broker.bootstrap(), "growing").await;
    assert_eq!(led, [0, 1, 2, 3], "topics.json kept the count");
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert!(!raw::read_partition(&mut client, "growing", 3)
        .await
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_many_new_partitions_at_once_then_every_one_is_created_and_led() {
    // More partitions than one etcd transaction takes: written in chunks, count last.
    let cluster = Cluster::start(1, &[]);
    cluster.create_topic("wide", 1, 1).await;
    let mut client = raw::connect(&cluster.bootstrap()).await;
    let answer = client
        .create_partitions(CreatePartitionsRequest {
            topics: vec![CreatePartitionsTopic {
                name: "wide".into(),
                count: 150,
            }],
            validate_only: false,
        })
        .await
        .expect("CreatePartitions")
        .into_inner();
    assert_eq!(
        answer.topics[0].error_code(),
        ErrorCode::None,
        "{}",
        answer.topics[0].error_message
    );
    let led = led_partitions(&cluster.bootstrap(), "wide").await;
    assert_eq!(led, (0..150).collect::<Vec<_>>());
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_cli_when_records_are_deleted_and_partitions_added_then_describe_shows_both() {
    const TOPIC: &str = "cli-growth";
    let broker = BrokerProcess::start();
    let bootstrap = broker.bootstrap();
    let run = |args: &[&str]| idem(&bootstrap, args);
    let created = run(&["topic", "create", TOPIC, "--partitions", "1"]);
    assert!(created.status.success(), "{}", stderr(&created));
    let values: Vec<String> = (0..5).map(|n| format!("c{n}")).collect();
    produce_values(&bootstrap, TOPIC, 0, &values).await;

    let deleted = run(&[
        "topic",
        "delete-records",
        TOPIC,
        "--partition",
        "0",
        "--offset",
        "3",
    ]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    assert!(
        stdout(&deleted).contains("the log starts at 3"),
        "{}",
        stdout(&deleted)
    );
    let refused = run(&[
        "topic",
        "delete-records",
        TOPIC,
        "--partition",
        "0",
        "--offset",
        "99",
    ]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("OffsetOutOfRange")
            && stderr(&refused).contains("high watermark 5"),
        "{}",
        stderr(&refused)
    );
    let all = run(&[
        "topic",
        "delete-records",
        TOPIC,
        "--partition",
        "0",
        "--offset",
        "-1",
    ]);
    assert!(
        stdout(&all).contains("the log starts at 5"),
        "{}{}",
        stdout(&all),
        stderr(&all)
    );

    let grown = run(&["topic", "add-partitions", TOPIC, "--partitions", "3"]);
    assert!(grown.status.success(), "{}", stderr(&grown));
    assert!(
        stdout(&grown).contains("now has 3 partition(s)"),
        "{}",
        stdout(&grown)
    );
    let shrink = run(&["topic", "add-partitions", TOPIC, "--partitions", "2"]);
    assert!(!shrink.status.success());
    assert!(
        stderr(&shrink).contains("InvalidPartitions")
            && stderr(&shrink).contains("has 3 partitions"),
        "{}",
        stderr(&shrink)
    );
    let described = stdout(&run(&["topic", "describe", TOPIC]));
    assert!(described.contains("3 partition(s)"), "{described}");
    let first = described
        .lines()
        .find(|l| l.split_whitespace().next() == Some("0"))
        .expect("partition 0 listed");
    let columns: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(columns[5], "5", "log_start of partition 0 in {first:?}");
}
