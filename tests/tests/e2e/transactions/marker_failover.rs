//! A partition leader killed while the commit markers are being written: the
//! coordinator keeps retrying, the marker lands on the new leader, and the transaction
//! becomes visible there whole and once.

use idem_client::{Isolation, ProducerRecord};
use idem_tests::txn::{self, values, wait_until_stable};
use idem_tests::Cluster;

const TOPIC: &str = "ledger";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_markers_in_flight_when_the_partition_leader_is_killed_then_the_commit_completes_on_the_new_leader(
) {
    let mut cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, 1, 3).await;
    let leader = cluster.leader_of(TOPIC, 0).await;
    // Clients bootstrap from a broker that stays up.
    let bootstrap = cluster
        .broker(cluster.observer(&[leader.leader_id]))
        .bootstrap();
    let producer = txn::producer(&bootstrap, "ledger-writer").await;

    producer.begin().expect("begin");
    let mut acked = Vec::new();
    for value in ["entry-1", "entry-2", "entry-3"] {
        let written = producer
            .send(ProducerRecord::new(TOPIC, value).partition(0))
            .await
            .expect("send")
            .await
            .expect("acked by every in-sync replica");
        acked.push(written.offset);
    }
    // Frozen, the leader takes the marker request and never answers it.
    cluster.pause(leader.leader_id);
    producer.commit().await.expect("commit decided");
    cluster.kill(leader.leader_id);
    let successor = cluster.new_leader(TOPIC, 0, &leader).await;
    assert_ne!(successor.leader_id, leader.leader_id);

    wait_until_stable(&bootstrap, TOPIC, &[0]).await;
    let read = txn::read(&bootstrap, TOPIC, &[0], Isolation::ReadCommitted).await;
    let offsets: Vec<i64> = read.iter().map(|r| r.offset).collect();
    assert_eq!(
        offsets, acked,
        "every acknowledged record at its acknowledged offset"
    );
    assert_eq!(
        values(&bootstrap, TOPIC, &[0], Isolation::ReadCommitted).await,
        vec!["entry-1", "entry-2", "entry-3"]
    );
}
