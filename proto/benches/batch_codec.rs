//! Micro-benchmarks of the record batch codec, the work every produced byte pays: the
//! producer encodes (CRC included), the broker validates (header, CRC, every record),
//! a consumer decodes. Batches of 1, 10 and 100 records with 1 KiB values; throughput
//! is in batch bytes, so the three sizes compare per byte.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use idem_proto::batch::{self, ProducerInfo, Record};

const VALUE_LEN: usize = 1024;
const RECORD_COUNTS: [usize; 3] = [1, 10, 100];

/// The CRC32C covers the batch from the `attributes` field on (docs/format.md).
const CRC_COVERED_FROM: usize = 21;

const PRODUCER: ProducerInfo = ProducerInfo {
    producer_id: 4_242,
    producer_epoch: 3,
    base_sequence: 1_000,
};

/// `count` records shaped like a typical keyed produce: a short key, a 1 KiB value.
fn records(count: usize) -> Vec<Record> {
    (0..count)
        .map(|i| Record {
            key: Some(Bytes::from(format!("order-{i:08}"))),
            value: Some(Bytes::from(vec![(i % 251) as u8; VALUE_LEN])),
            headers: Vec::new(),
            timestamp_ms: 1_700_000_000_000 + i as i64,
        })
        .collect()
}

fn label(count: usize) -> BenchmarkId {
    BenchmarkId::from_parameter(format!("{count}x1KiB"))
}

fn encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch/encode");
    for count in RECORD_COUNTS {
        let records = records(count);
        let encoded = batch::encode(PRODUCER, 0, &records);
        group.throughput(Throughput::Bytes(encoded.len() as u64));
        group.bench_with_input(label(count), &records, |b, records| {
            b.iter(|| batch::encode(black_box(PRODUCER), 0, black_box(records)));
        });
    }
    group.finish();
}

/// What a consumer does with a fetched batch: header and CRC check, then every record.
fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch/decode");
    for count in RECORD_COUNTS {
        let encoded = batch::encode(PRODUCER, 0, &records(count));
        group.throughput(Throughput::Bytes(encoded.len() as u64));
        group.bench_with_input(label(count), &encoded, |b, encoded| {
            b.iter(|| {
                let header = batch::verify(black_box(encoded)).expect("bench batch is valid");
                let records = batch::records(encoded).expect("bench batch has valid records");
                (header, records)
            });
        });
    }
    group.finish();
}

/// What the broker does with every produced batch before it touches the log.
fn validate_produced(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch/validate_produced");
    for count in RECORD_COUNTS {
        let encoded = batch::encode(PRODUCER, 0, &records(count));
        group.throughput(Throughput::Bytes(encoded.len() as u64));
        group.bench_with_input(label(count), &encoded, |b, encoded| {
            b.iter(|| batch::validate_produced(black_box(encoded)).expect("bench batch is valid"));
        });
    }
    group.finish();
}

/// The CRC alone over the same bytes, to tell checksum cost from parsing cost.
fn crc(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch/crc32c");
    for count in RECORD_COUNTS {
        let encoded = batch::encode(PRODUCER, 0, &records(count));
        let stored_crc = batch::decode_header(&encoded)
            .expect("bench batch is valid")
            .crc;
        assert_eq!(
            crc32c::crc32c(&encoded[CRC_COVERED_FROM..]),
            stored_crc,
            "CRC_COVERED_FROM no longer matches the batch format"
        );
        group.throughput(Throughput::Bytes(encoded.len() as u64));
        group.bench_with_input(label(count), &encoded, |b, encoded| {
            b.iter(|| crc32c::crc32c(black_box(&encoded[CRC_COVERED_FROM..])));
        });
    }
    group.finish();
}

criterion_group!(benches, encode, decode, validate_produced, crc);
criterion_main!(benches);
