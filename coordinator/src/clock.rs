//! The coordinator's wall clock (ms since the Unix epoch): transaction start and update
//! times, timeouts, and the lease-lapse check.

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
