//! The coordinator's wall clock (ms since the Unix epoch): transaction start and update
//! times, timeouts, and the lease-lapse check; and the microseconds its timing logs
//! report.

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Microseconds since `started`, for the debug timing logs.
pub fn micros_since(started: std::time::Instant) -> u64 {
    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)
}
