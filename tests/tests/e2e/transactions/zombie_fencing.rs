//! Zombie fencing: a second instance with the same transactional id fences the first;
//! nothing the zombie wrote in its open transaction ever becomes visible.

use idem_client::{ClientError, ErrorCode, Isolation, ProducerRecord};
use idem_tests::txn::{self, values, wait_until_stable};
use idem_tests::Cluster;

const TOPIC: &str = "payments";

fn is_fenced(error: &ClientError) -> bool {
    matches!(
        error.code(),
        Some(ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_newer_instance_when_the_zombie_sends_and_commits_then_both_are_fenced_and_its_data_stays_invisible(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, 2, 1).await;
    let bootstrap = cluster.bootstrap();

    let zombie = txn::producer(&bootstrap, "payment-service").await;
    zombie.begin().expect("begin");
    zombie
        .send(ProducerRecord::new(TOPIC, "zombie-1").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked before the new instance exists");
    let old_epoch = zombie.producer_id().expect("initialised").producer_epoch;

    let fresh = txn::producer(&bootstrap, "payment-service").await;
    let fresh_id = fresh.producer_id().expect("initialised");
    assert!(
        fresh_id.producer_epoch > old_epoch + 1,
        "the takeover aborted under a new epoch, then bumped again"
    );

    // The zombie's next write, to a partition it already wrote and to a new one.
    for partition in [0, 1] {
        let outcome = match zombie
            .send(ProducerRecord::new(TOPIC, format!("zombie-p{partition}")).partition(partition))
            .await
        {
            Ok(delivery) => delivery.await.map(|_| ()),
            Err(e) => Err(e),
        };
        let error = outcome.expect_err("a fenced producer cannot write");
        assert!(is_fenced(&error), "partition {partition}: {error}");
    }
    let error = zombie
        .commit()
        .await
        .expect_err("a fenced producer cannot commit");
    assert!(is_fenced(&error), "{error}");

    fresh.begin().expect("begin");
    fresh
        .send(ProducerRecord::new(TOPIC, "fresh-1").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    fresh.commit().await.expect("commit");

    wait_until_stable(&bootstrap, TOPIC, &[0, 1]).await;
    assert_eq!(
        values(&bootstrap, TOPIC, &[0, 1], Isolation::ReadCommitted).await,
        vec!["fresh-1"]
    );
    assert_eq!(
        values(&bootstrap, TOPIC, &[0, 1], Isolation::ReadUncommitted).await,
        vec!["zombie-1", "fresh-1"],
        "the zombie's one acknowledged record is in the log, aborted"
    );
}
