//! Offsets by timestamp (issue 30's ListOffsets by timestamp): the SDK's
//! `Admin::offset_for_timestamp`, confluent-kafka's `offsets_for_times` and kcat's
//! `-o s@TIME` find the first record, by offset, whose timestamp is at or after the one
//! asked for, across segments and with timestamps out of order; a time past every
//! record finds nothing; and a record of an open transaction is found by a
//! read_uncommitted lookup only, until the transaction commits.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_client::{
    Admin, Isolation, NewTopic, OffsetAndTimestamp, Producer, ProducerConfig, ProducerRecord,
};
use idem_tests::kafka_clients::{kcat, python};
use idem_tests::txn;
use idem_tests::Cluster;

const TOPIC: &str = "timeline";
const RECORDS: i64 = 40;

/// A day ahead: no marker or broker clock ever reaches these timestamps, so only the
/// records written here can answer a lookup.
fn base_ms() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX / 2) + 86_400_000
}

/// Record `i`'s timestamp: 10 ms apart, except record 20, from the future, and record
/// 21, from the past (producers set timestamps; nothing orders them).
fn timestamp_of(base: i64, i: i64) -> i64 {
    match i {
        20 => base + 100_000,
        21 => base + 5,
        _ => base + 10 * i,
    }
}

/// The definition: the first offset, in order, whose timestamp reaches `target`.
fn expected(base: i64, target: i64) -> Option<OffsetAndTimestamp> {
    (0..RECORDS)
        .find(|i| timestamp_of(base, *i) >= target)
        .map(|i| OffsetAndTimestamp {
            offset: i,
            timestamp_ms: timestamp_of(base, i),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_records_with_timestamps_out_of_order_when_looked_up_by_time_then_the_sdk_and_kafka_clients_find_the_first_at_or_after(
) {
    let cluster = Cluster::start(1, &["--kafka-listen", "127.0.0.1:0"]);
    let bootstrap = cluster.bootstrap();
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    // 1 KiB segments: the 40 records span several, and a lookup picks among them.
    admin
        .create_topic_with(NewTopic::new(TOPIC, 1).config("segment.bytes", "1024"))
        .await
        .expect("topic created");
    let base = base_ms();
    let producer = Producer::connect(ProducerConfig::new(&bootstrap))
        .await
        .expect("producer");
    for i in 0..RECORDS {
        let record = ProducerRecord {
            timestamp_ms: Some(timestamp_of(base, i)),
            ..ProducerRecord::new(TOPIC, format!("r{i}")).partition(0)
        };
        // One at a time: one batch per record, so segments roll between them.
        producer
            .send_record(record)
            .await
            .expect("queued")
            .await
            .expect("acknowledged");
    }
    let sealed = std::fs::read_dir(cluster.broker(1).data_dir().join(format!("{TOPIC}-0")))
        .expect("partition dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log"))
        })
        .count();
    assert!(sealed >= 3, "the records span {sealed} segment(s)");

    let targets = [
        base - 1_000,
        base,
        base + 4,
        base + 55,
        base + 195,
        base + 201,
        base + 99_999,
        base + 100_000,
        base + 100_001,
    ];
    for target in targets {
        for isolation in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
            let found = admin
                .offset_for_timestamp(TOPIC, 0, target, isolation)
                .await
                .expect("looked up");
            assert_eq!(found, expected(base, target), "target {target}");
        }
    }
    // base + 201 is past record 20's neighbours but before record 20 (base + 100 000):
    // the first by offset is record 20, not record 22.
    assert_eq!(expected(base, base + 201).map(|f| f.offset), Some(20));

    // confluent-kafka (ListOffsets with a timestamp through the Kafka listener).
    let kafka = cluster.broker(1).kafka_bootstrap();
    let target_args: Vec<String> = targets.iter().map(ToString::to_string).collect();
    let mut args = vec![kafka.as_str(), TOPIC, "0", "read_committed"];
    args.extend(target_args.iter().map(String::as_str));
    let answered = python("offsets_for_times.py", &args).await;
    let want: Vec<i64> = targets
        .iter()
        .map(|t| expected(base, *t).map_or(-1, |f| f.offset))
        .collect();
    assert_eq!(answered["offsets"], serde_json::json!(want), "{answered}");

    // kcat starts reading at a time.
    let from = format!("s@{}", base + 55);
    let read = kcat(
        &[
            "-C", "-b", &kafka, "-t", TOPIC, "-p", "0", "-o", &from, "-e", "-f", "%o %s\n",
        ],
        "",
    )
    .await;
    let first = read.lines().next().unwrap_or_default();
    assert_eq!(first, "6 r6", "{read}");
    assert_eq!(read.lines().count(), (RECORDS - 6) as usize, "{read}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_open_transaction_when_its_record_is_looked_up_by_time_then_only_read_uncommitted_finds_it_until_the_commit(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &[], &[]).await;
    let bootstrap = cluster.bootstrap();
    cluster.create_topic(TOPIC, 1, 1).await;
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    let base = base_ms();
    let producer = txn::producer(&bootstrap, "timeline-writer").await;
    producer.begin().expect("begin");
    let record = ProducerRecord {
        timestamp_ms: Some(base),
        ..ProducerRecord::new(TOPIC, "pending").partition(0)
    };
    producer
        .send(record)
        .await
        .expect("send")
        .await
        .expect("appended");
    // Offset 0 is the transaction's BEGIN marker, the record is at 1.
    let pending = Some(OffsetAndTimestamp {
        offset: 1,
        timestamp_ms: base,
    });
    let lookup = |isolation| {
        let admin = &admin;
        async move {
            admin
                .offset_for_timestamp(TOPIC, 0, base - 10, isolation)
                .await
                .expect("looked up")
        }
    };
    assert_eq!(lookup(Isolation::ReadUncommitted).await, pending);
    assert_eq!(
        lookup(Isolation::ReadCommitted).await,
        None,
        "an uncommitted record is past the last stable offset"
    );
    producer.commit().await.expect("committed");
    txn::wait_until_stable(&bootstrap, TOPIC, &[0]).await;
    assert_eq!(lookup(Isolation::ReadCommitted).await, pending);
}
