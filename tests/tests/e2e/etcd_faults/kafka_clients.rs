//! Kafka clients through an etcd restart (issue 30): a confluent-kafka transactional
//! producer and an idempotent one, both through the brokers' Kafka listeners, run while
//! the only etcd member is killed for longer than the lease TTL and restarted. Every
//! broker gives up its lease, partitions lose their leaders, coordinators their slices;
//! librdkafka retries through it. Once etcd is back everything serves again within the
//! bound, every transaction commits once, the idempotent producer's records are each
//! read once in order, and no transaction hangs.

use std::time::{Duration, Instant};

use idem_client::Admin;
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_tests::kafka_clients::{kcat_read, python, TransactionalSession};
use idem_tests::{txn, Cluster};
use serde_json::{json, Value};

use super::{LEASE_TTL, RECOVERY_MARGIN};
use crate::kafka::kcat_metadata;

const KAFKA_LISTEN: [&str; 2] = ["--kafka-listen", "127.0.0.1:0"];
/// librdkafka gives each record and transaction this long: an outage plus recovery
/// fits in it, so nothing is failed on the client's side.
const SETTINGS: [&str; 2] = ["transaction.timeout.ms=45000", "message.timeout.ms=45000"];
/// Past the lease TTL: every process gives its lease up by its own clock.
const OUTAGE: Duration = Duration::from_secs(5);
const TXN_TOPIC: &str = "kafka-txn";
const IDEMPOTENT_TOPIC: &str = "kafka-idempotent";

fn committed_transaction(round: usize) -> Vec<Value> {
    let mut steps = vec![json!(["begin", "p"])];
    for partition in 0..3 {
        steps.push(json!([
            "produce",
            "p",
            TXN_TOPIC,
            partition,
            format!("t{round}-p{partition}")
        ]));
    }
    steps.push(json!(["commit", "p"]));
    steps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_kafka_clients_producing_when_etcd_is_killed_and_restarted_then_every_commit_and_record_lands_once(
) {
    let mut cluster = Cluster::start_with_etcd_members(1, 3, 2, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic(TXN_TOPIC, 3, 3).await;
    cluster.create_topic(IDEMPOTENT_TOPIC, 3, 3).await;
    for partition in 0..3 {
        cluster.leader_of(TXN_TOPIC, partition).await;
        cluster.leader_of(IDEMPOTENT_TOPIC, partition).await;
    }
    let kafka = cluster.broker(1).kafka_bootstrap();

    // One committed transaction before the fault, four through and after it.
    let mut steps = vec![json!(["init", "p", "kafka-etcd-writer"])];
    steps.extend(committed_transaction(0));
    steps.push(json!(["wait"]));
    for round in 1..5 {
        steps.extend(committed_transaction(round));
    }
    let mut session = TransactionalSession::start(&kafka, &Value::Array(steps), &SETTINGS);
    let before = session.until_waiting().await;
    assert!(before.iter().all(|s| s["ok"] == json!(true)), "{before:?}");

    // 400 records/s for 14 s over 3 partitions, from 1 s before the outage to well
    // after it; the script reads everything back read_committed when done.
    let idempotent = {
        let kafka = kafka.clone();
        let mut args = vec![
            kafka.clone(),
            IDEMPOTENT_TOPIC.to_string(),
            "3".into(),
            "14".into(),
            "100".into(),
            "400".into(),
        ];
        args.extend(SETTINGS.map(String::from));
        tokio::spawn(async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            python("timed_produce.py", &args).await
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;

    cluster.etcd(0).kill();
    // The outage's length is the fault under test; recovery is awaited after it. The
    // next transactions start once every lease has lapsed, so they meet a cluster
    // without leaders or coordinators, and retry through the rest of the outage.
    tokio::time::sleep(LEASE_TTL + Duration::from_secs(1)).await;
    session.proceed().await;
    tokio::time::sleep(OUTAGE - LEASE_TTL - Duration::from_secs(1)).await;
    cluster.etcd(0).restart();
    let healed = Instant::now();

    let bound = LEASE_TTL + RECOVERY_MARGIN;
    cluster.wait_until_every_slice_served(healed, bound).await;
    cluster
        .wait_until_every_broker_serving(
            &[TXN_TOPIC, IDEMPOTENT_TOPIC, TXN_LOG_TOPIC],
            healed,
            bound,
        )
        .await;
    eprintln!("serving again {:?} after etcd restarted", healed.elapsed());

    let (after, reports) = session.finish().await;
    assert!(after.iter().all(|s| s["ok"] == json!(true)), "{after:?}");
    assert_eq!(reports.len(), 15, "{reports:?}");
    assert!(reports.iter().all(|r| r["error"].is_null()), "{reports:?}");

    let produced = idempotent.await.expect("the idempotent producer ran");
    eprintln!("idempotent producer: {produced}");
    assert_eq!(produced["failed"], json!(0), "{produced}");
    assert_eq!(produced["unflushed"], json!(0), "{produced}");
    assert_eq!(produced["lost"], json!(0), "{produced}");
    assert_eq!(produced["duplicated"], json!(0), "{produced}");
    assert_eq!(produced["reordered"], json!(0), "{produced}");
    assert_eq!(produced["read"], produced["records"], "{produced}");
    assert!(
        produced["records"].as_u64().unwrap_or(0) >= 5000,
        "the producer sent through the whole window: {produced}"
    );

    let grpc = cluster.bootstrap();
    txn::wait_until_stable(&grpc, TXN_TOPIC, &[0, 1, 2]).await;
    for partition in 0..3 {
        let expected: Vec<String> = (0..5)
            .map(|round| format!("t{round}-p{partition}"))
            .collect();
        let read: Vec<String> = kcat_read(&kafka, TXN_TOPIC, partition, "read_committed")
            .await
            .into_iter()
            .map(|(_, value)| value)
            .collect();
        assert_eq!(
            read, expected,
            "partition {partition}: each commit once, in order"
        );
    }
    let admin = Admin::connect(&grpc).await.expect("admin connects");
    let hanging = admin
        .find_hanging(Duration::from_secs(300))
        .await
        .expect("find-hanging asks every broker and coordinator");
    assert!(hanging.is_empty(), "hanging transactions: {hanging:?}");
    // Kafka metadata names every broker by its Kafka address again, and every
    // partition has a leader.
    let metadata = kcat_metadata(&kafka).await;
    let mut named: Vec<(i64, String)> = metadata["brokers"]
        .as_array()
        .expect("brokers")
        .iter()
        .map(|b| {
            (
                b["id"].as_i64().unwrap_or(-1),
                b["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    named.sort();
    let expected: Vec<(i64, String)> = (1..=3)
        .map(|id| (i64::from(id), cluster.broker(id).kafka_bootstrap()))
        .collect();
    assert_eq!(named, expected, "{metadata}");
    for topic in metadata["topics"].as_array().expect("topics") {
        for partition in topic["partitions"].as_array().expect("partitions") {
            assert!(
                partition["leader"].as_i64().unwrap_or(-1) >= 1,
                "{topic}: a partition without a leader"
            );
        }
    }
}
