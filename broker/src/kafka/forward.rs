//! Forwarding a Kafka coordinator request: the owner of its key (a transactional id or
//! a group id) as FindCoordinator finds it, the call over the coordinator link, and
//! every failure as the Kafka code the client acts on. The Kafka client's own rights
//! are checked before this (the call carries the broker's credential, which may do
//! anything), with the rules the coordinator applies to SDK callers.

use std::future::Future;

use idem_proto::ErrorCode;
use kafka_protocol::ResponseError;

use super::coordinator_link::{GroupClient, TxnClient};
use super::errors::kafka_code;
use super::KafkaContext;

/// Why a forwarded request was not answered by the coordinator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (Kafka error code {code})")]
pub struct Refused {
    /// Kafka's code (COORDINATOR_NOT_AVAILABLE when no owner or no answer).
    pub code: i16,
    pub message: String,
}

impl Refused {
    pub fn new(code: i16, message: impl Into<String>) -> Self {
        Refused {
            code,
            message: message.into(),
        }
    }
}

/// The address of the coordinator owning `key`.
fn owner(context: &KafkaContext, key: &str) -> Result<String, Refused> {
    context
        .service
        .coordinator_of(key)
        .map(|found| found.address)
        .map_err(|e| Refused::new(kafka_code(e.code() as i32), e.to_string()))
}

/// `call` on the TxnCoordinator owning `transactional_id`.
pub async fn to_txn_coordinator<T, F, Fut>(
    context: &KafkaContext,
    transactional_id: &str,
    call: F,
) -> Result<T, Refused>
where
    F: FnOnce(TxnClient) -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let address = owner(context, transactional_id)?;
    context
        .link
        .txn(&address, call)
        .await
        .map_err(|e| Refused::new(e.kafka_code(), e.to_string()))
}

/// `call` on the GroupCoordinator owning `group_id`.
pub async fn to_group_coordinator<T, F, Fut>(
    context: &KafkaContext,
    group_id: &str,
    call: F,
) -> Result<T, Refused>
where
    F: FnOnce(GroupClient) -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let address = owner(context, group_id)?;
    context
        .link
        .group(&address, call)
        .await
        .map_err(|e| Refused::new(e.kafka_code(), e.to_string()))
}

/// A coordinator's code for a Kafka client of `version`, where fencing is answered
/// PRODUCER_FENCED only from `fenced_since` on (KIP-588); older versions know it as
/// INVALID_PRODUCER_EPOCH, which they treat as fatal too.
pub fn for_version(code: i32, version: i16, fenced_since: i16) -> i16 {
    if code == ErrorCode::ProducerFenced as i32 && version < fenced_since {
        return ResponseError::InvalidProducerEpoch.code();
    }
    kafka_code(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_producer_fenced_for_an_old_version_then_invalid_producer_epoch() {
        let fenced = ErrorCode::ProducerFenced as i32;
        assert_eq!(for_version(fenced, 1, 2), 47);
        assert_eq!(for_version(fenced, 2, 2), 90);
        assert_eq!(
            for_version(ErrorCode::ConcurrentTransactions as i32, 0, 2),
            51
        );
        assert_eq!(for_version(0, 0, 2), 0);
    }
}
