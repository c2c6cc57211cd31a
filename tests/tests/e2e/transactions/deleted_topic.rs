//! Guarantee: a transaction survives the deletion of a topic it wrote to. The markers
//! of the deleted topic's partitions are dropped (as Kafka drops them), only once the
//! topic catalog in etcd says the partitions no longer exist; the transaction completes
//! with the outcome the producer asked for, its other partitions' records are visible
//! exactly once (committed) or never (aborted), nothing holds a last stable offset back,
//! and the transactional id runs its next transaction. A topic deleted and created again
//! under the name gets the marker of a partition it still has: a lone marker of a
//! producer with no transaction there, which the broker appends and which ends nothing.
//! `idem dev` (a solo coordinator, whose catalog is its single-node broker's topic
//! list) drops them the same way.

use idem_client::{Admin, Isolation, ProducerRecord, TransactionalProducer};
use idem_tests::txn::{self, values, wait_until_stable};
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::Cluster;

use crate::cli::DevServer;

const DELETED: &str = "deleted";
const KEPT: &str = "kept";
const PARTITIONS: i32 = 2;
const ID: &str = "deleted-topic-txn";

async fn send(producer: &TransactionalProducer, topic: &str, partition: i32, value: &str) {
    producer
        .send(ProducerRecord::new(topic, value.to_string()).partition(partition))
        .await
        .expect("send")
        .await
        .expect("acked");
}

/// Opens a transaction of `ID` that wrote `v-<topic>-<p>` to every partition of
/// DELETED and KEPT.
async fn open_transaction(bootstrap: &str) -> TransactionalProducer {
    let producer = txn::producer(bootstrap, ID).await;
    producer.begin().expect("begin");
    for topic in [DELETED, KEPT] {
        for p in 0..PARTITIONS {
            send(&producer, topic, p, &format!("v-{topic}-{p}")).await;
        }
    }
    producer
}

/// A cluster with DELETED and KEPT (2 partitions each, RF 3) and a producer whose open
/// transaction wrote `v-<topic>-<p>` to every partition of both.
async fn open_transaction_over_both() -> (Cluster, String, TransactionalProducer) {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    cluster.create_topic(DELETED, PARTITIONS, 3).await;
    cluster.create_topic(KEPT, PARTITIONS, 3).await;
    let bootstrap = cluster.bootstrap();
    let producer = open_transaction(&bootstrap).await;
    (cluster, bootstrap, producer)
}

/// Deletes `topic` and waits until every broker stopped listing it, so the markers find
/// it gone everywhere (the catalog says so from the deletion's answer on).
async fn delete(cluster: &Cluster, bootstrap: &str, topic: &str) {
    let admin = Admin::connect(bootstrap).await.expect("admin");
    admin.delete_topic(topic).await.expect("delete");
    for id in cluster.ids() {
        let admin = Admin::connect(&cluster.broker(id).bootstrap())
            .await
            .expect("admin");
        wait_until(
            PATIENCE,
            &format!("broker {id} no longer lists {topic}"),
            || async {
                let listed = admin
                    .metadata(&[topic])
                    .await
                    .ok()
                    .and_then(|m| m.topic(topic).map(|t| t.error.is_none()));
                seen_if(listed, listed == Some(false))
            },
        )
        .await;
    }
}

/// Waits until the coordinator completed `ID`'s transaction as `state` (CompleteCommit
/// or CompleteAbort): persisted once every remaining partition took its marker.
async fn completed(bootstrap: &str, state: &str) {
    let described = txn::wait_for_description(bootstrap, ID, &format!("reaches {state}"), |t| {
        t.state == state
    })
    .await;
    assert!(described.topics.is_empty(), "{described:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_transaction_over_two_topics_when_one_is_deleted_before_the_commit_then_the_commit_completes_and_the_id_runs_its_next_transaction(
) {
    let (cluster, bootstrap, producer) = open_transaction_over_both().await;
    delete(&cluster, &bootstrap, DELETED).await;

    // Kafka's answer: the commit was decided (PrepareCommit persisted) when the producer
    // asked; the deleted topic's records went with the topic, the others are committed.
    producer.commit().await.expect("commit");
    completed(&bootstrap, "CompleteCommit").await;
    let all: Vec<i32> = (0..PARTITIONS).collect();
    wait_until_stable(&bootstrap, KEPT, &all).await;
    assert_eq!(
        values(&bootstrap, KEPT, &all, Isolation::ReadCommitted).await,
        vec!["v-kept-0", "v-kept-1"],
        "the kept topic's records, exactly once"
    );

    // The same id runs another transaction (no CONCURRENT_TRANSACTIONS left behind).
    producer.begin().expect("begin");
    send(&producer, KEPT, 0, "next").await;
    producer
        .commit()
        .await
        .expect("the next transaction commits");
    completed(&bootstrap, "CompleteCommit").await;
    wait_until_stable(&bootstrap, KEPT, &all).await;
    assert_eq!(
        values(&bootstrap, KEPT, &all, Isolation::ReadCommitted).await,
        vec!["v-kept-0", "next", "v-kept-1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_idem_dev_when_a_topic_of_an_open_transaction_is_deleted_then_the_commit_completes_on_the_solo_coordinator(
) {
    let data_dir = tempfile::tempdir().expect("data dir");
    let dev = DevServer::start(data_dir.path(), "127.0.0.1:0");
    let bootstrap = dev.addr.clone();
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    for topic in [DELETED, KEPT] {
        admin
            .create_topic(topic, PARTITIONS, 1)
            .await
            .expect("create topic");
    }
    let producer = open_transaction(&bootstrap).await;
    admin.delete_topic(DELETED).await.expect("delete");

    producer.commit().await.expect("commit");
    completed(&bootstrap, "CompleteCommit").await;
    let all: Vec<i32> = (0..PARTITIONS).collect();
    wait_until_stable(&bootstrap, KEPT, &all).await;
    assert_eq!(
        values(&bootstrap, KEPT, &all, Isolation::ReadCommitted).await,
        vec!["v-kept-0", "v-kept-1"]
    );
    producer.begin().expect("begin");
    send(&producer, KEPT, 0, "next").await;
    producer
        .commit()
        .await
        .expect("the next transaction commits");
    completed(&bootstrap, "CompleteCommit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_topic_deleted_and_created_again_smaller_when_the_transaction_aborts_then_the_new_incarnation_gets_a_lone_marker_and_nothing_hangs(
) {
    let (cluster, bootstrap, producer) = open_transaction_over_both().await;
    delete(&cluster, &bootstrap, DELETED).await;
    // One partition now: DELETED-1 is gone for good (dropped), DELETED-0 is a partition
    // of the new incarnation, which the ABORT reaches.
    cluster.create_topic(DELETED, 1, 3).await;
    cluster.leader_of(DELETED, 0).await;

    producer.abort().await.expect("abort");
    completed(&bootstrap, "CompleteAbort").await;
    let all: Vec<i32> = (0..PARTITIONS).collect();
    wait_until_stable(&bootstrap, KEPT, &all).await;
    assert_eq!(
        values(&bootstrap, KEPT, &all, Isolation::ReadCommitted).await,
        Vec::<String>::new(),
        "aborted"
    );
    // The new incarnation holds the lone ABORT only: one offset, nothing open.
    let ends = wait_until_stable(&bootstrap, DELETED, &[0]).await;
    assert_eq!(ends, vec![1], "DELETED-0 holds the lone ABORT marker");
    assert_eq!(
        values(&bootstrap, DELETED, &[0], Isolation::ReadUncommitted).await,
        Vec::<String>::new(),
        "no record of the old incarnation"
    );

    // The id's next transaction writes both topics, the new incarnation included.
    producer.begin().expect("begin");
    send(&producer, DELETED, 0, "new-0").await;
    send(&producer, KEPT, 1, "kept-1").await;
    producer
        .commit()
        .await
        .expect("the next transaction commits");
    completed(&bootstrap, "CompleteCommit").await;
    wait_until_stable(&bootstrap, DELETED, &[0]).await;
    assert_eq!(
        values(&bootstrap, DELETED, &[0], Isolation::ReadCommitted).await,
        vec!["new-0"]
    );
    wait_until_stable(&bootstrap, KEPT, &all).await;
    assert_eq!(
        values(&bootstrap, KEPT, &all, Isolation::ReadCommitted).await,
        vec!["kept-1"]
    );
}
