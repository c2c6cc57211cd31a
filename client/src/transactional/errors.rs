//! What a transactional producer's caller does with an error (docs/transactions.md,
//! "Errors a transactional producer sees"): close the instance (fatal), abort the
//! transaction (abortable), or call again (retriable). Every [`ClientError`] has exactly
//! one class, decided from the error alone.

use idem_proto::ErrorCode;

use crate::error::{is_retriable, is_retriable_status, ClientError};

/// The caller's next step after a transactional producer call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnErrorClass {
    /// The instance cannot continue: it was fenced by a newer instance (or its
    /// coordinator was), or it is misconfigured or closed. Every later call fails with
    /// the same error; close it (a new instance may `init_transactions`).
    Fatal,
    /// The open transaction cannot commit (a send failed, the coordinator refused it,
    /// or the call did not fit the producer's state): `abort` it, then go on.
    Abortable,
    /// The coordinator was unreachable, moving or busy until the SDK's deadline: the
    /// same call may succeed later (after an unanswered `commit`, call `commit` again).
    Retriable,
}

/// Codes that mean this producer instance is a zombie.
pub fn is_fencing(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::ProducerFenced
            | ErrorCode::InvalidProducerEpoch
            | ErrorCode::InvalidProducerIdMapping
            | ErrorCode::TransactionCoordinatorFenced
    )
}

impl ClientError {
    /// The class of this error for a transactional producer's caller.
    pub fn txn_class(&self) -> TxnErrorClass {
        match self {
            ClientError::Broker { code, .. } => match code {
                c if is_fencing(*c) => TxnErrorClass::Fatal,
                ErrorCode::InvalidTransactionTimeout => TxnErrorClass::Fatal,
                ErrorCode::InvalidTxnState => TxnErrorClass::Abortable,
                c if is_retriable(*c) => TxnErrorClass::Retriable,
                _ => TxnErrorClass::Abortable,
            },
            ClientError::TxnAbortable(cause) => match cause.txn_class() {
                TxnErrorClass::Fatal => TxnErrorClass::Fatal,
                _ => TxnErrorClass::Abortable,
            },
            ClientError::Transport(status) if is_retriable_status(status.code()) => {
                TxnErrorClass::Retriable
            }
            ClientError::Connect { .. } => TxnErrorClass::Retriable,
            // Settings that will not match better by retrying.
            ClientError::Fatal(_)
            | ClientError::InvalidConfig(_)
            | ClientError::Closed
            | ClientError::Tls { .. } => TxnErrorClass::Fatal,
            ClientError::Transport(_)
            | ClientError::DeliveryTimeout { .. }
            | ClientError::OutcomeUnknown { .. }
            | ClientError::UnknownTopic { .. }
            | ClientError::NotAssigned { .. }
            | ClientError::RecordTooLarge { .. }
            | ClientError::Corrupt { .. }
            | ClientError::Protocol(_)
            | ClientError::IllegalState(_) => TxnErrorClass::Abortable,
        }
    }

    /// `self` as the reason a transaction must be aborted: fatal errors stay as they are
    /// (the instance is done), everything else becomes [`ClientError::TxnAbortable`].
    pub(crate) fn into_abortable(self) -> ClientError {
        match self {
            e @ ClientError::TxnAbortable(_) => e,
            e if e.txn_class() == TxnErrorClass::Fatal => e,
            e => ClientError::TxnAbortable(Box::new(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(code: ErrorCode) -> ClientError {
        ClientError::broker(code as i32, "")
    }

    #[test]
    fn fencing_and_bad_timeouts_are_fatal() {
        for code in [
            ErrorCode::ProducerFenced,
            ErrorCode::InvalidProducerEpoch,
            ErrorCode::InvalidProducerIdMapping,
            ErrorCode::TransactionCoordinatorFenced,
            ErrorCode::InvalidTransactionTimeout,
        ] {
            assert_eq!(broker(code).txn_class(), TxnErrorClass::Fatal, "{code:?}");
        }
        assert_eq!(ClientError::Closed.txn_class(), TxnErrorClass::Fatal);
        assert_eq!(
            ClientError::Fatal("x".into()).txn_class(),
            TxnErrorClass::Fatal
        );
    }

    #[test]
    fn invalid_txn_state_and_failed_sends_are_abortable() {
        assert_eq!(
            broker(ErrorCode::InvalidTxnState).txn_class(),
            TxnErrorClass::Abortable
        );
        let timeout = ClientError::DeliveryTimeout {
            attempts: 3,
            last_error: None,
            possibly_written: true,
        };
        assert_eq!(timeout.txn_class(), TxnErrorClass::Abortable);
        assert_eq!(
            broker(ErrorCode::MessageTooLarge).txn_class(),
            TxnErrorClass::Abortable
        );
        assert_eq!(
            ClientError::IllegalState("no".into()).txn_class(),
            TxnErrorClass::Abortable
        );
    }

    #[test]
    fn coordinator_moves_and_lost_answers_are_retriable() {
        for code in [
            ErrorCode::ConcurrentTransactions,
            ErrorCode::CoordinatorLoadInProgress,
            ErrorCode::NotCoordinator,
            ErrorCode::CoordinatorNotAvailable,
        ] {
            assert_eq!(
                broker(code).txn_class(),
                TxnErrorClass::Retriable,
                "{code:?}"
            );
        }
        assert_eq!(
            ClientError::Transport(tonic::Status::unavailable("x")).txn_class(),
            TxnErrorClass::Retriable
        );
        assert_eq!(
            ClientError::Transport(tonic::Status::unimplemented("x")).txn_class(),
            TxnErrorClass::Abortable
        );
    }

    #[test]
    fn wrapping_keeps_the_code_and_never_hides_a_fatal_cause() {
        let wrapped = broker(ErrorCode::NotEnoughReplicas).into_abortable();
        assert!(matches!(wrapped, ClientError::TxnAbortable(_)));
        assert_eq!(wrapped.txn_class(), TxnErrorClass::Abortable);
        assert_eq!(wrapped.code(), Some(ErrorCode::NotEnoughReplicas));
        let fenced = broker(ErrorCode::ProducerFenced).into_abortable();
        assert!(matches!(fenced, ClientError::Broker { .. }));
        assert_eq!(fenced.txn_class(), TxnErrorClass::Fatal);
        // Wrapping twice is wrapping once.
        let twice = wrapped.clone().into_abortable();
        assert!(
            matches!(&twice, ClientError::TxnAbortable(inner) if matches!(**inner, ClientError::Broker { .. }))
        );
        // A fatal cause inside a wrapper is still fatal.
        let hidden = ClientError::TxnAbortable(Box::new(broker(ErrorCode::ProducerFenced)));
        assert_eq!(hidden.txn_class(), TxnErrorClass::Fatal);
    }
}
