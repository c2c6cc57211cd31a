//! The coordinator's wall clock (ms since the Unix epoch): transaction start and update
//! times, timeouts, and the lease-lapse check; and the microseconds its timing logs
//! report.

pub use idem_runtime::clock::now_ms;

/// Microseconds since `started`, for the debug timing logs.
pub fn micros_since(started: std::time::Instant) -> u64 {
    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)
}
