//! The cleaner merges small cleaned segments on a real log: every offset stays readable,
//! the output respects `segment.bytes`, and a crash between any two file operations of a
//! swap reopens as a consistent log.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use idem_proto::batch::{self, Batches, ProducerInfo, Record};

use super::compaction::CleaningRules;
use super::{FlushPolicy, LogConfig, PartitionLog};

const SEGMENT_BYTES: u64 = 1024;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: SEGMENT_BYTES,
        index_interval_bytes: 100,
        flush: FlushPolicy::EveryAppend,
    }
}

fn update(key: &str, value: &str) -> Vec<u8> {
    let record = Record {
        key: Some(Bytes::copy_from_slice(key.as_bytes())),
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
        headers: Vec::new(),
        timestamp_ms: 1_000,
    };
    batch::encode(ProducerInfo::NONE, 0, &[record]).to_vec()
}

/// 20 sealed segments of 3 one-record batches over `keys` keys (leader epoch 0 for the
/// first half, 1 after), and one batch in the active segment. Returns the sealed bases.
fn many_small_segments(dir: &Path, keys: usize) -> (PartitionLog, Vec<i64>) {
    let (mut log, _) = PartitionLog::open(dir, config()).expect("open");
    let mut offset = 0;
    for segment in 0..20 {
        for _ in 0..3 {
            let key = format!("k{}", offset % keys);
            log.append(&update(&key, &format!("v{offset:04}")), segment / 10)
                .expect("append");
            offset += 1;
        }
        log.roll_now().expect("roll");
    }
    log.append(&update("k0", "active"), 1).expect("append");
    let bases = log.sealed_segments().iter().map(|(b, _)| *b).collect();
    (log, bases)
}

fn clean(log: &mut PartitionLog) -> Result<super::CleanReport, super::LogError> {
    let rules = CleaningRules {
        clean_below: log.active_segment_base(),
        now_ms: 2_000,
        delete_retention_ms: 0,
    };
    log.clean(rules, 0, |_, _| false, |_| None)
}

/// `(base, last, records)` of every batch, checking the offsets are dense from 0.
fn dense_batches(log: &PartitionLog) -> Vec<(i64, i64, i32)> {
    let all = log.read(0, usize::MAX, i64::MAX).expect("read whole log");
    let spans: Vec<(i64, i64, i32)> = Batches::new(&all)
        .map(|b| {
            let (h, _) = b.expect("valid batch");
            (h.base_offset, h.last_offset(), h.record_count)
        })
        .collect();
    let mut expected = 0;
    for &(base, last, _) in &spans {
        assert_eq!(base, expected, "no gap, no overlap: {spans:?}");
        expected = last + 1;
    }
    assert_eq!(expected, log.log_end_offset());
    spans
}

/// Each key's latest value in the log.
fn latest(log: &PartitionLog) -> BTreeMap<String, String> {
    let all = log.read(0, usize::MAX, i64::MAX).expect("read whole log");
    let mut latest = BTreeMap::new();
    for b in Batches::new(&all) {
        let (_, bytes) = b.expect("valid batch");
        for record in batch::records(bytes).expect("records decode") {
            let text = |b: &Option<Bytes>| {
                String::from_utf8_lossy(b.as_deref().unwrap_or(&[])).into_owned()
            };
            latest.insert(text(&record.key), text(&record.value));
        }
    }
    latest
}

/// A read at every offset returns, first, the batch covering it.
fn assert_every_offset_readable(log: &PartitionLog) {
    for offset in 0..log.log_end_offset() {
        let bytes = log.read(offset, 1, i64::MAX).expect("read at offset");
        let (header, _) = Batches::new(&bytes)
            .next()
            .expect("a batch")
            .expect("valid batch");
        assert!(
            header.base_offset <= offset && offset <= header.last_offset(),
            "read at {offset} returned {}..={}",
            header.base_offset,
            header.last_offset()
        );
    }
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap"))
        .collect()
}

#[test]
fn given_many_small_segments_of_few_keys_when_cleaned_then_they_merge_into_one_and_every_offset_reads(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, old_bases) = many_small_segments(dir.path(), 3);
    let before = latest(&log);
    assert_eq!(old_bases.len(), 20);

    let report = clean(&mut log).expect("clean");

    assert_eq!(report.merged_away, 19, "{report:?}");
    assert_eq!(
        log.sealed_segments(),
        vec![(0, 60)],
        "one sealed segment, from the log start"
    );
    assert_eq!((log.log_start_offset(), log.first_segment_base()), (0, 0));
    assert_eq!(latest(&log), before);
    let spans = dense_batches(&log);
    // 3 live records; fillers merge across the merged segments, one per leader epoch.
    assert_eq!(spans.iter().filter(|s| s.2 > 0).count(), 4, "{spans:?}");
    assert_every_offset_readable(&log);
    for base in &old_bases {
        let bytes = log.read(*base, 1, i64::MAX).expect("read at an old base");
        assert!(!bytes.is_empty());
    }
    let segment_files = std::fs::read_dir(dir.path())
        .expect("list")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log"))
        })
        .count();
    assert_eq!(segment_files, 2, "the merged segment and the active one");
    assert!(leftovers(dir.path()).is_empty());

    // Reopened, the merged segment serves the same log; cleaning again changes nothing.
    drop(log);
    let (mut log, report) = PartitionLog::open(dir.path(), config()).expect("reopen");
    assert_eq!(report.reason, None);
    assert_eq!(dense_batches(&log), spans);
    assert_every_offset_readable(&log);
    let again = clean(&mut log).expect("clean");
    assert_eq!((again.rewritten, again.merged_away), (0, 0), "{again:?}");
}

#[test]
fn given_segments_that_keep_all_their_records_then_each_output_stays_within_segment_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Every key is distinct: cleaning removes nothing, merging alone shrinks the count.
    let (mut log, _) = many_small_segments(dir.path(), 1_000);
    let before = dense_batches(&log);
    let report = clean(&mut log).expect("clean");
    let sealed = log.sealed_segments();
    assert!(report.merged_away > 0 && sealed.len() < 20, "{report:?}");
    for &(base, next) in &sealed {
        let bytes = log.read(base, usize::MAX, next).expect("read segment");
        assert!(
            bytes.len() as u64 <= SEGMENT_BYTES,
            "{base}..{next}: {} bytes",
            bytes.len()
        );
    }
    assert_eq!(dense_batches(&log), before);
    assert_every_offset_readable(&log);
}

#[test]
fn given_a_crash_between_any_two_file_operations_of_a_merge_then_the_log_reopens_consistent() {
    let reference = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = many_small_segments(reference.path(), 3);
    let before = latest(&log);
    clean(&mut log).expect("clean");
    let cleaned = dense_batches(&log);
    drop(log);

    let mut crashed_at = 0;
    for budget in 0.. {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _) = many_small_segments(dir.path(), 3);
        log.crash_after_file_ops = Some(budget);
        if clean(&mut log).is_ok() {
            break;
        }
        crashed_at += 1;
        drop(log);
        let (mut log, _) = PartitionLog::open(dir.path(), config()).expect("reopen");
        assert!(leftovers(dir.path()).is_empty(), "after {budget} ops");
        let spans = dense_batches(&log);
        assert!(
            log.sealed_segments().len() == 20 || spans == cleaned,
            "after {budget} ops: the old segments or the merged one, got {:?}",
            log.sealed_segments()
        );
        assert_eq!(latest(&log), before, "after {budget} ops");
        assert_every_offset_readable(&log);
        // The next pass finishes the job.
        clean(&mut log).expect("clean after reopen");
        assert_eq!(dense_batches(&log), cleaned, "after {budget} ops");
        assert_eq!(log.sealed_segments(), vec![(0, 60)]);
    }
    // A rename, a sync, 20 index and 19 log removals, a sync, a rename and a sync.
    assert_eq!(crashed_at, 44);
}

#[test]
fn given_segments_too_large_to_merge_before_cleaning_then_the_next_pass_merges_them_unprompted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = PartitionLog::open(dir.path(), config()).expect("open");
    // One batch of about 990 bytes per segment, all updates of one key.
    for offset in 0..5 {
        let value = format!("{offset:04}{}", "v".repeat(900));
        log.append(&update("k", &value), 0).expect("append");
        log.roll_now().expect("roll");
    }
    log.append(&update("k", "active"), 0).expect("append");
    let rules = CleaningRules {
        clean_below: log.active_segment_base(),
        now_ms: 2_000,
        delete_retention_ms: u64::MAX,
    };
    let first = log.clean(rules, 0, |_, _| false, |_| None).expect("clean");
    assert_eq!((first.rewritten, first.merged_away), (4, 0), "{first:?}");
    // Nothing new was sealed and no horizon came due, but the emptied segments now fit
    // together: the next pass runs and merges them (into one filler); the segment of the
    // live record still does not fit beside it.
    let second = log.clean(rules, 0, |_, _| false, |_| None).expect("clean");
    assert_eq!(second.merged_away, 3, "{second:?}");
    assert_eq!(log.sealed_segments(), vec![(0, 4), (4, 5)]);
    dense_batches(&log);
    assert_every_offset_readable(&log);
    let third = log.clean(rules, 0, |_, _| false, |_| None).expect("clean");
    assert_eq!(third.segments, 0, "nothing left to do: skipped {third:?}");
}
