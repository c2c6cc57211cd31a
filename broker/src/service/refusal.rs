//! One log line per refused partition, at a level that says whose fault it is: a
//! refusal the client can act on is routine (debug), an unknown server error is ours.

use idem_proto::ErrorCode;

use crate::error::BrokerError;

pub(super) fn log_refusal(topic: &str, partition: i32, error: &BrokerError) {
    match error.code() {
        ErrorCode::UnknownServerError => {
            tracing::error!(topic, partition, error = %error, "request failed")
        }
        code => {
            tracing::debug!(topic, partition, code = code.as_str_name(), error = %error, "request refused")
        }
    }
}
