//! Requests in flight on one Kafka connection: a client may send several before reading
//! any answer (librdkafka keeps up to five Produce requests in flight). The listener
//! appends produced batches in arrival order while earlier answers wait for their
//! fsync (`broker/src/kafka/connection.rs`), so this checks what a client relies on:
//! answers come back in request order, every batch lands in request order on its
//! partition (also without idempotence, whose sequence numbers would otherwise
//! restore it), an acks=0 Produce gets no answer but is appended before the next
//! request is served, and a bad frame closes the connection only after every earlier
//! answer was written.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::{ProduceResponse, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::kafka::{api_versions_v0, create_topic, kafka_batch, KAFKA_LISTEN};
use idem_tests::kafka_clients::kcat_read;
use idem_tests::wait::PATIENCE;
use idem_tests::BrokerProcess;

const TOPIC: &str = "in-flight";
const PARTITIONS: i32 = 3;
/// Produce v7: the response header is v0, as ApiVersions v0's.
const PRODUCE_VERSION: i16 = 7;

/// The partitions request `i` writes: two of the three, so consecutive requests share one.
fn partitions_of(i: i32) -> [i32; 2] {
    [i % PARTITIONS, (i + 1) % PARTITIONS]
}

fn value(i: i32, partition: i32) -> String {
    format!("r{i}-p{partition}")
}

/// A Produce (v7, no idempotence) frame with correlation id `i`: one single-record
/// batch per partition of `partitions_of(i)`.
fn produce_frame(i: i32, acks: i16) -> Vec<u8> {
    let partition_data = partitions_of(i)
        .iter()
        .map(|&p| {
            PartitionProduceData::default()
                .with_index(p)
                .with_records(Some(kafka_batch(&[&value(i, p)])))
        })
        .collect();
    let request = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_data(partition_data)]);
    let mut out = BytesMut::new();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(0)
        .with_request_api_version(PRODUCE_VERSION)
        .with_correlation_id(i)
        .encode(&mut out, 1)
        .expect("header");
    request.encode(&mut out, PRODUCE_VERSION).expect("request");
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    out.to_vec()
}

/// The frames of `answer`, each as (correlation id, body).
fn frames(mut answer: &[u8]) -> Vec<(i32, Bytes)> {
    let mut frames = Vec::new();
    while !answer.is_empty() {
        assert!(answer.len() >= 8, "a whole frame, got {answer:?}");
        let size = i32::from_be_bytes(answer[..4].try_into().expect("4 bytes")) as usize;
        let mut frame = Bytes::copy_from_slice(&answer[4..4 + size]);
        let header = ResponseHeader::decode(&mut frame, 0).expect("response header v0");
        frames.push((header.correlation_id, frame));
        answer = &answer[4 + size..];
    }
    frames
}

#[tokio::test]
async fn given_requests_pipelined_on_one_connection_then_answers_and_appends_keep_request_order() {
    let broker = BrokerProcess::start_with(&KAFKA_LISTEN);
    let bootstrap = broker.kafka_bootstrap();
    assert_eq!(
        create_topic(&bootstrap, TOPIC, PARTITIONS).await["error"],
        Value::Null
    );
    // 0..=14 Produce, 15 ApiVersions, 16..=28 Produce, 29 Produce with acks=0,
    // 30 ApiVersions, then an unknown API key: all written before any answer is read.
    let mut sent = Vec::new();
    for i in 0..=30 {
        match i {
            15 | 30 => sent.extend(api_versions_v0(0, i)),
            29 => sent.extend(produce_frame(i, 0)),
            _ => sent.extend(produce_frame(i, 1)),
        }
    }
    let mut unknown = BytesMut::new();
    unknown.put_i32(10);
    unknown.put_i16(999);
    unknown.put_i16(0);
    unknown.put_i32(31);
    unknown.put_i16(-1);
    sent.extend(unknown);

    let mut stream = TcpStream::connect(&bootstrap).await.expect("connect");
    stream.write_all(&sent).await.expect("send");
    stream.shutdown().await.expect("half-close");
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer))
        .await
        .expect("every answer, then the close, within the patience")
        .expect("a clean close: every request was read");

    let frames = frames(&answer);
    let correlation_ids: Vec<i32> = frames.iter().map(|(id, _)| *id).collect();
    let expected: Vec<i32> = (0..=30).filter(|&i| i != 29).collect();
    assert_eq!(
        correlation_ids, expected,
        "one answer per request that wants one, in request order, then the close"
    );
    // Each partition's batches took consecutive offsets in request order.
    let mut next_offset = [0i64; PARTITIONS as usize];
    for (i, body) in frames {
        if i == 15 || i == 30 {
            continue;
        }
        let response =
            ProduceResponse::decode(&mut body.clone(), PRODUCE_VERSION).expect("a Produce answer");
        let answered: Vec<(i32, i16, i64)> = response.responses[0]
            .partition_responses
            .iter()
            .map(|p| (p.index, p.error_code, p.base_offset))
            .collect();
        let wanted: Vec<(i32, i16, i64)> = partitions_of(i)
            .iter()
            .map(|&p| (p, 0, next_offset[p as usize]))
            .collect();
        assert_eq!(
            answered, wanted,
            "request {i}: (partition, error, base offset)"
        );
        for p in partitions_of(i) {
            next_offset[p as usize] += 1;
        }
    }
    // The acks=0 request was appended before request 30 was served: read back, every
    // partition holds its records in request order, 29's included.
    for p in 0..PARTITIONS {
        let read = kcat_read(&bootstrap, TOPIC, p, "read_uncommitted").await;
        let wanted: Vec<(i64, String)> = (0..=29)
            .filter(|&i| i != 15 && partitions_of(i).contains(&p))
            .enumerate()
            .map(|(offset, i)| (offset as i64, value(i, p)))
            .collect();
        assert_eq!(read, wanted, "partition {p}");
    }
    assert!(broker.is_running());
}
