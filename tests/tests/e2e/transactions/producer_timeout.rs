//! A producer that dies inside a transaction: the coordinator aborts the transaction
//! once its timeout passes (bumping the epoch), the LSO moves on, and read_committed
//! consumers see what other producers committed behind it.

use std::time::{Duration, Instant};

use idem_client::{Admin, Isolation, ProducerRecord};
use idem_proto::v1::DescribeTransactionRequest;
use idem_tests::txn::{self, values, wait_until_stable};
use idem_tests::Cluster;

const TOPIC: &str = "shipments";
const TIMEOUT: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_producer_gone_mid_transaction_when_its_timeout_passes_then_the_coordinator_aborts_and_the_lso_advances(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, 1, 1).await;
    let bootstrap = cluster.bootstrap();

    let started = Instant::now();
    let abandoned = txn::producer_with_timeout(&bootstrap, "abandoned", TIMEOUT).await;
    abandoned.begin().expect("begin");
    let stuck_at = abandoned
        .send(ProducerRecord::new(TOPIC, "abandoned-1").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked")
        .offset;
    let abandoned_epoch = abandoned.producer_id().expect("initialised").producer_epoch;
    // The process dies: no commit, no abort, no further request.
    drop(abandoned);

    let other = txn::producer(&bootstrap, "still-alive").await;
    other.begin().expect("begin");
    other
        .send(ProducerRecord::new(TOPIC, "after-1").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    other.commit().await.expect("commit");

    // Until the timeout, the abandoned transaction holds the LSO at its start.
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    let (_, lso) = txn::offsets(&admin, TOPIC, 0).await;
    if started.elapsed() < TIMEOUT {
        assert!(
            lso <= stuck_at,
            "LSO {lso} passed the open transaction at {stuck_at}"
        );
    }

    wait_until_stable(&bootstrap, TOPIC, &[0]).await;
    assert!(
        started.elapsed() >= TIMEOUT,
        "the transaction was aborted before its timeout ({:?})",
        started.elapsed()
    );
    assert_eq!(
        values(&bootstrap, TOPIC, &[0], Isolation::ReadCommitted).await,
        vec!["after-1"]
    );

    let coordinator = txn::find_coordinator(&bootstrap, "abandoned").await;
    let mut client = txn::coordinator_client(&coordinator.address)
        .await
        .expect("coordinator");
    let described = client
        .describe_transaction(DescribeTransactionRequest {
            transactional_id: "abandoned".into(),
        })
        .await
        .expect("DescribeTransaction")
        .into_inner()
        .transaction
        .expect("described");
    assert_eq!(described.state, "CompleteAbort");
    assert!(
        described.producer_epoch > i32::from(abandoned_epoch),
        "the abort bumped the epoch, fencing the producer if it comes back"
    );
}
