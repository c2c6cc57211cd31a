//! A bare gRPC client for tests that need exact control over what goes on the wire
//! (hand-made batches, chosen sequences, corrupt bytes), bypassing the SDK.

use bytes::Bytes;
use idem_proto::batch::{self, ProducerInfo, Record, StoredRecord};
use idem_proto::v1::broker_client::BrokerClient;
use idem_proto::v1::{
    ControlType, CreatableTopic, CreateTopicsRequest, FetchPartition, FetchPartitionResponse,
    FetchRequest, FetchTopic, IsolationLevel, PartitionProduceData, PartitionProduceResponse,
    ProduceRequest, TopicProduceData, TxnMarkerPartitionResult, TxnTopicPartitions,
    WriteTxnMarkersRequest,
};
use idem_proto::ErrorCode;
use tonic::transport::Channel;

pub type RawClient = BrokerClient<Channel>;

pub async fn connect(bootstrap: &str) -> RawClient {
    try_connect(bootstrap).await.expect("connect to broker")
}

/// [`connect`] to a broker that may be down (a fault, a container starting), saying
/// why not instead of panicking; gives up on connecting after 2 s.
pub async fn try_connect(address: &str) -> Result<RawClient, tonic::transport::Error> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .expect("endpoint")
        .tcp_nodelay(true)
        .connect_timeout(std::time::Duration::from_secs(2))
        .connect()
        .await?;
    Ok(BrokerClient::new(channel)
        .max_decoding_message_size(64 * 1024 * 1024)
        .max_encoding_message_size(64 * 1024 * 1024))
}

/// Creates a topic and returns the error code the broker answered.
pub async fn create_topic(client: &mut RawClient, name: &str, partitions: i32) -> ErrorCode {
    create_topic_rf(client, name, partitions, 1).await
}

/// Creates `topic`, every setting spelled out, through the broker at `address`; panics
/// unless it is created.
pub async fn create(address: &str, topic: CreatableTopic) {
    let name = topic.name.clone();
    let answer = connect(address)
        .await
        .create_topics(CreateTopicsRequest {
            topics: vec![topic],
        })
        .await
        .expect("CreateTopics")
        .into_inner();
    let result = &answer.topics[0];
    assert_eq!(
        result.error_code(),
        ErrorCode::None,
        "{name}: {}",
        result.error_message
    );
}

/// [`create_topic`] with `replication_factor` replicas per partition.
pub async fn create_topic_rf(
    client: &mut RawClient,
    name: &str,
    partitions: i32,
    replication_factor: i32,
) -> ErrorCode {
    let response = client
        .create_topics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.into(),
                num_partitions: partitions,
                replication_factor,
                unclean_leader_election: false,
                coordinator_id: None,
                configs: Vec::new(),
            }],
        })
        .await
        .expect("CreateTopics")
        .into_inner();
    response.topics[0].error_code()
}

/// Records with the given values, keyed by nothing.
pub fn records(values: &[&str]) -> Vec<Record> {
    values
        .iter()
        .map(|v| Record {
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            // Stamped now, as a client does: a record stamped in 1970 is past every
            // retention.ms and goes at the broker's first retention pass.
            timestamp_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
            ..Record::default()
        })
        .collect()
}

/// An idempotent batch from `producer_id`/`epoch` starting at `base_sequence`.
pub fn idempotent_batch(
    producer_id: i64,
    epoch: i16,
    base_sequence: i32,
    values: &[&str],
) -> Bytes {
    batch::encode(
        ProducerInfo {
            producer_id,
            producer_epoch: epoch,
            base_sequence,
        },
        0,
        &records(values),
    )
}

/// A transactional batch from `producer_id`/`epoch` starting at `base_sequence`.
pub fn transactional_batch(
    producer_id: i64,
    epoch: i16,
    base_sequence: i32,
    values: &[&str],
) -> Bytes {
    batch::encode(
        ProducerInfo {
            producer_id,
            producer_epoch: epoch,
            base_sequence,
        },
        batch::ATTR_TRANSACTIONAL,
        &records(values),
    )
}

/// Produces one batch to one partition with acks=all and returns the partition's answer.
pub async fn produce(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> PartitionProduceResponse {
    produce_declared(client, topic, partition, records, None).await
}

/// [`produce`] declaring a coordinator epoch, as a coordinator writing its internal
/// topic does.
pub async fn produce_as_coordinator(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    records: Bytes,
    coordinator_epoch: i32,
) -> PartitionProduceResponse {
    produce_declared(client, topic, partition, records, Some(coordinator_epoch)).await
}

async fn produce_declared(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    records: Bytes,
    coordinator_epoch: Option<i32>,
) -> PartitionProduceResponse {
    let response = client
        .produce(ProduceRequest {
            coordinator_epoch,
            acks: -1,
            timeout_ms: 30_000,
            topics: vec![TopicProduceData {
                name: topic.into(),
                partitions: vec![PartitionProduceData { partition, records }],
            }],
        })
        .await
        .expect("Produce")
        .into_inner();
    response.topics[0].partitions[0].clone()
}

/// Every record of a partition from its log start to the high watermark, CRC-checked.
pub async fn read_partition(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
) -> Vec<StoredRecord> {
    read_batches(client, topic, partition)
        .await
        .into_iter()
        .flat_map(|(_, records)| records)
        .collect()
}

/// The values of records, as strings.
pub fn values(records: &[StoredRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

/// Every batch of a partition (header and records) from its log start (0 unless
/// retention moved it) to the high watermark.
pub async fn read_batches(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
) -> Vec<(batch::BatchHeader, Vec<StoredRecord>)> {
    let mut out = Vec::new();
    // Every answer, an out-of-range refusal included, names the log start.
    let mut offset = fetch(client, topic, partition, 0)
        .await
        .log_start_offset
        .max(0);
    loop {
        let p = fetch(client, topic, partition, offset).await;
        assert_eq!(
            p.error_code(),
            ErrorCode::None,
            "fetch at {offset}: {}",
            p.error_message
        );
        if p.records.is_empty() {
            return out;
        }
        for item in batch::Batches::new(&p.records) {
            let (header, bytes) = item.expect("fetched batch passes its CRC");
            offset = header.next_offset();
            out.push((header, batch::records(bytes).expect("records decode")));
        }
    }
}

/// One fetch of one partition at `offset`, read committed, without waiting.
pub async fn fetch(
    client: &mut RawClient,
    topic: &str,
    partition: i32,
    offset: i64,
) -> FetchPartitionResponse {
    let response = client
        .fetch(FetchRequest {
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 8 * 1024 * 1024,
            isolation_level: IsolationLevel::ReadCommitted as i32,
            topics: vec![FetchTopic {
                name: topic.into(),
                partitions: vec![FetchPartition {
                    partition,
                    fetch_offset: offset,
                    partition_max_bytes: 1 << 20,
                    current_leader_epoch: None,
                }],
            }],
            replica_id: None,
            include_control_batches: false,
        })
        .await
        .expect("Fetch")
        .into_inner();
    response.topics[0].partitions[0].clone()
}

/// A transaction marker for one partition, as a coordinator would write it.
pub struct Marker<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub producer_id: i64,
    /// BEGIN: the transaction's epoch; COMMIT/ABORT: the epoch the producer moves to.
    pub producer_epoch: i32,
    pub control: ControlType,
    pub coordinator_epoch: i32,
}

/// A marker for partition 0 of `topic` from coordinator epoch 0, written; its answer's
/// code and offset (-1 when nothing was appended).
pub async fn write_marker_at_0(
    client: &mut RawClient,
    topic: &str,
    producer_id: i64,
    control: ControlType,
    producer_epoch: i32,
) -> (ErrorCode, i64) {
    let marker = Marker {
        topic,
        partition: 0,
        producer_id,
        producer_epoch,
        control,
        coordinator_epoch: 0,
    };
    let result = write_marker(client, marker).await;
    (result.error_code(), result.offset)
}

/// Writes `marker` (waiting up to 5 s for the in-sync replicas) and returns the
/// partition's answer.
pub async fn write_marker(client: &mut RawClient, marker: Marker<'_>) -> TxnMarkerPartitionResult {
    let answer = client
        .write_txn_markers(WriteTxnMarkersRequest {
            producer_id: marker.producer_id,
            producer_epoch: marker.producer_epoch,
            control_type: marker.control as i32,
            coordinator_epoch: marker.coordinator_epoch,
            topics: vec![TxnTopicPartitions {
                topic: marker.topic.into(),
                partitions: vec![marker.partition],
            }],
            timeout_ms: 5_000,
            at_transaction_epoch: false,
        })
        .await
        .expect("WriteTxnMarkers")
        .into_inner();
    answer.results[0].clone()
}
