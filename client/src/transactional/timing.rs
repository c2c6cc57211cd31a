//! Durations as the transactional producer's debug events carry them (`*_us` fields):
//! whole microseconds, so an event's fields stay plain integers.

use std::time::Duration;

/// A duration in whole microseconds, saturating (no debug event is worth a panic).
pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
