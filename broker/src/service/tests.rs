//! The transaction RPCs of a single-node broker, called through the gRPC trait without a
//! network: WriteTxnMarkers per-partition results, FindCoordinator with and without
//! `--coordinator`, Metadata's coordinators and LSO, ListOpenTransactions, and the
//! isolation levels of ListOffsets; `--null-produce`, which must check batches like
//! the real path and write nothing; internal topics, which only their coordinator
//! creates and writes; and the refusals of malformed CreateTopics and Fetch sizes.

use bytes::Bytes;
use idem_pidstore::SledPidStore;
use idem_proto::batch::{self, ProducerInfo, Record};
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::v1::broker_server::Broker as _;
use idem_proto::v1::{
    ControlType, CoordinatorInfo, CreatableTopic, FetchPartition, FetchTopic, IsolationLevel,
    ListOffsetsPartition, ListOffsetsTopic, PartitionProduceData, TopicProduceData,
    TxnTopicPartitions,
};
use idem_proto::ErrorCode;

use super::admin::LATEST_TIMESTAMP;
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
        topic_defaults: crate::topic_config::TopicDefaults::new(
            LogConfig::DEFAULT_SEGMENT_BYTES,
            1 << 20,
        ),
    };
    let topics = TopicRegistry::open(dir.path(), 0, settings, 100).expect("registry");
    topics
        .create("orders", 2, 1, false, Default::default())
        .await
        .expect("create");
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
        at_transaction_epoch: false,
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
            group_id: String::new(),
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
        .create(TXN_LOG_TOPIC, 8, 1, false, Default::default())
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

fn log_end(service: &BrokerService, topic: &str, partition: i32) -> i64 {
    service
        .topics
        .partition(topic, partition)
        .expect("partition")
        .offsets()
        .log_end_offset
}

/// A batch as the coordinator's transaction log writer sends it.
fn writer_batch(producer_id: i64, coordinator_epoch: i16, base_sequence: i32) -> Bytes {
    batch::encode(
        ProducerInfo {
            producer_id,
            producer_epoch: coordinator_epoch,
            base_sequence,
        },
        0,
        &[Record {
            value: Some(Bytes::from_static(b"{\"fence\": 1}")),
            ..Record::default()
        }],
    )
}

async fn produce_to(
    service: &BrokerService,
    topic: &str,
    records: Bytes,
    coordinator_epoch: Option<i32>,
) -> (ErrorCode, String) {
    let mut request = produce_request(records);
    request.topics[0].name = topic.into();
    request.coordinator_epoch = coordinator_epoch;
    let answer = service
        .produce(Request::new(request))
        .await
        .expect("answer")
        .into_inner();
    let p = &answer.topics[0].partitions[0];
    (
        ErrorCode::try_from(p.error_code).expect("known code"),
        p.error_message.clone(),
    )
}

#[tokio::test]
async fn given_the_transaction_log_when_a_client_writes_it_then_invalid_topic_and_nothing_appended()
{
    for null_produce in [false, true] {
        let b = broker(Some("127.0.0.1:9094")).await;
        let service = b.service.with_null_produce(null_produce);
        service
            .topics
            .create(TXN_LOG_TOPIC, 2, 1, false, Default::default())
            .await
            .expect("created as the coordinator would");
        // The probe of issue 21: a plain batch, then an idempotent one.
        for records in [three_records(), writer_batch(9, 0, 0)] {
            let (code, message) = produce_to(&service, TXN_LOG_TOPIC, records, None).await;
            assert_eq!(code, ErrorCode::InvalidTopicException, "{message}");
            assert!(message.contains(TXN_LOG_TOPIC), "{message}");
        }
        assert_eq!(log_end(&service, TXN_LOG_TOPIC, 0), 0, "nothing appended");
    }
}

#[tokio::test]
async fn given_the_coordinator_writer_when_it_declares_its_epoch_then_its_appends_land() {
    let b = broker(Some("127.0.0.1:9094")).await;
    b.service
        .topics
        .create(TXN_LOG_TOPIC, 2, 1, false, Default::default())
        .await
        .expect("created");
    let ours = produce_to(&b.service, TXN_LOG_TOPIC, writer_batch(9, 3, 0), Some(3)).await;
    assert_eq!(ours.0, ErrorCode::None, "{}", ours.1);
    // Declared, but the batch's producer epoch is not the declared coordinator epoch.
    let mismatched = produce_to(&b.service, TXN_LOG_TOPIC, writer_batch(9, 3, 1), Some(4)).await;
    assert_eq!(
        mismatched.0,
        ErrorCode::InvalidTopicException,
        "{}",
        mismatched.1
    );
    // A transactional batch is never a coordinator's.
    let txn = batch::encode(
        ProducerInfo {
            producer_id: 9,
            producer_epoch: 3,
            base_sequence: 1,
        },
        batch::ATTR_TRANSACTIONAL,
        &[Record::default()],
    );
    let refused = produce_to(&b.service, TXN_LOG_TOPIC, txn, Some(3)).await;
    assert_eq!(refused.0, ErrorCode::InvalidTopicException, "{}", refused.1);
    // An older coordinator epoch is fenced by the producer state, as before.
    let stale = produce_to(&b.service, TXN_LOG_TOPIC, writer_batch(9, 2, 1), Some(2)).await;
    assert_eq!(stale.0, ErrorCode::InvalidProducerEpoch, "{}", stale.1);
    assert_eq!(
        log_end(&b.service, TXN_LOG_TOPIC, 0),
        1,
        "only the writer's batch"
    );
}

#[tokio::test]
async fn given_an_internal_topic_when_markers_are_written_to_it_then_invalid_topic() {
    let b = broker(Some("127.0.0.1:9094")).await;
    b.service
        .topics
        .create(TXN_LOG_TOPIC, 1, 1, false, Default::default())
        .await
        .expect("created");
    let results = write(&b, markers(ControlType::Begin, 0, &[(TXN_LOG_TOPIC, 0)])).await;
    assert_eq!(results, vec![(0, ErrorCode::InvalidTopicException, -1)]);
    assert_eq!(log_end(&b.service, TXN_LOG_TOPIC, 0), 0);
}

async fn create(service: &BrokerService, topic: CreatableTopic) -> (ErrorCode, String) {
    let answer = service
        .create_topics(Request::new(CreateTopicsRequest {
            topics: vec![topic],
        }))
        .await
        .expect("answer")
        .into_inner();
    let t = &answer.topics[0];
    (
        ErrorCode::try_from(t.error_code).expect("known code"),
        t.error_message.clone(),
    )
}

fn creatable(name: &str, replication_factor: i32, coordinator_id: Option<i32>) -> CreatableTopic {
    CreatableTopic {
        name: name.into(),
        num_partitions: 1,
        replication_factor,
        unclean_leader_election: false,
        coordinator_id,
        configs: Vec::new(),
    }
}

fn topic_names(service: &BrokerService) -> Vec<String> {
    service
        .topics
        .describe(&[])
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

#[tokio::test]
async fn given_create_topics_then_internal_names_need_a_coordinator_and_negative_factors_are_refused(
) {
    let b = broker(Some("127.0.0.1:9094")).await;
    let before = topic_names(&b.service);
    for name in [TXN_LOG_TOPIC, "__consumer_offsets", "__mine"] {
        let (code, message) = create(&b.service, creatable(name, 1, None)).await;
        assert_eq!(code, ErrorCode::InvalidTopicException, "{name}: {message}");
        assert!(message.contains(name), "{message}");
    }
    for factor in [-2, -100] {
        let (code, message) = create(&b.service, creatable("payments", factor, None)).await;
        assert_eq!(
            code,
            ErrorCode::InvalidReplicationFactor,
            "{factor}: {message}"
        );
    }
    assert_eq!(topic_names(&b.service), before, "nothing created");
    for (name, factor) in [("payments", 0), ("refunds", -1)] {
        let (code, message) = create(&b.service, creatable(name, factor, None)).await;
        assert_eq!(code, ErrorCode::None, "{name}: {message}");
    }
    let (code, message) = create(&b.service, creatable(TXN_LOG_TOPIC, 1, Some(0))).await;
    assert_eq!(
        code,
        ErrorCode::None,
        "the coordinator creates its log: {message}"
    );
}

fn fetch_request(max_bytes: i32, partition_max_bytes: i32) -> FetchRequest {
    FetchRequest {
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes,
        isolation_level: IsolationLevel::ReadUncommitted as i32,
        topics: vec![FetchTopic {
            name: "orders".into(),
            partitions: vec![FetchPartition {
                partition: 0,
                fetch_offset: 0,
                partition_max_bytes,
                current_leader_epoch: None,
            }],
        }],
        replica_id: None,
        include_control_batches: false,
    }
}

async fn fetch(service: &BrokerService, request: FetchRequest) -> (ErrorCode, usize) {
    let answer = service
        .fetch(Request::new(request))
        .await
        .expect("answer")
        .into_inner();
    let p = &answer.topics[0].partitions[0];
    (
        ErrorCode::try_from(p.error_code).expect("known code"),
        p.records.len(),
    )
}

#[tokio::test]
async fn given_fetch_sizes_then_negatives_are_refused_and_zero_means_the_broker_limit() {
    let b = broker(None).await;
    assert_eq!(
        produce(&b.service, three_records()).await.0,
        ErrorCode::None
    );
    for (max, partition_max) in [(-1, 1024), (1024, -1), (i32::MIN, 0)] {
        assert_eq!(
            fetch(&b.service, fetch_request(max, partition_max)).await,
            (ErrorCode::InvalidRequest, 0),
            "max_bytes {max}, partition_max_bytes {partition_max}"
        );
    }
    let whole = three_records().len();
    for (max, partition_max) in [(0, 0), (0, 1024), (1024, 0)] {
        assert_eq!(
            fetch(&b.service, fetch_request(max, partition_max)).await,
            (ErrorCode::None, whole),
            "max_bytes {max}, partition_max_bytes {partition_max}"
        );
    }
}
