//! Kafka clients work unchanged against idem's Kafka listener (issue 30): kcat and
//! confluent-kafka (librdkafka) list metadata, create topics, produce (plain,
//! idempotent, compressed) and consume; an idempotent producer whose responses are lost
//! writes every record once, in order; bad frames get an answer or a clean close and
//! never stop the broker serving others.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use idem_client::admin::acls::AclBinding;
use idem_client::{Admin, ProducerRecord};
use idem_tests::cluster::Cluster;
use idem_tests::kafka_clients::{kcat, kcat_read, python, KafkaProxy};
use idem_tests::txn;
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::BrokerProcess;
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::{
    ApiKey, EndTxnRequest, EndTxnResponse, MetadataRequest, MetadataResponse, ProduceResponse,
    RequestHeader, ResponseHeader, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(crate) const KAFKA_LISTEN: [&str; 2] = ["--kafka-listen", "127.0.0.1:0"];

/// How long a test waits for the broker to answer or close one connection.
const ANSWER_PATIENCE: Duration = Duration::from_secs(10);

pub(crate) async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Value {
    python(
        "create_topic.py",
        &[bootstrap, topic, &partitions.to_string(), "1"],
    )
    .await
}

/// `kcat -L -J`: the cluster as librdkafka sees it.
pub(crate) async fn kcat_metadata(bootstrap: &str) -> Value {
    let out = kcat(&["-b", bootstrap, "-L", "-J"], "").await;
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("kcat -J printed {out:?}: {e}"))
}

#[tokio::test]
async fn given_a_broker_when_kcat_lists_metadata_then_it_shows_the_broker_topics_partitions_and_leaders(
) {
    let broker = BrokerProcess::start_with(&KAFKA_LISTEN);
    let bootstrap = broker.kafka_bootstrap();
    assert_eq!(
        create_topic(&bootstrap, "orders", 3).await["error"],
        Value::Null
    );
    let again = create_topic(&bootstrap, "orders", 3).await;
    assert!(
        again["error"]
            .as_str()
            .unwrap_or_default()
            .contains("TOPIC_ALREADY_EXISTS"),
        "a second CreateTopics: {again}"
    );

    let metadata = kcat_metadata(&bootstrap).await;
    let brokers = metadata["brokers"].as_array().expect("brokers");
    assert_eq!(brokers.len(), 1, "{metadata}");
    assert_eq!(brokers[0]["id"], 0);
    assert_eq!(brokers[0]["name"], bootstrap.as_str());
    let topics = metadata["topics"].as_array().expect("topics");
    let orders = topics
        .iter()
        .find(|t| t["topic"] == "orders")
        .unwrap_or_else(|| panic!("orders listed: {metadata}"));
    let partitions = orders["partitions"].as_array().expect("partitions");
    assert_eq!(partitions.len(), 3);
    for (i, p) in partitions.iter().enumerate() {
        assert_eq!(p["partition"], i);
        assert_eq!(p["leader"], 0);
        assert_eq!(p["replicas"][0]["id"], 0);
        assert_eq!(p["isrs"][0]["id"], 0);
    }
    // An unknown topic asked by name: UNKNOWN_TOPIC_OR_PARTITION, and not created.
    let unknown = kcat(&["-b", &bootstrap, "-L", "-J", "-t", "nope"], "").await;
    let unknown: Value = serde_json::from_str(unknown.trim()).expect("JSON");
    assert!(
        unknown["topics"][0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("Unknown topic"),
        "{unknown}"
    );
    let after = kcat_metadata(&bootstrap).await;
    assert_eq!(after["topics"].as_array().map(Vec::len), Some(1), "{after}");
}

#[tokio::test]
async fn given_a_topic_when_a_kafka_admin_deletes_it_then_it_is_gone_and_errors_name_the_rest() {
    let broker = BrokerProcess::start_with(&KAFKA_LISTEN);
    let bootstrap = broker.kafka_bootstrap();
    assert_eq!(
        create_topic(&bootstrap, "doomed", 2).await["error"],
        Value::Null
    );
    kcat(
        &["-b", &bootstrap, "-P", "-t", "doomed", "-p", "0"],
        "a\nb\n",
    )
    .await;

    let deleted = python("delete_topic.py", &[&bootstrap, "doomed"]).await;
    assert_eq!(deleted["error"], Value::Null, "{deleted}");
    let after = kcat_metadata(&bootstrap).await;
    assert_eq!(after["topics"].as_array().map(Vec::len), Some(0), "{after}");
    // Gone for the gRPC side too: its name is free again, and empty.
    assert_eq!(
        create_topic(&bootstrap, "doomed", 1).await["error"],
        Value::Null
    );
    assert!(kcat_read(&bootstrap, "doomed", 0, "read_uncommitted")
        .await
        .is_empty());

    // librdkafka prints the Kafka error code as `val=N`.
    for (topic, code) in [
        ("never-was", "val=3,"), // UNKNOWN_TOPIC_OR_PARTITION
        // Internal topics hold the coordinators' state: refused, as over gRPC.
        ("__transaction_state", "val=17,"), // INVALID_TOPIC_EXCEPTION
    ] {
        let refused = python("delete_topic.py", &[&bootstrap, topic]).await;
        assert!(
            refused["error"].as_str().unwrap_or_default().contains(code),
            "{topic}: {refused}"
        );
    }
}

/// Users run hundreds of partitions: kcat spreads 2000 keyed records over a
/// 120-partition topic, then reads the whole topic back in one consumer (a fetch of
/// every partition per round): every record once, every partition used.
#[tokio::test]
async fn given_a_120_partition_topic_when_kcat_produces_keyed_records_then_one_consumer_reads_every_one_once(
) {
    let broker = BrokerProcess::start_with(&KAFKA_LISTEN);
    let bootstrap = broker.kafka_bootstrap();
    assert_eq!(
        create_topic(&bootstrap, "wide", 120).await["error"],
        Value::Null
    );
    let lines: Vec<String> = (0..2000).map(|i| format!("k{i}:v{i}")).collect();
    kcat(
        &[
            "-b", &bootstrap, "-P", "-t", "wide", "-K", ":", "-X", "acks=all",
        ],
        &(lines.join("\n") + "\n"),
    )
    .await;
    let read = kcat(
        &[
            "-b",
            &bootstrap,
            "-C",
            "-t",
            "wide",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%p %s\\n",
        ],
        "",
    )
    .await;
    let mut values = Vec::new();
    let mut partitions = BTreeSet::new();
    for line in read.lines() {
        let (partition, value) = line.split_once(' ').unwrap_or((line, ""));
        partitions.insert(partition.to_string());
        values.push(value.to_string());
    }
    values.sort();
    let mut expected: Vec<String> = (0..2000).map(|i| format!("v{i}")).collect();
    expected.sort();
    assert_eq!(values, expected, "every record once");
    // 2000 keys over 120 partitions: librdkafka's hash leaves none empty.
    assert_eq!(partitions.len(), 120, "partitions read: {partitions:?}");
}

#[tokio::test]
async fn given_kcat_when_it_produces_then_kcat_consumes_the_same_values_at_consecutive_offsets() {
    let broker = BrokerProcess::start_with(&KAFKA_LISTEN);
    let bootstrap = broker.kafka_bootstrap();
    assert_eq!(
        create_topic(&bootstrap, "lines", 2).await["error"],
        Value::Null
    );
    let values: Vec<String> = (0..200).map(|i| format!("line-{i}")).collect();
    kcat(
        &["-b", &bootstrap, "-P", "-t", "lines", "-p", "1"],
        &(values.join("\n") + "\n"),
    )
    .await;
    let read = kcat_read(&bootstrap, "lines", 1, "read_uncommitted").await;
    let expected: Vec<(i64, String)> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (i as i64, v.clone()))
        .collect();
    assert_eq!(read, expected);
    assert_eq!(
        kcat_read(&bootstrap, "lines", 1, "read_committed").await,
        expected
    );
    assert!(kcat_read(&bootstrap, "lines", 0, "read_uncommitted")
        .await
        .is_empty());
}

/// Every record of `reports` (produce.py's delivery reports) delivered without error
/// at the offset equal to its value: once each, in order.
fn assert_delivered_in_order(produced: &Value, count: usize) {
    assert_eq!(produced["undelivered"], 0, "{produced}");
    let reports = produced["reports"].as_array().expect("reports");
    assert_eq!(reports.len(), count);
    for report in reports {
        assert_eq!(report["error"], Value::Null, "{report}");
        let value: i64 = report["value"]
            .as_str()
            .expect("value")
            .parse()
            .expect("number");
        assert_eq!(report["offset"], value, "{report}");
    }
}

fn in_order(count: usize) -> Vec<(i64, String)> {
    (0..count).map(|i| (i as i64, i.to_string())).collect()
}

#[tokio::test]
async fn given_lost_produce_responses_when_an_idempotent_kafka_producer_retries_then_every_record_is_written_once_in_order(
) {
    let proxy = KafkaProxy::bind().await;
    let advertised = proxy.addr().to_string();
    // Metadata names the proxy, so every connection of the client goes through it.
    let broker = BrokerProcess::start_with(&[
        KAFKA_LISTEN[0],
        KAFKA_LISTEN[1],
        "--kafka-advertise",
        &advertised,
    ]);
    proxy.forward_to(broker.kafka_bootstrap().parse().expect("address"));
    assert_eq!(
        create_topic(&advertised, "payments", 1).await["error"],
        Value::Null
    );

    const COUNT: usize = 2000;
    const LOST: usize = 8;
    proxy.lose_produce_responses(4, LOST);
    let produced = python(
        "produce.py",
        &[
            &advertised,
            "payments",
            "0",
            &COUNT.to_string(),
            "enable.idempotence=true",
            "batch.num.messages=25",
            "linger.ms=2",
        ],
    )
    .await;
    assert_eq!(proxy.lost_responses(), LOST, "the faults happened");
    assert_delivered_in_order(&produced, COUNT);
    assert_eq!(
        kcat_read(&broker.kafka_bootstrap(), "payments", 0, "read_committed").await,
        in_order(COUNT),
        "each record once, in order"
    );
}

#[tokio::test]
async fn given_each_compression_when_confluent_kafka_produces_then_kcat_reads_every_record_back() {
    let broker = BrokerProcess::start_with(&KAFKA_LISTEN);
    let bootstrap = broker.kafka_bootstrap();
    let codecs = ["gzip", "lz4", "zstd", "snappy"];
    assert_eq!(
        create_topic(&bootstrap, "packed", codecs.len() as i32).await["error"],
        Value::Null
    );
    const COUNT: usize = 500;
    for (partition, codec) in codecs.iter().enumerate() {
        let compression = format!("compression.type={codec}");
        let produced = python(
            "produce.py",
            &[
                &bootstrap,
                "packed",
                &partition.to_string(),
                &COUNT.to_string(),
                "enable.idempotence=true",
                &compression,
            ],
        )
        .await;
        assert_delivered_in_order(&produced, COUNT);
        assert_eq!(
            kcat_read(&bootstrap, "packed", partition as i32, "read_uncommitted").await,
            in_order(COUNT),
            "{codec}"
        );
    }
}

/// An ApiVersions v0 request frame (header v1, empty body).
pub(crate) fn api_versions_v0(version: i16, correlation_id: i32) -> Vec<u8> {
    let mut frame = BytesMut::new();
    frame.put_i32(10);
    frame.put_i16(18);
    frame.put_i16(version);
    frame.put_i32(correlation_id);
    frame.put_i16(-1); // no client id
    frame.to_vec()
}

/// Sends `bytes` on a new connection, half-closes it, and returns everything the
/// broker answered before it closed. A reset counts as a close: the kernel resets
/// rather than ends a connection closed with bytes still unread (an oversized frame's).
pub(crate) async fn exchange(address: &str, bytes: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream.write_all(bytes).await.expect("send");
    stream.shutdown().await.expect("half-close");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(ANSWER_PATIENCE, stream.read_to_end(&mut answer))
        .await
        .expect("the broker answers or closes");
    match read {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("reading the answer: {e}"),
    }
    answer
}

/// An ApiVersions v0 answer: (correlation id, error code, [(api key, min, max)]).
fn read_api_versions_v0(answer: &[u8]) -> (i32, i16, Vec<(i16, i16, i16)>) {
    assert!(answer.len() >= 14, "an ApiVersions answer, got {answer:?}");
    let size = i32::from_be_bytes([answer[0], answer[1], answer[2], answer[3]]);
    assert_eq!(size as usize, answer.len() - 4, "one whole frame");
    // Past the size: header v0 (correlation id), then the v0 body.
    let mut at = 4;
    let mut next = |n: usize| {
        let slice = &answer[at..at + n];
        at += n;
        slice.to_vec()
    };
    let correlation_id = i32::from_be_bytes(next(4).try_into().expect("4 bytes"));
    let error_code = i16::from_be_bytes(next(2).try_into().expect("2 bytes"));
    let count = i32::from_be_bytes(next(4).try_into().expect("4 bytes"));
    let apis = (0..count)
        .map(|_| {
            let key = i16::from_be_bytes(next(2).try_into().expect("2 bytes"));
            let min = i16::from_be_bytes(next(2).try_into().expect("2 bytes"));
            let max = i16::from_be_bytes(next(2).try_into().expect("2 bytes"));
            (key, min, max)
        })
        .collect();
    (correlation_id, error_code, apis)
}

/// A well-formed ApiVersions on a new connection is still answered.
async fn assert_still_serving(address: &str) {
    let answer = exchange(address, &api_versions_v0(0, 77)).await;
    let (correlation_id, error_code, apis) = read_api_versions_v0(&answer);
    assert_eq!((correlation_id, error_code), (77, 0));
    assert!(
        apis.contains(&(0, 3, 9)),
        "Produce 3..=9 advertised: {apis:?}"
    );
}

#[tokio::test]
async fn given_bad_frames_when_sent_then_each_is_answered_or_closed_and_the_broker_keeps_serving() {
    let broker = BrokerProcess::start_with(&KAFKA_LISTEN);
    let address = broker.kafka_bootstrap();
    assert_still_serving(&address).await;

    // A version outside the advertised range: ApiVersions answers UNSUPPORTED_VERSION
    // (35) with the ranges it serves, so the client can pick one (KIP-511).
    let answer = exchange(&address, &api_versions_v0(99, 5)).await;
    let (correlation_id, error_code, apis) = read_api_versions_v0(&answer);
    assert_eq!((correlation_id, error_code), (5, 35));
    assert!(apis.contains(&(18, 0, 3)), "{apis:?}");
    assert_still_serving(&address).await;

    let header_only = |key: i16, version: i16| {
        let mut frame = BytesMut::new();
        frame.put_i32(10);
        frame.put_i16(key);
        frame.put_i16(version);
        frame.put_i32(1);
        frame.put_i16(-1);
        frame.to_vec()
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("an unknown API key", header_only(999, 0)),
        ("Metadata at a version no codec knows", header_only(3, 99)),
        ("a JoinGroup body that does not decode", header_only(11, 5)),
        (
            "DescribeAcls, neither served nor answered",
            header_only(29, 1),
        ),
        ("a Metadata body that does not decode", header_only(3, 9)),
        ("a truncated frame", {
            let mut frame = api_versions_v0(0, 1);
            frame[..4].copy_from_slice(&100i32.to_be_bytes());
            frame
        }),
        ("an oversized frame", {
            let mut frame = BytesMut::new();
            frame.put_i32(64 * 1024 * 1024);
            frame.put_slice(&api_versions_v0(0, 1)[4..]);
            frame.to_vec()
        }),
        ("a negative size", (-5i32).to_be_bytes().to_vec()),
        ("a frame shorter than a header", {
            let mut frame = BytesMut::new();
            frame.put_i32(2);
            frame.put_i16(18);
            frame.to_vec()
        }),
    ];
    for (case, bytes) in cases {
        let answer = exchange(&address, &bytes).await;
        assert!(
            answer.is_empty(),
            "{case}: closed without an answer, got {answer:?}"
        );
        assert_still_serving(&address).await;
    }

    // Well-formed requests the listener does not serve but parses: UNSUPPORTED_VERSION
    // in their own schema, on a connection that stays usable.
    let metadata = MetadataRequest::default().with_topics(None);
    let answer = exchange(&address, &request_frame(3, 13, &metadata)).await;
    let answer: MetadataResponse = read_response(&answer, 3, 13);
    assert_eq!(answer.error_code, 35, "Metadata v13 (advertised: up to 12)");
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_static_str("t")))
        .with_committed(true);
    let answer = exchange(&address, &request_frame(26, 5, &end)).await;
    let answer: EndTxnResponse = read_response(&answer, 26, 5);
    assert_eq!(answer.error_code, 35, "EndTxn v5 (KIP-890): not served");
    assert_still_serving(&address).await;
    assert!(broker.is_running());
}

/// A request frame: size, header (the version `api_key` needs), `body` at `version`.
pub(crate) fn request_frame(api_key: i16, version: i16, body: &impl Encodable) -> Vec<u8> {
    let key = ApiKey::try_from(api_key).expect("a Kafka API");
    let mut out = BytesMut::new();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(api_key)
        .with_request_api_version(version)
        .with_correlation_id(41)
        .encode(&mut out, key.request_header_version(version))
        .expect("header");
    body.encode(&mut out, version).expect("body");
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    out.to_vec()
}

/// The one response frame in `answer`, to a request of `api_key` at `version`.
pub(crate) fn read_response<T: Decodable>(answer: &[u8], api_key: i16, version: i16) -> T {
    let key = ApiKey::try_from(api_key).expect("a Kafka API");
    assert!(answer.len() > 4, "an answer");
    let mut body = Bytes::copy_from_slice(&answer[4..]);
    let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
        .expect("response header");
    assert_eq!(header.correlation_id, 41);
    T::decode(&mut body, version).expect("response body")
}

/// One record batch v2 with `values`, as a Kafka client sends it.
pub(crate) fn kafka_batch(values: &[&str]) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32 - 1,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode batch");
    buf.freeze()
}

/// The error code of a Produce (v7, acks=1) of one batch to `topic`-`partition`, sent
/// to `address` directly.
async fn produce_error(address: &str, topic: &str, partition: i32) -> i16 {
    const VERSION: i16 = 7;
    let request = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(kafka_batch(&["x"])))])]);
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(0)
        .with_request_api_version(VERSION)
        .with_correlation_id(9)
        .encode(&mut body, 1)
        .expect("header");
    request.encode(&mut body, VERSION).expect("request");
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    let answer = exchange(address, &frame).await;
    assert!(answer.len() > 4, "a Produce response");
    let mut answer = Bytes::from(answer).slice(4..);
    let header = ResponseHeader::decode(&mut answer, 0).expect("response header");
    assert_eq!(header.correlation_id, 9);
    let response = ProduceResponse::decode(&mut answer, VERSION).expect("response");
    response.responses[0].partition_responses[0].error_code
}

#[tokio::test]
async fn given_three_brokers_when_kafka_clients_connect_then_every_kafka_address_is_advertised_and_produce_finds_each_leader(
) {
    let cluster = Cluster::start(3, &KAFKA_LISTEN);
    cluster.create_topic("spread", 3, 3).await;
    let mut leaders = Vec::new();
    for partition in 0..3 {
        leaders.push(cluster.leader_of("spread", partition).await.leader_id);
    }
    let bootstrap = cluster.broker(1).kafka_bootstrap();

    let metadata = kcat_metadata(&bootstrap).await;
    let mut brokers: Vec<(i64, String)> = metadata["brokers"]
        .as_array()
        .expect("brokers")
        .iter()
        .map(|b| {
            (
                b["id"].as_i64().expect("id"),
                b["name"].as_str().expect("name").to_string(),
            )
        })
        .collect();
    brokers.sort();
    let expected: Vec<(i64, String)> = (1..=3)
        .map(|id| (i64::from(id), cluster.broker(id).kafka_bootstrap()))
        .collect();
    assert_eq!(brokers, expected, "every broker's Kafka listener");
    let spread = metadata["topics"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["topic"] == "spread"))
        .unwrap_or_else(|| panic!("spread listed: {metadata}"));
    for (partition, leader) in leaders.iter().enumerate() {
        assert_eq!(
            spread["partitions"][partition]["leader"], *leader,
            "{spread}"
        );
        assert_eq!(
            spread["partitions"][partition]["isrs"]
                .as_array()
                .map(Vec::len),
            Some(3)
        );
    }

    // A follower refuses a Produce: NOT_LEADER_OR_FOLLOWER (6), which tells a Kafka
    // client to refresh its metadata.
    let follower = (1..=3).find(|id| *id != leaders[0]).expect("a follower");
    assert_eq!(
        produce_error(&cluster.broker(follower).kafka_bootstrap(), "spread", 0).await,
        6
    );
    assert_eq!(
        produce_error(&cluster.broker(leaders[0]).kafka_bootstrap(), "spread", 0).await,
        0
    );

    // kcat spreads keyed records over the three partitions, each to its leader.
    let lines: Vec<String> = (0..300).map(|i| format!("k{i}:v{i}")).collect();
    kcat(
        &[
            "-b", &bootstrap, "-P", "-t", "spread", "-K", ":", "-X", "acks=all",
        ],
        &(lines.join("\n") + "\n"),
    )
    .await;
    let mut seen = BTreeSet::new();
    let mut total = 0;
    for partition in 0..3 {
        let read = kcat_read(&bootstrap, "spread", partition, "read_committed").await;
        let values: Vec<&str> = read.iter().map(|(_, v)| v.as_str()).collect();
        // Partition 0 also holds the "x" of the Produce above, first.
        let values: Vec<&str> = values.into_iter().filter(|v| *v != "x").collect();
        assert!(!values.is_empty(), "partition {partition} got records");
        for (i, (offset, _)) in read.iter().enumerate() {
            assert_eq!(
                *offset, i as i64,
                "consecutive offsets in partition {partition}"
            );
        }
        total += values.len();
        seen.extend(values.into_iter().map(str::to_string));
    }
    assert_eq!(total, 300, "each record once");
    let expected: BTreeSet<String> = (0..300).map(|i| format!("v{i}")).collect();
    assert_eq!(seen, expected);
}

/// idem's own transactional producer (there is no Kafka transactional API yet) writes
/// committed and aborted transactions; kcat reads them over the Kafka listener.
#[tokio::test]
async fn given_an_aborted_transaction_when_kcat_reads_committed_then_it_sees_only_committed_records_and_reaches_the_end(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("ledger", 1, 1).await;
    let bootstrap = cluster.broker(1).bootstrap();
    let producer = txn::producer(&bootstrap, "kafka-reader").await;
    txn::commit_one(&producer, "ledger", "c0")
        .await
        .expect("commit");
    producer.begin().expect("begin");
    for value in ["a1", "a2"] {
        producer
            .send(ProducerRecord::new("ledger", value.to_string()).partition(0))
            .await
            .expect("send")
            .await
            .expect("acknowledged");
    }
    producer.abort().await.expect("abort");
    txn::commit_one(&producer, "ledger", "c3")
        .await
        .expect("commit");
    txn::wait_until_stable(&bootstrap, "ledger", &[0]).await;

    let kafka = cluster.broker(1).kafka_bootstrap();
    let values = |read: Vec<(i64, String)>| read.into_iter().map(|(_, v)| v).collect::<Vec<_>>();
    // kcat -e exits only once its position reaches the end: past the aborted batches
    // and markers idem left out, which the empty batch of the answer spans.
    assert_eq!(
        values(kcat_read(&kafka, "ledger", 0, "read_committed").await),
        ["c0", "c3"]
    );
    assert_eq!(
        values(kcat_read(&kafka, "ledger", 0, "read_uncommitted").await),
        ["c0", "a1", "a2", "c3"]
    );
}

/// One broker with a Kafka listener under `--authorizer acl`, where a Kafka client
/// without SASL or a certificate is `User:ANONYMOUS` and holds no ACL yet; the
/// operator's admin client (`t-admin`, a super user); the token files' directory, kept
/// as long as the broker runs.
pub(crate) async fn anonymous_acl_broker() -> (tempfile::TempDir, Cluster, Admin) {
    let dir = tempfile::tempdir().expect("dir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path.display().to_string()
    };
    let tokens = write("tokens", "broker t-broker\nadmin t-admin\n");
    let own = write("broker-token", "t-broker\n");
    let cluster = Cluster::start(
        1,
        &[
            KAFKA_LISTEN[0],
            KAFKA_LISTEN[1],
            "--authorizer",
            "acl",
            "--super-users",
            "User:broker,User:admin",
            "--auth-token-file",
            &tokens,
            "--auth-token",
            &own,
        ],
    );
    let admin = crate::acls::admin_of(&cluster).await;
    (dir, cluster, admin)
}

/// Under `--authorizer acl` a Kafka client without SASL acts as `User:ANONYMOUS` and
/// goes through the same checks as gRPC: nothing until an ACL allows it.
#[tokio::test]
async fn given_acls_when_an_anonymous_kafka_client_produces_then_it_is_refused_until_an_acl_allows_it(
) {
    let (_tokens, cluster, admin) = anonymous_acl_broker().await;
    admin
        .create_topic("guarded", 1, 1)
        .await
        .expect("topic created by the operator");
    let kafka = cluster.broker(1).kafka_bootstrap();

    // Not described: left out of Metadata; asked by name: refused.
    let listed = kcat_metadata(&kafka).await;
    assert_eq!(
        listed["topics"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
    let refused = python(
        "produce.py",
        &[&kafka, "guarded", "0", "3", "message.timeout.ms=10000"],
    )
    .await;
    let reports = refused["reports"].as_array().expect("reports");
    assert_eq!(reports.len(), 3, "{refused}");
    for report in reports {
        let error = report["error"].as_str().unwrap_or_default().to_lowercase();
        assert!(error.contains("authorization"), "{report}");
    }
    // Nor may it delete the topic: TOPIC_AUTHORIZATION_FAILED (29), and it stays.
    let refused = python("delete_topic.py", &[&kafka, "guarded"]).await;
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or_default()
            .contains("val=29,"),
        "{refused}"
    );
    let still = admin.metadata(&["guarded"]).await.expect("metadata");
    assert!(
        still.topic("guarded").is_some(),
        "the refused delete removed it"
    );

    let allow = |operation: &str| AclBinding {
        principal: "User:ANONYMOUS".into(),
        resource_type: "topic".into(),
        resource_name: "guarded".into(),
        pattern_type: "literal".into(),
        operation: operation.into(),
        permission: "allow".into(),
    };
    admin
        .create_acls(&[allow("write"), allow("read")])
        .await
        .expect("ACLs stored");
    // ACLs reach the broker through an etcd watch: wait until Metadata shows the topic.
    wait_until(PATIENCE, "the broker applies the new ACLs", || async {
        let seen = kcat_metadata(&kafka).await;
        match seen["topics"].as_array().map(Vec::len) {
            Some(1) => Seen::Reached(()),
            _ => Seen::Not(seen.to_string()),
        }
    })
    .await;
    let produced = python("produce.py", &[&kafka, "guarded", "0", "3"]).await;
    assert_delivered_in_order(&produced, 3);
    assert_eq!(
        kcat_read(&kafka, "guarded", 0, "read_committed").await,
        in_order(3)
    );
}

/// `idem dev` with its Kafka listener (on by default at 9094; port 0 here, as tests
/// run side by side): it prints the address, and kcat produces and consumes through it.
#[tokio::test]
async fn given_idem_dev_when_kcat_produces_and_consumes_through_its_kafka_listener_then_records_round_trip(
) {
    /// Reaps idem dev even when an assertion fails.
    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut dev = std::process::Command::new(idem_tests::binaries::binary("idem"))
        .args([
            "dev",
            "--listen",
            "127.0.0.1:0",
            "--coordinator-listen",
            "127.0.0.1:0",
            "--kafka-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(tmp.path().join("data"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map(Reaped)
        .expect("spawn idem dev");
    let stdout = dev.0.stdout.take().expect("stdout");
    let kafka = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(stdout).lines();
        let kafka = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix("kafka listener on ").map(str::to_string));
        // Keep draining so idem dev never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        kafka
    })
    .await
    .expect("reader");
    let kafka = kafka.expect("idem dev prints its kafka listener line");
    assert_eq!(create_topic(&kafka, "demo", 3).await["error"], Value::Null);
    kcat(&["-b", &kafka, "-P", "-t", "demo", "-p", "2"], "1\n2\n3\n").await;
    assert_eq!(
        kcat_read(&kafka, "demo", 2, "read_committed").await,
        [
            (0, "1".to_string()),
            (1, "2".to_string()),
            (2, "3".to_string())
        ]
    );
}

/// The failover case: the partition's leader is SIGKILLed while an idempotent
/// confluent-kafka producer writes to it (acks=all); librdkafka finds the new leader
/// through Metadata and retries, and the partition holds every record once, in order.
#[tokio::test]
async fn given_the_leader_killed_under_an_idempotent_kafka_producer_then_nothing_is_lost_or_duplicated(
) {
    let mut cluster = Cluster::start(3, &KAFKA_LISTEN);
    cluster.create_topic("failover", 1, 3).await;
    let old = cluster.leader_of("failover", 0).await;
    let bootstrap: String = (1..=3)
        .map(|id| cluster.broker(id).kafka_bootstrap())
        .collect::<Vec<_>>()
        .join(",");

    const COUNT: usize = 3000;
    let producing = {
        let bootstrap = bootstrap.clone();
        tokio::spawn(async move {
            python(
                "produce.py",
                &[
                    &bootstrap,
                    "failover",
                    "0",
                    &COUNT.to_string(),
                    "enable.idempotence=true",
                    "batch.num.messages=10",
                    "linger.ms=0",
                ],
            )
            .await
        })
    };
    // Mid-stream: once a tenth of the records is acknowledged, and before the last.
    let seen = cluster
        .wait_for(old.leader_id, "failover", 0, |p| {
            p.high_watermark >= (COUNT / 10) as i64
        })
        .await;
    assert!(
        seen.high_watermark < COUNT as i64,
        "the leader dies mid-stream: {seen:?}"
    );
    assert!(!producing.is_finished(), "the producer is still at work");
    cluster.kill(old.leader_id);
    let new = cluster.new_leader("failover", 0, &old).await;
    let produced = producing.await.expect("producer task");
    let high_watermark = cluster
        .wait_for(new.leader_id, "failover", 0, |p| {
            p.high_watermark >= COUNT as i64
        })
        .await
        .high_watermark;
    assert_eq!(high_watermark, COUNT as i64, "nothing duplicated");
    assert_delivered_in_order(&produced, COUNT);
    let reader = cluster.broker(new.leader_id).kafka_bootstrap();
    assert_eq!(
        kcat_read(&reader, "failover", 0, "read_committed").await,
        in_order(COUNT),
        "each record once, in order"
    );
}
