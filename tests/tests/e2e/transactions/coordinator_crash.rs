//! A coordinator SIGKILLed after it persisted PrepareCommit and before its markers
//! landed: the coordinator that takes the partition over finds the prepared commit in
//! `__transaction_state` and finishes it; the transaction is visible once and whole.

use idem_client::{Isolation, ProducerRecord};
use idem_proto::v1::DescribeTransactionRequest;
use idem_tests::txn::{self, values, wait_until_stable};
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::Cluster;

const ORDERS: &str = "orders";
const AUDIT: &str = "audit";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_prepare_commit_persisted_when_the_coordinator_is_killed_before_markers_then_another_coordinator_completes_the_commit(
) {
    let mut cluster = Cluster::start_with_coordinators(3, 2, &[], &[]).await;
    // Replication factor 1: while its only broker is paused, no marker can land there.
    cluster.create_topic(ORDERS, 1, 1).await;
    cluster.create_topic(AUDIT, 1, 3).await;
    let bootstrap = cluster.bootstrap();
    let producer = txn::producer(&bootstrap, "checkout").await;

    producer.begin().expect("begin");
    for (topic, value) in [(ORDERS, "order-1"), (AUDIT, "audit-1"), (ORDERS, "order-2")] {
        producer
            .send(ProducerRecord::new(topic, value).partition(0))
            .await
            .expect("send")
            .await
            .expect("acked");
    }
    let orders_leader = cluster.leader_of(ORDERS, 0).await.leader_id;
    let owner = txn::find_coordinator(&bootstrap, "checkout").await;
    let other = if owner.coordinator_id == 1 { 2 } else { 1 };

    cluster.pause(orders_leader);
    // Answered once PrepareCommit is persisted (the transaction log is replicated 3
    // times and survives the paused broker); the ORDERS marker cannot land yet.
    producer.commit().await.expect("commit decided");
    cluster.kill_coordinator(owner.coordinator_id);
    cluster.resume(orders_leader);

    // The survivor takes the partition over once the dead one's lease expires.
    let (successor, _) = wait_until(PATIENCE, "the survivor owns the id", || async {
        let found = txn::find_coordinator(&bootstrap, "checkout").await;
        let moved = found.coordinator_id == other;
        seen_if(found, moved)
    })
    .await;
    assert!(successor.coordinator_epoch > owner.coordinator_epoch);

    wait_until_stable(&bootstrap, ORDERS, &[0]).await;
    wait_until_stable(&bootstrap, AUDIT, &[0]).await;
    assert_eq!(
        values(&bootstrap, ORDERS, &[0], Isolation::ReadCommitted).await,
        vec!["order-1", "order-2"]
    );
    assert_eq!(
        values(&bootstrap, AUDIT, &[0], Isolation::ReadCommitted).await,
        vec!["audit-1"]
    );

    let mut client = txn::coordinator_client(&successor.address)
        .await
        .expect("coordinator");
    let described = client
        .describe_transaction(DescribeTransactionRequest {
            transactional_id: "checkout".into(),
        })
        .await
        .expect("DescribeTransaction")
        .into_inner()
        .transaction
        .expect("described");
    assert_eq!(described.state, "CompleteCommit");

    // The producer carries on with the epoch its commit answer gave it.
    txn::commit_one(&producer, ORDERS, "order-3")
        .await
        .expect("commit on the new coordinator");
    wait_until_stable(&bootstrap, ORDERS, &[0]).await;
    assert_eq!(
        values(&bootstrap, ORDERS, &[0], Isolation::ReadCommitted).await,
        vec!["order-1", "order-2", "order-3"]
    );
}
