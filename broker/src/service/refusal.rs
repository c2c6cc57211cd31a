//! One log line per refused partition, at a level that says whose fault it is: a
//! refusal the client can act on is routine (debug), an unknown server error is ours;
//! and one count in `idem_refusals_total{code}` (OUT_OF_ORDER_SEQUENCE_NUMBER,
//! INVALID_PRODUCER_EPOCH for a fenced producer, NOT_LEADER_OR_FOLLOWER, ...).

use idem_proto::ErrorCode;

use crate::error::BrokerError;

pub(super) fn log_refusal(topic: &str, partition: i32, error: &BrokerError) {
    metrics::counter!("idem_refusals_total", "code" => error.code().as_str_name()).increment(1);
    match error.code() {
        ErrorCode::UnknownServerError => {
            tracing::error!(topic, partition, error = %error, "request failed")
        }
        code => {
            tracing::debug!(topic, partition, code = code.as_str_name(), error = %error, "request refused")
        }
    }
}
