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

    /// `Ok` when `authorizer` allows `principal` every one of `needs`; else the refusal
    /// naming the first one denied (its authorization error code and message).
    pub fn unless_authorized(
        authorizer: &idem_runtime::acl::Authorizer,
        principal: &str,
        needs: impl IntoIterator<Item = (idem_runtime::acl::Operation, idem_runtime::acl::Resource)>,
    ) -> Result<(), Refusal> {
        authorizer
            .check_all(principal, needs)
            .map_err(|denied| Refusal::new(denied.error_code(), denied.to_string()))
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
