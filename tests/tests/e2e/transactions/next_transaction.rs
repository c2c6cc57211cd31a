//! A producer's next transaction starts right after its commit, while the commit's
//! markers may still be on their way. Its registration is not sent away with
//! CONCURRENT_TRANSACTIONS: the coordinator persists the new transaction at once, with
//! the commit as its pending end, and answers once the commit's markers are written
//! and the new BEGINs after them. Registrations that arrive meanwhile (the SDK does not
//! wait for one call before the next) are carried out when the commit completes. A
//! coordinator killed while the commit is pending behind the new transaction leaves
//! both to its successor, which writes the commit's markers before serving.

use std::time::{Duration, Instant};

use idem_client::{Isolation, ProducerRecord, TransactionalProducer};
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

/// A cluster where ORDERS-0 lives on one broker only, and a transaction of an id logged
/// away from that broker with "order-1" acknowledged there.
struct OrderSent {
    cluster: Cluster,
    orders_leader: i32,
    bootstrap: String,
    id: String,
    log_partition: i32,
    producer: TransactionalProducer,
}

async fn order_sent(audit_partitions: i32) -> OrderSent {
    // A stopped follower leaves the ISR after a second, so the transaction log (RF 3)
    // keeps taking writes while the fault lasts.
    let brokers = ["--replica-lag-time-max-ms", "1000"];
    let cluster = Cluster::start_with_coordinators(3, 1, &brokers, &[]).await;
    // Replication factor 1: while its only broker is stopped, no marker lands there.
    cluster.create_topic(ORDERS, 1, 1).await;
    cluster.create_topic(AUDIT, audit_partitions, 3).await;
    let orders_leader = cluster.leader_of(ORDERS, 0).await.leader_id;
    // Clients bootstrap from a broker that stays up.
    let bootstrap = cluster
        .broker(cluster.observer(&[orders_leader]))
        .bootstrap();
    // An id whose transaction-log partition another broker leads, so persisting the
    // commit does not wait for the stopped broker.
    let (id, log_partition) = txn::id_logged_away_from(&cluster, "ledger", orders_leader).await;
    let producer = txn::producer(&bootstrap, &id).await;
    producer.begin().expect("begin");
    producer
        .send(ProducerRecord::new(ORDERS, "order-1").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    OrderSent {
        cluster,
        orders_leader,
        bootstrap,
        id,
        log_partition,
        producer,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_commit_whose_markers_are_delayed_when_the_next_transaction_registers_then_it_waits_and_is_accepted(
) {
    let OrderSent {
        mut cluster,
        orders_leader,
        bootstrap,
        id,
        log_partition,
        producer,
    } = order_sent(2).await;
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
    // The new transaction is persisted while the marker cannot land, with the commit it
    // began behind as its pending end; its BEGINs wait for that marker.
    let described = txn::wait_for_description(
        &bootstrap,
        &id,
        "persisted the next transaction behind its commit",
        |t| !t.pending_end.is_empty(),
    )
    .await;
    assert_eq!(
        (described.state.as_str(), described.pending_end.as_str()),
        ("Ongoing", "COMMIT")
    );
    assert_eq!(described.producer_epoch, i32::from(next.producer_epoch));
    assert_eq!(
        described.pending_end_topics,
        vec![TxnTopicPartitions {
            topic: ORDERS.into(),
            partitions: vec![0],
        }]
    );
    assert!(
        registrations.iter().all(|r| !r.is_finished()),
        "a registration was answered before the commit's marker landed"
    );
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
    // The transaction log: the next transaction went in as one append on its own, right
    // after PrepareCommit and while the marker was held (no CompleteCommit: the commit
    // completes by clearing the pending end); its last record holds both registrations'
    // partitions and nothing pending.
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
        states.get(..4),
        Some(
            &[
                vec!["Empty"],
                vec!["Ongoing"],
                vec!["PrepareCommit"],
                vec!["Ongoing"]
            ][..]
        ),
        "the transaction log's batches of {id}, by state"
    );
    assert!(
        states
            .iter()
            .flatten()
            .all(|state| !state.starts_with("Complete")),
        "{states:?}"
    );
    let began_behind = &appends[3][0].1;
    let pending = format!(
        r#""pending_end":{{"commit":true,"partitions":[{{"topic":"{ORDERS}","partition":0}}]}}"#
    );
    assert!(began_behind.contains(&pending), "{began_behind}");
    let (last_state, opened) = appends.iter().flatten().last().expect("records");
    assert_eq!(last_state, "Ongoing");
    assert!(!opened.contains("pending_end"), "{opened}");
    for partition in [0, 1] {
        let entry = format!(r#"{{"topic":"{AUDIT}","partition":{partition}}}"#);
        assert!(opened.contains(&entry), "{entry} missing from {opened}");
    }

    // The coordinator dies now; restarted, it must load the second transaction open
    // with both partitions, or AUDIT-1 (BEGIN written, no data) would hang with nobody
    // to end it.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_transaction_begun_behind_a_commit_when_the_coordinator_dies_before_the_markers_then_its_successor_writes_them_and_both_commit(
) {
    let OrderSent {
        mut cluster,
        orders_leader,
        bootstrap,
        id,
        producer,
        ..
    } = order_sent(1).await;
    // ORDERS-0's only broker dies: its COMMIT marker cannot land, and no marker request
    // of this coordinator is left waiting in a socket to land later on its behalf.
    cluster.kill(orders_leader);
    producer.commit().await.expect("commit decided");
    producer.begin().expect("begin the next");
    let audit = producer
        .send(ProducerRecord::new(AUDIT, "audit-2").partition(0))
        .await
        .expect("send");
    let coordinator = txn::find_coordinator(&bootstrap, &id).await;
    txn::wait_for_description(
        &bootstrap,
        &id,
        "persisted the next transaction behind its commit",
        |t| t.pending_end == "COMMIT" && t.state == "Ongoing",
    )
    .await;

    // Only the transaction log knows the commit is not written everywhere yet.
    cluster.kill_coordinator(coordinator.coordinator_id);
    cluster.restart(orders_leader);
    cluster.restart_coordinator(coordinator.coordinator_id);
    cluster.wait_for_coordinators().await;

    audit
        .await
        .expect("audit-2 acked through the restarted coordinator");
    producer.commit().await.expect("second commit");
    wait_until_stable(&bootstrap, ORDERS, &[0]).await;
    wait_until_stable(&bootstrap, AUDIT, &[0]).await;
    assert_eq!(
        values(&bootstrap, ORDERS, &[0], Isolation::ReadCommitted).await,
        vec!["order-1"]
    );
    assert_eq!(
        values(&bootstrap, AUDIT, &[0], Isolation::ReadCommitted).await,
        vec!["audit-2"]
    );
    let described =
        txn::wait_for_description(&bootstrap, &id, "completed the second commit", |t| {
            t.state == "CompleteCommit"
        })
        .await;
    assert_eq!(described.pending_end, "");
}
