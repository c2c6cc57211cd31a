//! The transaction rules of docs/transactions.md ("Broker rules"), one test per row and
//! per refusal: BEGIN, COMMIT/ABORT, transactional and non-transactional data, retries
//! that append nothing, stale coordinator and producer epochs, replay and snapshots.

use bytes::Bytes;
use idem_proto::batch::{self, sequence_add, ProducerInfo, Record, ATTR_TRANSACTIONAL};
use idem_proto::control::{self, ControlMarker};
use idem_proto::v1::ControlType;

use super::*;

const PID: i64 = 7;

/// A partition in miniature: decides, and on `Append` applies the stored batch at the
/// next offset exactly as the partition does (header as stored, marker decoded).
struct Log {
    table: ProducerStateTable,
    next_offset: i64,
    now_ms: i64,
    /// Every appended batch, for replay.
    stored: Vec<Vec<u8>>,
}

impl Log {
    fn new() -> Self {
        Log {
            table: ProducerStateTable::new(),
            next_offset: 0,
            now_ms: 1_000,
            stored: Vec::new(),
        }
    }

    fn store(&mut self, mut buf: Vec<u8>) -> i64 {
        let offset = self.next_offset;
        batch::assign(&mut buf, offset, 0);
        let header = batch::verify(&buf).expect("valid batch");
        let marker = header
            .is_control()
            .then(|| control::decode_control(&buf).expect("marker"));
        self.table.apply_batch(&header, marker, self.now_ms);
        self.next_offset = header.next_offset();
        self.stored.push(buf);
        offset
    }

    /// Decides and, when told to, appends a marker; returns the decision and its offset.
    fn marker(
        &mut self,
        control_type: ControlType,
        epoch: i16,
        coordinator_epoch: i32,
    ) -> (MarkerDecision, Option<i64>) {
        self.marker_at(control_type, epoch, coordinator_epoch, MarkerEpoch::Next)
    }

    /// [`Self::marker`] with the end marker's epoch kind.
    fn marker_at(
        &mut self,
        control_type: ControlType,
        epoch: i16,
        coordinator_epoch: i32,
        end_epoch: MarkerEpoch,
    ) -> (MarkerDecision, Option<i64>) {
        let decision =
            self.table
                .check_marker(PID, epoch, control_type, coordinator_epoch, end_epoch);
        let offset = (decision == MarkerDecision::Append).then(|| {
            let marker = ControlMarker {
                control_type,
                coordinator_epoch,
            };
            self.store(control::encode_control(PID, epoch, marker, 5).to_vec())
        });
        (decision, offset)
    }

    fn begin(&mut self, epoch: i16, ce: i32) -> MarkerDecision {
        self.marker(ControlType::Begin, epoch, ce).0
    }

    fn commit(&mut self, epoch: i16, ce: i32) -> MarkerDecision {
        self.marker(ControlType::Commit, epoch, ce).0
    }

    fn abort(&mut self, epoch: i16, ce: i32) -> MarkerDecision {
        self.marker(ControlType::Abort, epoch, ce).0
    }

    /// Decides and, on `Append`, appends a data batch of `count` records.
    fn data(&mut self, epoch: i16, first_seq: i32, count: i32, transactional: bool) -> Decision {
        let last_seq = sequence_add(first_seq, count - 1);
        let decision = self
            .table
            .check_data(PID, epoch, first_seq, last_seq, transactional);
        if decision == Decision::Append {
            let records: Vec<Record> = (0..count)
                .map(|i| Record {
                    value: Some(Bytes::from(vec![i as u8])),
                    ..Record::default()
                })
                .collect();
            let producer = ProducerInfo {
                producer_id: PID,
                producer_epoch: epoch,
                base_sequence: first_seq,
            };
            let attributes = if transactional { ATTR_TRANSACTIONAL } else { 0 };
            self.store(batch::encode(producer, attributes, &records).to_vec());
        }
        decision
    }

    fn entry(&self) -> &ProducerEntry {
        self.table.get(PID).expect("entry")
    }

    /// The table rebuilt from the stored batches alone.
    fn replayed(&self) -> ProducerStateTable {
        let mut table = ProducerStateTable::new();
        for buf in &self.stored {
            let header = batch::decode_header(buf).expect("header");
            let marker = header
                .is_control()
                .then(|| control::decode_control(buf).expect("marker"));
            table.apply_batch(&header, marker, self.now_ms);
        }
        table
    }
}

fn not_in_txn(epoch: i16) -> Decision {
    Decision::InvalidTxnState(TxnRefusal::NotInTransaction { epoch })
}

// ---- BEGIN ---------------------------------------------------------------------------

#[test]
fn given_an_unknown_producer_when_begin_then_append_and_the_transaction_opens_at_its_offset() {
    let mut log = Log::new();
    log.next_offset = 40;
    let (decision, offset) = log.marker(ControlType::Begin, 3, 1);
    assert_eq!((decision, offset), (MarkerDecision::Append, Some(40)));
    let entry = log.entry();
    assert_eq!(entry.producer_epoch, 3);
    assert_eq!(entry.txn_first_offset, Some(40));
    assert_eq!(entry.coordinator_epoch, 1);
}

#[test]
fn given_an_idempotent_producer_when_begin_of_a_newer_epoch_then_append_and_the_cache_resets() {
    let mut log = Log::new();
    assert_eq!(log.data(0, 0, 3, false), Decision::Append);
    assert_eq!(log.begin(1, 0), MarkerDecision::Append);
    assert!(log.entry().batches.is_empty());
    assert_eq!(log.entry().txn_first_offset, Some(3));
}

#[test]
fn given_begin_of_an_older_epoch_then_invalid_epoch() {
    let mut log = Log::new();
    log.begin(5, 0);
    log.commit(6, 0);
    assert_eq!(
        log.begin(5, 0),
        MarkerDecision::InvalidEpoch { current: 6, got: 5 }
    );
}

#[test]
fn given_begin_from_a_lower_coordinator_epoch_then_coordinator_fenced() {
    let mut log = Log::new();
    log.begin(1, 4);
    log.commit(2, 4);
    let before = log.next_offset;
    assert_eq!(
        log.begin(2, 3),
        MarkerDecision::CoordinatorFenced { current: 4, got: 3 }
    );
    assert_eq!(log.next_offset, before, "nothing appended");
}

#[test]
fn given_an_older_producer_epoch_and_a_lower_coordinator_epoch_then_the_producer_epoch_is_reported()
{
    let mut log = Log::new();
    log.begin(4, 9);
    assert_eq!(
        log.begin(3, 1),
        MarkerDecision::InvalidEpoch { current: 4, got: 3 }
    );
}

#[test]
fn given_an_open_transaction_when_its_begin_is_retried_then_already_applied_and_nothing_appended() {
    let mut log = Log::new();
    log.begin(2, 0);
    log.data(2, 0, 2, true);
    let before = log.next_offset;
    assert_eq!(
        log.marker(ControlType::Begin, 2, 0),
        (MarkerDecision::AlreadyApplied, None)
    );
    // A newer coordinator retrying the same BEGIN (it took over) is a retry too.
    assert_eq!(log.begin(2, 1), MarkerDecision::AlreadyApplied);
    assert_eq!(log.next_offset, before);
    assert_eq!(log.entry().txn_first_offset, Some(0));
}

#[test]
fn given_an_open_transaction_when_begin_of_a_newer_epoch_then_invalid_txn_state() {
    let mut log = Log::new();
    log.begin(2, 0);
    assert_eq!(
        log.begin(3, 0),
        MarkerDecision::InvalidTxnState(TxnRefusal::OpenAtLowerEpoch {
            open_epoch: 2,
            begin_epoch: 3
        })
    );
    assert_eq!(
        log.entry().txn_first_offset,
        Some(0),
        "still open, never closed silently"
    );
}

#[test]
fn given_a_committed_transaction_when_the_next_begins_at_the_bumped_epoch_then_append() {
    let mut log = Log::new();
    log.begin(0, 0);
    log.data(0, 0, 1, true);
    log.commit(1, 0);
    let (decision, offset) = log.marker(ControlType::Begin, 1, 0);
    assert_eq!((decision, offset), (MarkerDecision::Append, Some(3)));
    assert_eq!(log.entry().txn_first_offset, Some(3));
    assert_eq!(log.data(1, 0, 1, true), Decision::Append);
}

// ---- COMMIT / ABORT ------------------------------------------------------------------

#[test]
fn given_an_open_transaction_when_commit_then_append_close_bump_and_empty_cache() {
    let mut log = Log::new();
    log.begin(0, 2);
    log.data(0, 0, 2, true);
    let (decision, offset) = log.marker(ControlType::Commit, 1, 2);
    assert_eq!((decision, offset), (MarkerDecision::Append, Some(3)));
    let entry = log.entry();
    assert_eq!(entry.producer_epoch, 1);
    assert_eq!(entry.txn_first_offset, None);
    assert!(entry.batches.is_empty());
    assert_eq!(entry.coordinator_epoch, 2);
}

#[test]
fn given_an_open_transaction_when_abort_then_append_and_close() {
    let mut log = Log::new();
    log.begin(0, 0);
    log.data(0, 0, 2, true);
    assert_eq!(log.abort(1, 0), MarkerDecision::Append);
    assert_eq!(log.entry().txn_first_offset, None);
    assert_eq!(log.entry().producer_epoch, 1);
}

#[test]
fn given_a_transaction_at_the_last_epoch_then_its_saturated_abort_at_that_epoch_closes_it() {
    // Only an older coordinator opened transactions at the last epoch; the abort that
    // ends one cannot move the epoch on.
    let mut log = Log::new();
    log.begin(i16::MAX, 0);
    log.data(i16::MAX, 0, 2, true);
    assert_eq!(log.abort(i16::MAX, 0), MarkerDecision::Append);
    // A marker at the data's own epoch keeps the sequences (as Kafka's transaction
    // version 1 markers do); nothing can follow at this epoch anyway.
    assert_eq!(log.entry().last_seq(), Some(1));
    assert_eq!(log.entry().txn_first_offset, None);
}

#[test]
fn given_the_next_transaction_open_when_the_marker_that_closed_the_last_arrives_again_then_already_applied_and_it_stays_open(
) {
    for control_type in [ControlType::Commit, ControlType::Abort] {
        let mut log = Log::new();
        log.begin(0, 0);
        log.marker(control_type, 1, 0);
        log.begin(1, 0);
        log.data(1, 0, 2, true);
        let before = log.next_offset;
        // A late copy of the marker at epoch 1 that ended the epoch-0 transaction.
        assert_eq!(
            log.marker(control_type, 1, 0),
            (MarkerDecision::AlreadyApplied, None)
        );
        assert_eq!(log.next_offset, before);
        assert_eq!(log.entry().txn_first_offset, Some(2), "still open");
        assert_eq!(log.data(1, 2, 1, true), Decision::Append);
        // Its own marker, at the next epoch, ends it.
        assert_eq!(log.commit(2, 0), MarkerDecision::Append);
    }
}

#[test]
fn given_a_closed_transaction_when_its_marker_is_retried_then_already_applied() {
    for control_type in [ControlType::Commit, ControlType::Abort] {
        let mut log = Log::new();
        log.begin(0, 0);
        log.marker(control_type, 1, 0);
        let before = log.next_offset;
        assert_eq!(
            log.marker(control_type, 1, 0),
            (MarkerDecision::AlreadyApplied, None)
        );
        assert_eq!(log.next_offset, before);
    }
}

#[test]
fn given_a_stale_marker_of_an_older_epoch_then_invalid_epoch() {
    let mut log = Log::new();
    log.begin(0, 0);
    log.commit(1, 0);
    log.begin(1, 0);
    log.commit(2, 0);
    assert_eq!(
        log.commit(1, 0),
        MarkerDecision::InvalidEpoch { current: 2, got: 1 }
    );
    assert_eq!(
        log.abort(1, 0),
        MarkerDecision::InvalidEpoch { current: 2, got: 1 }
    );
}

#[test]
fn given_a_marker_from_a_lower_coordinator_epoch_then_coordinator_fenced_and_the_txn_stays_open() {
    let mut log = Log::new();
    log.begin(0, 5);
    assert_eq!(
        log.commit(1, 4),
        MarkerDecision::CoordinatorFenced { current: 5, got: 4 }
    );
    assert_eq!(
        log.abort(1, 4),
        MarkerDecision::CoordinatorFenced { current: 5, got: 4 }
    );
    assert_eq!(log.entry().txn_first_offset, Some(0));
    // The coordinator that took over (higher epoch) ends it.
    assert_eq!(log.abort(1, 6), MarkerDecision::Append);
    assert_eq!(log.entry().coordinator_epoch, 6);
}

#[test]
fn given_no_open_transaction_when_a_marker_of_a_newer_epoch_then_append_and_only_the_epoch_moves() {
    let mut log = Log::new();
    log.data(0, 0, 2, false);
    assert_eq!(log.abort(1, 0), MarkerDecision::Append);
    let entry = log.entry();
    assert_eq!((entry.producer_epoch, entry.txn_first_offset), (1, None));
    // An unknown producer: a lone marker fences its epoch.
    let mut log = Log::new();
    assert_eq!(log.commit(4, 0), MarkerDecision::Append);
    assert_eq!(log.entry().producer_epoch, 4);
    assert_eq!(
        log.data(3, 0, 1, false),
        Decision::InvalidEpoch { current: 4, got: 3 }
    );
}

// ---- transactional data --------------------------------------------------------------

#[test]
fn given_no_begin_when_transactional_data_then_invalid_txn_state() {
    let mut log = Log::new();
    assert_eq!(log.data(0, 0, 1, true), not_in_txn(0));
    log.data(0, 0, 1, false);
    assert_eq!(log.data(0, 1, 1, true), not_in_txn(0));
    assert_eq!(log.next_offset, 1, "only the idempotent batch was appended");
}

#[test]
fn given_an_open_transaction_of_another_epoch_when_transactional_data_then_invalid_txn_state() {
    let mut log = Log::new();
    log.begin(2, 0);
    assert_eq!(log.data(3, 0, 1, true), not_in_txn(3));
}

#[test]
fn given_an_open_transaction_when_transactional_data_then_the_idempotence_rules_apply() {
    let mut log = Log::new();
    log.begin(0, 0);
    assert_eq!(log.data(0, 0, 3, true), Decision::Append);
    assert_eq!(log.data(0, 3, 2, true), Decision::Append);
    assert_eq!(
        log.data(0, 0, 3, true),
        Decision::Duplicate(BatchMetadata {
            first_seq: 0,
            last_seq: 2,
            first_offset: 1,
            last_offset: 3,
            timestamp_ms: 0,
        })
    );
    assert_eq!(
        log.data(0, 9, 1, true),
        Decision::OutOfOrder {
            expected: 5,
            got: 9
        }
    );
    assert_eq!(log.data(0, 5, 1, true), Decision::Append);
}

#[test]
fn given_a_committed_transaction_when_a_late_batch_of_it_arrives_then_invalid_epoch() {
    let mut log = Log::new();
    log.begin(0, 0);
    log.data(0, 0, 1, true);
    log.commit(1, 0);
    // A late retry and a late new batch of transaction N are both fenced by the bump…
    assert_eq!(
        log.data(0, 0, 1, true),
        Decision::InvalidEpoch { current: 1, got: 0 }
    );
    assert_eq!(
        log.data(0, 1, 1, true),
        Decision::InvalidEpoch { current: 1, got: 0 }
    );
    // …and transaction N+1's data needs its own BEGIN.
    assert_eq!(log.data(1, 0, 1, true), not_in_txn(1));
}

#[test]
fn given_a_new_transaction_epoch_then_only_sequence_zero_starts_it() {
    let mut log = Log::new();
    log.begin(0, 0);
    log.data(0, 0, 4, true);
    log.commit(1, 0);
    log.begin(1, 0);
    assert_eq!(
        log.data(1, 4, 1, true),
        Decision::OutOfOrder {
            expected: 0,
            got: 4
        }
    );
    assert_eq!(log.data(1, 0, 1, true), Decision::Append);
}

// ---- non-transactional data ----------------------------------------------------------

#[test]
fn given_an_open_transaction_when_non_transactional_data_then_invalid_txn_state() {
    let mut log = Log::new();
    log.begin(2, 0);
    let refused = Decision::InvalidTxnState(TxnRefusal::TransactionOpen { open_epoch: 2 });
    assert_eq!(log.data(2, 0, 1, false), refused);
    assert_eq!(log.data(3, 0, 1, false), refused);
    assert_eq!(
        log.data(1, 0, 1, false),
        Decision::InvalidEpoch { current: 2, got: 1 }
    );
}

#[test]
fn given_no_transaction_then_non_transactional_data_follows_the_idempotence_rules() {
    let mut log = Log::new();
    assert_eq!(log.data(0, 0, 1, false), Decision::Append);
    assert_eq!(
        log.data(0, 2, 1, false),
        Decision::OutOfOrder {
            expected: 1,
            got: 2
        }
    );
    log.begin(0, 0);
    log.abort(1, 0);
    assert_eq!(log.data(1, 0, 1, false), Decision::Append);
}

// ---- replay, expiry, snapshots -------------------------------------------------------

#[test]
fn given_any_history_then_replaying_the_log_derives_the_same_table() {
    let mut log = Log::new();
    log.data(0, 0, 2, false);
    log.begin(1, 3);
    log.data(1, 0, 2, true);
    log.data(1, 2, 1, true);
    log.abort(2, 3);
    log.begin(2, 4);
    log.data(2, 0, 1, true);
    assert_eq!(log.replayed(), log.table);
    log.commit(3, 4);
    assert_eq!(log.replayed(), log.table);
}

#[test]
fn given_a_control_batch_without_its_record_then_only_the_epoch_moves() {
    let mut table = ProducerStateTable::new();
    let marker = ControlMarker {
        control_type: ControlType::Begin,
        coordinator_epoch: 1,
    };
    let mut buf = control::encode_control(PID, 2, marker, 0).to_vec();
    batch::assign(&mut buf, 10, 0);
    let header = batch::decode_header(&buf).expect("header");
    table.apply_batch(&header, None, 0);
    let entry = table.get(PID).expect("entry");
    assert_eq!(entry.producer_epoch, 2);
    assert_eq!(entry.txn_first_offset, None);
    assert_eq!(entry.coordinator_epoch, NO_COORDINATOR_EPOCH);
}

#[test]
fn given_transactional_data_in_the_log_without_a_begin_then_replay_opens_the_transaction_there() {
    let mut table = ProducerStateTable::new();
    let producer = ProducerInfo {
        producer_id: PID,
        producer_epoch: 0,
        base_sequence: 0,
    };
    let mut buf = batch::encode(producer, ATTR_TRANSACTIONAL, &[Record::default()]).to_vec();
    batch::assign(&mut buf, 12, 0);
    table.apply_batch(&batch::decode_header(&buf).expect("header"), None, 0);
    assert_eq!(table.get(PID).expect("entry").txn_first_offset, Some(12));
}

#[test]
fn given_an_open_transaction_then_the_producer_never_expires() {
    let mut log = Log::new();
    log.begin(0, 0);
    assert_eq!(log.table.remove_expired(i64::MAX, 1), 0);
    log.commit(1, 0);
    assert_eq!(log.table.remove_expired(i64::MAX, 1), 1);
}

#[test]
fn given_transaction_fields_when_snapshotted_then_they_round_trip() {
    let mut log = Log::new();
    log.begin(3, 11);
    log.data(3, 0, 2, true);
    let bytes = log.table.encode_snapshot();
    let decoded = ProducerStateTable::decode_snapshot(&bytes).expect("decode");
    assert_eq!(decoded, log.table);
    let entry = decoded.get(PID).expect("entry");
    assert_eq!(
        (entry.txn_first_offset, entry.coordinator_epoch),
        (Some(0), 11)
    );
    // Decided the same after the round trip.
    assert_eq!(
        decoded.check_marker(PID, 3, ControlType::Begin, 11, MarkerEpoch::Next),
        MarkerDecision::AlreadyApplied
    );
}

#[test]
fn given_a_version_1_snapshot_then_it_is_not_used() {
    let mut bytes = ProducerStateTable::new().encode_snapshot();
    bytes[4..6].copy_from_slice(&1u16.to_be_bytes());
    assert!(matches!(
        ProducerStateTable::decode_snapshot(&bytes),
        Err(SnapshotError::UnsupportedVersion(1))
    ));
}

// Kafka's transaction version 1: a Kafka client without KIP-890 keeps its epoch, and the
// coordinator's markers carry the transaction's own epoch (`MarkerEpoch::Transaction`).

#[test]
fn given_markers_at_the_transactions_own_epoch_then_each_closes_its_transaction_and_sequences_go_on(
) {
    let mut log = Log::new();
    assert_eq!(log.begin(0, 1), MarkerDecision::Append);
    assert_eq!(log.data(0, 0, 3, true), Decision::Append);
    let (commit, at) = log.marker_at(ControlType::Commit, 0, 1, MarkerEpoch::Transaction);
    assert_eq!((commit, at), (MarkerDecision::Append, Some(4)));
    assert!(
        !log.entry().in_transaction(),
        "the COMMIT at epoch 0 closed it"
    );
    // Its retry appends nothing.
    assert_eq!(
        log.marker_at(ControlType::Commit, 0, 1, MarkerEpoch::Transaction)
            .0,
        MarkerDecision::AlreadyApplied
    );
    // The next transaction at the same epoch: data before its BEGIN is refused, after
    // it the sequence goes on from 3 (the client does not restart it).
    assert!(matches!(
        log.data(0, 3, 2, true),
        Decision::InvalidTxnState(_)
    ));
    assert_eq!(log.begin(0, 1), MarkerDecision::Append);
    assert_eq!(
        log.data(0, 0, 3, true),
        Decision::Duplicate(log.entry().find_batch(0, 2).expect("cached")),
        "a retry of the first transaction's batch is still a duplicate"
    );
    assert_eq!(log.data(0, 3, 2, true), Decision::Append);
    let (abort, _) = log.marker_at(ControlType::Abort, 0, 1, MarkerEpoch::Transaction);
    assert_eq!(abort, MarkerDecision::Append);
    assert!(!log.entry().in_transaction());
    // Replay of the log rebuilds the same state.
    let replayed = log.replayed();
    let entry = replayed.get(PID).expect("entry");
    assert_eq!(
        (
            entry.producer_epoch,
            entry.last_seq(),
            entry.in_transaction()
        ),
        (0, Some(4), false)
    );
}

#[test]
fn given_kept_epochs_when_a_new_instance_bumps_the_epoch_then_the_old_one_is_fenced() {
    let mut log = Log::new();
    log.begin(0, 1);
    log.data(0, 0, 2, true);
    log.marker_at(ControlType::Commit, 0, 1, MarkerEpoch::Transaction);
    log.begin(0, 1);
    log.data(0, 2, 1, true);
    // The new instance's InitProducerId aborts the open transaction at the next epoch.
    assert_eq!(log.abort(1, 1), MarkerDecision::Append);
    assert!(!log.entry().in_transaction());
    assert!(matches!(
        log.data(0, 3, 1, true),
        Decision::InvalidEpoch { current: 1, got: 0 }
    ));
    assert!(matches!(
        log.marker_at(ControlType::Commit, 0, 1, MarkerEpoch::Transaction)
            .0,
        MarkerDecision::InvalidEpoch { current: 1, got: 0 }
    ));
    assert!(matches!(
        log.begin(0, 1),
        MarkerDecision::InvalidEpoch { .. }
    ));
    // The new instance starts at sequence 0 of epoch 1.
    assert_eq!(log.begin(1, 1), MarkerDecision::Append);
    assert_eq!(log.data(1, 0, 1, true), Decision::Append);
}
