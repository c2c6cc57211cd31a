//! The transaction rules of a partition (docs/transactions.md, "Broker rules"): which
//! transaction markers and which data batches a producer's state admits. Pure deciders
//! over [`ProducerStateTable`]; the partition appends only on `Append` and then records
//! the stored batch with [`ProducerStateTable::apply_batch`].
//!
//! Invariant kept: a partition holds an open transaction of `(pid, e)` only after a BEGIN
//! of `(pid, e)` was appended, transactional data of `(pid, e)` is accepted only while that
//! transaction is open, and nothing but a COMMIT/ABORT marker closes it.

use idem_proto::v1::ControlType;

use super::decision::{Decision, MarkerDecision, MarkerEpoch, TxnRefusal};
use super::ProducerStateTable;

impl ProducerStateTable {
    /// [`check`](Self::check) plus the transaction rules for a data batch:
    /// transactional data needs an open transaction of its epoch; non-transactional data
    /// of a producer with an open transaction is refused. A stale epoch is
    /// `InvalidEpoch` first, so a late batch of a transaction that a marker closed (and
    /// whose epoch the marker bumped) is fenced like any zombie.
    pub fn check_data(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        first_seq: i32,
        last_seq: i32,
        transactional: bool,
    ) -> Decision {
        let entry = self.get(producer_id);
        if let Some(entry) = entry {
            if producer_epoch < entry.producer_epoch {
                return Decision::InvalidEpoch {
                    current: entry.producer_epoch,
                    got: producer_epoch,
                };
            }
        }
        let open_epoch = entry
            .filter(|e| e.in_transaction())
            .map(|e| e.producer_epoch);
        if transactional && open_epoch != Some(producer_epoch) {
            return Decision::InvalidTxnState(TxnRefusal::NotInTransaction {
                epoch: producer_epoch,
            });
        }
        if !transactional {
            if let Some(open_epoch) = open_epoch {
                return Decision::InvalidTxnState(TxnRefusal::TransactionOpen { open_epoch });
            }
        }
        self.check(producer_id, producer_epoch, first_seq, last_seq)
    }

    /// Decides a marker of `control_type` for `producer_id` at `producer_epoch` from a
    /// coordinator at `coordinator_epoch`. BEGIN carries the transaction's epoch,
    /// COMMIT/ABORT the epoch the producer moves to, or with [`MarkerEpoch::Transaction`]
    /// the transaction's own, which the producer keeps. A retry whose effect is in the
    /// log already is `AlreadyApplied`, so the coordinator may resend markers freely.
    pub fn check_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        control_type: ControlType,
        coordinator_epoch: i32,
        end_epoch: MarkerEpoch,
    ) -> MarkerDecision {
        let Some(entry) = self.get(producer_id) else {
            // Never seen (or expired without a transaction): BEGIN opens one; a lone
            // COMMIT/ABORT (its BEGIN never reached this partition) only fences the epoch.
            return MarkerDecision::Append;
        };
        if producer_epoch < entry.producer_epoch {
            return MarkerDecision::InvalidEpoch {
                current: entry.producer_epoch,
                got: producer_epoch,
            };
        }
        if coordinator_epoch < entry.coordinator_epoch {
            return MarkerDecision::CoordinatorFenced {
                current: entry.coordinator_epoch,
                got: coordinator_epoch,
            };
        }
        let open = entry.in_transaction();
        if end_epoch == MarkerEpoch::Transaction && control_type != ControlType::Begin {
            // At the transaction's own epoch the marker closes the transaction open at
            // exactly that epoch (or, at a lower one, fences it like any newer marker);
            // with nothing open at its epoch it is a retry of itself.
            return if !open && entry.producer_epoch == producer_epoch {
                MarkerDecision::AlreadyApplied
            } else {
                MarkerDecision::Append
            };
        }
        match control_type {
            ControlType::Begin if open && entry.producer_epoch == producer_epoch => {
                MarkerDecision::AlreadyApplied
            }
            ControlType::Begin if open => {
                MarkerDecision::InvalidTxnState(TxnRefusal::OpenAtLowerEpoch {
                    open_epoch: entry.producer_epoch,
                    begin_epoch: producer_epoch,
                })
            }
            ControlType::Commit | ControlType::Abort
                if !open && entry.producer_epoch == producer_epoch =>
            {
                MarkerDecision::AlreadyApplied
            }
            // The transaction open here began at this epoch, so after the marker that
            // moved the producer to it: this is that marker again, delivered late (a
            // retried request overtaken by its own retry). Appending it would end the
            // wrong transaction. The coordinator never opens a transaction at the last
            // epoch, where a marker could not move the epoch on; one left open there
            // (by an older coordinator) is still ended by its saturated ABORT.
            ControlType::Commit | ControlType::Abort
                if open && entry.producer_epoch == producer_epoch && producer_epoch < i16::MAX =>
            {
                MarkerDecision::AlreadyApplied
            }
            ControlType::Begin | ControlType::Commit | ControlType::Abort => MarkerDecision::Append,
        }
    }
}
