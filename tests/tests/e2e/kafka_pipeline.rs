//! Kafka's exactly-once consume-transform-produce (KIP-447) works unchanged against idem
//! (issue 30): a processor built only from confluent-kafka (`tests/kafka_clients/
//! transform.py`: a KIP-848 group consumer reading committed, a transactional producer,
//! `send_offsets_to_transaction`) is SIGKILLed inside a transaction whose outputs are
//! already written, at both points a crash can leave one open; a new instance under the
//! same transactional id fences it, its transaction is aborted, and the group resumes
//! from the offsets of the last committed transaction. Every input has exactly one
//! output visible to read_committed, in input order per partition.

use std::collections::BTreeMap;
use std::time::Duration;

use idem_tests::kafka_clients::kcat_read;
use idem_tests::kafka_groups::{Events, GroupConsumer};
use idem_tests::txn;
use idem_tests::Cluster;
use serde_json::Value;

use crate::kafka_groups::{committed, produce};

const KAFKA_LISTEN: [&str; 2] = ["--kafka-listen", "127.0.0.1:0"];

/// A killed processor's partitions go to its successor once its session expires.
const SHORT_SESSION: [&str; 2] = ["--group-session-timeout-ms", "6000"];

const PARTITIONS: i32 = 4;
const PER_PARTITION: usize = 150;

/// How long one processor may take to get its partitions and work through the input.
const PROCESS_PATIENCE: Duration = Duration::from_secs(120);

/// The inputs of every `committed` line of `events`, as (partition, offset, value).
fn committed_inputs(events: &Events) -> Vec<(i64, i64, String)> {
    events
        .lines
        .iter()
        .filter_map(|line| line.get("committed").and(line.get("inputs")))
        .flat_map(|inputs| inputs.as_array().cloned().unwrap_or_default())
        .map(|input| {
            (
                input[0].as_i64().expect("partition"),
                input[1].as_i64().expect("offset"),
                input[2].as_str().expect("value").to_string(),
            )
        })
        .collect()
}

/// The line a processor printed before it SIGKILLed itself, or a panic with its events.
fn dying_line(events: &Events) -> Value {
    events
        .lines
        .iter()
        .find(|line| line.get("dying").is_some())
        .cloned()
        .unwrap_or_else(|| panic!("the processor did not die where told: {:?}", events.lines))
}

/// Runs one processor instance until it dies (with `die`) or, with the `earlier`
/// instances, has committed every input's last offset (without), and returns its
/// events.
async fn run_instance(kafka: &str, die: Option<&str>, earlier: &[&Events]) -> Events {
    let settings: Vec<&str> = die.into_iter().collect();
    let mut processor = GroupConsumer::start_transform(
        kafka,
        "enrich",
        ("orders", "enriched"),
        "enrich-1",
        &settings,
    );
    match die {
        Some(_) => {
            let events = processor
                .wait_for(PROCESS_PATIENCE, "its death", |e| e.ended)
                .await;
            dying_line(&events);
            events
        }
        None => {
            // It commits the rest: the killed instances committed the inputs before
            // theirs (a partition may have been finished by one of them).
            let before: Vec<(i64, i64, String)> =
                earlier.iter().flat_map(|e| committed_inputs(e)).collect();
            processor
                .wait_for(
                    PROCESS_PATIENCE,
                    "every input's last offset committed",
                    |e| {
                        let mut last: BTreeMap<i64, i64> = BTreeMap::new();
                        for (partition, offset, _) in
                            before.iter().cloned().chain(committed_inputs(e))
                        {
                            let at = last.entry(partition).or_insert(offset);
                            *at = (*at).max(offset);
                        }
                        last.len() == PARTITIONS as usize
                            && last.values().all(|o| *o as usize == PER_PARTITION - 1)
                    },
                )
                .await;
            processor.close().await
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_kafka_processor_sigkilled_mid_transaction_twice_when_restarted_then_each_input_has_exactly_one_committed_output(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &SHORT_SESSION).await;
    cluster.create_topic("orders", PARTITIONS, 1).await;
    cluster.create_topic("enriched", PARTITIONS, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    produce(&kafka, "orders", PARTITIONS, PER_PARTITION, 0).await;

    // Instance 1 dies in its third transaction after sending the offsets; instance 2
    // in its second, after writing the outputs but before sending the offsets;
    // instance 3 finishes. Each next instance's init_transactions fences the one
    // before and aborts its open transaction.
    let first = run_instance(&kafka, Some("die=3:offsets"), &[]).await;
    let second = run_instance(&kafka, Some("die=2:outputs"), &[&first]).await;
    let third = run_instance(&kafka, None, &[&first, &second]).await;

    // The killed transactions held outputs (flushed, so written to the log).
    for events in [&first, &second] {
        let dying = dying_line(events);
        assert_eq!(dying["unsent"], Value::from(0), "{dying}");
        assert!(
            !dying["inputs"].as_array().expect("inputs").is_empty(),
            "{dying}"
        );
    }

    let grpc = cluster.bootstrap();
    let partitions: Vec<i32> = (0..PARTITIONS).collect();
    txn::wait_until_stable(&grpc, "enriched", &partitions).await;
    let mut written_twice = 0;
    for partition in 0..PARTITIONS {
        let want: Vec<String> = (0..PER_PARTITION)
            .map(|i| format!("out-{partition}-{i}"))
            .collect();
        let read: Vec<String> = kcat_read(&kafka, "enriched", partition, "read_committed")
            .await
            .into_iter()
            .map(|(_, value)| value)
            .collect();
        assert_eq!(read, want, "partition {partition} read committed");
        let uncommitted = kcat_read(&kafka, "enriched", partition, "read_uncommitted")
            .await
            .len();
        written_twice += uncommitted - PER_PARTITION;
    }
    // The aborted transactions' outputs are in the log: read_committed left them out.
    let aborted: usize = [&first, &second]
        .iter()
        .map(|e| dying_line(e)["inputs"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(written_twice, aborted);
    // Each input committed by exactly one instance, once.
    let mut by_input = BTreeMap::new();
    for events in [&first, &second, &third] {
        for (_, _, value) in committed_inputs(events) {
            *by_input.entry(value).or_insert(0) += 1;
        }
    }
    assert_eq!(by_input.len(), PARTITIONS as usize * PER_PARTITION);
    assert!(by_input.values().all(|n| *n == 1), "{by_input:?}");
    assert_eq!(
        committed(&kafka, "enrich", "orders", PARTITIONS).await,
        vec![PER_PARTITION as i64; PARTITIONS as usize]
    );
}
