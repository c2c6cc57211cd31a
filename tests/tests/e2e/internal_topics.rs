//! Internal topics (`__…`) hold the coordinators' state: a client can neither create nor
//! write them, so no batch a coordinator did not write can make a slice of the
//! transaction log unloadable; the owning coordinator's own appends keep working.

use bytes::Bytes;
use idem_client::Isolation;
use idem_proto::batch::{self, ProducerInfo};
use idem_proto::txn::{txn_log_partition, TXN_LOG_TOPIC};
use idem_proto::v1::{CreatableTopic, CreateTopicsRequest, PartitionProduceResponse};
use idem_proto::ErrorCode;
use idem_tests::cluster::TXN_LOG_PARTITIONS;
use idem_tests::raw::{self, RawClient};
use idem_tests::{txn, Cluster};

const TOPIC: &str = "payments";

async fn produce_declared(
    client: &mut RawClient,
    partition: i32,
    records: Bytes,
    coordinator_epoch: Option<i32>,
) -> PartitionProduceResponse {
    match coordinator_epoch {
        None => raw::produce(client, TXN_LOG_TOPIC, partition, records).await,
        Some(epoch) => {
            raw::produce_as_coordinator(client, TXN_LOG_TOPIC, partition, records, epoch).await
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_client_when_it_writes_the_transaction_log_then_invalid_topic_and_the_coordinator_still_loads_it(
) {
    let mut cluster = Cluster::start_with_coordinators(1, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, 1, 1).await;
    let bootstrap = cluster.bootstrap();
    let id = "refunds";
    let producer = txn::producer(&bootstrap, id).await;
    txn::commit_one(&producer, TOPIC, "first")
        .await
        .expect("a transaction commits");
    // The commit is answered once PrepareCommit is persisted; CompleteCommit is appended
    // after the markers: wait for it, so the log end below is the coordinator's last.
    txn::wait_for_description(&bootstrap, id, "completed the commit", |t| {
        t.state == "CompleteCommit"
    })
    .await;
    let log_partition = txn_log_partition(id, TXN_LOG_PARTITIONS);
    let mut client = raw::connect(&cluster.broker(1).bootstrap()).await;
    let before = raw::read_batches(&mut client, TXN_LOG_TOPIC, log_partition).await;
    let (writer, _) = before.last().expect("the owner wrote its partition");
    let (writer_id, epoch) = (writer.producer_id, writer.producer_epoch);

    // The probe of issue 21: a plain batch, then an idempotent one of a fresh producer.
    for records in [
        batch::encode(ProducerInfo::NONE, 0, &raw::records(&["not json"])),
        raw::idempotent_batch(writer_id + 1000, 0, 0, &["not json"]),
    ] {
        let answer = produce_declared(&mut client, log_partition, records, None).await;
        assert_eq!(
            answer.error_code(),
            ErrorCode::InvalidTopicException,
            "{}",
            answer.error_message
        );
        assert!(
            answer.error_message.contains(TXN_LOG_TOPIC),
            "the message names the topic: {}",
            answer.error_message
        );
    }
    // A forged declaration disagrees with the ownership keys in etcd.
    let stale = produce_declared(
        &mut client,
        log_partition,
        raw::idempotent_batch(writer_id, epoch - 1, 0, &["stale"]),
        Some(i32::from(epoch) - 1),
    )
    .await;
    assert_eq!(
        stale.error_code(),
        ErrorCode::TransactionCoordinatorFenced,
        "{}",
        stale.error_message
    );
    let stranger = produce_declared(
        &mut client,
        log_partition,
        raw::idempotent_batch(writer_id + 1000, epoch, 0, &["stranger"]),
        Some(i32::from(epoch)),
    )
    .await;
    assert_eq!(
        stranger.error_code(),
        ErrorCode::InvalidTopicException,
        "{}",
        stranger.error_message
    );
    let after = raw::read_batches(&mut client, TXN_LOG_TOPIC, log_partition).await;
    assert_eq!(after.len(), before.len(), "nothing appended");
    assert_eq!(
        after.last().map(|(h, _)| h.next_offset()),
        before.last().map(|(h, _)| h.next_offset()),
        "the log end did not move"
    );

    // Nor can a client create another internal topic.
    let created = client
        .create_topics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: "__consumer_offsets".into(),
                num_partitions: 1,
                replication_factor: 1,
                unclean_leader_election: false,
                coordinator_id: None,
                configs: Vec::new(),
            }],
        })
        .await
        .expect("CreateTopics")
        .into_inner();
    assert_eq!(
        created.topics[0].error_code(),
        ErrorCode::InvalidTopicException
    );

    // A restarted coordinator loads the partition again and serves the id.
    drop(producer);
    cluster.kill_coordinator(1);
    cluster.restart_coordinator(1);
    cluster.wait_for_coordinators().await;
    let producer = txn::producer(&bootstrap, id).await;
    txn::commit_one(&producer, TOPIC, "second")
        .await
        .expect("the reloaded coordinator commits");
    assert_eq!(
        txn::values(&bootstrap, TOPIC, &[0], Isolation::ReadCommitted).await,
        vec!["first".to_string(), "second".to_string()]
    );
}
