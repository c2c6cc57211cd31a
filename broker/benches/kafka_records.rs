//! What the Kafka listener's conversion at the edge costs (issue 30: "convert at the
//! edge, or store Kafka's format natively: measure and say which"). A produced Kafka
//! v2 batch of 1 KiB records (the benchmark's size; 256 records, about librdkafka's
//! batch at linger 5 ms under load) becomes an idem batch, uncompressed and compressed
//! as clients send it; a stored idem batch becomes the Kafka batch a fetch answers.
//! Throughput is in the produced or fetched bytes, to set beside the broker's
//! end-to-end produce rate (scripts/bench-kafka.sh, docs/benchmarks.md).

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use idem_broker::kafka::records::{produced_to_idem, stored_to_kafka};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const RECORDS: usize = 256;
const VALUE_LEN: usize = 1024;

/// An idempotent producer's batch: producer id, epoch and consecutive sequences, values
/// that start like the bench's stamp and are zero-padded (compressible, as the bench's).
fn kafka_batch(compression: Compression) -> Bytes {
    let records: Vec<Record> = (0..RECORDS)
        .map(|i| {
            let mut value = vec![0u8; VALUE_LEN];
            value[..8].copy_from_slice(&(i as u64).to_be_bytes());
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: 4242,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: i as i32,
                timestamp: 1_700_000_000_000 + i as i64,
                key: None,
                value: Some(Bytes::from(value)),
                headers: IndexMap::new(),
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encode the bench batch");
    buf.freeze()
}

fn produce(c: &mut Criterion) {
    let mut group = c.benchmark_group("kafka_produced_to_idem");
    for (name, compression) in [
        ("none", Compression::None),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        let batch = kafka_batch(compression);
        // Records' bytes, so compressed and plain batches compare per record.
        group.throughput(Throughput::Bytes((RECORDS * VALUE_LEN) as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), &batch, |b, batch| {
            b.iter(|| produced_to_idem(black_box(batch)).expect("converts"))
        });
    }
    group.finish();
}

fn fetch(c: &mut Criterion) {
    let stored = produced_to_idem(&kafka_batch(Compression::None)).expect("converts");
    let mut group = c.benchmark_group("kafka_stored_to_kafka");
    group.throughput(Throughput::Bytes((RECORDS * VALUE_LEN) as u64));
    group.bench_function("none", |b| {
        let mut out = BytesMut::with_capacity(stored.len() * 2);
        b.iter(|| {
            out.clear();
            stored_to_kafka(black_box(&stored), &mut out).expect("converts");
        })
    });
    group.finish();
}

criterion_group!(benches, produce, fetch);
criterion_main!(benches);
