//! The coordinator crate's one error type. [`CoordinatorError::OwnershipLost`] is the
//! one every caller must treat specially: the coordinator stops serving that
//! transaction log partition at once, because another coordinator may own it now.

use std::path::PathBuf;

use idem_client::ClientError;
use idem_proto::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error("metrics endpoint: {0}")]
    Metrics(String),
    #[error("authentication: {0}")]
    Auth(String),
    /// Another coordinator may own the partition now (a broker fenced our writes or
    /// markers, or our lease lapsed): stop serving it.
    #[error("no longer the owner of transaction log partition {partition}: {reason}")]
    OwnershipLost { partition: i32, reason: String },
    /// A broker refused a request for good (not a leadership change, not a fencing).
    #[error("broker refused {what} with {code:?}: {message}")]
    Refused {
        what: String,
        code: ErrorCode,
        message: String,
    },
    /// A record of `__transaction_state` does not decode: loading stops rather than
    /// forget a transaction.
    #[error("transaction log partition {partition}, offset {offset}: {reason}")]
    CorruptLog {
        partition: i32,
        offset: i64,
        reason: String,
    },
    /// A decision would have persisted a change the transaction log must never hold
    /// (a bug in the coordinator): refused, nothing appended.
    #[error("refusing to persist {transactional_id}: {reason}")]
    IllegalChange {
        transactional_id: String,
        reason: crate::txn::change::IllegalChange,
    },
    /// A topic key of the etcd catalog does not decode: the topic is not taken for
    /// deleted on that account.
    #[error("topic catalog key {key}: {reason}")]
    CorruptCatalog { key: String, reason: String },
    #[error("broker connection: {0}")]
    Client(#[from] ClientError),
    #[error(transparent)]
    Etcd(#[from] idem_runtime::etcd_call::EtcdCallError),
    #[error("producer ids: {0}")]
    ProducerIds(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    CorruptStateFile { path: PathBuf, reason: String },
    #[error("the coordinator epoch {0} no longer fits a producer epoch (i16)")]
    EpochExhausted(i32),
    #[error(transparent)]
    Grpc(#[from] idem_runtime::grpc_server::GrpcServerError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("invalid configuration: {0}")]
    InvalidConfig(#[from] idem_runtime::config_error::ConfigError),
    /// The coordinator is shutting down.
    #[error("the coordinator is stopping")]
    Stopping,
}

impl CoordinatorError {
    pub fn ownership_lost(partition: i32, reason: impl Into<String>) -> Self {
        CoordinatorError::OwnershipLost {
            partition,
            reason: reason.into(),
        }
    }
}
