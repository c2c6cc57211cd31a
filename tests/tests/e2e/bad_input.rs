//! Bad input gets a clear error code and changes nothing: the partition's offsets and
//! the topic list are the same after the refusal as before it.

use bytes::Bytes;
use idem_proto::batch::{self, ProducerInfo, ATTR_CONTROL, ATTR_TRANSACTIONAL};
use idem_proto::v1::{
    CreatableTopic, CreateTopicsRequest, MetadataRequest, PartitionProduceData, ProduceRequest,
    TopicProduceData,
};
use idem_proto::ErrorCode;
use idem_tests::raw::{self, RawClient};
use idem_tests::BrokerProcess;

async fn log_end(client: &mut RawClient, topic: &str) -> Vec<i64> {
    let metadata = client
        .metadata(MetadataRequest {
            topics: vec![topic.into()],
        })
        .await
        .expect("Metadata")
        .into_inner();
    metadata.topics[0]
        .partitions
        .iter()
        .map(|p| p.log_end_offset)
        .collect()
}

async fn topic_names(client: &mut RawClient) -> Vec<String> {
    let metadata = client
        .metadata(MetadataRequest { topics: vec![] })
        .await
        .expect("Metadata")
        .into_inner();
    metadata.topics.into_iter().map(|t| t.name).collect()
}

async fn broker_with_topic(args: &[&str]) -> (BrokerProcess, RawClient) {
    let broker = BrokerProcess::start_with(args);
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut client, "orders", 2).await,
        ErrorCode::None
    );
    let ok = raw::produce(
        &mut client,
        "orders",
        0,
        raw::idempotent_batch(1, 0, 0, &["a", "b"]),
    )
    .await;
    assert_eq!(ok.error_code(), ErrorCode::None);
    (broker, client)
}

#[tokio::test]
async fn given_a_batch_with_a_flipped_bit_when_produced_then_corrupt_message_and_nothing_appended()
{
    let (_broker, mut client) = broker_with_topic(&[]).await;
    let before = log_end(&mut client, "orders").await;
    let mut bytes = raw::idempotent_batch(1, 0, 2, &["c"]).to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    let answer = raw::produce(&mut client, "orders", 0, Bytes::from(bytes)).await;
    assert_eq!(answer.error_code(), ErrorCode::CorruptMessage);
    assert!(
        answer.error_message.contains("CRC"),
        "message: {}",
        answer.error_message
    );
    // A truncated batch and bytes that are no batch at all are refused the same way.
    let whole = raw::idempotent_batch(1, 0, 2, &["c"]);
    let torn = raw::produce(&mut client, "orders", 0, whole.slice(..whole.len() - 3)).await;
    assert_eq!(torn.error_code(), ErrorCode::CorruptMessage);
    let junk = raw::produce(&mut client, "orders", 0, Bytes::from_static(b"not a batch")).await;
    assert_eq!(junk.error_code(), ErrorCode::CorruptMessage);
    assert_eq!(log_end(&mut client, "orders").await, before);
    // The refused sequence 2 is still the next one: nothing of it was recorded.
    let next = raw::produce(
        &mut client,
        "orders",
        0,
        raw::idempotent_batch(1, 0, 2, &["c"]),
    )
    .await;
    assert_eq!((next.error_code(), next.base_offset), (ErrorCode::None, 2));
}

#[tokio::test]
async fn given_a_batch_over_the_limit_when_produced_then_message_too_large_and_nothing_appended() {
    let (_broker, mut client) = broker_with_topic(&["--max-batch-bytes", "1024"]).await;
    let before = log_end(&mut client, "orders").await;
    let big = "x".repeat(2000);
    let answer = raw::produce(
        &mut client,
        "orders",
        0,
        raw::idempotent_batch(1, 0, 2, &[&big]),
    )
    .await;
    assert_eq!(answer.error_code(), ErrorCode::MessageTooLarge);
    assert_eq!(log_end(&mut client, "orders").await, before);
}

#[tokio::test]
async fn given_a_request_over_the_limit_when_sent_then_refused_before_decoding_and_nothing_appended(
) {
    let (_broker, mut client) = broker_with_topic(&["--max-request-bytes", "65536"]).await;
    let before = log_end(&mut client, "orders").await;
    let big = "y".repeat(100_000);
    let request = ProduceRequest {
        coordinator_epoch: None,
        acks: -1,
        timeout_ms: 1000,
        topics: vec![TopicProduceData {
            name: "orders".into(),
            partitions: vec![PartitionProduceData {
                partition: 1,
                records: raw::idempotent_batch(9, 0, 0, &[&big]),
            }],
        }],
    };
    let status = client
        .produce(request)
        .await
        .expect_err("oversized request must be refused");
    assert_eq!(status.code(), tonic::Code::OutOfRange, "status: {status:?}");
    assert!(status.message().contains("too large"), "status: {status:?}");
    assert_eq!(log_end(&mut client, "orders").await, before);
}

#[tokio::test]
async fn given_unknown_topics_or_partitions_when_produced_or_fetched_then_unknown_topic_or_partition(
) {
    let (_broker, mut client) = broker_with_topic(&[]).await;
    let batch = raw::idempotent_batch(5, 0, 0, &["x"]);
    for (topic, partition) in [("nope", 0), ("orders", 2), ("orders", -1)] {
        let answer = raw::produce(&mut client, topic, partition, batch.clone()).await;
        assert_eq!(
            answer.error_code(),
            ErrorCode::UnknownTopicOrPartition,
            "{topic}-{partition}"
        );
        let fetched = fetch_code(&mut client, topic, partition, 0).await;
        assert_eq!(
            fetched,
            ErrorCode::UnknownTopicOrPartition,
            "{topic}-{partition}"
        );
    }
    assert_eq!(topic_names(&mut client).await, vec!["orders".to_string()]);
}

async fn fetch_code(client: &mut RawClient, topic: &str, partition: i32, offset: i64) -> ErrorCode {
    raw::fetch(client, topic, partition, offset)
        .await
        .error_code()
}

#[tokio::test]
async fn given_negative_or_past_the_end_fetch_offsets_then_offset_out_of_range() {
    let (_broker, mut client) = broker_with_topic(&[]).await;
    assert_eq!(
        fetch_code(&mut client, "orders", 0, -1).await,
        ErrorCode::OffsetOutOfRange
    );
    assert_eq!(
        fetch_code(&mut client, "orders", 0, 3).await,
        ErrorCode::OffsetOutOfRange
    );
    assert_eq!(
        fetch_code(&mut client, "orders", 0, i64::MAX).await,
        ErrorCode::OffsetOutOfRange
    );
    // The end itself is a valid position with nothing to read yet.
    assert_eq!(
        fetch_code(&mut client, "orders", 0, 2).await,
        ErrorCode::None
    );
}

#[tokio::test]
async fn given_invalid_topic_specs_when_created_then_refused_and_no_topic_appears() {
    let broker = BrokerProcess::start();
    let mut client = raw::connect(&broker.bootstrap()).await;
    let cases: Vec<(String, i32, i32, ErrorCode)> = vec![
        ("".into(), 1, 1, ErrorCode::InvalidTopicException),
        ("..".into(), 1, 1, ErrorCode::InvalidTopicException),
        ("has space".into(), 1, 1, ErrorCode::InvalidTopicException),
        ("slash/name".into(), 1, 1, ErrorCode::InvalidTopicException),
        ("x".repeat(250), 1, 1, ErrorCode::InvalidTopicException),
        ("zero".into(), 0, 1, ErrorCode::InvalidPartitions),
        ("negative".into(), -3, 1, ErrorCode::InvalidPartitions),
        ("absurd".into(), 1_000_000, 1, ErrorCode::InvalidPartitions),
        (
            "replicated".into(),
            1,
            3,
            ErrorCode::InvalidReplicationFactor,
        ),
        // Only 0 and -1 mean "the default".
        (
            "minus-two".into(),
            1,
            -2,
            ErrorCode::InvalidReplicationFactor,
        ),
        (
            "minus-100".into(),
            1,
            -100,
            ErrorCode::InvalidReplicationFactor,
        ),
        // Internal topics are created only by a coordinator.
        (
            "__consumer_offsets".into(),
            1,
            1,
            ErrorCode::InvalidTopicException,
        ),
        (
            "__transaction_state".into(),
            1,
            1,
            ErrorCode::InvalidTopicException,
        ),
    ];
    for (name, partitions, replication_factor, expected) in cases {
        let response = client
            .create_topics(CreateTopicsRequest {
                topics: vec![CreatableTopic {
                    name: name.clone(),
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
        let result = &response.topics[0];
        assert_eq!(
            result.error_code(),
            expected,
            "{name:?} x{partitions}: {}",
            result.error_message
        );
        assert!(!result.error_message.is_empty(), "a refusal says why");
    }
    assert!(topic_names(&mut client).await.is_empty());
    assert_eq!(
        raw::create_topic(&mut client, "ok", 1).await,
        ErrorCode::None
    );
    assert_eq!(
        raw::create_topic(&mut client, "ok", 1).await,
        ErrorCode::TopicAlreadyExists
    );
}

#[tokio::test]
async fn given_transactional_control_or_reserved_bit_batches_or_bad_acks_when_produced_then_refused_and_nothing_appended(
) {
    let (_broker, mut client) = broker_with_topic(&[]).await;
    let before = log_end(&mut client, "orders").await;
    let producer = ProducerInfo {
        producer_id: 1,
        producer_epoch: 0,
        base_sequence: 2,
    };
    let txn = batch::encode(producer, ATTR_TRANSACTIONAL, &raw::records(&["t"]));
    let answer = raw::produce(&mut client, "orders", 0, txn).await;
    assert_eq!(answer.error_code(), ErrorCode::InvalidTxnState);
    let control = batch::encode(
        producer,
        ATTR_CONTROL | ATTR_TRANSACTIONAL,
        &raw::records(&["c"]),
    );
    let answer = raw::produce(&mut client, "orders", 0, control).await;
    assert_eq!(answer.error_code(), ErrorCode::InvalidRequest);
    // Transactional without a producer id: malformed, in no transaction at all.
    let anonymous = batch::encode(
        ProducerInfo::NONE,
        ATTR_TRANSACTIONAL,
        &raw::records(&["a"]),
    );
    let answer = raw::produce(&mut client, "orders", 0, anonymous).await;
    assert_eq!(
        answer.error_code(),
        ErrorCode::InvalidRequest,
        "{}",
        answer.error_message
    );
    // A reserved attribute bit (here Kafka's gzip compression) set by a foreign encoder.
    let reserved = batch::encode(producer, 0b001, &raw::records(&["r"]));
    let answer = raw::produce(&mut client, "orders", 0, reserved).await;
    assert_eq!(
        answer.error_code(),
        ErrorCode::CorruptMessage,
        "{}",
        answer.error_message
    );
    let response = client
        .produce(ProduceRequest {
            coordinator_epoch: None,
            acks: 7,
            timeout_ms: 1000,
            topics: vec![TopicProduceData {
                name: "orders".into(),
                partitions: vec![PartitionProduceData {
                    partition: 0,
                    records: raw::idempotent_batch(1, 0, 2, &["z"]),
                }],
            }],
        })
        .await
        .expect("Produce")
        .into_inner();
    assert_eq!(
        response.topics[0].partitions[0].error_code(),
        ErrorCode::InvalidRequiredAcks
    );
    assert_eq!(log_end(&mut client, "orders").await, before);
}
