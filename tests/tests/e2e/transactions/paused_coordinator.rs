//! A coordinator paused past its lease loses its partitions to another; when it wakes
//! it can change nothing: it answers NOT_COORDINATOR for the ids it used to own, and the
//! transaction the producer committed through the new owner is visible once.

use idem_client::{Isolation, ProducerRecord};
use idem_proto::v1::EndTxnRequest;
use idem_proto::ErrorCode;
use idem_tests::txn::{self, values, wait_until_stable};
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::Cluster;

const TOPIC: &str = "invoices";
const ID: &str = "billing";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_coordinator_paused_past_its_lease_when_it_resumes_then_it_answers_not_coordinator_and_changes_nothing(
) {
    let cluster = Cluster::start_with_coordinators(1, 2, &[], &[]).await;
    cluster.create_topic(TOPIC, 1, 1).await;
    let bootstrap = cluster.bootstrap();
    let producer = txn::producer(&bootstrap, ID).await;
    let old = txn::find_coordinator(&bootstrap, ID).await;

    cluster.pause_coordinator(old.coordinator_id);
    // The other coordinator takes the id over once the paused one's lease lapses.
    let (new, _) = wait_until(PATIENCE, "another coordinator owns the id", || async {
        let found = txn::find_coordinator(&bootstrap, ID).await;
        let moved = found.coordinator_id != old.coordinator_id;
        seen_if(found, moved)
    })
    .await;
    assert!(new.coordinator_epoch > old.coordinator_epoch);

    txn::commit_one(&producer, TOPIC, "invoice-1")
        .await
        .expect("commit through the new owner");
    let epoch = producer.producer_id().expect("initialised");

    cluster.resume_coordinator(old.coordinator_id);
    let mut stale = txn::coordinator_client(&old.address)
        .await
        .expect("old coordinator");
    let init = txn::init_producer_id(&mut stale, ID, 60_000, None).await;
    assert_eq!(
        init.error_code(),
        ErrorCode::NotCoordinator,
        "{}",
        init.error_message
    );
    let end = stale
        .end_txn(EndTxnRequest {
            transactional_id: ID.into(),
            producer_id: epoch.producer_id,
            producer_epoch: i32::from(epoch.producer_epoch),
            commit: false,
            keep_epoch: false,
        })
        .await
        .expect("EndTxn")
        .into_inner();
    assert_eq!(
        end.error_code(),
        ErrorCode::NotCoordinator,
        "{}",
        end.error_message
    );

    // The producer's instance is still the current one: the next transaction commits.
    producer.begin().expect("begin");
    producer
        .send(ProducerRecord::new(TOPIC, "invoice-2").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    producer.commit().await.expect("commit");
    wait_until_stable(&bootstrap, TOPIC, &[0]).await;
    assert_eq!(
        values(&bootstrap, TOPIC, &[0], Isolation::ReadCommitted).await,
        vec!["invoice-1", "invoice-2"]
    );
}
