//! The SDK's one error type and the classification of every broker `ErrorCode`.
//! Contract: an error that reaches the caller says whether the SDK already retried
//! ([`ClientError::DeliveryTimeout`] and [`ClientError::OutcomeUnknown`] come after
//! retries; everything else did not retry) and whether the data may be in the log
//! ([`ClientError::possibly_written`]).

use idem_proto::batch::BatchError;
use idem_proto::ErrorCode;

/// Everything the SDK can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The broker answered with an error code. `retriable` says whether the same request
    /// may succeed later: the producer in a retrying mode never surfaces a retriable code
    /// on its own (it retries, then reports [`ClientError::DeliveryTimeout`]); at-most-once
    /// and the admin and consumer calls hand it over untouched so the caller may retry.
    #[error("broker error {code:?}{}: {message}", if *retriable { " (retriable)" } else { "" })]
    Broker {
        code: ErrorCode,
        message: String,
        retriable: bool,
    },
    /// The request got no answer (connection refused or reset, request timeout): a
    /// produce may or may not have been written. Or the transport refused it before the
    /// broker acted (e.g. `OUT_OF_RANGE`, too large): nothing was written.
    #[error("transport error: {0}")]
    Transport(tonic::Status),
    /// The first connection to the bootstrap address failed.
    #[error("cannot connect to {address}: {message}")]
    Connect { address: String, message: String },
    /// The first connection failed the way a TLS mismatch does: a TLS-only server dialled
    /// in plaintext, a server certificate the CA does not vouch for (or that names
    /// another host), a client certificate the server refused. `hint` says which.
    #[error("cannot connect to {address}: {hint} ({message})")]
    Tls {
        address: String,
        hint: String,
        message: String,
    },
    /// The SDK retried until `delivery_timeout` without a definite answer.
    /// `possibly_written` is true when an attempt got no answer (or an answer that does
    /// not rule a write out), so the batch may be in the log; false when every attempt
    /// was definitely refused.
    #[error(
        "delivery timed out after {attempts} attempts (possibly written: {possibly_written}){}",
        last_error.as_ref().map(|e| format!("; last error: {e}")).unwrap_or_default()
    )]
    DeliveryTimeout {
        attempts: u32,
        last_error: Option<Box<ClientError>>,
        possibly_written: bool,
    },
    /// An exactly-once batch whose earlier attempt may have been written, and whose
    /// producer identity had to be replaced (the partition bumped its producer epoch)
    /// before the broker confirmed or denied that write. Resending it under the new epoch
    /// could duplicate it, so the SDK gave up; the batch is in the log at most once (a copy
    /// still in transit is refused once the partition has seen the new epoch).
    #[error("batch outcome unknown after {attempts} attempts (it may have been written once): {last_error}")]
    OutcomeUnknown {
        attempts: u32,
        last_error: Box<ClientError>,
    },
    /// The producer or consumer cannot continue (e.g. no producer id could be obtained).
    #[error("fatal: {0}")]
    Fatal(String),
    /// A setting is out of range; nothing was sent.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The producer was closed (or its task ended) before the call could complete.
    #[error("the client is closed")]
    Closed,
    /// The topic, or this partition of it, does not exist.
    #[error("unknown topic {topic}{}", partition.map(|p| format!(" partition {p}")).unwrap_or_default())]
    UnknownTopic {
        topic: String,
        partition: Option<i32>,
    },
    /// A partition that was never assigned to this consumer.
    #[error("partition {topic}/{partition} is not assigned")]
    NotAssigned { topic: String, partition: i32 },
    /// A record larger than the producer can ever send.
    #[error("record of {size} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge { size: usize, max: usize },
    /// Fetched data failed its CRC or does not parse: reported, never skipped.
    #[error("corrupt data in {topic}/{partition} at offset {offset}: {source}")]
    Corrupt {
        topic: String,
        partition: i32,
        offset: i64,
        source: BatchError,
    },
    /// The broker's answer does not follow the protocol (e.g. a missing partition).
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// A transactional producer call that does not fit the producer's state (e.g.
    /// `send` before `begin`, `begin` twice); nothing changed.
    #[error("illegal transactional state: {0}")]
    IllegalState(String),
    /// The open transaction cannot commit (a send of it failed, or the coordinator
    /// refused it): the caller aborts it. The cause is inside.
    #[error("the transaction must be aborted: {0}")]
    TxnAbortable(Box<ClientError>),
}

impl ClientError {
    /// A broker error from a raw proto code; unknown numbers become `UNKNOWN_SERVER_ERROR`.
    pub fn broker(code: i32, message: impl Into<String>) -> ClientError {
        let message = message.into();
        match ErrorCode::try_from(code) {
            Ok(code) => ClientError::Broker {
                code,
                message,
                retriable: is_retriable(code),
            },
            Err(_) => ClientError::Broker {
                code: ErrorCode::UnknownServerError,
                message: format!("unrecognised error code {code}: {message}"),
                retriable: false,
            },
        }
    }

    /// The broker error code, if the broker answered with one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            ClientError::TxnAbortable(cause) => cause.code(),
            _ => None,
        }
    }

    /// Whether the failed produce may nevertheless have been appended to the log.
    pub fn possibly_written(&self) -> bool {
        match self {
            ClientError::Transport(status) => is_retriable_status(status.code()),
            ClientError::OutcomeUnknown { .. } => true,
            ClientError::DeliveryTimeout {
                possibly_written, ..
            } => *possibly_written,
            ClientError::Broker { code, .. } => may_have_written(*code),
            ClientError::Protocol(_) => true,
            ClientError::TxnAbortable(cause) => cause.possibly_written(),
            _ => false,
        }
    }

    /// Whether the cluster refused the request's principal (issue 29): an
    /// `*_AUTHORIZATION_FAILED` code (the message names principal, operation and
    /// resource), or a PERMISSION_DENIED / UNAUTHENTICATED status. Never retriable:
    /// nothing changes until an ACL or the credential does.
    pub fn is_authorization_failure(&self) -> bool {
        match self {
            ClientError::Broker { code, .. } => is_authorization_failure(*code),
            ClientError::Transport(status) => matches!(
                status.code(),
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
            ),
            ClientError::TxnAbortable(cause) => cause.is_authorization_failure(),
            ClientError::DeliveryTimeout {
                last_error: Some(cause),
                ..
            }
            | ClientError::OutcomeUnknown {
                last_error: cause, ..
            } => cause.is_authorization_failure(),
            _ => false,
        }
    }

    /// Whether the SDK already retried before giving up with this error.
    pub fn retried(&self) -> bool {
        matches!(
            self,
            ClientError::DeliveryTimeout { .. } | ClientError::OutcomeUnknown { .. }
        )
    }
}

impl From<tonic::Status> for ClientError {
    fn from(status: tonic::Status) -> Self {
        ClientError::Transport(status)
    }
}

/// What a client does with a broker error code on a produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Success (`NONE`, and `DUPLICATE_SEQUENCE_NUMBER`: the batch is already in the log).
    Success,
    /// Transient: resend the same bytes (same producer id and sequence) after a backoff.
    Retriable,
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER`: retriable while an earlier batch of the partition
    /// is unacknowledged; otherwise the broker lost the producer's state and the
    /// partition moves to the next epoch of its producer id.
    OutOfOrderSequence,
    /// `UNKNOWN_PRODUCER_ID`: the broker holds no state for the producer id (it expired,
    /// or sequence 0 of a fresh id has not arrived yet). Like an out-of-order answer:
    /// retriable behind an unacknowledged batch, otherwise the partition continues under
    /// the next epoch of its producer id from sequence 0.
    NeedsNewProducerId,
    /// Sending the same request again cannot succeed.
    Fatal,
}

/// Classifies a code as a produce response.
pub fn classify(code: ErrorCode) -> ErrorClass {
    use ErrorCode as E;
    match code {
        E::None | E::DuplicateSequenceNumber => ErrorClass::Success,
        E::OutOfOrderSequenceNumber => ErrorClass::OutOfOrderSequence,
        E::UnknownProducerId => ErrorClass::NeedsNewProducerId,
        c if is_retriable(c) => ErrorClass::Retriable,
        _ => ErrorClass::Fatal,
    }
}

/// Codes after which the same request may succeed (leadership moves, replicas catch up,
/// a coordinator or the producer-id store finishes loading, a broker-side fault the
/// broker logged), as docs/protocol.md lists them. `UNKNOWN_TOPIC_OR_PARTITION` is
/// fatal for a produce there: the producer checks the topic's metadata before sending.
pub fn is_retriable(code: ErrorCode) -> bool {
    use ErrorCode as E;
    matches!(
        code,
        E::UnknownServerError
            | E::NotLeaderOrFollower
            | E::LeaderNotAvailable
            | E::RequestTimedOut
            | E::NotEnoughReplicas
            | E::NotEnoughReplicasAfterAppend
            | E::CoordinatorLoadInProgress
            | E::CoordinatorNotAvailable
            | E::NotCoordinator
            | E::FencedLeaderEpoch
            | E::ConcurrentTransactions
    )
}

/// `UNKNOWN_PRODUCER_ID`: the partition must continue under a new producer identity
/// (the next epoch of its producer id).
pub fn needs_new_producer_id(code: ErrorCode) -> bool {
    code == ErrorCode::UnknownProducerId
}

/// The codes of a refused principal: `TOPIC_`, `GROUP_`, `CLUSTER_` and
/// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`. Fatal.
pub fn is_authorization_failure(code: ErrorCode) -> bool {
    use ErrorCode as E;
    matches!(
        code,
        E::TopicAuthorizationFailed
            | E::GroupAuthorizationFailed
            | E::ClusterAuthorizationFailed
            | E::TransactionalIdAuthorizationFailed
    )
}

/// Codes that no retry can fix: the request (or the producer) is wrong.
pub fn is_fatal(code: ErrorCode) -> bool {
    classify(code) == ErrorClass::Fatal
}

/// Codes that do not rule out that the batch was appended: a timeout waiting for
/// replication happens after the leader's append, and an unknown server error may come
/// from anywhere. Every other error code means "not appended by this request".
pub fn may_have_written(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::RequestTimedOut
            | ErrorCode::UnknownServerError
            | ErrorCode::NotEnoughReplicasAfterAppend
    )
}

/// Codes after which the client's view of leaders or topics is stale.
pub fn needs_metadata_refresh(code: ErrorCode) -> bool {
    use ErrorCode as E;
    matches!(
        code,
        E::NotLeaderOrFollower
            | E::LeaderNotAvailable
            | E::UnknownTopicOrPartition
            | E::FencedLeaderEpoch
    )
}

/// gRPC statuses that mean "no answer, try again" (the request may or may not have been
/// acted on). Every other status refuses the request before the broker acts on it, e.g.
/// `OUT_OF_RANGE` for a request over the broker's size limit.
pub fn is_retriable_status(code: tonic::Code) -> bool {
    use tonic::Code as C;
    matches!(
        code,
        C::Unavailable | C::DeadlineExceeded | C::Cancelled | C::Unknown | C::Aborted | C::Internal
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leadership_and_timeouts_are_retriable() {
        for code in [
            ErrorCode::NotLeaderOrFollower,
            ErrorCode::LeaderNotAvailable,
            ErrorCode::RequestTimedOut,
            ErrorCode::NotEnoughReplicas,
            ErrorCode::CoordinatorLoadInProgress,
            ErrorCode::UnknownServerError,
        ] {
            assert_eq!(classify(code), ErrorClass::Retriable, "{code:?}");
        }
    }

    #[test]
    fn bad_input_and_fencing_are_fatal() {
        for code in [
            ErrorCode::CorruptMessage,
            ErrorCode::MessageTooLarge,
            ErrorCode::InvalidProducerEpoch,
            ErrorCode::ProducerFenced,
            ErrorCode::InvalidTopicException,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidRequiredAcks,
            ErrorCode::UnknownTopicOrPartition,
            ErrorCode::ProducerIdsExhausted,
        ] {
            assert!(is_fatal(code), "{code:?}");
        }
    }

    #[test]
    fn sequence_codes_have_their_own_classes() {
        assert_eq!(
            classify(ErrorCode::OutOfOrderSequenceNumber),
            ErrorClass::OutOfOrderSequence
        );
        assert_eq!(
            classify(ErrorCode::UnknownProducerId),
            ErrorClass::NeedsNewProducerId
        );
        assert!(needs_new_producer_id(ErrorCode::UnknownProducerId));
        assert_eq!(
            classify(ErrorCode::DuplicateSequenceNumber),
            ErrorClass::Success
        );
    }

    #[test]
    fn unrecognised_codes_become_fatal_unknown_server_errors() {
        let e = ClientError::broker(4242, "what");
        assert_eq!(e.code(), Some(ErrorCode::UnknownServerError));
        assert!(matches!(
            e,
            ClientError::Broker {
                retriable: false,
                ..
            }
        ));
        assert!(e.possibly_written());
        assert!(!e.retried());
    }

    #[test]
    fn errors_say_whether_data_may_be_in_the_log() {
        assert!(ClientError::Transport(tonic::Status::unavailable("x")).possibly_written());
        assert!(
            !ClientError::Transport(tonic::Status::resource_exhausted("too big"))
                .possibly_written()
        );
        assert!(!ClientError::broker(ErrorCode::MessageTooLarge as i32, "").possibly_written());
        let timeout = ClientError::DeliveryTimeout {
            attempts: 3,
            last_error: None,
            possibly_written: true,
        };
        assert!(timeout.possibly_written() && timeout.retried());
    }
}
