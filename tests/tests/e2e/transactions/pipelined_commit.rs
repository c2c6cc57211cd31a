//! `commit_and_begin`: the open transaction is sealed and committed in the background
//! while the producer already sends the next one. The next transaction's records wait
//! in the producer until the commit is decided, then go out under the epoch it
//! answered; a commit that fails (here: a record of it that never reaches its paused
//! leader) is aborted, and takes the transaction begun after it down with it, so
//! nothing sent after a failed commit can become visible. A commit whose EndTxn gets
//! no answer (its coordinator paused) leaves the producer fatal; a new instance settles
//! the commit all or nothing, and the next transaction never shows.

use std::time::Duration;

use idem_client::{
    ClientError, Isolation, ProducerRecord, TransactionalConfig, TransactionalProducer,
    TxnErrorClass, TxnState,
};
use idem_tests::txn::{self, values, wait_for_lso, wait_until_stable};
use idem_tests::Cluster;

const ORDERS: &str = "orders";
const AUDIT: &str = "audit";

/// An initialised transactional producer that gives up on a request after 1 s and on
/// a record or a coordinator call after 3 s, so a fault turns into an error quickly.
async fn impatient_producer(bootstrap: &str, id: &str) -> TransactionalProducer {
    let config = TransactionalConfig {
        request_timeout: Duration::from_secs(1),
        delivery_timeout: Duration::from_secs(3),
        linger: Duration::ZERO,
        ..TransactionalConfig::new(bootstrap, id)
    };
    let producer = TransactionalProducer::connect(config)
        .await
        .expect("connects");
    producer.init_transactions().await.expect("init");
    producer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_commit_and_begin_then_the_next_transaction_is_sent_meanwhile_and_each_is_read_once_in_order(
) {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    cluster.create_topic(ORDERS, 2, 3).await;
    let bootstrap = cluster.broker(1).bootstrap();
    let producer = txn::producer(&bootstrap, "pipelined-orders").await;
    producer.begin().expect("begin");
    let mut first = Vec::new();
    for (value, partition) in [("a-1", 0), ("a-2", 1)] {
        first.push(
            producer
                .send(ProducerRecord::new(ORDERS, value).partition(partition))
                .await
                .expect("send"),
        );
    }
    let epoch = producer.producer_id().expect("initialised").producer_epoch;
    // Returns with the first transaction sealed, its records maybe not yet acknowledged.
    let pending = producer.commit_and_begin().await.expect("commit and begin");
    let mut second = Vec::new();
    for (value, partition) in [("b-1", 0), ("b-2", 1)] {
        second.push(
            producer
                .send(ProducerRecord::new(ORDERS, value).partition(partition))
                .await
                .expect("send into the next transaction"),
        );
    }
    pending
        .committed()
        .await
        .expect("the first transaction committed");
    for delivery in first.into_iter().chain(second) {
        delivery.await.expect("acknowledged");
    }
    assert_eq!(
        producer.producer_id().map(|p| p.producer_epoch),
        Some(epoch + 1),
        "the next transaction goes out under the epoch the commit answered"
    );
    // The second transaction's records are written but not committed yet. Each
    // partition: BEGIN 0, a 1, COMMIT 2, BEGIN 3 (the open transaction's first offset).
    wait_for_lso(&bootstrap, ORDERS, &[0, 1], 3).await;
    assert_eq!(
        values(&bootstrap, ORDERS, &[0, 1], Isolation::ReadCommitted).await,
        vec!["a-1", "a-2"]
    );
    producer.commit().await.expect("second commit");
    wait_until_stable(&bootstrap, ORDERS, &[0, 1]).await;
    assert_eq!(
        values(&bootstrap, ORDERS, &[0, 1], Isolation::ReadCommitted).await,
        vec!["a-1", "b-1", "a-2", "b-2"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_pipelined_commit_that_fails_then_it_is_aborted_and_the_transaction_after_it_too() {
    // A paused follower leaves the ISR after a second, so the transaction log (RF 3)
    // keeps taking writes while the fault lasts.
    let brokers = ["--replica-lag-time-max-ms", "1000"];
    let cluster = Cluster::start_with_coordinators(3, 1, &brokers, &[]).await;
    // Replication factor 1: while its only broker is paused, ORDERS takes nothing.
    cluster.create_topic(ORDERS, 1, 1).await;
    cluster.create_topic(AUDIT, 1, 3).await;
    let orders_leader = cluster.leader_of(ORDERS, 0).await.leader_id;
    let bootstrap = cluster
        .broker(cluster.observer(&[orders_leader]))
        .bootstrap();
    // An id whose transaction log another broker leads, so the abort can be persisted.
    let (id, _) = txn::id_logged_away_from(&cluster, "pipelined", orders_leader).await;
    let producer = impatient_producer(&bootstrap, &id).await;

    producer.begin().expect("begin");
    // Both partitions join; then the orders leader stops, so the next order is never
    // acknowledged.
    for (topic, value) in [(AUDIT, "audit-0"), (ORDERS, "order-0")] {
        producer
            .send(ProducerRecord::new(topic, value).partition(0))
            .await
            .expect("send")
            .await
            .expect("acked");
    }
    cluster.pause(orders_leader);
    let order = producer
        .send(ProducerRecord::new(ORDERS, "order-1").partition(0))
        .await
        .expect("send");
    let pending = producer.commit_and_begin().await.expect("sealed");
    let next = producer
        .send(ProducerRecord::new(AUDIT, "audit-1").partition(0))
        .await
        .expect("the next transaction takes records while the commit is open");

    let failed = pending.committed().await.expect_err("cannot commit");
    assert_eq!(failed.txn_class(), TxnErrorClass::Abortable, "{failed}");
    // Aborted meanwhile (PrepareAbort persisted); its ORDERS marker lands on resume.
    cluster.resume(orders_leader);
    assert!(order.await.is_err(), "the order was never acknowledged");
    let refused = next
        .await
        .expect_err("nothing after a failed commit is sent");
    assert_eq!(refused.txn_class(), TxnErrorClass::Abortable, "{refused}");
    assert!(
        producer.commit().await.is_err(),
        "the next transaction cannot commit"
    );

    producer.abort().await.expect("abort the next transaction");
    txn::commit_one(&producer, AUDIT, "audit-2")
        .await
        .expect("a later transaction commits");

    wait_until_stable(&bootstrap, ORDERS, &[0]).await;
    wait_until_stable(&bootstrap, AUDIT, &[0]).await;
    assert_eq!(
        values(&bootstrap, ORDERS, &[0], Isolation::ReadCommitted).await,
        Vec::<String>::new()
    );
    assert_eq!(
        values(&bootstrap, AUDIT, &[0], Isolation::ReadCommitted).await,
        vec!["audit-2"]
    );
    assert_eq!(
        values(&bootstrap, AUDIT, &[0], Isolation::ReadUncommitted).await,
        vec!["audit-0", "audit-2"],
        "audit-1 never left the producer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_pipelined_commit_whose_end_txn_is_never_answered_then_the_producer_is_fatal_and_a_new_instance_settles_it(
) {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    cluster.create_topic(ORDERS, 2, 3).await;
    let bootstrap = cluster.bootstrap();
    let id = "pipelined-unanswered";
    let producer = impatient_producer(&bootstrap, id).await;
    producer.begin().expect("begin");
    for (value, partition) in [("a-1", 0), ("a-2", 1)] {
        producer
            .send(ProducerRecord::new(ORDERS, value).partition(partition))
            .await
            .expect("send")
            .await
            .expect("acked");
    }
    // The only coordinator stops: the commit's EndTxn is sent and never answered.
    let coordinator = txn::find_coordinator(&bootstrap, id).await.coordinator_id;
    cluster.pause_coordinator(coordinator);
    let pending = producer.commit_and_begin().await.expect("sealed");
    let next = producer
        .send(ProducerRecord::new(ORDERS, "b-1").partition(0))
        .await
        .expect("the next transaction takes records meanwhile");

    let unknown = pending.committed().await.expect_err("no answer");
    assert_eq!(unknown.txn_class(), TxnErrorClass::Fatal, "{unknown}");
    assert_eq!(producer.state(), TxnState::FatalError);
    let refused = next
        .await
        .expect_err("nothing after an unknown commit is sent");
    // It fails unsent: with the commit's fatal outcome, or at its own delivery timeout
    // when that comes first. Both run for the delivery timeout, and the EndTxn's last
    // attempt may outlast it by a request timeout.
    assert!(!refused.possibly_written(), "{refused}");
    assert!(
        refused.txn_class() == TxnErrorClass::Fatal
            || matches!(refused, ClientError::DeliveryTimeout { attempts: 0, .. }),
        "{refused}"
    );

    // A new instance settles the first transaction (commits a prepared one, aborts an
    // open one) and goes on.
    cluster.resume_coordinator(coordinator);
    let successor = txn::producer(&bootstrap, id).await;
    successor.begin().expect("begin");
    successor
        .send(ProducerRecord::new(ORDERS, "c-1").partition(1))
        .await
        .expect("send")
        .await
        .expect("acked");
    successor.commit().await.expect("commit");
    wait_until_stable(&bootstrap, ORDERS, &[0, 1]).await;
    let seen = values(&bootstrap, ORDERS, &[0, 1], Isolation::ReadCommitted).await;
    assert!(
        seen == ["a-1", "a-2", "c-1"] || seen == ["c-1"],
        "the first transaction all or nothing, b-1 never: {seen:?}"
    );
}
