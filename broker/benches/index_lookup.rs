//! Micro-benchmarks of the lookups a fetch makes before it reads records.
//!
//! Offset index: the index type is private to the log, so its lookup is measured the way
//! a fetch pays for it, through `PartitionLog::read` of the one batch holding a random
//! offset: index binary search, the check that the entry points at its batch, the scan
//! of batch headers from there, and the CRC-verified read. A dense index (one entry per
//! batch, 100,000 entries) leaves no scan; the default 4 KiB interval is what brokers run.
//!
//! Transaction index: what a read_committed fetch asks, the last stable offset and the
//! aborted transactions overlapping the fetched range.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use idem_broker::log::{FlushPolicy, LogConfig, PartitionLog};
use idem_broker::txn_index::TxnIndex;
use idem_proto::batch::{self, BatchHeader, ProducerInfo, Record, ATTR_TRANSACTIONAL};
use idem_proto::control::{self, ControlMarker};
use idem_proto::v1::ControlType;

/// One record per batch, so offsets and batches coincide and 100,001 batches give a
/// dense index 100,000 entries (the batch at position 0 never gets one).
const LOG_BATCHES: i64 = 100_001;
const VALUE_LEN: usize = 100;
const LOOKUPS: usize = 4_096;

/// Deterministic pseudo-random values in `0..below` (xorshift64), so runs compare.
fn random_offsets(count: usize, below: i64) -> Vec<i64> {
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % below as u64) as i64
        })
        .collect()
}

/// A single-segment log of `LOG_BATCHES` one-record batches, never fsynced (the bench
/// reads from the page cache, as a fetch of recent data does).
fn build_log(dir: &std::path::Path, index_interval_bytes: u32) -> PartitionLog {
    let config = LogConfig {
        index_interval_bytes,
        flush: FlushPolicy::Never,
        ..LogConfig::default()
    };
    let (mut log, _) = PartitionLog::open(dir, config).expect("open bench log");
    let record = Record {
        value: Some(vec![7u8; VALUE_LEN].into()),
        ..Record::default()
    };
    let encoded = batch::encode(ProducerInfo::NONE, 0, &[record]);
    for _ in 0..LOG_BATCHES {
        log.append(&encoded, 0).expect("append bench batch");
    }
    assert_eq!(log.active_segment_base(), 0, "the bench log is one segment");
    log
}

fn offset_lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("offset_index/read_batch_at_random_offset");
    let cases = [
        ("dense_100k_entries", 1),
        (
            "default_4KiB_interval",
            LogConfig::DEFAULT_INDEX_INTERVAL_BYTES,
        ),
    ];
    for (name, index_interval_bytes) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = build_log(dir.path(), index_interval_bytes);
        let log_end = log.log_end_offset();
        let offsets = random_offsets(LOOKUPS, log_end);
        let mut turn = 0usize;
        group.bench_function(name, |b| {
            b.iter(|| {
                turn = (turn + 1) % offsets.len();
                // max_bytes 1: exactly the batch holding the offset.
                let bytes = log
                    .read(black_box(offsets[turn]), 1, log_end)
                    .expect("read bench log");
                assert!(!bytes.is_empty());
                bytes
            });
        });
    }
    group.finish();
}

/// Appends batch headers at consecutive offsets to a transaction index, as the
/// partition's append path does.
struct TxnLog {
    index: TxnIndex,
    next_offset: i64,
    data: BatchHeader,
    control: BatchHeader,
}

impl TxnLog {
    fn new() -> Self {
        let producer = ProducerInfo {
            producer_id: 0,
            producer_epoch: 0,
            base_sequence: 0,
        };
        let data = batch::encode(producer, ATTR_TRANSACTIONAL, &[Record::default()]);
        let marker = ControlMarker {
            control_type: ControlType::Begin,
            coordinator_epoch: 0,
        };
        let control = control::encode_control(0, 0, marker, 0);
        TxnLog {
            index: TxnIndex::new(),
            next_offset: 0,
            data: batch::decode_header(&data).expect("bench batch is valid"),
            control: batch::decode_header(&control).expect("bench marker is valid"),
        }
    }

    fn data(&mut self, producer_id: i64) {
        let header = BatchHeader {
            producer_id,
            base_offset: self.next_offset,
            ..self.data
        };
        self.index.apply(&header, None);
        self.next_offset += 1;
    }

    fn marker(&mut self, producer_id: i64, control_type: ControlType) {
        let header = BatchHeader {
            producer_id,
            base_offset: self.next_offset,
            ..self.control
        };
        let marker = ControlMarker {
            control_type,
            coordinator_epoch: 0,
        };
        self.index.apply(&header, Some(marker));
        self.next_offset += 1;
    }
}

/// `rounds` rounds of `producers` interleaved transactions (BEGIN, 4 data batches,
/// marker each), every other one aborted; the index is pruned at the log end.
fn txn_log(rounds: usize, producers: i64) -> TxnLog {
    let mut log = TxnLog::new();
    for round in 0..rounds {
        for producer_id in 0..producers {
            log.marker(producer_id, ControlType::Begin);
        }
        for _ in 0..4 {
            for producer_id in 0..producers {
                log.data(producer_id);
            }
        }
        for producer_id in 0..producers {
            let aborted = (round + producer_id as usize) % 2 == 1;
            let end = if aborted {
                ControlType::Abort
            } else {
                ControlType::Commit
            };
            log.marker(producer_id, end);
        }
    }
    log.index.prune_stable(log.next_offset);
    log
}

fn aborted_lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("txn_index/aborted_overlapping");
    // 2,000 rounds x 10 producers: 20,000 transactions, 10,000 aborted, 120,000 offsets.
    let log = txn_log(2_000, 10);
    assert_eq!(log.index.aborted().len(), 10_000);
    let log_end = log.next_offset;
    let last_stable = log.index.last_stable_offset(log_end);
    let froms = random_offsets(LOOKUPS, log_end);
    // A fetch that reads about 1,000 offsets asks only about those.
    let mut turn = 0usize;
    group.bench_function("fetch_window_1000_offsets", |b| {
        b.iter(|| {
            turn = (turn + 1) % froms.len();
            let from = black_box(froms[turn]);
            log.index.aborted_overlapping(from, from + 1_000)
        });
    });
    // `read_for_consumer` asks for everything up to the LSO: from a random offset that is
    // on average half of the 10,000 aborted transactions.
    group.bench_function("to_last_stable_offset", |b| {
        b.iter(|| {
            turn = (turn + 1) % froms.len();
            log.index
                .aborted_overlapping(black_box(froms[turn]), last_stable)
        });
    });
    group.finish();
}

fn last_stable_offset(c: &mut Criterion) {
    let mut group = c.benchmark_group("txn_index/last_stable_offset");
    for open in [1i64, 10_000] {
        let mut log = TxnLog::new();
        for producer_id in 0..open {
            log.marker(producer_id, ControlType::Begin);
        }
        let high_watermark = log.next_offset;
        group.bench_function(BenchmarkId::new("open_transactions", open), |b| {
            b.iter(|| log.index.last_stable_offset(black_box(high_watermark)));
        });
    }
    group.finish();
}

criterion_group!(benches, offset_lookup, aborted_lookup, last_stable_offset);
criterion_main!(benches);
