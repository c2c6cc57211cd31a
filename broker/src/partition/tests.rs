//! A real partition (log on disk, sole replica) under transactions: markers and their
//! retries, the LSO, read_committed filtering, and the transaction state rebuilt after a
//! reopen and a truncation exactly as it was built by appends.

use std::collections::BTreeMap;
use std::time::Duration;

use idem_proto::batch::{self, ProducerInfo, Record, ATTR_TRANSACTIONAL};
use idem_proto::control::{self, ControlMarker};
use idem_proto::v1::{ControlType, IsolationLevel};
use idem_proto::ErrorCode;

use crate::log::ReadLimit;
use crate::producer_state::MarkerEpoch;
use crate::txn_index::segment_file;

use super::*;

const TIMEOUT: Duration = Duration::from_secs(5);
const COMMITTED: IsolationLevel = IsolationLevel::ReadCommitted;
const UNCOMMITTED: IsolationLevel = IsolationLevel::ReadUncommitted;

fn settings() -> PartitionSettings {
    PartitionSettings {
        log: LogConfig {
            segment_bytes: 4096,
            ..LogConfig::default()
        },
        max_batch_bytes: 1 << 20,
        producer_id_expiration_ms: 1_000,
        topic_defaults: crate::topic_config::TopicDefaults::new(4096, 1 << 20),
    }
}

fn open(topic: &str, dir: &Path) -> Partition {
    Partition::open(topic, 0, dir, settings(), 0).expect("open partition")
}

fn data(producer_id: i64, epoch: i16, seq: i32, records: usize, transactional: bool) -> Vec<u8> {
    let producer = ProducerInfo {
        producer_id,
        producer_epoch: epoch,
        base_sequence: seq,
    };
    let attributes = if transactional { ATTR_TRANSACTIONAL } else { 0 };
    let records: Vec<Record> = (0..records)
        .map(|i| Record {
            value: Some(bytes::Bytes::from(format!("v{i}"))),
            ..Record::default()
        })
        .collect();
    batch::encode(producer, attributes, &records).to_vec()
}

async fn produce(p: &Partition, batch: &[u8]) -> Result<i64, BrokerError> {
    p.append(batch, ACKS_ALL, TIMEOUT)
        .await
        .map(|o| o.base_offset)
}

async fn marker(
    p: &Partition,
    producer_id: i64,
    epoch: i16,
    control_type: ControlType,
) -> Result<Option<i64>, BrokerError> {
    p.append_marker(
        producer_id,
        epoch,
        control_type,
        0,
        MarkerEpoch::Next,
        TIMEOUT,
    )
    .await
}

/// `(base_offset, producer_id)` of every batch a consumer fetch returns from `offset`.
fn consume(p: &Partition, offset: i64, isolation: IsolationLevel) -> (Vec<(i64, i64)>, i64) {
    let read = p
        .read_for_consumer(offset, ReadLimit::at_least_one(1 << 20), isolation)
        .expect("read");
    let batches = stored_batches(&read.records)
        .map(|b| {
            let (header, _) = b.expect("batch");
            assert!(!header.is_control(), "control batches are never returned");
            (header.base_offset, header.producer_id)
        })
        .collect();
    (batches, read.next_fetch_offset)
}

#[tokio::test]
async fn given_a_committed_transaction_then_read_committed_sees_it_only_after_the_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("orders", dir.path());
    assert_eq!(
        marker(&p, 1, 0, ControlType::Begin).await.expect("begin"),
        Some(0)
    );
    assert_eq!(produce(&p, &data(1, 0, 0, 2, true)).await.expect("data"), 1);
    let offsets = p.offsets();
    assert_eq!((offsets.high_watermark, offsets.last_stable_offset), (3, 0));
    assert_eq!(consume(&p, 0, COMMITTED), (vec![], 0));
    assert_eq!(consume(&p, 0, UNCOMMITTED), (vec![(1, 1)], 3));

    let lso = p.watch_last_stable_offset();
    assert_eq!(
        marker(&p, 1, 1, ControlType::Commit).await.expect("commit"),
        Some(3)
    );
    assert_eq!(*lso.borrow(), 4, "the LSO watch moved with the commit");
    assert_eq!(p.offsets().last_stable_offset, 4);
    assert_eq!(consume(&p, 0, COMMITTED), (vec![(1, 1)], 4));
    assert!(p.open_transactions().is_empty());
}

#[tokio::test]
async fn given_an_aborted_transaction_then_read_committed_skips_it_and_moves_past_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("orders", dir.path());
    marker(&p, 1, 0, ControlType::Begin).await.expect("begin");
    produce(&p, &data(1, 0, 0, 2, true)).await.expect("data"); // 1..=2
    produce(&p, &data(2, 0, 0, 1, false)).await.expect("other"); // 3
    produce(&p, &data(1, 0, 2, 1, true)).await.expect("data"); // 4
    marker(&p, 1, 1, ControlType::Abort).await.expect("abort"); // 5
    assert_eq!(consume(&p, 0, COMMITTED), (vec![(3, 2)], 6));
    assert_eq!(
        consume(&p, 0, UNCOMMITTED),
        (vec![(1, 1), (3, 2), (4, 1)], 6)
    );
    // From inside the aborted range only filtered batches remain: nothing returned,
    // and the position moves past them so the consumer does not stall.
    assert_eq!(consume(&p, 4, COMMITTED), (vec![], 6));
    assert_eq!(consume(&p, 6, COMMITTED), (vec![], 6));
}

#[tokio::test]
async fn given_a_long_run_of_filtered_batches_and_small_reads_then_the_fetch_skips_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("orders", dir.path());
    marker(&p, 1, 0, ControlType::Begin).await.expect("begin");
    for seq in 0..5 {
        produce(&p, &data(1, 0, seq, 1, true)).await.expect("data");
    }
    marker(&p, 1, 1, ControlType::Abort).await.expect("abort"); // 6
    produce(&p, &data(2, 0, 0, 1, false)).await.expect("after"); // 7
                                                                 // One batch per read: the fetch keeps reading past filtered batches.
    let read = p
        .read_for_consumer(0, ReadLimit::at_least_one(1), COMMITTED)
        .expect("read");
    let got: Vec<i64> = stored_batches(&read.records)
        .map(|b| b.expect("batch").0.base_offset)
        .collect();
    assert_eq!((got, read.next_fetch_offset), (vec![7], 8));
}

#[tokio::test]
async fn given_a_retried_marker_then_nothing_is_appended_and_the_answer_is_success() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("orders", dir.path());
    marker(&p, 1, 0, ControlType::Begin).await.expect("begin");
    assert_eq!(
        marker(&p, 1, 0, ControlType::Begin).await.expect("retry"),
        None
    );
    marker(&p, 1, 1, ControlType::Commit).await.expect("commit");
    assert_eq!(
        marker(&p, 1, 1, ControlType::Commit).await.expect("retry"),
        None
    );
    assert_eq!(p.offsets().log_end_offset, 2);
}

#[tokio::test]
async fn given_refused_markers_then_their_codes_are_the_documented_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("orders", dir.path());
    p.append_marker(1, 3, ControlType::Begin, 5, MarkerEpoch::Next, TIMEOUT)
        .await
        .expect("begin");
    let code = |r: Result<Option<i64>, BrokerError>| r.expect_err("refused").code();
    assert_eq!(
        code(
            p.append_marker(1, 2, ControlType::Commit, 5, MarkerEpoch::Next, TIMEOUT)
                .await
        ),
        ErrorCode::InvalidProducerEpoch
    );
    assert_eq!(
        code(
            p.append_marker(1, 4, ControlType::Commit, 4, MarkerEpoch::Next, TIMEOUT)
                .await
        ),
        ErrorCode::TransactionCoordinatorFenced
    );
    assert_eq!(
        code(
            p.append_marker(1, 4, ControlType::Begin, 5, MarkerEpoch::Next, TIMEOUT)
                .await
        ),
        ErrorCode::InvalidTxnState
    );
    assert_eq!(
        p.offsets().log_end_offset,
        1,
        "no refusal appended anything"
    );
}

#[tokio::test]
async fn given_produce_then_transactional_data_needs_a_begin_and_control_batches_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("orders", dir.path());
    let code = |r: Result<i64, BrokerError>| r.expect_err("refused").code();
    assert_eq!(
        code(produce(&p, &data(1, 0, 0, 1, true)).await),
        ErrorCode::InvalidTxnState
    );
    let control_batch = control::encode_control(
        1,
        0,
        ControlMarker {
            control_type: ControlType::Commit,
            coordinator_epoch: 0,
        },
        0,
    );
    assert_eq!(
        code(produce(&p, &control_batch).await),
        ErrorCode::InvalidRequest
    );
    marker(&p, 1, 0, ControlType::Begin).await.expect("begin");
    assert_eq!(
        code(produce(&p, &data(1, 0, 0, 1, false)).await),
        ErrorCode::InvalidTxnState,
        "non-transactional data while the producer's transaction is open"
    );
    produce(&p, &data(1, 0, 0, 1, true))
        .await
        .expect("inside the transaction");
    marker(&p, 1, 1, ControlType::Commit).await.expect("commit");
    assert_eq!(
        code(produce(&p, &data(1, 0, 1, 1, true)).await),
        ErrorCode::InvalidProducerEpoch,
        "a late batch of the committed transaction"
    );
}

/// What a partition's transaction state looks like from outside.
fn observed(p: &Partition) -> (PartitionOffsets, Vec<OpenTransaction>, Vec<(i64, i64)>, i64) {
    let (batches, next) = consume(p, 0, COMMITTED);
    let open: Vec<OpenTransaction> = p
        .open_transactions()
        .into_iter()
        .map(|t| OpenTransaction {
            last_update_ms: 0,
            ..t
        })
        .collect();
    (p.offsets(), open, batches, next)
}

async fn mixed_history(p: &Partition) {
    produce(p, &data(3, 0, 0, 1, false)).await.expect("plain"); // 0
    marker(p, 1, 0, ControlType::Begin).await.expect("begin"); // 1
    produce(p, &data(1, 0, 0, 2, true)).await.expect("data"); // 2..=3
    marker(p, 1, 1, ControlType::Abort).await.expect("abort"); // 4
    marker(p, 2, 0, ControlType::Begin).await.expect("begin"); // 5
    produce(p, &data(2, 0, 0, 1, true)).await.expect("data"); // 6
    produce(p, &data(3, 0, 1, 1, false)).await.expect("plain"); // 7
}

#[tokio::test]
async fn given_a_reopen_with_or_without_a_snapshot_then_the_transaction_state_is_the_same() {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = {
        let p = open("orders", dir.path());
        mixed_history(&p).await;
        let state = observed(&p);
        assert_eq!(state.0.last_stable_offset, 5);
        assert_eq!(state.1.len(), 1);
        assert_eq!(state.2, vec![(0, 3)], "the aborted batch is dropped");
        p.shutdown().expect("shutdown writes a snapshot");
        state
    };
    assert_eq!(
        observed(&open("orders", dir.path())),
        before,
        "from the snapshot"
    );
    for entry in std::fs::read_dir(dir.path()).expect("dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(path).expect("remove snapshot");
        }
    }
    let replayed = open("orders", dir.path());
    assert_eq!(observed(&replayed), before, "from the log alone");
    // The reopened partition still decides: producer 2's transaction can be committed.
    assert_eq!(
        marker(&replayed, 2, 1, ControlType::Commit)
            .await
            .expect("commit"),
        Some(8)
    );
}

#[tokio::test]
async fn given_a_truncation_past_a_marker_then_its_transaction_is_open_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("orders", dir.path());
    marker(&p, 1, 0, ControlType::Begin).await.expect("begin"); // 0
    produce(&p, &data(1, 0, 0, 2, true)).await.expect("data"); // 1..=2
    marker(&p, 1, 1, ControlType::Abort).await.expect("abort"); // 3
    assert_eq!(p.offsets().last_stable_offset, 4);
    p.truncate_to(3).expect("truncate");
    let offsets = p.offsets();
    assert_eq!((offsets.high_watermark, offsets.last_stable_offset), (3, 0));
    assert_eq!(p.open_transactions().len(), 1);
    assert_eq!(consume(&p, 0, COMMITTED), (vec![], 0));
    // The marker is written again (the coordinator retries it) and settles the same way.
    assert_eq!(
        marker(&p, 1, 1, ControlType::Abort).await.expect("abort"),
        Some(3)
    );
    assert_eq!(consume(&p, 0, COMMITTED), (vec![], 4));
}

#[tokio::test]
async fn given_idle_producers_then_open_transactions_and_internal_topics_keep_theirs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("orders", dir.path());
    produce(&p, &data(1, 0, 0, 1, false)).await.expect("plain");
    marker(&p, 2, 0, ControlType::Begin).await.expect("begin");
    assert_eq!(
        p.expire_producers(now_ms() + 10_000),
        1,
        "only the idle idempotent one"
    );
    assert_eq!(p.open_transactions().len(), 1);

    let internal_dir = tempfile::tempdir().expect("tempdir");
    let internal = open(idem_proto::txn::TXN_LOG_TOPIC, internal_dir.path());
    produce(&internal, &data(9, 7, 0, 1, false))
        .await
        .expect("fence record");
    assert_eq!(internal.expire_producers(now_ms() + 10_000), 0);
    assert_eq!(
        produce(&internal, &data(9, 6, 1, 1, false))
            .await
            .expect_err("old coordinator epoch")
            .code(),
        ErrorCode::InvalidProducerEpoch
    );
}

/// A transactional batch of one 1 KiB record: four fill a 4 KiB test segment.
fn big(producer_id: i64, seq: i32) -> Vec<u8> {
    let producer = ProducerInfo {
        producer_id,
        producer_epoch: 0,
        base_sequence: seq,
    };
    let record = Record {
        value: Some(bytes::Bytes::from(vec![b'x'; 1024])),
        ..Record::default()
    };
    batch::encode(producer, ATTR_TRANSACTIONAL, &[record]).to_vec()
}

/// Transactions spread over many segments: short ones committed or aborted, a long one
/// (producer 100) open across several segment boundaries and then aborted, and one
/// (producer 200) still open at the end.
async fn history_across_segments(p: &Partition) {
    marker(p, 100, 0, ControlType::Begin).await.expect("begin");
    produce(p, &big(100, 0)).await.expect("long data");
    for round in 1..=8i64 {
        marker(p, round, 0, ControlType::Begin)
            .await
            .expect("begin");
        produce(p, &big(round, 0)).await.expect("data");
        produce(p, &big(round, 1)).await.expect("data");
        let end = if round % 2 == 0 {
            ControlType::Abort
        } else {
            ControlType::Commit
        };
        marker(p, round, 1, end).await.expect("end");
        if round == 5 {
            marker(p, 100, 1, ControlType::Abort)
                .await
                .expect("long abort");
            marker(p, 200, 0, ControlType::Begin).await.expect("begin");
            produce(p, &big(200, 0)).await.expect("open data");
        }
    }
}

fn txn_index_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txnindex"))
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn given_sealed_segments_then_reopening_from_their_index_files_equals_walking_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = {
        let p = open("orders", dir.path());
        history_across_segments(&p).await;
        let state = observed(&p);
        let sealed = p.lock().log.sealed_segments().len();
        assert!(sealed >= 4, "the history spans {sealed} sealed segments");
        assert_eq!(
            txn_index_files(dir.path()).len(),
            sealed,
            "one per sealed segment"
        );
        let visible: Vec<i64> = state.2.iter().map(|(_, pid)| *pid).collect();
        assert_eq!(
            visible,
            vec![1, 1, 3, 3, 5, 5],
            "only committed rounds, before the open one"
        );
        assert_eq!(state.1.len(), 1, "producer 200 is open");
        p.shutdown().expect("shutdown");
        state
    };
    assert_eq!(
        observed(&open("orders", dir.path())),
        before,
        "from the files"
    );

    // Without files the log is walked, and the walk writes them again.
    let files = txn_index_files(dir.path());
    for file in &files {
        std::fs::remove_file(file).expect("remove");
    }
    assert_eq!(
        observed(&open("orders", dir.path())),
        before,
        "from the log"
    );
    assert_eq!(txn_index_files(dir.path()), files, "rewritten by the walk");

    // A torn file in the middle: the files before it are used, the rest is walked.
    let torn = &files[files.len() / 2];
    let bytes = std::fs::read(torn).expect("read");
    std::fs::write(torn, &bytes[..bytes.len() - 3]).expect("tear");
    assert_eq!(
        observed(&open("orders", dir.path())),
        before,
        "past a torn file"
    );
    assert_eq!(std::fs::read(torn).expect("read"), bytes, "rewritten whole");
}

#[tokio::test]
async fn given_a_truncation_into_an_earlier_segment_then_later_index_files_go_and_the_state_follows_the_log(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("orders", dir.path());
    history_across_segments(&p).await;
    let sealed = p.lock().log.sealed_segments();
    // Cut inside an early sealed segment: producer 100's abort and everything after go.
    let (base, next) = sealed[1];
    let mut cut = None;
    p.lock()
        .log
        .for_each_header(base, |header| {
            if header.base_offset > base && header.base_offset < next {
                cut = Some(header.base_offset);
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })
        .expect("walk");
    let cut = cut.expect("a batch boundary inside the segment");
    p.truncate_to(cut).expect("truncate");
    let active = p.lock().log.active_segment_base();
    for file in txn_index_files(dir.path()) {
        let name = file.file_stem().and_then(|s| s.to_str()).expect("name");
        let file_base: i64 = name.parse().expect("offset name");
        assert!(
            file_base < active,
            "{} survived the truncation",
            file.display()
        );
    }
    let open_now: Vec<i64> = p
        .open_transactions()
        .iter()
        .map(|t| t.producer_id)
        .collect();
    assert!(
        open_now.contains(&100),
        "the long transaction is open again: {open_now:?}"
    );
    assert!(
        p.offsets().last_stable_offset <= 1,
        "and holds the LSO at its begin"
    );
    let truncated = observed(&p);
    p.shutdown().expect("shutdown");
    assert_eq!(
        observed(&open("orders", dir.path())),
        truncated,
        "reopen agrees"
    );
}

#[tokio::test]
async fn given_a_later_batch_arriving_first_then_it_waits_for_the_earlier_one_and_both_append_in_order(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("orders", dir.path());
    produce(&p, &data(9, 0, 0, 2, false)).await.expect("first"); // seq 0..=1
                                                                 // Requests in flight together: seq 4..=5 reaches the partition before 2..=3.
    let later = data(9, 0, 4, 2, false);
    let earlier = data(9, 0, 2, 2, false);
    let (later, earlier) = tokio::join!(produce(&p, &later), produce(&p, &earlier));
    assert_eq!((earlier.expect("earlier"), later.expect("later")), (2, 4));
    // And a new producer's second batch ahead of its first.
    let second = data(11, 0, 3, 1, false);
    let first = data(11, 0, 0, 3, false);
    let (second, first) = tokio::join!(produce(&p, &second), produce(&p, &first));
    assert_eq!((first.expect("first"), second.expect("second")), (6, 9));
}

// The clock is paused and advances only while every task waits on a timer, so the
// two bounds below are exact: a wait for the gap shows as SEQUENCE_GAP_WAIT, however
// slow the machine, and no wait shows as none.
#[tokio::test(start_paused = true)]
async fn given_a_gap_no_batch_fills_then_the_batch_is_refused_after_the_wait_and_nothing_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("orders", dir.path());
    produce(&p, &data(9, 0, 0, 2, false)).await.expect("first");
    let started = tokio::time::Instant::now();
    let refused = produce(&p, &data(9, 0, 5, 1, false)).await;
    assert!(
        matches!(
            refused,
            Err(BrokerError::OutOfOrderSequence {
                expected: 2,
                got: 5,
                ..
            })
        ),
        "{refused:?}"
    );
    assert!(
        started.elapsed() >= SEQUENCE_GAP_WAIT,
        "refused before the wait"
    );
    assert_eq!(p.offsets().log_end_offset, 2);
    // A sequence behind the expected one is no gap: refused at once.
    let started = tokio::time::Instant::now();
    let stale = produce(&p, &data(9, 0, 1, 1, false)).await;
    assert!(
        matches!(
            stale,
            Err(BrokerError::OutOfOrderSequence {
                expected: 2,
                got: 1,
                ..
            })
        ),
        "{stale:?}"
    );
    assert!(
        started.elapsed() < SEQUENCE_GAP_WAIT,
        "waited for a stale batch"
    );
}

#[tokio::test]
async fn given_replicated_batches_then_only_the_followed_leader_and_epoch_may_append_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let leader = Partition::open("orders", 0, &dir.path().join("leader"), settings(), 1)
        .expect("open leader");
    produce(&leader, &data(9, 0, 0, 3, false))
        .await
        .expect("produce");
    let records = leader
        .read_for_follower(2, 0, ReadLimit::at_least_one(1 << 20), None)
        .expect("read for follower")
        .records;
    let follower = Partition::open("orders", 0, &dir.path().join("follower"), settings(), 2)
        .expect("open follower");
    let follow = |leader_id: i32, epoch: i32| {
        follower.set_replication(
            Role::Follower { leader: leader_id },
            epoch,
            vec![1, 2],
            vec![1, 2],
            1,
        )
    };
    follow(1, 3);
    for (from, epoch, why) in [(1, 2, "an older epoch"), (3, 3, "another leader")] {
        let refused = follower.append_replicated(&records, from, epoch).await;
        assert_eq!(
            refused.map_err(|e| e.code()),
            Err(ErrorCode::NotLeaderOrFollower),
            "{why}"
        );
        assert_eq!(
            follower.offsets().log_end_offset,
            0,
            "{why} changed the log"
        );
    }
    // This broker took over: a fetch answered by the old leader must not land.
    follower.set_replication(Role::Leader, 4, vec![1, 2], vec![2], 1);
    let refused = follower.append_replicated(&records, 1, 3).await;
    assert!(refused.is_err(), "appended as leader");
    assert_eq!(follower.offsets().log_end_offset, 0);
    follow(1, 5);
    assert_eq!(
        follower
            .append_replicated(&records, 1, 5)
            .await
            .expect("append"),
        3
    );
}

#[tokio::test]
async fn given_a_follower_that_has_not_fetched_then_a_begin_is_answered_and_data_and_commit_wait_for_it(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let leader = Partition::open("orders", 0, dir.path(), settings(), 1).expect("open leader");
    leader.set_replication(Role::Leader, 1, vec![1, 2], vec![1, 2], 1);
    let short = Duration::from_millis(200);
    // Waiting for broker 2 would run into TIMEOUT and fail: a BEGIN only orders the
    // transaction's data after it.
    let begin = leader
        .append_marker(7, 0, ControlType::Begin, 0, MarkerEpoch::Next, TIMEOUT)
        .await
        .expect("BEGIN answered without the follower");
    assert_eq!(begin, Some(0));
    assert_eq!(
        leader.offsets().high_watermark,
        0,
        "the BEGIN is not visible"
    );
    assert_eq!(
        leader.open_transactions().first().map(|t| t.first_offset),
        Some(0)
    );
    // The data after it is acknowledged only once the follower holds both.
    let acked = leader
        .append(&data(7, 0, 0, 2, true), ACKS_ALL, short)
        .await;
    assert!(
        matches!(acked, Err(BrokerError::ReplicationTimedOut { end: 3, .. })),
        "{acked:?}"
    );
    leader
        .read_for_follower(2, 3, ReadLimit::at_least_one(1 << 20), None)
        .expect("the follower holds offsets 0 to 2");
    assert_eq!(leader.offsets().high_watermark, 3);
    let commit = leader
        .append_marker(7, 1, ControlType::Commit, 0, MarkerEpoch::Next, short)
        .await;
    assert!(
        matches!(commit, Err(BrokerError::ReplicationTimedOut { end: 4, .. })),
        "a COMMIT waits for the in-sync replicas: {commit:?}"
    );
}

#[tokio::test]
async fn given_a_deposed_leader_waiting_for_acks_all_when_it_follows_a_new_leader_then_the_wait_fails_instead_of_acknowledging(
) {
    // Found by a chaos run that isolates leaders: the old leader's high watermark moved
    // past its own batch's offset with the new leader's records there, and the waiting
    // acks=all produce was acknowledged an offset another producer also held.
    let dir = tempfile::tempdir().expect("tempdir");
    let old = Partition::open("orders", 0, &dir.path().join("old"), settings(), 1).expect("open");
    old.set_replication(Role::Leader, 0, vec![1, 2], vec![1, 2], 1);
    let waiting = {
        let batch = data(9, 0, 0, 1, false);
        let old = &old;
        async move { old.append(&batch, ACKS_ALL, Duration::from_secs(10)).await }
    };
    let depose = async {
        // Appended at offset 0, unconfirmed; then broker 2 leads in epoch 1 with another
        // record at offset 0, and this replica cuts its tail and follows.
        tokio::time::sleep(Duration::from_millis(100)).await;
        old.set_replication(Role::Follower { leader: 2 }, 1, vec![1, 2], vec![2], 1);
        old.truncate_to(0).expect("cut the unconfirmed tail");
        let new_leader =
            Partition::open("orders", 0, &dir.path().join("new"), settings(), 2).expect("open");
        new_leader.set_replication(Role::Leader, 1, vec![1, 2], vec![2], 1);
        produce(&new_leader, &data(7, 0, 0, 1, false))
            .await
            .expect("the new leader's record");
        let FollowerRead {
            records, offsets, ..
        } = new_leader
            .read_for_follower(1, 0, ReadLimit::at_least_one(1 << 20), None)
            .expect("fetch");
        old.append_replicated(&records, 2, 1)
            .await
            .expect("replicate");
        old.follow_high_watermark(offsets.high_watermark);
    };
    let (answer, ()) = tokio::join!(waiting, depose);
    let error = answer.expect_err("the deposed leader must not acknowledge offset 0");
    assert_eq!(error.code(), ErrorCode::RequestTimedOut, "{error}");
    assert!(
        error.to_string().contains("may have been written"),
        "{error}"
    );
}

#[tokio::test]
async fn given_a_leader_moved_off_the_partition_when_it_retires_then_a_waiting_acks_all_fails_at_once_and_nothing_more_is_appended(
) {
    // A reassignment that drops the leader: the leader publishes the final state (a new
    // leader, a new epoch) and closes its replica; its follower stopped fetching from it,
    // so without retirement an acks=all produce would wait out its whole timeout.
    let dir = tempfile::tempdir().expect("tempdir");
    let leaving = Partition::open("orders", 0, dir.path(), settings(), 1).expect("open");
    leaving.set_replication(Role::Leader, 3, vec![1, 2], vec![1, 2], 1);
    let started = tokio::time::Instant::now();
    let waiting = {
        let batch = data(9, 0, 0, 1, false);
        let leaving = &leaving;
        async move {
            leaving
                .append(&batch, ACKS_ALL, Duration::from_secs(30))
                .await
        }
    };
    let retire = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        leaving.retire();
    };
    let (answer, ()) = tokio::join!(waiting, retire);
    let error = answer.expect_err("not confirmed by the ISR");
    assert_eq!(error.code(), ErrorCode::RequestTimedOut, "{error}");
    assert!(
        error.to_string().contains("may have been written"),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "ended at once");
    let after = leaving
        .append(&data(9, 0, 1, 1, false), 1, TIMEOUT)
        .await
        .expect_err("a retired replica appends nothing");
    assert_eq!(after.code(), ErrorCode::NotLeaderOrFollower, "{after}");
    assert_eq!(leaving.offsets().log_end_offset, 1);
}

/// The partition's topic config set to `pairs` over the test defaults.
fn configure(p: &Partition, pairs: &[(&str, &str)]) {
    let config =
        crate::topic_config::TopicConfig::from_pairs(pairs.iter().copied()).expect("valid config");
    p.set_topic_settings(config.resolve(&settings().topic_defaults));
}

/// Idempotent batches of producer `producer_id` from `seq` on, 20 records each, until
/// the log has at least `segments` sealed segments; returns the next sequence.
async fn fill_segments(p: &Partition, producer_id: i64, mut seq: i32, segments: usize) -> i32 {
    while p.lock().log.sealed_segments().len() < segments {
        produce(p, &data(producer_id, 0, seq, 20, false))
            .await
            .expect("append");
        seq += 20;
    }
    seq
}

#[tokio::test]
async fn given_an_idle_producer_whose_batches_retention_deleted_then_its_retry_is_a_duplicate_and_its_next_batch_is_accepted(
) {
    // KAFKA-7190: producer state must outlive the segments that held it.
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("idle", dir.path());
    assert_eq!(
        produce(&p, &data(1, 0, 0, 1, false)).await.expect("first"),
        0
    );
    fill_segments(&p, 2, 0, 6).await;
    configure(&p, &[("retention.bytes", "8192")]);
    let start = p
        .enforce_retention(now_ms())
        .expect("retention")
        .expect("the log start moved");
    assert!(start > 0 && p.offsets().log_start_offset == start);
    assert!(p.lock().log.size_bytes() < 8192 + 2 * 4096);
    let retry = p
        .append(&data(1, 0, 0, 1, false), ACKS_ALL, TIMEOUT)
        .await
        .expect("retry answered");
    assert!(retry.duplicate && retry.base_offset == 0, "{retry:?}");
    let next = produce(&p, &data(1, 0, 1, 1, false))
        .await
        .expect("next batch");
    assert!(next >= start);
    // And after a restart, which rebuilds the state from what is left on disk.
    drop(p);
    let p = open("idle", dir.path());
    assert_eq!(p.offsets().log_start_offset, start);
    let retry = p
        .append(&data(1, 0, 1, 1, false), ACKS_ALL, TIMEOUT)
        .await
        .expect("retry answered");
    assert!(retry.duplicate && retry.base_offset == next, "{retry:?}");
    produce(&p, &data(1, 0, 2, 1, false))
        .await
        .expect("the producer goes on after the restart");
    match produce(&p, &data(1, 0, 9, 1, false)).await {
        Err(BrokerError::OutOfOrderSequence { .. }) => {}
        other => panic!("a gap is still a gap: {other:?}"),
    }
}

#[tokio::test]
async fn given_an_open_transaction_then_retention_keeps_its_segments_until_it_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("open-txn", dir.path());
    let seq = fill_segments(&p, 2, 0, 2).await;
    let begin = marker(&p, 9, 0, ControlType::Begin)
        .await
        .expect("begin")
        .expect("appended");
    produce(&p, &data(9, 0, 0, 5, true))
        .await
        .expect("txn data");
    fill_segments(&p, 2, seq, 8).await;
    configure(&p, &[("retention.bytes", "1024"), ("retention.ms", "1")]);
    let start = p.enforce_retention(now_ms()).expect("retention");
    let start = start.expect("segments before the transaction go");
    assert!(
        start <= begin,
        "start {start} passed the open transaction at {begin}"
    );
    assert!(
        consume(&p, start, UNCOMMITTED).1 > start,
        "the kept log reads from the start"
    );
    marker(&p, 9, 1, ControlType::Commit).await.expect("commit");
    let later = p
        .enforce_retention(now_ms())
        .expect("retention")
        .expect("the rest goes once the transaction ended");
    assert!(later > begin);
}

#[tokio::test]
async fn given_a_quiet_partition_past_segment_ms_then_its_active_segment_rolls_and_time_retention_empties_it(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("quiet", dir.path());
    // Test records carry timestamp 0: older than any retention.
    produce(&p, &data(1, 0, 0, 3, false)).await.expect("append");
    produce(&p, &data(1, 0, 3, 3, false)).await.expect("append");
    configure(&p, &[("segment.ms", "1000"), ("retention.ms", "1000")]);
    let end = p.offsets().log_end_offset;
    assert_eq!(p.enforce_retention(now_ms()).expect("retention"), Some(end));
    assert_eq!(consume(&p, end, UNCOMMITTED), (vec![], end));
    assert_eq!(
        produce(&p, &data(1, 0, 6, 1, false)).await.expect("append"),
        end
    );
    // A topic with the delete policy off keeps everything.
    let dir = tempfile::tempdir().expect("tempdir");
    let kept = open("kept", dir.path());
    produce(&kept, &data(1, 0, 0, 3, false))
        .await
        .expect("append");
    configure(&kept, &[("segment.ms", "1000"), ("retention.ms", "-1")]);
    assert_eq!(kept.enforce_retention(now_ms()).expect("retention"), None);
    assert_eq!(kept.offsets().log_start_offset, 0);
}

/// Copies the leader's log past the follower's end into the follower, as its fetcher
/// would, without moving the follower's high watermark.
async fn replicate(leader: &Partition, follower: &Partition) {
    loop {
        let from = follower.offsets().log_end_offset;
        if from >= leader.offsets().log_end_offset {
            return;
        }
        let fetched = leader
            .read_for_follower(2, from, ReadLimit::at_least_one(1 << 20), None)
            .expect("fetch");
        follower
            .append_replicated(&fetched.records, 1, 1)
            .await
            .expect("replicate");
    }
}

#[tokio::test]
async fn given_retention_deleted_an_idle_producers_batches_when_a_follower_truncates_to_its_high_watermark_and_leads_then_the_producer_goes_on(
) {
    // KAFKA-7190 on a follower: segments roll past its high watermark (another replica
    // holds the leader's back), so its newest snapshots are all above it; the truncation
    // of a leader change must still find the idle producer's state at or below it.
    let dir = tempfile::tempdir().expect("tempdir");
    let leader =
        Partition::open("idle", 0, &dir.path().join("leader"), settings(), 1).expect("open leader");
    let follower = Partition::open("idle", 0, &dir.path().join("follower"), settings(), 2)
        .expect("open follower");
    follower.set_replication(Role::Follower { leader: 1 }, 1, vec![1, 2], vec![1, 2], 1);

    assert_eq!(
        produce(&leader, &data(1, 0, 0, 1, false))
            .await
            .expect("idle producer"),
        0
    );
    let seq = fill_segments(&leader, 2, 0, 6).await;
    replicate(&leader, &follower).await;
    let high_watermark = leader.offsets().high_watermark;
    follower.follow_high_watermark(high_watermark);
    configure(&leader, &[("retention.bytes", "8192")]);
    let leader_start = leader
        .enforce_retention(now_ms())
        .expect("retention")
        .expect("the leader's log start moved");
    assert_eq!(
        follower
            .follow_log_start(leader_start)
            .expect("follow the log start"),
        Some(leader_start),
        "the idle producer's batch is gone from the follower too"
    );

    // Three more segments reach the follower; its high watermark stays.
    let sealed = follower.lock().log.sealed_segments().len();
    fill_segments(&leader, 2, seq, sealed + 3).await;
    replicate(&leader, &follower).await;
    assert!(follower.lock().log.sealed_segments().len() >= sealed + 3);
    assert_eq!(follower.offsets().high_watermark, high_watermark);

    // The leader dies; the new leader had only the high watermark: the fetcher cuts there.
    follower
        .truncate_to(high_watermark)
        .expect("truncate to the high watermark");
    follower.set_replication(Role::Leader, 2, vec![2], vec![2], 1);
    assert_eq!(follower.offsets().log_end_offset, high_watermark);
    assert_eq!(follower.offsets().log_start_offset, leader_start);

    let retry = follower
        .append(&data(1, 0, 0, 1, false), ACKS_ALL, TIMEOUT)
        .await
        .expect("the idle producer's retry is answered");
    assert!(retry.duplicate && retry.base_offset == 0, "{retry:?}");
    let next = produce(&follower, &data(1, 0, 1, 1, false))
        .await
        .expect("the idle producer's next batch is accepted");
    assert_eq!(next, high_watermark);
    let replay = follower
        .append(&data(1, 0, 1, 1, false), ACKS_ALL, TIMEOUT)
        .await
        .expect("a replay of it is answered");
    assert!(replay.duplicate && replay.base_offset == next, "{replay:?}");
    assert_eq!(follower.offsets().log_end_offset, next + 1);
}

/// A transactional batch of one keyed record.
fn keyed_txn(producer_id: i64, epoch: i16, key: &str, value: &str) -> Vec<u8> {
    let producer = ProducerInfo {
        producer_id,
        producer_epoch: epoch,
        base_sequence: 0,
    };
    let record = Record {
        key: Some(bytes::Bytes::copy_from_slice(key.as_bytes())),
        value: Some(bytes::Bytes::copy_from_slice(value.as_bytes())),
        ..Record::default()
    };
    batch::encode(producer, ATTR_TRANSACTIONAL, &[record]).to_vec()
}

/// `(key, value)` of every record a read_committed consumer gets from the log start,
/// moving its position as the SDK does; and how many batches it was handed.
fn committed_records(p: &Partition) -> (Vec<(String, String)>, usize) {
    let mut offset = p.offsets().log_start_offset;
    let (mut out, mut batches) = (Vec::new(), 0);
    loop {
        let read = p
            .read_for_consumer(offset, ReadLimit::at_least_one(1 << 20), COMMITTED)
            .expect("read");
        let mut next = read.next_fetch_offset;
        for item in stored_batches(&read.records) {
            let (header, bytes) = item.expect("batch");
            batches += 1;
            for r in batch::records(bytes).expect("records") {
                if r.offset >= offset {
                    let text = |b: Option<bytes::Bytes>| {
                        String::from_utf8_lossy(&b.unwrap_or_default()).into_owned()
                    };
                    out.push((text(r.key), text(r.value)));
                }
            }
            next = next.max(header.next_offset());
        }
        if next == offset {
            return (out, batches);
        }
        offset = next;
    }
}

/// Producer 1 runs `count` transactions on keys k0-k2 (BEGIN, one record, COMMIT or,
/// every fourth, ABORT; each end bumps the epoch as the coordinator does); returns each
/// key's committed value.
async fn transactions(p: &Partition, from: i16, count: i16) -> BTreeMap<String, String> {
    let mut committed = BTreeMap::new();
    for txn in from..from + count {
        let (key, value) = (format!("k{}", txn % 3), format!("value-{txn}"));
        marker(p, 1, txn, ControlType::Begin).await.expect("begin");
        produce(p, &keyed_txn(1, txn, &key, &value))
            .await
            .expect("data");
        let commit = txn % 4 != 3;
        let end = if commit {
            ControlType::Commit
        } else {
            ControlType::Abort
        };
        marker(p, 1, txn + 1, end).await.expect("end");
        if commit {
            committed.insert(key, value);
        }
    }
    committed
}

fn latest(records: &[(String, String)]) -> BTreeMap<String, String> {
    records.iter().cloned().collect()
}

#[tokio::test]
async fn given_compacted_transactions_when_cleaned_past_the_horizon_then_markers_go_and_readers_replicas_and_restarts_agree(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = Partition::open("ledger", 0, &dir.path().join("leader"), settings(), 1)
        .expect("open leader");
    configure(
        &p,
        &[
            ("cleanup.policy", "compact"),
            ("delete.retention.ms", "100"),
        ],
    );
    let model = transactions(&p, 0, 120).await;
    p.lock().log.roll_now().expect("roll");
    let end = p.offsets().log_end_offset;
    assert_eq!(end, 360);
    let (before, _) = committed_records(&p);
    assert_eq!(latest(&before), model);
    let epoch_end = p.epoch_end(0);
    // A follower that copied part of the log before it was cleaned.
    let follower = Partition::open("ledger", 0, &dir.path().join("follower"), settings(), 2)
        .expect("open follower");
    follower.set_replication(Role::Follower { leader: 1 }, 5, vec![1, 2], vec![1, 2], 1);
    let fetch = |offset: i64, limit: usize| {
        p.read_for_follower(2, offset, ReadLimit::at_least_one(limit), None)
            .expect("read for follower")
            .records
    };
    while follower.offsets().log_end_offset < 100 {
        let from = follower.offsets().log_end_offset;
        follower
            .append_replicated(&fetch(from, 1), 1, 5)
            .await
            .expect("replicate");
    }

    // Markers carry the broker's clock: cleaning happens after them.
    let now = now_ms() + 1_000;
    let first = p.compact(now).expect("clean");
    assert!(
        first.horizons_set > 0 && first.markers_removed == 0,
        "{first:?}"
    );
    assert_eq!(first.producers, 1, "{first:?}");
    let second = p.compact(now + 99).expect("clean");
    assert_eq!(
        second.segments, 0,
        "nothing came due before the horizon: {second:?}"
    );
    let second = p.compact(now + 100).expect("clean");
    assert!(second.markers_removed > 0, "{second:?}");
    assert_eq!(second.horizons_set, 0, "{second:?}");
    assert_eq!(p.offsets().log_end_offset, end);

    // What stays: each key's latest committed record with its transaction's markers,
    // and the producer's last batch (its last marker), in fillers' company.
    let sealed_bytes = second.bytes_after;
    let sealed = p.lock().log.sealed_segments().len() as u64;
    let (after, handed) = committed_records(&p);
    assert_eq!(latest(&after), model);
    assert_eq!(after.len(), 3, "one record per key: {after:?}");
    assert!(
        sealed_bytes <= 3 * (2 * 61 + 100) + 61 + 61 * 8 * sealed,
        "{sealed_bytes} bytes in {sealed} sealed segments"
    );
    assert!(
        handed < 40,
        "fillers merged: {handed} batches handed to the consumer"
    );
    let offsets = p.offsets();
    assert_eq!(offsets.last_stable_offset, offsets.high_watermark);
    assert!(p.open_transactions().is_empty());
    assert_eq!(
        p.epoch_end(0),
        epoch_end,
        "the leader-epoch history is unchanged"
    );

    // The follower goes on from the middle of what became one filler.
    while follower.offsets().log_end_offset < end {
        let from = follower.offsets().log_end_offset;
        follower
            .append_replicated(&fetch(from, 1 << 20), 1, 5)
            .await
            .expect("replicate");
    }
    follower.follow_high_watermark(end);
    assert_eq!(latest(&committed_records(&follower).0), model);
    assert!(follower.open_transactions().is_empty());

    // A restart that replays the cleaned log from its start (no producer snapshot, no
    // transaction index file) finds no transaction open and the producer where it was.
    drop(p);
    let leader_dir = dir.path().join("leader");
    producer_state::delete_snapshots_above(&leader_dir, -1).expect("delete snapshots");
    segment_file::delete_from(&leader_dir, i64::MIN).expect("delete txn index files");
    let p = Partition::open("ledger", 0, &leader_dir, settings(), 1).expect("reopen");
    configure(
        &p,
        &[
            ("cleanup.policy", "compact"),
            ("delete.retention.ms", "100"),
        ],
    );
    let offsets = p.offsets();
    assert_eq!(offsets.last_stable_offset, end);
    assert!(p.open_transactions().is_empty());
    assert_eq!(latest(&committed_records(&p).0), model);
    assert_eq!(
        code_of(produce(&p, &keyed_txn(1, 119, "k0", "zombie")).await),
        ErrorCode::InvalidProducerEpoch,
        "the producer's epoch was rebuilt from its last marker"
    );
    let mut model = model;
    model.extend(transactions(&p, 120, 4).await);
    assert_eq!(latest(&committed_records(&p).0), model);
}

fn code_of(r: Result<i64, BrokerError>) -> ErrorCode {
    r.expect_err("refused").code()
}

#[tokio::test]
async fn given_cleaned_segments_merged_then_each_has_its_transaction_index_file_and_a_reopen_agrees(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = open("ledger", dir.path());
    configure(
        &p,
        &[
            ("cleanup.policy", "compact"),
            ("delete.retention.ms", "100"),
        ],
    );
    let model = transactions(&p, 0, 120).await;
    p.lock().log.roll_now().expect("roll");
    // A reopen writes the file of the segment sealed by hand above.
    drop(p);
    let p = open("ledger", dir.path());
    configure(
        &p,
        &[
            ("cleanup.policy", "compact"),
            ("delete.retention.ms", "100"),
        ],
    );
    // The first pass sets the markers' horizons; segments still full of markers do
    // not fit together in segment.bytes, so they stay apart.
    let now = now_ms() + 1_000;
    p.compact(now).expect("clean");
    let sealed_before = p.lock().log.sealed_segments();
    assert!(sealed_before.len() >= 5, "{sealed_before:?}");

    // Past the horizon the markers go, and the emptied segments merge.
    let report = p.compact(now + 100).expect("clean");

    let sealed = p.lock().log.sealed_segments();
    assert!(
        report.merged_away > 0 && sealed.len() < sealed_before.len(),
        "{report:?}"
    );
    // Every sealed segment's file describes it, and the merged-away ones' files went.
    for &(base, next) in &sealed {
        let file = segment_file::read(dir.path(), base)
            .expect("readable")
            .expect("a file for each sealed segment");
        assert_eq!(file.next_offset, next, "the file of segment {base}");
    }
    for (base, _) in sealed_before
        .iter()
        .filter(|s| !sealed.iter().any(|t| t.0 == s.0))
    {
        assert_eq!(
            segment_file::read(dir.path(), *base).expect("readable"),
            None
        );
    }
    let (committed, _) = committed_records(&p);
    assert_eq!(latest(&committed), model);
    let offsets = p.offsets();

    // Reopened from the files (no walk needed), the partition serves the same.
    drop(p);
    let p = open("ledger", dir.path());
    assert_eq!(p.offsets().last_stable_offset, offsets.last_stable_offset);
    assert!(p.open_transactions().is_empty());
    assert_eq!(committed_records(&p).0, committed);
}

#[tokio::test]
async fn given_a_deposed_leader_waiting_for_acks_all_when_its_new_leader_writes_nothing_then_the_wait_fails_at_once(
) {
    // Found by an etcd pause: a coordinator's fence went to the old leader of its
    // transaction log partition just before the catalog deposed it. The new leader had
    // nothing to write past the fence's offset (the coordinator waits for the answer),
    // so the old leader's high watermark never reached it and the wait ran out its
    // whole timeout: the slice went unserved for 10 s.
    let dir = tempfile::tempdir().expect("tempdir");
    let old = Partition::open("orders", 0, dir.path(), settings(), 1).expect("open");
    old.set_replication(Role::Leader, 0, vec![1, 2], vec![1, 2], 1);
    let waiting = {
        let batch = data(9, 0, 0, 1, false);
        let old = &old;
        async move { old.append(&batch, ACKS_ALL, Duration::from_secs(30)).await }
    };
    let depose = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        old.set_replication(Role::Follower { leader: 2 }, 1, vec![1, 2], vec![2], 1);
    };
    let (answer, ()) = tokio::join!(waiting, depose);
    let error = answer.expect_err("not confirmed by the ISR");
    // Not ReplicationTimedOut: the wait ended on the lost leadership, not the clock.
    assert!(
        matches!(
            error,
            BrokerError::LeadershipLostAfterAppend { epoch: 0, .. }
        ),
        "{error:?}"
    );
    assert_eq!(error.code(), ErrorCode::RequestTimedOut, "{error}");
}
