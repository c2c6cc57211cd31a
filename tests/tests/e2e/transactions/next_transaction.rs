//! A producer's next transaction starts right after its commit, while the commit's
//! markers may still be on their way: a registration that finds the previous
//! transaction completing waits for it at the coordinator and is then accepted, instead
//! of being sent away with CONCURRENT_TRANSACTIONS to retry after a backoff. The
//! completion carries it out: the previous transaction's CompleteCommit and the next
//! one's Ongoing go to the transaction log in one append, and registrations that
//! arrive meanwhile (the SDK does not wait for one call before the next) join it. A
//! coordinator killed right after that append loads the new transaction whole.

use std::time::{Duration, Instant};

use idem_client::{Isolation, ProducerRecord};
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::v1::{AddPartitionsToTxnRequest, TxnTopicPartitions};
use idem_proto::ErrorCode;
use idem_tests::raw;
use idem_tests::txn::{self, values, wait_until_stable};
use idem_tests::Cluster;

const ORDERS: &str = "orders";
const AUDIT: &str = "audit";
/// How long the marker of the first transaction is held back.
const HELD: Duration = Duration::from_millis(1000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_commit_whose_markers_are_delayed_when_the_next_transaction_registers_then_it_waits_and_is_accepted(
) {
    // A paused follower leaves the ISR after a second, so the transaction log (RF 3)
    // keeps taking writes while the fault lasts.
    let brokers = ["--replica-lag-time-max-ms", "1000"];
    let mut cluster = Cluster::start_with_coordinators(3, 1, &brokers, &[]).await;
    // Replication factor 1: while its only broker is paused, no marker lands there.
    cluster.create_topic(ORDERS, 1, 1).await;
    cluster.create_topic(AUDIT, 2, 3).await;
    let orders_leader = cluster.leader_of(ORDERS, 0).await.leader_id;
    // Clients bootstrap from a broker that stays up.
    let bootstrap = cluster
        .broker(cluster.observer(&[orders_leader]))
        .bootstrap();
    // An id whose transaction-log partition another broker leads, so persisting the
    // commit does not wait for the paused broker.
    let (id, log_partition) = txn::id_logged_away_from(&cluster, "ledger", orders_leader).await;
    let producer = txn::producer(&bootstrap, &id).await;
    producer.begin().expect("begin");
    producer
        .send(ProducerRecord::new(ORDERS, "order-1").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    cluster.pause(orders_leader);
    // Answered once PrepareCommit is persisted; the ORDERS marker cannot land yet.
    producer.commit().await.expect("commit decided");
    let next = producer.producer_id().expect("initialised");

    // The next transaction registers two partitions, in two calls, while the first is
    // still completing.
    let owner = txn::find_coordinator(&bootstrap, &id).await;
    let started = Instant::now();
    let mut registrations = Vec::new();
    for partition in [0, 1] {
        let mut coordinator = txn::coordinator_client(&owner.address)
            .await
            .expect("coordinator");
        let request = AddPartitionsToTxnRequest {
            transactional_id: id.clone(),
            producer_id: next.producer_id,
            producer_epoch: i32::from(next.producer_epoch),
            topics: vec![TxnTopicPartitions {
                topic: AUDIT.into(),
                partitions: vec![partition],
            }],
        };
        registrations.push(tokio::spawn(async move {
            coordinator
                .add_partitions_to_txn(request)
                .await
                .expect("AddPartitionsToTxn")
                .into_inner()
        }));
    }
    // The fault lasts HELD; then the marker lands and the commit completes.
    tokio::time::sleep(HELD).await;
    cluster.resume(orders_leader);
    for registration in registrations {
        let answer = registration.await.expect("registration task");
        assert_eq!(
            answer.error_code(),
            ErrorCode::None,
            "{}",
            answer.error_message
        );
    }
    assert!(
        started.elapsed() >= HELD,
        "answered after {:?}, before the first transaction could complete",
        started.elapsed()
    );
    // One append: the batch that completes the first transaction also opens the second,
    // with both registrations' partitions.
    let log_leader = cluster
        .leader_of(TXN_LOG_TOPIC, log_partition)
        .await
        .leader_id;
    let mut client = raw::connect(&cluster.broker(log_leader).bootstrap()).await;
    let appends: Vec<Vec<(String, String)>> =
        raw::read_batches(&mut client, TXN_LOG_TOPIC, log_partition)
            .await
            .into_iter()
            .map(|(_, records)| states_of(&id, &records))
            .filter(|states| !states.is_empty())
            .collect();
    let states: Vec<Vec<&str>> = appends
        .iter()
        .map(|batch| batch.iter().map(|(state, _)| state.as_str()).collect())
        .collect();
    assert_eq!(
        states,
        vec![
            vec!["Empty"],
            vec!["Ongoing"],
            vec!["PrepareCommit"],
            vec!["CompleteCommit", "Ongoing"]
        ],
        "the transaction log's batches of {id}, by state"
    );
    let opened = &appends[3][1].1;
    for partition in [0, 1] {
        let entry = format!(r#"{{"topic":"{AUDIT}","partition":{partition}}}"#);
        assert!(opened.contains(&entry), "{entry} missing from {opened}");
    }

    // The coordinator dies right after that append; restarted, it must load the second
    // transaction open with both partitions, or AUDIT-1 (BEGIN written, no data) would
    // hang with nobody to end it.
    cluster.kill_coordinator(owner.coordinator_id);
    cluster.restart_coordinator(owner.coordinator_id);
    cluster.wait_for_coordinators().await;

    // The producer carries on: its second transaction commits through the same
    // registration, and both transactions are visible once.
    producer.begin().expect("begin");
    producer
        .send(ProducerRecord::new(AUDIT, "audit-2").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    producer.commit().await.expect("second commit");
    wait_until_stable(&bootstrap, ORDERS, &[0]).await;
    wait_until_stable(&bootstrap, AUDIT, &[0, 1]).await;
    assert_eq!(
        values(&bootstrap, ORDERS, &[0], Isolation::ReadCommitted).await,
        vec!["order-1"]
    );
    assert_eq!(
        values(&bootstrap, AUDIT, &[0], Isolation::ReadCommitted).await,
        vec!["audit-2"]
    );
}

/// The state and the whole value of each of `transactional_id`'s records among
/// `records`, in order.
fn states_of(
    transactional_id: &str,
    records: &[idem_proto::batch::StoredRecord],
) -> Vec<(String, String)> {
    records
        .iter()
        .filter(|r| r.key.as_deref() == Some(transactional_id.as_bytes()))
        .filter_map(|r| {
            let value = String::from_utf8_lossy(r.value.as_deref()?).into_owned();
            let (_, after) = value.split_once("\"state\":\"")?;
            let state = after.split('"').next()?.to_string();
            Some((state, value))
        })
        .collect()
}
