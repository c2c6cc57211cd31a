//! How the SDK retries what is safe to repeat (metadata, offsets, producer ids): an
//! exponential backoff from a floor, doubling up to a cap, with jitter so that clients
//! that lost the same broker at the same moment do not all come back in lock step, and
//! bounded by a number of attempts or a deadline. Which errors are worth a retry is the
//! caller's decision; this file only says how long to wait.

use std::time::Duration;

use backon::ExponentialBuilder;

use crate::error::{is_retriable_status, ClientError};

/// Attempts of a request that is safe to repeat (metadata, offsets): the first and
/// up to seven retries.
pub(crate) const READ_ATTEMPTS: usize = 8;
/// Longest pause between two attempts, before jitter.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// Pauses of a read: 20 ms, doubling to 1 s, for [`READ_ATTEMPTS`] attempts in all.
pub(crate) fn read_backoff() -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(20))
        .with_max_delay(MAX_PAUSE)
        .with_max_times(READ_ATTEMPTS - 1)
        .with_jitter()
}

/// Pauses of a request refused for a passing reason and retried until a deadline
/// (InitProducerId while the broker's producer-id store is unreachable): 50 ms,
/// doubling to 1 s, pausing `within` at most in all.
pub(crate) fn until_deadline_backoff(within: Duration) -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(MAX_PAUSE)
        .without_max_times()
        .with_total_delay(Some(within))
        .with_jitter()
}

/// Pauses between attempts of a transaction coordinator call: 50 ms, doubling to 1 s,
/// until the call's deadline (the caller stops before a pause that would pass it).
/// Not jittered: the caller's deadline check compares the next pause with the time
/// left, and jitter (up to twice the pause) would make a call give up a retry earlier
/// than its deadline allows.
pub(crate) fn coordinator_backoff() -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(MAX_PAUSE)
        .without_max_times()
}

/// A transport failure that may have lost the answer, not the request's fault: the
/// same request may go again (to this broker or another).
pub(crate) fn is_lost_answer(error: &ClientError) -> bool {
    matches!(error, ClientError::Transport(status) if is_retriable_status(status.code()))
}
