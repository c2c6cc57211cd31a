//! KIP-447's first step: AddOffsetsToTxn adds the group's `__consumer_offsets`
//! partition to the producer's transaction, which opens it there with a BEGIN marker
//! and ends it with the transaction's COMMIT or ABORT, like any partition: nothing is
//! left hanging in the offsets partition, and a stale producer is refused.

use idem_client::ProducerRecord;
use idem_proto::txn::{txn_log_partition, OFFSETS_TOPIC};
use idem_proto::v1::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, ControlType,
    ListOpenTransactionsRequest, TxnTopicPartitions,
};
use idem_proto::{batch, control, ErrorCode};
use idem_tests::cluster::TXN_LOG_PARTITIONS;
use idem_tests::txn;
use idem_tests::{raw, replicas, Cluster};

const OUT: &str = "out";
const GROUP: &str = "processors";

/// The producer ids with a transaction open in the group's offsets partition, as its
/// leader holds them.
async fn open_in_offsets_partition(cluster: &Cluster, partition: i32) -> Vec<i64> {
    let leader = cluster.leader_of(OFFSETS_TOPIC, partition).await.leader_id;
    let mut client = raw::connect(&cluster.broker(leader).bootstrap()).await;
    client
        .list_open_transactions(ListOpenTransactionsRequest {
            topics: vec![OFFSETS_TOPIC.into()],
        })
        .await
        .expect("ListOpenTransactions")
        .into_inner()
        .transactions
        .into_iter()
        .filter(|t| t.partition == partition)
        .map(|t| t.producer_id)
        .collect()
}

async fn add_offsets(
    cluster: &Cluster,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i32,
) -> AddOffsetsToTxnResponse {
    let found = txn::find_coordinator(&cluster.bootstrap(), transactional_id).await;
    let mut coordinator = txn::coordinator_client(&found.address)
        .await
        .expect("coordinator");
    coordinator
        .add_offsets_to_txn(AddOffsetsToTxnRequest {
            transactional_id: transactional_id.into(),
            producer_id,
            producer_epoch,
            group_id: GROUP.into(),
        })
        .await
        .expect("AddOffsetsToTxn")
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_offsets_added_to_a_transaction_then_its_markers_open_and_end_it_in_the_groups_offsets_partition(
) {
    let mut cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    cluster.create_topic(OUT, 1, 3).await;
    let producer = txn::producer(&cluster.bootstrap(), "pipeline-1").await;
    let offsets_partition = txn_log_partition(GROUP, TXN_LOG_PARTITIONS);

    for commit in [true, false] {
        producer.begin().expect("begin");
        producer
            .send(ProducerRecord::new(OUT, "x").partition(0))
            .await
            .expect("send")
            .await
            .expect("acked");
        let id = producer.producer_id().expect("initialized");
        let added = add_offsets(
            &cluster,
            "pipeline-1",
            id.producer_id,
            i32::from(id.producer_epoch),
        )
        .await;
        assert_eq!(
            added.error_code(),
            ErrorCode::None,
            "{}",
            added.error_message
        );
        // Its BEGIN opened the transaction in the group's offsets partition.
        assert_eq!(
            open_in_offsets_partition(&cluster, offsets_partition).await,
            [id.producer_id]
        );
        if commit {
            producer.commit().await.expect("commit");
        } else {
            producer.abort().await.expect("abort");
        }
        txn::wait_until_stable(&cluster.bootstrap(), OFFSETS_TOPIC, &[offsets_partition]).await;
    }

    // A producer epoch the coordinator moved past is refused, and opens nothing.
    let id = producer.producer_id().expect("initialized");
    let stale = add_offsets(
        &cluster,
        "pipeline-1",
        id.producer_id,
        i32::from(id.producer_epoch) - 1,
    )
    .await;
    assert!(
        matches!(
            stale.error_code(),
            ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch
        ),
        "{:?}: {}",
        stale.error_code(),
        stale.error_message
    );
    assert_eq!(
        open_in_offsets_partition(&cluster, offsets_partition).await,
        Vec::<i64>::new(),
        "nothing opened"
    );

    // The offsets partition cannot be added as a plain partition (no group named).
    let found = txn::find_coordinator(&cluster.bootstrap(), "pipeline-1").await;
    let mut coordinator = txn::coordinator_client(&found.address)
        .await
        .expect("coordinator");
    let direct = coordinator
        .add_partitions_to_txn(AddPartitionsToTxnRequest {
            transactional_id: "pipeline-1".into(),
            producer_id: id.producer_id,
            producer_epoch: i32::from(id.producer_epoch),
            topics: vec![TxnTopicPartitions {
                topic: OFFSETS_TOPIC.into(),
                partitions: vec![offsets_partition],
            }],
        })
        .await
        .expect("AddPartitionsToTxn")
        .into_inner();
    assert_eq!(direct.error_code(), ErrorCode::InvalidTopicException);
    assert!(
        direct.error_message.contains("AddOffsetsToTxn"),
        "{}",
        direct.error_message
    );
    assert_eq!(
        open_in_offsets_partition(&cluster, offsets_partition).await,
        Vec::<i64>::new(),
        "nothing opened"
    );

    // On disk: BEGIN, COMMIT, BEGIN, ABORT of the producer, nothing else of it.
    let leader = cluster
        .leader_of(OFFSETS_TOPIC, offsets_partition)
        .await
        .leader_id;
    cluster.stop_all();
    let dir = cluster
        .broker(leader)
        .data_dir()
        .join(format!("{OFFSETS_TOPIC}-{offsets_partition}"));
    let markers: Vec<ControlType> = replicas::batches_on_disk(&dir)
        .into_iter()
        // The group coordinator's own records (the fence it writes when it loads the
        // slice) are idempotent, not transactional: the producer's are markers only.
        .filter(|(_, bytes)| {
            let header = batch::decode_header(bytes).expect("header");
            header.is_transactional()
        })
        .map(|(_, bytes)| {
            let header = batch::decode_header(&bytes).expect("header");
            assert!(header.is_control(), "only markers so far: {header:?}");
            assert_eq!(header.producer_id, id.producer_id);
            control::decode_control(&bytes)
                .expect("marker")
                .control_type
        })
        .collect();
    assert_eq!(
        markers,
        [
            ControlType::Begin,
            ControlType::Commit,
            ControlType::Begin,
            ControlType::Abort
        ]
    );
}
