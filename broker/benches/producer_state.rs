//! Micro-benchmarks of the producer-state check every idempotent produce goes through:
//! `ProducerStateTable::check_data` decides, and on `Append` the partition records the
//! stored batch with `apply_batch` (both under the partition lock, so their cost bounds
//! produce concurrency on one partition). Cases: the in-sequence append, and a retry of
//! one of the last 5 batches answered as a duplicate, with 1 and 10,000 producers.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use idem_broker::producer_state::{Decision, ProducerStateTable, MAX_CACHED_BATCHES};
use idem_proto::batch::{self, BatchHeader, ProducerInfo, Record};

const PRODUCER_COUNTS: [usize; 2] = [1, 10_000];
const RECORDS_PER_BATCH: i32 = 10;
const EPOCH: i16 = 0;
const FIRST_PRODUCER_ID: i64 = 1_000;
/// Coprime with `MAX_CACHED_BATCHES` x producers: every cached batch of every producer
/// gets retried, and consecutive retries hit different producers.
const RETRY_STRIDE: usize = 7;
/// Broker clock; only expiry reads it, which no bench triggers.
const NOW_MS: i64 = 1_700_000_000_000;

/// A stored data batch header of `producer_id` as the log would hand it to the table,
/// taken from a really encoded batch so every field is what a produce carries.
fn header(producer_id: i64, base_sequence: i32, base_offset: i64) -> BatchHeader {
    let records = vec![Record::default(); RECORDS_PER_BATCH as usize];
    let producer = ProducerInfo {
        producer_id,
        producer_epoch: EPOCH,
        base_sequence,
    };
    let encoded = batch::encode(producer, 0, &records);
    let header = batch::decode_header(&encoded).expect("bench batch is valid");
    BatchHeader {
        base_offset,
        ..header
    }
}

/// One partition's producer state with the producers' next sequences and the log end.
struct Partition {
    table: ProducerStateTable,
    next_sequence: Vec<i32>,
    log_end_offset: i64,
    template: BatchHeader,
}

impl Partition {
    /// `producers` producers that have each appended `MAX_CACHED_BATCHES` batches.
    fn with_producers(producers: usize) -> Self {
        let mut partition = Partition {
            table: ProducerStateTable::new(),
            next_sequence: vec![0; producers],
            log_end_offset: 0,
            template: header(FIRST_PRODUCER_ID, 0, 0),
        };
        for _ in 0..MAX_CACHED_BATCHES {
            for producer in 0..producers {
                let decision = partition.produce(producer);
                assert_eq!(decision, Decision::Append, "setup appends in sequence");
            }
        }
        partition
    }

    fn batch(&self, producer: usize, base_sequence: i32, base_offset: i64) -> BatchHeader {
        BatchHeader {
            producer_id: FIRST_PRODUCER_ID + producer as i64,
            base_sequence,
            base_offset,
            ..self.template
        }
    }

    /// The produce path: check the next batch of `producer`, and record it if appended.
    fn produce(&mut self, producer: usize) -> Decision {
        let header = self.batch(producer, self.next_sequence[producer], self.log_end_offset);
        let decision = self.table.check_data(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence(),
            header.is_transactional(),
        );
        if decision == Decision::Append {
            self.table.apply_batch(&header, None, NOW_MS);
            self.next_sequence[producer] = batch::sequence_add(header.last_sequence(), 1);
            self.log_end_offset = header.next_offset();
        }
        decision
    }

    /// A retry of each producer's cached batches, in producer-major order.
    fn retries(&self) -> Vec<BatchHeader> {
        (0..self.next_sequence.len())
            .flat_map(|producer| {
                let entry = self
                    .table
                    .get(FIRST_PRODUCER_ID + producer as i64)
                    .expect("setup added every producer");
                entry
                    .batches
                    .iter()
                    .map(move |cached| self.batch(producer, cached.first_seq, -1))
            })
            .collect()
    }
}

fn append_in_sequence(c: &mut Criterion) {
    let mut group = c.benchmark_group("producer_state/append_in_sequence");
    for producers in PRODUCER_COUNTS {
        let mut partition = Partition::with_producers(producers);
        let mut turn = 0usize;
        group.bench_function(BenchmarkId::new("producers", producers), |b| {
            b.iter(|| {
                // Round-robin, so with many producers each check finds a cold entry.
                turn = (turn + 1) % producers;
                let decision = partition.produce(black_box(turn));
                assert_eq!(decision, Decision::Append);
            });
        });
    }
    group.finish();
}

fn duplicate_retry(c: &mut Criterion) {
    let mut group = c.benchmark_group("producer_state/duplicate_retry");
    for producers in PRODUCER_COUNTS {
        let partition = Partition::with_producers(producers);
        let retries = partition.retries();
        let mut turn = 0usize;
        group.bench_function(BenchmarkId::new("producers", producers), |b| {
            b.iter(|| {
                turn = (turn + RETRY_STRIDE) % retries.len();
                let retry = black_box(&retries[turn]);
                let decision = partition.table.check_data(
                    retry.producer_id,
                    retry.producer_epoch,
                    retry.base_sequence,
                    retry.last_sequence(),
                    retry.is_transactional(),
                );
                assert!(matches!(decision, Decision::Duplicate(_)));
            });
        });
    }
    group.finish();
}

criterion_group!(benches, append_in_sequence, duplicate_retry);
criterion_main!(benches);
