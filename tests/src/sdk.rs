//! SDK helpers for end-to-end tests: producers configured for fault injection and a
//! reader that returns everything a read-committed consumer sees.

use std::time::Duration;

use crate::{raw, BrokerProcess, FaultyProxy};
use bytes::Bytes;
use idem_client::{
    Consumer, ConsumerConfig, ConsumerRecord, Delivery, Isolation, Producer, ProducerConfig,
};

/// A producer whose every record travels as its own batch (so each send is one
/// request) with short timeouts, so injected faults resolve quickly.
pub async fn one_record_per_batch(bootstrap: &str, delivery: Delivery) -> Producer {
    let config = ProducerConfig {
        linger: Duration::ZERO,
        batch_size: 1,
        request_timeout: Duration::from_secs(5),
        retry_backoff: Duration::from_millis(20),
        delivery_timeout: Duration::from_secs(60),
        ..ProducerConfig::new(bootstrap).with_delivery(delivery)
    };
    Producer::connect(config).await.expect("producer connects")
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
