//! Wall-clock time as the protocol carries it: milliseconds since the Unix epoch (record
//! timestamps, transaction ages). Written once here for the SDK and the CLI.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch; 0 if the clock reads before 1970 (a record
/// timestamp is informative, never worth failing a send for).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
