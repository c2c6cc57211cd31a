//! Bad transactional requests get a clear error and change nothing: timeouts out of
//! range, unknown ids, stale epochs, unknown topics, the wrong coordinator, and markers
//! and transaction-log writes from a coordinator epoch the partition has already seen
//! superseded.

use idem_proto::txn::{txn_log_partition, TXN_LOG_TOPIC};
use idem_proto::v1::{
    AddPartitionsToTxnRequest, ControlType, DescribeTransactionRequest, EndTxnRequest,
    TxnTopicPartitions,
};
use idem_proto::ErrorCode;
use idem_tests::cluster::TXN_LOG_PARTITIONS;
use idem_tests::raw::{self, Marker};
use idem_tests::txn::{self, RawCoordinator};
use idem_tests::Cluster;

const TOPIC: &str = "accounts";

fn partitions(topic: &str, partition: i32) -> Vec<TxnTopicPartitions> {
    vec![TxnTopicPartitions {
        topic: topic.into(),
        partitions: vec![partition],
    }]
}

async fn init(
    coordinator: &mut RawCoordinator,
    id: &str,
    timeout_ms: i32,
) -> (ErrorCode, i64, i32) {
    let answer = txn::init_producer_id(coordinator, id, timeout_ms, None).await;
    (
        answer.error_code(),
        answer.producer_id,
        answer.producer_epoch,
    )
}

async fn add(
    coordinator: &mut RawCoordinator,
    id: &str,
    producer_id: i64,
    epoch: i32,
    topic: &str,
) -> ErrorCode {
    coordinator
        .add_partitions_to_txn(AddPartitionsToTxnRequest {
            transactional_id: id.into(),
            producer_id,
            producer_epoch: epoch,
            topics: partitions(topic, 0),
        })
        .await
        .expect("AddPartitionsToTxn")
        .into_inner()
        .error_code()
}

async fn end(
    coordinator: &mut RawCoordinator,
    id: &str,
    producer_id: i64,
    epoch: i32,
    commit: bool,
) -> (ErrorCode, i32) {
    let answer = coordinator
        .end_txn(EndTxnRequest {
            transactional_id: id.into(),
            producer_id,
            producer_epoch: epoch,
            commit,
            keep_epoch: false,
        })
        .await
        .expect("EndTxn")
        .into_inner();
    (answer.error_code(), answer.producer_epoch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_bad_transactional_requests_then_each_gets_its_error_and_nothing_changes() {
    let cluster = Cluster::start_with_coordinators(1, 2, &[], &[]).await;
    cluster.create_topic(TOPIC, 1, 1).await;
    let bootstrap = cluster.bootstrap();
    let id = "ledger-service";
    let owner = txn::find_coordinator(&bootstrap, id).await;
    let mut coordinator = txn::coordinator_client(&owner.address)
        .await
        .expect("coordinator");

    // Timeouts out of range: refused, and the id is not created.
    for timeout_ms in [0, -5, i32::MAX] {
        let (code, _, _) = init(&mut coordinator, id, timeout_ms).await;
        assert_eq!(
            code,
            ErrorCode::InvalidTransactionTimeout,
            "timeout {timeout_ms}"
        );
    }
    let described = coordinator
        .describe_transaction(DescribeTransactionRequest {
            transactional_id: id.into(),
        })
        .await
        .expect("DescribeTransaction")
        .into_inner();
    assert_eq!(described.error_code(), ErrorCode::TransactionalIdNotFound);

    // An id nobody initialised, asked of its own coordinator.
    let stranger = txn::find_coordinator(&bootstrap, "never-initialised").await;
    let mut stranger_owner = txn::coordinator_client(&stranger.address)
        .await
        .expect("coordinator");
    assert_eq!(
        add(&mut stranger_owner, "never-initialised", 1, 0, TOPIC).await,
        ErrorCode::InvalidProducerIdMapping
    );
    assert_eq!(
        end(&mut stranger_owner, "never-initialised", 1, 0, true)
            .await
            .0,
        ErrorCode::InvalidProducerIdMapping
    );

    let (code, producer_id, stale_epoch) = init(&mut coordinator, id, 60_000).await;
    assert_eq!(code, ErrorCode::None);
    // A second instance moves the id to the next epoch.
    let (code, same_id, epoch) = init(&mut coordinator, id, 60_000).await;
    assert_eq!(
        (code, same_id, epoch),
        (ErrorCode::None, producer_id, stale_epoch + 1)
    );
    // Wrong producer id, stale epoch, nothing open to end.
    assert_eq!(
        add(&mut coordinator, id, producer_id + 1, epoch, TOPIC).await,
        ErrorCode::InvalidProducerIdMapping
    );
    assert_eq!(
        add(&mut coordinator, id, producer_id, stale_epoch, TOPIC).await,
        ErrorCode::ProducerFenced
    );
    assert_eq!(
        end(&mut coordinator, id, producer_id, epoch, true).await.0,
        ErrorCode::InvalidTxnState
    );
    // A topic that does not exist is refused before it becomes part of the transaction.
    assert_eq!(
        add(&mut coordinator, id, producer_id, epoch, "no-such-topic").await,
        ErrorCode::UnknownTopicOrPartition
    );

    // The wrong coordinator says so.
    let other = if owner.coordinator_id == 1 { 2 } else { 1 };
    let mut wrong = txn::coordinator_client(&cluster.coordinator(other).bootstrap())
        .await
        .expect("coordinator");
    assert_eq!(
        init(&mut wrong, id, 60_000).await.0,
        ErrorCode::NotCoordinator
    );

    // After all of that, the transaction works.
    assert_eq!(
        add(&mut coordinator, id, producer_id, epoch, TOPIC).await,
        ErrorCode::None
    );
    let (code, next_epoch) = end(&mut coordinator, id, producer_id, epoch, true).await;
    assert_eq!((code, next_epoch), (ErrorCode::None, epoch + 1));
    txn::wait_until_stable(&bootstrap, TOPIC, &[0]).await;

    // A marker from an older coordinator epoch than the last one this producer's
    // partition saw is refused and appends nothing.
    let mut broker = raw::connect(&bootstrap).await;
    let before = txn::wait_until_stable(&bootstrap, TOPIC, &[0]).await;
    let stale = Marker {
        topic: TOPIC,
        partition: 0,
        producer_id,
        producer_epoch: next_epoch + 1,
        control: ControlType::Abort,
        coordinator_epoch: owner.coordinator_epoch - 1,
    };
    let answer = raw::write_marker(&mut broker, stale).await;
    assert_eq!(
        answer.error_code(),
        ErrorCode::TransactionCoordinatorFenced,
        "{}",
        answer.error_message
    );
    assert_eq!(
        txn::wait_until_stable(&bootstrap, TOPIC, &[0]).await,
        before
    );

    // A transaction-log write from a lower coordinator epoch than the owner's (the
    // writer's producer epoch is the coordinator epoch) is refused and appends nothing.
    let log_partition = txn_log_partition(id, TXN_LOG_PARTITIONS);
    let batches = raw::read_batches(&mut broker, TXN_LOG_TOPIC, log_partition).await;
    let (last, _) = batches
        .last()
        .expect("the owner wrote its partition of the log");
    assert_eq!(
        i32::from(last.producer_epoch),
        owner.coordinator_epoch,
        "the log is written under the coordinator epoch"
    );
    let stale = raw::produce_as_coordinator(
        &mut broker,
        TXN_LOG_TOPIC,
        log_partition,
        raw::idempotent_batch(last.producer_id, last.producer_epoch - 1, 0, &["stale"]),
        i32::from(last.producer_epoch) - 1,
    )
    .await;
    // The broker knows the owner's epoch from etcd; were its catalog behind, the
    // partition's producer state would refuse the older epoch instead.
    assert!(
        matches!(
            stale.error_code(),
            ErrorCode::TransactionCoordinatorFenced | ErrorCode::InvalidProducerEpoch
        ),
        "{:?}: {}",
        stale.error_code(),
        stale.error_message
    );
    let after = raw::read_batches(&mut broker, TXN_LOG_TOPIC, log_partition).await;
    assert_eq!(after.len(), batches.len(), "nothing appended");
}
