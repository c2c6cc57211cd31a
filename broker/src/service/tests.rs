//! The transaction RPCs of a single-node broker, called through the gRPC trait without a
//! network: WriteTxnMarkers per-partition results, FindCoordinator with and without
//! `--coordinator`, Metadata's coordinators and LSO, ListOpenTransactions, and the
//! isolation levels of ListOffsets; and `--null-produce`, which must check batches like
//! the real path and write nothing.

use idem_pidstore::SledPidStore;
use idem_proto::batch::{self, ProducerInfo, Record};
use idem_proto::v1::broker_server::Broker as _;
use idem_proto::v1::{
    ListOffsetsPartition, ListOffsetsTopic, PartitionProduceData, TopicProduceData,
    TxnTopicPartitions,
};

use super::*;
use crate::log::LogConfig;
use crate::partition::PartitionSettings;

struct Broker {
    service: BrokerService,
    _dir: tempfile::TempDir,
}

async fn broker(coordinator: Option<&str>) -> Broker {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = PartitionSettings {
        log: LogConfig::default(),
        max_batch_bytes: 1 << 20,
        producer_id_expiration_ms: 60_000,
    };
    let topics = TopicRegistry::open(dir.path(), 0, settings, 100).expect("registry");
    topics.create("orders", 2, 1, false).await.expect("create");
    let store = SledPidStore::open(dir.path().join("pidstore")).expect("pid store");
    let producer_ids = Arc::new(ProducerIdManager::new(Arc::new(store), 0));
    let service = BrokerService::new(
        0,
        "127.0.0.1:9092".into(),
        Arc::new(topics),
        producer_ids,
        1 << 20,
    )
    .with_coordinator(coordinator.map(str::to_string));
    Broker { service, _dir: dir }
}

fn markers(
    control_type: ControlType,
    producer_epoch: i32,
    partitions: &[(&str, i32)],
) -> WriteTxnMarkersRequest {
    WriteTxnMarkersRequest {
        producer_id: 42,
        producer_epoch,
        control_type: control_type as i32,
        coordinator_epoch: 3,
        topics: partitions
            .iter()
            .map(|(topic, p)| TxnTopicPartitions {
                topic: (*topic).into(),
                partitions: vec![*p],
            })
            .collect(),
        timeout_ms: 5_000,
    }
}

async fn write(b: &Broker, request: WriteTxnMarkersRequest) -> Vec<(i32, ErrorCode, i64)> {
    b.service
        .write_txn_markers(Request::new(request))
        .await
        .expect("answer")
        .into_inner()
        .results
        .into_iter()
        .map(|r| {
            let code = ErrorCode::try_from(r.error_code).expect("known code");
            (r.partition, code, r.offset)
        })
        .collect()
}

#[tokio::test]
async fn given_markers_then_each_partition_answers_for_itself() {
    let b = broker(None).await;
    let begin = markers(
        ControlType::Begin,
        0,
        &[("orders", 0), ("orders", 1), ("orders", 7), ("nope", 0)],
    );
    assert_eq!(
        write(&b, begin.clone()).await,
        vec![
            (0, ErrorCode::None, 0),
            (1, ErrorCode::None, 0),
            (7, ErrorCode::UnknownTopicOrPartition, -1),
            (0, ErrorCode::UnknownTopicOrPartition, -1),
        ]
    );
    // A retry appends nothing: offset -1, success.
    assert_eq!(write(&b, begin).await[0], (0, ErrorCode::None, -1));

    let open = b
        .service
        .list_open_transactions(Request::new(ListOpenTransactionsRequest::default()))
        .await
        .expect("answer")
        .into_inner()
        .transactions;
    assert_eq!(open.len(), 2);
    assert!(open
        .iter()
        .all(|t| t.producer_id == 42 && t.producer_epoch == 0 && t.first_offset == 0));

    let stale_coordinator = WriteTxnMarkersRequest {
        coordinator_epoch: 2,
        ..markers(ControlType::Commit, 1, &[("orders", 0)])
    };
    assert_eq!(
        write(&b, stale_coordinator).await,
        vec![(0, ErrorCode::TransactionCoordinatorFenced, -1)]
    );
    assert_eq!(
        write(&b, markers(ControlType::Commit, 1, &[("orders", 0)])).await,
        vec![(0, ErrorCode::None, 1)]
    );
    assert_eq!(
        write(&b, markers(ControlType::Abort, 0, &[("orders", 0)])).await,
        vec![(0, ErrorCode::InvalidProducerEpoch, -1)]
    );
    let bad_epoch = markers(ControlType::Begin, 70_000, &[("orders", 0)]);
    assert_eq!(
        write(&b, bad_epoch).await,
        vec![(0, ErrorCode::InvalidRequest, -1)]
    );
}

#[tokio::test]
async fn given_an_open_transaction_then_metadata_and_list_offsets_report_the_lso() {
    let b = broker(None).await;
    write(&b, markers(ControlType::Begin, 0, &[("orders", 0)])).await;
    // Another producer's records after the BEGIN: visible read_uncommitted only.
    assert_eq!(
        produce(&b.service, three_records()).await,
        (ErrorCode::None, 1)
    );
    let metadata = b
        .service
        .metadata(Request::new(MetadataRequest {
            topics: vec!["orders".into()],
        }))
        .await
        .expect("answer")
        .into_inner();
    let p0 = &metadata.topics[0].partitions[0];
    assert_eq!((p0.high_watermark, p0.last_stable_offset), (4, 0));
    let latest = |isolation: IsolationLevel| ListOffsetsRequest {
        isolation_level: isolation as i32,
        topics: vec![ListOffsetsTopic {
            name: "orders".into(),
            partitions: vec![ListOffsetsPartition {
                partition: 0,
                timestamp: LATEST_TIMESTAMP,
            }],
        }],
    };
    let offset = |response: ListOffsetsResponse| response.topics[0].partitions[0].offset;
    let committed = b
        .service
        .list_offsets(Request::new(latest(IsolationLevel::ReadCommitted)))
        .await
        .expect("answer")
        .into_inner();
    let uncommitted = b
        .service
        .list_offsets(Request::new(latest(IsolationLevel::ReadUncommitted)))
        .await
        .expect("answer")
        .into_inner();
    assert_eq!((offset(committed), offset(uncommitted)), (0, 4));
}

async fn find(b: &Broker, transactional_id: &str) -> FindCoordinatorResponse {
    b.service
        .find_coordinator(Request::new(FindCoordinatorRequest {
            transactional_id: transactional_id.into(),
        }))
        .await
        .expect("answer")
        .into_inner()
}

#[tokio::test]
async fn given_no_coordinator_flag_then_find_coordinator_is_not_available() {
    let b = broker(None).await;
    let found = find(&b, "orders-app").await;
    assert_eq!(found.error_code, ErrorCode::CoordinatorNotAvailable as i32);
    let metadata = b
        .service
        .metadata(Request::new(MetadataRequest::default()))
        .await
        .expect("answer")
        .into_inner();
    assert!(metadata.coordinators.is_empty());
}

#[tokio::test]
async fn given_a_coordinator_flag_then_it_answers_for_every_id_with_the_local_partition_count() {
    let b = broker(Some("127.0.0.1:9094")).await;
    let found = find(&b, "orders-app").await;
    assert_eq!(found.error_code, ErrorCode::None as i32);
    assert_eq!(
        (found.coordinator_id, found.address.as_str()),
        (0, "127.0.0.1:9094")
    );
    assert_eq!((found.txn_log_partition, found.coordinator_epoch), (0, 0));

    b.service
        .topics
        .create(TXN_LOG_TOPIC, 8, 1, false)
        .await
        .expect("the internal topic is a valid name");
    let found = find(&b, "orders-app").await;
    assert_eq!(
        found.txn_log_partition,
        idem_proto::txn::txn_log_partition("orders-app", 8)
    );
    let metadata = b
        .service
        .metadata(Request::new(MetadataRequest::default()))
        .await
        .expect("answer")
        .into_inner();
    assert_eq!(
        metadata.coordinators,
        vec![CoordinatorInfo {
            coordinator_id: 0,
            address: "127.0.0.1:9094".into()
        }]
    );
}

fn produce_request(records: Bytes) -> ProduceRequest {
    ProduceRequest {
        acks: -1,
        timeout_ms: 5_000,
        topics: vec![TopicProduceData {
            name: "orders".into(),
            partitions: vec![PartitionProduceData {
                partition: 0,
                records,
            }],
        }],
        coordinator_epoch: None,
    }
}

async fn produce(service: &BrokerService, records: Bytes) -> (ErrorCode, i64) {
    let answer = service
        .produce(Request::new(produce_request(records)))
        .await
        .expect("answer")
        .into_inner();
    let p = &answer.topics[0].partitions[0];
    let code = ErrorCode::try_from(p.error_code).expect("known code");
    (code, p.base_offset)
}

fn three_records() -> Bytes {
    let records: Vec<Record> = (0..3)
        .map(|i| Record {
            value: Some(Bytes::from(format!("order-{i}"))),
            timestamp_ms: 1_000,
            ..Record::default()
        })
        .collect();
    batch::encode(ProducerInfo::NONE, 0, &records)
}

/// The batch with one byte of its last record flipped: its CRC no longer matches.
fn corrupted(records: &Bytes) -> Bytes {
    let mut bytes = records.to_vec();
    if let Some(last) = bytes.last_mut() {
        *last ^= 0xff;
    }
    Bytes::from(bytes)
}

#[tokio::test]
async fn given_null_produce_when_a_valid_batch_arrives_then_it_succeeds_and_the_log_stays_empty() {
    let b = broker(None).await;
    let service = BrokerService {
        null_produce: Some(NullProduce::default()),
        ..b.service
    };
    assert_eq!(
        produce(&service, three_records()).await,
        (ErrorCode::None, 0)
    );
    // Offsets are made up but still increase by the records answered.
    assert_eq!(
        produce(&service, three_records()).await,
        (ErrorCode::None, 3)
    );
    let offsets = service
        .topics
        .partition("orders", 0)
        .expect("partition")
        .offsets();
    assert_eq!((offsets.log_end_offset, offsets.high_watermark), (0, 0));
}

#[tokio::test]
async fn given_null_produce_when_a_corrupt_batch_arrives_then_it_is_refused_like_a_real_append() {
    let real = broker(None).await;
    let null = broker(None).await;
    let null_service = null.service.with_null_produce(true);
    let bad = corrupted(&three_records());
    let refused_for_real = produce(&real.service, bad.clone()).await;
    assert_eq!(refused_for_real, (ErrorCode::CorruptMessage, -1));
    assert_eq!(produce(&null_service, bad).await, refused_for_real);
    let unknown = ProduceRequest {
        topics: vec![TopicProduceData {
            name: "nope".into(),
            ..produce_request(three_records()).topics[0].clone()
        }],
        ..produce_request(three_records())
    };
    let answer = null_service
        .produce(Request::new(unknown))
        .await
        .expect("answer")
        .into_inner();
    assert_eq!(
        answer.topics[0].partitions[0].error_code,
        ErrorCode::UnknownTopicOrPartition as i32
    );
}
