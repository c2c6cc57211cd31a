//! The wall clock every idem server reads for timestamps, timeouts and lease checks:
//! milliseconds since the Unix epoch, 0 for a clock set before 1970 rather than a panic.

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
