//! A producer that dies inside a transaction: the coordinator aborts the transaction
//! once its timeout passes (bumping the epoch), the LSO moves on, and read_committed
//! consumers see what other producers committed behind it. Once with an SDK producer
//! that stops sending, once with an `idem produce` process SIGKILLed mid-transaction.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use idem_client::{Admin, Consumer, ConsumerConfig, Isolation, ProducerRecord};
use idem_tests::binaries::binary;
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

    let described = txn::describe(&bootstrap, "abandoned")
        .await
        .expect("described");
    assert_eq!(described.state, "CompleteAbort");
    assert!(
        described.producer_epoch > i32::from(abandoned_epoch),
        "the abort bumped the epoch, fencing the producer if it comes back"
    );
}

/// The same with a real process: `idem produce --transactional-id` is SIGKILLed while
/// its transaction is open and its records are in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_producer_process_killed_mid_transaction_then_its_records_are_aborted_after_the_timeout(
) {
    const KILLED_TOPIC: &str = "killed-shipments";
    let cluster = Cluster::start_with_coordinators(1, 1, &[], &[]).await;
    cluster.create_topic(KILLED_TOPIC, 1, 1).await;
    let bootstrap = cluster.bootstrap();

    let started = Instant::now();
    let mut child = Command::new(binary("idem"))
        .args(["--bootstrap", &bootstrap, "produce", KILLED_TOPIC])
        .args(["--transactional-id", "killed", "--commit-every", "1000"])
        .args(["--transaction-timeout-ms", &TIMEOUT.as_millis().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn idem produce");
    // Stdin stays open: the transaction is never ended by the process itself.
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(b"killed-1\nkilled-2\nkilled-3\n")
        .expect("write stdin");
    stdin.flush().expect("flush stdin");

    // Wait until its three records are in the log (read_uncommitted sees them).
    let config = ConsumerConfig {
        isolation: Isolation::ReadUncommitted,
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::connect(&bootstrap, config)
        .await
        .expect("consumer");
    consumer.assign(vec![(KILLED_TOPIC.to_string(), 0)]);
    consumer.seek_to_beginning(KILLED_TOPIC, 0).expect("seek");
    let mut seen = Vec::new();
    while seen.len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the producer's records never reached the log: {seen:?}"
        );
        let polled = consumer.poll(Duration::from_secs(5)).await.expect("poll");
        seen.extend(polled.iter().map(idem_tests::sdk::value));
    }
    assert_eq!(seen, vec!["killed-1", "killed-2", "killed-3"]);
    child.kill().expect("SIGKILL idem produce");
    child.wait().expect("reap idem produce");
    drop(stdin);

    let other = txn::producer(&bootstrap, "still-alive").await;
    other.begin().expect("begin");
    other
        .send(ProducerRecord::new(KILLED_TOPIC, "after-1").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    other.commit().await.expect("commit");

    wait_until_stable(&bootstrap, KILLED_TOPIC, &[0]).await;
    assert!(
        started.elapsed() >= TIMEOUT,
        "the transaction was aborted before its timeout ({:?})",
        started.elapsed()
    );
    assert_eq!(
        values(&bootstrap, KILLED_TOPIC, &[0], Isolation::ReadCommitted).await,
        vec!["after-1"],
        "nothing of the killed transaction is visible"
    );
    assert_eq!(
        values(&bootstrap, KILLED_TOPIC, &[0], Isolation::ReadUncommitted).await,
        vec!["killed-1", "killed-2", "killed-3", "after-1"],
        "its records stay in the log, aborted"
    );
    let described = txn::describe(&bootstrap, "killed")
        .await
        .expect("described");
    assert_eq!(described.state, "CompleteAbort");
}
