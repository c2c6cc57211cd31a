//! Many transactions while partition leaders and coordinators are killed under them:
//! every committed transaction is visible exactly once and whole, no aborted record is
//! ever returned by a read_committed fetch, each partition keeps the producer's order,
//! and at the end no partition's LSO lags its high watermark. The faults land at fixed
//! points of the run (during a commit), so the checks are the same on every run. The
//! same again with pipelined commits (`commit_and_begin`): the faults land while a
//! commit goes on in the background and the next transaction's records are handed over.

use std::collections::{BTreeMap, HashMap};

use idem_client::{
    ClientError, DeliveryFuture, Isolation, ProducerRecord, TransactionalProducer, TxnErrorClass,
};
use idem_tests::txn::{self, wait_until_stable};
use idem_tests::Cluster;

const TOPICS: [&str; 2] = ["chaos-orders", "chaos-stock"];
const PARTITIONS: [i32; 2] = [0, 1];
const TRANSACTIONS: usize = 30;
const ID: &str = "chaos-writer";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Committed,
    Aborted,
    /// The producer lost track (an error on commit): all or nothing may be visible.
    Unknown,
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    KillLeader(&'static str, i32),
    KillCoordinator,
}

fn fault_at(transaction: usize) -> Option<Fault> {
    match transaction {
        4 => Some(Fault::KillLeader(TOPICS[0], 0)),
        8 => Some(Fault::KillCoordinator),
        12 => Some(Fault::KillLeader(TOPICS[1], 1)),
        16 => Some(Fault::KillCoordinator),
        20 => Some(Fault::KillLeader(TOPICS[0], 1)),
        24 => Some(Fault::KillCoordinator),
        _ => None,
    }
}

fn value(transaction: usize, topic: &str, partition: i32) -> String {
    format!("t{transaction:03}-{topic}-{partition}")
}

async fn write_all(
    producer: &TransactionalProducer,
    transaction: usize,
) -> Result<(), ClientError> {
    for delivery in send_all(producer, transaction).await? {
        delivery.await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_leader_and_coordinator_kills_when_transactions_commit_and_abort_then_read_committed_sees_each_committed_one_exactly_once(
) {
    let (mut cluster, bootstrap) = chaos_cluster().await;
    let mut producer = txn::producer(&bootstrap, ID).await;
    let mut outcomes = Vec::with_capacity(TRANSACTIONS);

    for transaction in 0..TRANSACTIONS {
        let commit = transaction % 4 != 3;
        producer.begin().expect("begin");
        let written = write_all(&producer, transaction).await;
        let outcome = end_under_fault(
            &mut cluster,
            &bootstrap,
            &mut producer,
            transaction,
            commit && written.is_ok(),
        )
        .await;
        outcomes.push(outcome);
    }

    check_read_back(&cluster, &bootstrap, &outcomes).await;
}

/// Hands one record of `transaction` to every partition; acknowledgements come later.
async fn send_all(
    producer: &TransactionalProducer,
    transaction: usize,
) -> Result<Vec<DeliveryFuture>, ClientError> {
    let mut deliveries = Vec::new();
    for topic in TOPICS {
        for partition in PARTITIONS {
            let record = ProducerRecord::new(topic, value(transaction, topic, partition))
                .partition(partition);
            deliveries.push(producer.send(record).await?);
        }
    }
    Ok(deliveries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_leader_and_coordinator_kills_during_pipelined_commits_then_read_committed_sees_each_committed_one_exactly_once(
) {
    let (mut cluster, bootstrap) = chaos_cluster().await;
    let mut producer = txn::producer(&bootstrap, ID).await;
    let mut outcomes = Vec::with_capacity(TRANSACTIONS);
    producer.begin().expect("begin");
    let mut sent = send_all(&producer, 0).await;

    for transaction in 0..TRANSACTIONS {
        let more = transaction + 1 < TRANSACTIONS;
        let commit = transaction % 4 != 3 && sent.is_ok();
        if commit && more {
            let pending = producer.commit_and_begin().await.expect("sealed");
            inject(&mut cluster, &bootstrap, transaction).await;
            // The next transaction's records are handed over while this one commits.
            let next = send_all(&producer, transaction + 1).await;
            let outcome = match pending.committed().await {
                Ok(()) => Outcome::Committed,
                // Aborted in the background: the next transaction must be aborted too.
                Err(e) if e.txn_class() == TxnErrorClass::Abortable => Outcome::Aborted,
                Err(e) => {
                    eprintln!("transaction {transaction}: outcome unknown ({e})");
                    Outcome::Unknown
                }
            };
            outcomes.push(outcome);
            sent = match outcome {
                Outcome::Committed => next,
                // Nothing of the next transaction left the producer: start it again.
                Outcome::Aborted => {
                    producer.abort().await.expect("abort the doomed next one");
                    producer.begin().expect("begin");
                    send_all(&producer, transaction + 1).await
                }
                Outcome::Unknown => {
                    producer = txn::producer(&bootstrap, ID).await;
                    producer.begin().expect("begin");
                    send_all(&producer, transaction + 1).await
                }
            };
            continue;
        }
        let outcome =
            end_under_fault(&mut cluster, &bootstrap, &mut producer, transaction, commit).await;
        outcomes.push(outcome);
        if more {
            producer.begin().expect("begin");
            sent = send_all(&producer, transaction + 1).await;
        }
    }
    check_read_back(&cluster, &bootstrap, &outcomes).await;
}

/// Three brokers, two coordinators, the chaos topics (replication factor 3); with the
/// bootstrap address.
async fn chaos_cluster() -> (Cluster, String) {
    let cluster = Cluster::start_with_coordinators(3, 2, &[], &[]).await;
    for topic in TOPICS {
        cluster
            .create_topic(topic, PARTITIONS.len() as i32, 3)
            .await;
    }
    let bootstrap = cluster.bootstrap();
    (cluster, bootstrap)
}

/// Commits (or aborts) the open transaction while its planned fault lands; a producer
/// whose ending failed is replaced by a new instance and the outcome is unknown.
async fn end_under_fault(
    cluster: &mut Cluster,
    bootstrap: &str,
    producer: &mut TransactionalProducer,
    transaction: usize,
    commit: bool,
) -> Outcome {
    let ending = {
        let producer = producer.clone();
        tokio::spawn(async move {
            if commit {
                producer.commit().await.map(|()| Outcome::Committed)
            } else {
                producer.abort().await.map(|()| Outcome::Aborted)
            }
        })
    };
    // The fault lands while the transaction ends (markers in flight).
    inject(cluster, bootstrap, transaction).await;
    match ending.await.expect("end task") {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("transaction {transaction}: ending failed ({e}); a new instance takes over");
            *producer = txn::producer(bootstrap, ID).await;
            Outcome::Unknown
        }
    }
}

/// The fault planned for `transaction`, if any.
async fn inject(cluster: &mut Cluster, bootstrap: &str, transaction: usize) {
    match fault_at(transaction) {
        Some(Fault::KillLeader(topic, partition)) => {
            let leader = cluster.leader_of(topic, partition).await;
            cluster.kill(leader.leader_id);
            cluster.new_leader(topic, partition, &leader).await;
            cluster.restart(leader.leader_id);
        }
        Some(Fault::KillCoordinator) => {
            let owner = txn::find_coordinator(bootstrap, ID).await.coordinator_id;
            cluster.kill_coordinator(owner);
            // The survivor takes every partition over before the victim returns.
            cluster.wait_for_coordinators().await;
            cluster.restart_coordinator(owner);
        }
        None => {}
    }
}

/// Reads every partition back read_committed: each committed transaction exactly once
/// and in the producer's order, no aborted one, an unknown one all or nothing.
async fn check_read_back(cluster: &Cluster, bootstrap: &str, outcomes: &[Outcome]) {
    let committed = outcomes
        .iter()
        .filter(|o| **o == Outcome::Committed)
        .count();
    assert!(
        committed >= TRANSACTIONS / 2,
        "most transactions commit despite the faults: {outcomes:?}"
    );
    cluster.wait_for_coordinators().await;
    for topic in TOPICS {
        wait_until_stable(bootstrap, topic, &PARTITIONS).await;
        for partition in PARTITIONS {
            let read = txn::read(bootstrap, topic, &[partition], Isolation::ReadCommitted).await;
            let seen: Vec<String> = read.iter().map(idem_tests::sdk::value).collect();
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for v in &seen {
                *counts.entry(v.as_str()).or_default() += 1;
            }
            assert!(
                counts.values().all(|n| *n == 1),
                "{topic}-{partition}: a duplicate in {seen:?}"
            );
            let mut expected = BTreeMap::new();
            for (transaction, outcome) in outcomes.iter().enumerate() {
                let v = value(transaction, topic, partition);
                let visible = counts.contains_key(v.as_str());
                match outcome {
                    Outcome::Committed => assert!(visible, "{v}: committed but not visible"),
                    Outcome::Aborted => assert!(!visible, "{v}: aborted but visible"),
                    Outcome::Unknown => {}
                }
                if visible {
                    expected.insert(transaction, v);
                }
            }
            let in_order: Vec<String> = expected.into_values().collect();
            assert_eq!(
                seen, in_order,
                "{topic}-{partition}: the producer's order is kept"
            );
        }
    }
    // An unknown outcome is all or nothing across the four partitions.
    for (transaction, outcome) in outcomes.iter().enumerate() {
        if *outcome != Outcome::Unknown {
            continue;
        }
        let mut visible = 0;
        for topic in TOPICS {
            let seen = txn::values(bootstrap, topic, &PARTITIONS, Isolation::ReadCommitted).await;
            visible += PARTITIONS
                .iter()
                .filter(|p| seen.contains(&value(transaction, topic, **p)))
                .count();
        }
        assert!(
            visible == 0 || visible == 4,
            "transaction {transaction} is partly visible ({visible} of 4)"
        );
    }
}
