//! No hanging transactions: a transactional batch that arrives after its transaction
//! was aborted (held back in the network by the test), or that targets a partition the
//! coordinator never registered, is refused; nothing is left open and the LSO always
//! catches up with the high watermark.

use idem_client::Isolation;
use idem_proto::v1::{AddPartitionsToTxnRequest, EndTxnRequest, TxnTopicPartitions};
use idem_proto::ErrorCode;
use idem_tests::txn::{self, values, wait_until_stable, RawCoordinator};
use idem_tests::{raw, Cluster, FaultyProxy};

const TOPIC: &str = "reservations";
const ID: &str = "reservation-service";

async fn add_partition(
    coordinator: &mut RawCoordinator,
    producer_id: i64,
    epoch: i32,
    partition: i32,
) {
    let answer = coordinator
        .add_partitions_to_txn(AddPartitionsToTxnRequest {
            transactional_id: ID.into(),
            producer_id,
            producer_epoch: epoch,
            topics: vec![TxnTopicPartitions {
                topic: TOPIC.into(),
                partitions: vec![partition],
            }],
        })
        .await
        .expect("AddPartitionsToTxn")
        .into_inner();
    assert_eq!(
        answer.error_code(),
        ErrorCode::None,
        "{}",
        answer.error_message
    );
}

async fn end(coordinator: &mut RawCoordinator, producer_id: i64, epoch: i32, commit: bool) -> i32 {
    let answer = coordinator
        .end_txn(EndTxnRequest {
            transactional_id: ID.into(),
            producer_id,
            producer_epoch: epoch,
            commit,
            keep_epoch: false,
        })
        .await
        .expect("EndTxn")
        .into_inner();
    assert_eq!(
        answer.error_code(),
        ErrorCode::None,
        "{}",
        answer.error_message
    );
    answer.producer_epoch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_batch_delayed_past_its_abort_or_for_an_unregistered_partition_then_it_is_refused_and_the_lso_catches_up(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, 2, 1).await;
    let bootstrap = cluster.broker(1).bootstrap();
    let proxy = FaultyProxy::start(cluster.broker(1).addr()).await;

    let found = txn::find_coordinator(&bootstrap, ID).await;
    let mut coordinator = txn::coordinator_client(&found.address)
        .await
        .expect("coordinator");
    let init = txn::init_producer_id(&mut coordinator, ID, 60_000, None).await;
    assert_eq!(init.error_code(), ErrorCode::None, "{}", init.error_message);
    let (producer_id, epoch) = (init.producer_id, init.producer_epoch);
    let epoch16 = i16::try_from(epoch).expect("epoch fits");

    add_partition(&mut coordinator, producer_id, epoch, 0).await;
    let mut direct = raw::connect(&bootstrap).await;
    let on_time = raw::produce(
        &mut direct,
        TOPIC,
        0,
        raw::transactional_batch(producer_id, epoch16, 0, &["on-time"]),
    )
    .await;
    assert_eq!(
        on_time.error_code(),
        ErrorCode::None,
        "{}",
        on_time.error_message
    );

    // The next batch of the transaction is held in the network...
    proxy.hold_next_request();
    let mut via_proxy = raw::connect(&proxy.bootstrap()).await;
    let late = tokio::spawn(async move {
        raw::produce(
            &mut via_proxy,
            TOPIC,
            0,
            raw::transactional_batch(producer_id, epoch16, 1, &["late"]),
        )
        .await
    });
    proxy.wait_held_requests(1).await;
    // ...while the transaction is aborted and its marker written.
    let next_epoch = end(&mut coordinator, producer_id, epoch, false).await;
    assert_eq!(next_epoch, epoch + 1);
    wait_until_stable(&bootstrap, TOPIC, &[0]).await;

    proxy.release_held();
    let answer = late.await.expect("late produce task");
    assert_eq!(
        answer.error_code(),
        ErrorCode::InvalidProducerEpoch,
        "the abort marker's epoch fences the late batch: {}",
        answer.error_message
    );
    let ends = wait_until_stable(&bootstrap, TOPIC, &[0]).await;
    assert_eq!(
        values(&bootstrap, TOPIC, &[0], Isolation::ReadUncommitted).await,
        vec!["on-time"]
    );
    assert_eq!(
        values(&bootstrap, TOPIC, &[0], Isolation::ReadCommitted).await,
        Vec::<String>::new()
    );

    // A new transaction registers partition 0 only; a batch for partition 1 is refused
    // and appends nothing, so nothing can hold partition 1's LSO.
    add_partition(&mut coordinator, producer_id, next_epoch, 0).await;
    let next16 = i16::try_from(next_epoch).expect("epoch fits");
    let unregistered = raw::produce(
        &mut direct,
        TOPIC,
        1,
        raw::transactional_batch(producer_id, next16, 0, &["unregistered"]),
    )
    .await;
    assert_eq!(
        unregistered.error_code(),
        ErrorCode::InvalidTxnState,
        "{}",
        unregistered.error_message
    );
    // A producer id no coordinator ever gave out is refused the same way.
    let stranger = raw::produce(
        &mut direct,
        TOPIC,
        1,
        raw::transactional_batch(producer_id + 1_000_000, 0, 0, &["stranger"]),
    )
    .await;
    assert_eq!(
        stranger.error_code(),
        ErrorCode::InvalidTxnState,
        "{}",
        stranger.error_message
    );
    assert_eq!(
        wait_until_stable(&bootstrap, TOPIC, &[1]).await,
        vec![0],
        "partition 1 stays empty"
    );

    end(&mut coordinator, producer_id, next_epoch, false).await;
    let after = wait_until_stable(&bootstrap, TOPIC, &[0]).await;
    assert!(
        after[0] > ends[0],
        "the BEGIN and ABORT markers of the second transaction were written"
    );
}
