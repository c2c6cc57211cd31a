//! The verdicts of the producer state table: what to do with an incoming data batch
//! ([`Decision`]) or transaction marker ([`MarkerDecision`]), and why a batch or marker
//! does not fit the producer's transaction state ([`TxnRefusal`]). Each maps to one
//! answer of the partition (append, duplicate, or an error code).

use super::entry::BatchMetadata;

/// What to do with an incoming batch of an idempotent producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Append it, then [`ProducerStateTable::apply`](super::ProducerStateTable::apply) it.
    Append,
    /// Already appended: answer with these original offsets and append nothing.
    Duplicate(BatchMetadata),
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER`: a gap, or a retry older than the cached batches.
    OutOfOrder { expected: i32, got: i32 },
    /// `INVALID_PRODUCER_EPOCH`: the producer was fenced by a newer epoch.
    InvalidEpoch { current: i16, got: i16 },
    /// `UNKNOWN_PRODUCER_ID`: no state for this producer (never seen, or expired) and the
    /// batch does not start at sequence 0.
    UnknownProducerId,
    /// `INVALID_TXN_STATE`: the batch does not fit the producer's transaction state.
    InvalidTxnState(TxnRefusal),
}

/// Why a batch or marker does not fit the producer's transaction state
/// (`INVALID_TXN_STATE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxnRefusal {
    /// Transactional data, but no transaction of the batch's epoch is open here: the
    /// partition was never added to the transaction, or the transaction already ended.
    #[error("transactional batch of epoch {epoch} outside a transaction this partition began")]
    NotInTransaction { epoch: i16 },
    /// Non-transactional data from a producer whose transaction is open here.
    #[error(
        "non-transactional batch while the producer's transaction of epoch {open_epoch} is open"
    )]
    TransactionOpen { open_epoch: i16 },
    /// A BEGIN of a newer epoch while an older transaction is still open: closing it
    /// silently would lose its outcome, so only its COMMIT/ABORT may end it.
    #[error(
        "BEGIN of epoch {begin_epoch} while the transaction of epoch {open_epoch} is still open"
    )]
    OpenAtLowerEpoch { open_epoch: i16, begin_epoch: i16 },
}

/// Which epoch a COMMIT or ABORT carries (`WriteTxnMarkersRequest.at_transaction_epoch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerEpoch {
    /// The epoch the producer moves to, one above the transaction's (KIP-890, the SDK):
    /// it fences every late batch of the transaction.
    Next,
    /// The transaction's own epoch, which its producer keeps (Kafka's transaction
    /// version 1, Kafka clients without KIP-890).
    Transaction,
}

/// What to do with a transaction marker (`WriteTxnMarkers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerDecision {
    /// Append the control batch, then apply it.
    Append,
    /// A retry whose effect is already in the log: success, nothing appended.
    AlreadyApplied,
    /// `INVALID_PRODUCER_EPOCH`: the marker is older than the producer's epoch here.
    InvalidEpoch { current: i16, got: i16 },
    /// `TRANSACTION_COORDINATOR_FENCED`: a coordinator with a newer epoch wrote a marker
    /// for this producer already.
    CoordinatorFenced { current: i32, got: i32 },
    /// `INVALID_TXN_STATE`.
    InvalidTxnState(TxnRefusal),
}
