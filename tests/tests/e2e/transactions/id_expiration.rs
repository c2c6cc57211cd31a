//! A transactional id idle past `--transactional-id-expiration-ms` is retired: the
//! coordinator persists it as Dead and forgets it, a restarted coordinator does not
//! bring it back, the old producer instance gets a fatal error, and the id's next
//! InitProducerId starts afresh with a new producer id.

use std::time::{Duration, Instant};

use idem_client::{Isolation, ProducerRecord, TxnErrorClass};
use idem_proto::ErrorCode;
use idem_tests::txn::{self, values, wait_until_stable};
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::Cluster;

const TOPIC: &str = "retired";
const EXPIRATION: Duration = Duration::from_millis(1500);
const ID: &str = "short-lived";

/// What DescribeTransaction says of `ID`: its state, or the refusal's code.
async fn describe(bootstrap: &str) -> Result<String, ErrorCode> {
    txn::describe(bootstrap, ID).await.map(|t| t.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_idle_transactional_id_when_its_expiration_passes_then_it_is_retired_durably_and_starts_afresh(
) {
    let expiration = EXPIRATION.as_millis().to_string();
    // The harness already checks every 100 ms (--txn-check-interval-ms).
    let coordinator_args = ["--transactional-id-expiration-ms", expiration.as_str()];
    let mut cluster = Cluster::start_with_coordinators(1, 1, &[], &coordinator_args).await;
    cluster.create_topic(TOPIC, 1, 1).await;
    let bootstrap = cluster.bootstrap();

    let first = txn::producer(&bootstrap, ID).await;
    let old = first.producer_id().expect("initialised");
    first.begin().expect("begin");
    first
        .send(ProducerRecord::new(TOPIC, "first").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    first.commit().await.expect("commit");
    let committed_at = Instant::now();
    // commit() returns once PrepareCommit is persisted; the markers follow.
    let settled = |state: &str| ["PrepareCommit", "CompleteCommit"].contains(&state);
    let state = describe(&bootstrap).await.expect("described");
    assert!(settled(&state), "{state}");

    // The coordinator's timer retires it once it has been idle past the expiration.
    wait_until(PATIENCE, "the idle id retired", || async {
        match describe(&bootstrap).await {
            Ok(state) => {
                assert!(settled(&state), "{state}");
                Seen::Not(state)
            }
            Err(code) => {
                assert_eq!(code, ErrorCode::TransactionalIdNotFound);
                Seen::Reached(())
            }
        }
    })
    .await;
    assert!(
        committed_at.elapsed() >= EXPIRATION,
        "retired after {:?}, before its expiration",
        committed_at.elapsed()
    );

    // Retirement is in the log: a restarted coordinator reloads it as gone.
    cluster.kill_coordinator(1);
    cluster.restart_coordinator(1);
    cluster.wait_for_coordinators().await;
    assert_eq!(
        describe(&bootstrap).await,
        Err(ErrorCode::TransactionalIdNotFound)
    );

    // The old instance's producer id no longer maps to the id: fatal.
    first.begin().expect("begin");
    let refused = match first
        .send(ProducerRecord::new(TOPIC, "zombie").partition(0))
        .await
    {
        Err(e) => e,
        Ok(delivery) => match delivery.await {
            Err(e) => e,
            Ok(_) => first
                .commit()
                .await
                .expect_err("a retired producer id commits"),
        },
    };
    assert_eq!(refused.txn_class(), TxnErrorClass::Fatal, "{refused}");

    // A new instance starts afresh under a new producer id and commits.
    let second = txn::producer(&bootstrap, ID).await;
    let fresh = second.producer_id().expect("initialised");
    assert_ne!(fresh.producer_id, old.producer_id);
    assert_eq!(fresh.producer_epoch, 0);
    second.begin().expect("begin");
    second
        .send(ProducerRecord::new(TOPIC, "second").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    second.commit().await.expect("commit");
    wait_until_stable(&bootstrap, TOPIC, &[0]).await;
    assert_eq!(
        values(&bootstrap, TOPIC, &[0], Isolation::ReadCommitted).await,
        vec!["first", "second"]
    );
}
