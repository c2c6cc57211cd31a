//! How the core answers a request with an error code instead of a decision: a
//! [`Refusal`] of its own (not the owner, still loading, a bad request), or a decider
//! error mapped to its wire code by [`txn_error_code`].

use idem_proto::ErrorCode;

use crate::txn::decide::TxnError;

/// A request answered with an error code instead of a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl Refusal {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

/// The wire code of a decider error.
pub fn txn_error_code(error: TxnError) -> ErrorCode {
    match error {
        TxnError::ProducerFenced => ErrorCode::ProducerFenced,
        TxnError::InvalidProducerIdMapping => ErrorCode::InvalidProducerIdMapping,
        TxnError::ConcurrentTransactions => ErrorCode::ConcurrentTransactions,
        TxnError::InvalidTxnState => ErrorCode::InvalidTxnState,
        TxnError::InvalidTransactionTimeout => ErrorCode::InvalidTransactionTimeout,
    }
}
