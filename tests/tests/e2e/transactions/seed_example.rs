//! The seed's transactional producer: one transaction writes `order-events` and
//! `inventory-events`; read_committed sees both only after the commit and never an
//! aborted one; read_uncommitted sees everything written, and never a control record.

use idem_client::{Isolation, ProducerRecord};
use idem_tests::txn::{self, values, wait_until_stable};
use idem_tests::Cluster;

const ORDERS: &str = "order-events";
const INVENTORY: &str = "inventory-events";

async fn send(producer: &idem_client::TransactionalProducer, topic: &str, value: &str) -> i64 {
    producer
        .send(ProducerRecord::new(topic, value.to_string()).partition(0))
        .await
        .expect("send")
        .await
        .expect("acked")
        .offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_transaction_over_two_topics_when_committed_or_aborted_then_read_committed_sees_all_or_nothing(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &[], &[]).await;
    cluster.create_topic(ORDERS, 1, 1).await;
    cluster.create_topic(INVENTORY, 1, 1).await;
    let bootstrap = cluster.bootstrap();
    let producer = txn::producer(&bootstrap, "order-service").await;

    producer.begin().expect("begin");
    let first_order = send(&producer, ORDERS, "order-1").await;
    send(&producer, INVENTORY, "reserve-1").await;
    // Acknowledged and in the log, but not committed: only read_uncommitted sees it.
    for (topic, value) in [(ORDERS, "order-1"), (INVENTORY, "reserve-1")] {
        assert_eq!(
            values(&bootstrap, topic, &[0], Isolation::ReadCommitted).await,
            Vec::<String>::new()
        );
        assert_eq!(
            values(&bootstrap, topic, &[0], Isolation::ReadUncommitted).await,
            vec![value]
        );
    }
    let admin = idem_client::Admin::connect(&bootstrap)
        .await
        .expect("admin");
    let (_, lso) = txn::offsets(&admin, ORDERS, 0).await;
    assert!(
        lso <= first_order,
        "the open transaction holds the LSO (LSO {lso}, first record {first_order})"
    );

    producer.commit().await.expect("commit");
    wait_until_stable(&bootstrap, ORDERS, &[0]).await;
    wait_until_stable(&bootstrap, INVENTORY, &[0]).await;
    assert_eq!(
        values(&bootstrap, ORDERS, &[0], Isolation::ReadCommitted).await,
        vec!["order-1"]
    );
    assert_eq!(
        values(&bootstrap, INVENTORY, &[0], Isolation::ReadCommitted).await,
        vec!["reserve-1"]
    );

    producer.begin().expect("begin");
    send(&producer, ORDERS, "order-2").await;
    send(&producer, INVENTORY, "reserve-2").await;
    producer.abort().await.expect("abort");

    producer.begin().expect("begin");
    let third_order = send(&producer, ORDERS, "order-3").await;
    send(&producer, INVENTORY, "reserve-3").await;
    producer.commit().await.expect("commit");

    wait_until_stable(&bootstrap, ORDERS, &[0]).await;
    wait_until_stable(&bootstrap, INVENTORY, &[0]).await;
    let committed = values(&bootstrap, ORDERS, &[0], Isolation::ReadCommitted).await;
    assert_eq!(
        committed,
        vec!["order-1", "order-3"],
        "the aborted order is never visible"
    );
    assert_eq!(
        values(&bootstrap, INVENTORY, &[0], Isolation::ReadCommitted).await,
        vec!["reserve-1", "reserve-3"]
    );
    // read_uncommitted returns the aborted records too, and no control record.
    assert_eq!(
        values(&bootstrap, ORDERS, &[0], Isolation::ReadUncommitted).await,
        vec!["order-1", "order-2", "order-3"]
    );
    // Markers take offsets: the committed records keep their gaps.
    let read = txn::read(&bootstrap, ORDERS, &[0], Isolation::ReadCommitted).await;
    assert_eq!(read[0].offset, first_order);
    assert_eq!(read[1].offset, third_order);
    assert!(
        third_order > first_order + 2,
        "BEGIN/COMMIT/ABORT markers sit between the records"
    );
}
