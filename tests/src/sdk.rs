//! SDK helpers for end-to-end tests: producers configured for fault injection and a
//! reader that returns everything a read-committed consumer sees.

use std::time::Duration;

use crate::{raw, BrokerProcess, FaultyProxy};
use bytes::Bytes;
use idem_client::{
    ClientError, Consumer, ConsumerConfig, ConsumerRecord, Delivery, Isolation, Producer,
    ProducerConfig, RecordMetadata,
};

/// A producer whose every record travels as its own batch (so each send is one
/// request) with short timeouts, so injected faults resolve quickly.
pub async fn one_record_per_batch(bootstrap: &str, delivery: Delivery) -> Producer {
    with_timeouts(
        bootstrap,
        delivery,
        Duration::from_secs(5),
        Duration::from_secs(60),
    )
    .await
}

/// [`one_record_per_batch`] with the request and delivery timeouts a test needs to
/// make the SDK give up (or not) within a fault.
pub async fn with_timeouts(
    bootstrap: &str,
    delivery: Delivery,
    request_timeout: Duration,
    delivery_timeout: Duration,
) -> Producer {
    let config = ProducerConfig {
        linger: Duration::ZERO,
        batch_size: 1,
        request_timeout,
        retry_backoff: Duration::from_millis(20),
        delivery_timeout,
        ..ProducerConfig::new(bootstrap).with_delivery(delivery)
    };
    Producer::connect(config).await.expect("producer connects")
}

/// Sends one record to one partition and waits for its outcome.
pub async fn send_one(
    producer: &Producer,
    topic: &str,
    partition: i32,
    value: &str,
) -> Result<RecordMetadata, ClientError> {
    producer
        .send_to(topic, partition, None, bytes(value))
        .await?
        .await
}

/// Every record of the given partitions from the log start to the end, read committed.
pub async fn read_all(bootstrap: &str, topic: &str, partitions: &[i32]) -> Vec<ConsumerRecord> {
    let config = ConsumerConfig {
        isolation: Isolation::ReadCommitted,
        max_wait: Duration::from_millis(50),
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::connect(bootstrap, config)
        .await
        .expect("consumer connects");
    consumer.assign(partitions.iter().map(|p| (topic.to_string(), *p)).collect());
    for p in partitions {
        consumer.seek_to_beginning(topic, *p).expect("seek");
    }
    let admin = idem_client::Admin::connect(bootstrap)
        .await
        .expect("admin connects");
    let mut ends = Vec::new();
    for p in partitions {
        let end = admin
            .list_offsets(
                topic,
                *p,
                idem_client::OffsetSpec::Latest,
                Isolation::ReadCommitted,
            )
            .await
            .expect("list offsets");
        ends.push(end);
    }
    let wanted: i64 = ends.iter().sum();
    let mut records: Vec<ConsumerRecord> = Vec::new();
    loop {
        let mut done = true;
        for (p, end) in partitions.iter().zip(&ends) {
            if consumer.position(topic, *p).await.expect("position") < *end {
                done = false;
            }
        }
        if done {
            break;
        }
        records.extend(consumer.poll(Duration::from_secs(5)).await.expect("poll"));
    }
    assert_eq!(
        records.len() as i64,
        wanted,
        "offsets are dense without transactions"
    );
    records
}

pub fn value(record: &ConsumerRecord) -> String {
    String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).into_owned()
}

pub fn bytes(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// A broker with `topic` (of `partitions` partitions) and a fault proxy in front of it.
pub async fn broker_behind_proxy(topic: &str, partitions: i32) -> (BrokerProcess, FaultyProxy) {
    let broker = BrokerProcess::start();
    let mut admin = raw::connect(&broker.bootstrap()).await;
    let created = raw::create_topic(&mut admin, topic, partitions).await;
    assert_eq!(created, idem_proto::ErrorCode::None);
    let proxy = FaultyProxy::start(broker.addr()).await;
    (broker, proxy)
}

/// What every exactly-once test checks from what a consumer reads back: each
/// acknowledged record is in the log exactly once, at the partition and offset it was
/// acknowledged with; nothing else is; and each partition holds its records in send
/// order (values are zero-padded sequence numbers, so send order is sort order).
pub fn assert_exactly_once(
    acked: &[(String, idem_client::RecordMetadata)],
    log: &[ConsumerRecord],
) {
    use std::collections::{HashMap, HashSet};
    let values: Vec<String> = log.iter().map(value).collect();
    let unique: HashSet<&String> = values.iter().collect();
    assert_eq!(unique.len(), values.len(), "no record is duplicated");
    assert_eq!(values.len(), acked.len(), "nothing missing, nothing extra");
    let by_position: HashMap<(i32, i64), &str> = log
        .iter()
        .zip(&values)
        .map(|(r, v)| ((r.partition, r.offset), v.as_str()))
        .collect();
    for (sent, written) in acked {
        assert_eq!(
            by_position.get(&(written.partition, written.offset)),
            Some(&sent.as_str())
        );
    }
    let partitions: HashSet<i32> = log.iter().map(|r| r.partition).collect();
    for partition in partitions {
        let in_log: Vec<&String> = log
            .iter()
            .zip(&values)
            .filter(|(r, _)| r.partition == partition)
            .map(|(_, v)| v)
            .collect();
        let mut sorted = in_log.clone();
        sorted.sort();
        assert_eq!(
            in_log, sorted,
            "partition {partition} holds its records in send order"
        );
    }
}
