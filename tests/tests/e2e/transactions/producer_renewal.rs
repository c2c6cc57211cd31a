//! A running producer renews its own identity, as the SDK does when a commit leaves it
//! at the last epoch (32,767): InitProducerId naming its current producer id and epoch.
//! Against a real coordinator: the renewal moves the id on; a retry of it (its answer
//! lost) gets the same answer, also from a restarted coordinator that reloaded the log;
//! a renewal from an instance that another one replaced is PRODUCER_FENCED and changes
//! nothing. And the SDK itself: a producer whose commit reaches the last epoch goes on
//! under a fresh producer id, and every committed record is read back once.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use idem_client::{Isolation, ProducerRecord};
use idem_proto::ErrorCode;
use idem_tests::txn::{self, values, wait_until_stable};
use idem_tests::Cluster;

const ID: &str = "ledger-writer";

/// InitProducerId: `renewing` is the caller's own identity, `None` for a new instance.
async fn init(bootstrap: &str, renewing: Option<(i64, i32)>) -> (ErrorCode, i64, i32) {
    let owner = txn::find_coordinator(bootstrap, ID).await;
    let mut coordinator = txn::coordinator_client(&owner.address)
        .await
        .expect("coordinator");
    let answer = txn::init_producer_id(&mut coordinator, ID, 60_000, renewing).await;
    (
        answer.error_code(),
        answer.producer_id,
        answer.producer_epoch,
    )
}

async fn identity(bootstrap: &str) -> (i64, i32, String) {
    let described = txn::describe(bootstrap, ID).await.expect("described");
    (
        described.producer_id,
        described.producer_epoch,
        described.state,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_renewal_then_it_moves_the_id_on_a_retry_gets_the_same_answer_and_a_replaced_instance_is_fenced(
) {
    let mut cluster = Cluster::start_with_coordinators(1, 1, &[], &[]).await;
    let bootstrap = cluster.bootstrap();
    let (code, producer_id, epoch) = init(&bootstrap, None).await;
    assert_eq!((code, epoch), (ErrorCode::None, 0));

    let renewed = init(&bootstrap, Some((producer_id, 0))).await;
    assert_eq!(renewed, (ErrorCode::None, producer_id, 1));

    // The answer was lost; the coordinator restarts before the producer asks again.
    cluster.restart_coordinator(1);
    cluster.wait_for_coordinators().await;
    assert_eq!(init(&bootstrap, Some((producer_id, 0))).await, renewed);
    assert_eq!(
        identity(&bootstrap).await,
        (producer_id, 1, "Empty".to_string()),
        "the retry changed nothing"
    );

    // Another instance starts; the one it replaced cannot renew itself back.
    let (code, _, epoch) = init(&bootstrap, None).await;
    assert_eq!((code, epoch), (ErrorCode::None, 2));
    let (code, _, _) = init(&bootstrap, Some((producer_id, 1))).await;
    assert_eq!(code, ErrorCode::ProducerFenced);
    assert_eq!(
        identity(&bootstrap).await,
        (producer_id, 2, "Empty".to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_producer_whose_commit_takes_the_last_epoch_then_it_goes_on_under_a_fresh_producer_id(
) {
    const TOPIC: &str = "ledger";
    // 32,765 InitProducerIds: without an fsync each (what this test checks is the
    // epochs, not durability) they take a fraction of the time.
    let cluster = Cluster::start_with_coordinators(1, 1, &["--flush", "never"], &[]).await;
    cluster.create_topic(TOPIC, 1, 1).await;
    let bootstrap = cluster.bootstrap();
    // Earlier instances used up all but the last two epochs: each InitProducerId
    // bumps the epoch, as each commit does. The coordinator takes them one at a time;
    // a few in flight keep it busy.
    let owner = txn::find_coordinator(&bootstrap, ID).await;
    let coordinator = txn::coordinator_client(&owner.address)
        .await
        .expect("coordinator");
    let started = std::time::Instant::now();
    let calls = i32::from(i16::MAX) - 1; // epochs 0 to 32,765
    let issued = Arc::new(AtomicI32::new(0));
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let (mut coordinator, issued) = (coordinator.clone(), issued.clone());
            tokio::spawn(async move {
                while issued.fetch_add(1, Ordering::SeqCst) < calls {
                    let answer = txn::init_producer_id(&mut coordinator, ID, 60_000, None).await;
                    assert_eq!(answer.error_code(), ErrorCode::None);
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("caller");
    }
    let (_, epoch, _) = identity(&bootstrap).await;
    assert_eq!(epoch, i32::from(i16::MAX) - 2);
    eprintln!("{calls} InitProducerIds in {:?}", started.elapsed());

    // The SDK's instance starts at 32766; its first commit moves it to 32767. Pipelined
    // commits: the next transaction's record is handed over while that commit and the
    // renewal go on in the background, and leaves under the renewed identity.
    let producer = txn::producer(&bootstrap, ID).await;
    let first = producer.producer_id().expect("initialised");
    assert_eq!(i32::from(first.producer_epoch), i32::from(i16::MAX) - 1);
    producer.begin().expect("begin");
    let mut acks = Vec::new();
    for value in ["entry-1", "entry-2", "entry-3"] {
        let ack = producer
            .send(ProducerRecord::new(TOPIC, value).partition(0))
            .await
            .expect("send");
        acks.push(ack);
        if value != "entry-3" {
            let pending = producer.commit_and_begin().await.expect("sealed");
            let ack = producer
                .send(ProducerRecord::new(TOPIC, format!("{value}-after")).partition(0))
                .await
                .expect("send");
            acks.push(ack);
            pending.committed().await.expect("committed");
        }
    }
    producer.commit().await.expect("committed");
    for ack in acks {
        ack.await.expect("acked");
    }
    let now = producer.producer_id().expect("identity");
    assert_ne!(
        now.producer_id, first.producer_id,
        "renewed under a fresh id"
    );
    assert_eq!(now.producer_epoch, 2, "two commits since the renewal");

    wait_until_stable(&bootstrap, TOPIC, &[0]).await;
    assert_eq!(
        values(&bootstrap, TOPIC, &[0], Isolation::ReadCommitted).await,
        vec![
            "entry-1",
            "entry-1-after",
            "entry-2",
            "entry-2-after",
            "entry-3"
        ]
    );
}
