//! A log line that repeats (a fetch loop failing every 100 ms, an etcd call failing
//! while etcd is down) must be seen, at WARN, but not drown the log: at most one line per
//! interval, saying how many were held back since the last. Pure: the caller passes the
//! time.

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct LogLimit {
    every: Duration,
    last: Option<Instant>,
    held_back: u64,
}

impl LogLimit {
    /// The interval every idem process uses for a failure that repeats in a retry
    /// loop: one WARN per 10 s.
    pub fn for_repeated_failures() -> LogLimit {
        LogLimit::every(Duration::from_secs(10))
    }

    pub fn every(every: Duration) -> LogLimit {
        LogLimit {
            every,
            last: None,
            held_back: 0,
        }
    }

    /// Whether to log now; `Some(n)` with the number of occurrences held back since the
    /// last line logged.
    pub fn check(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                self.held_back += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held_back))
            }
        }
    }
}

/// Logs at WARN when `$limit` (a [`LogLimit`]) allows, with a `held_back` field counting
/// the occurrences held back since the last WARN, else at DEBUG; the rest is what
/// `tracing::warn!` takes (fields, then the message).
#[macro_export]
macro_rules! warn_limited {
    ($limit:expr, $($rest:tt)+) => {
        match $limit.check(::std::time::Instant::now()) {
            Some(held_back) => ::tracing::warn!(held_back, $($rest)+),
            None => ::tracing::debug!($($rest)+),
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_occurrence_logs_then_one_per_interval_with_the_count_held_back() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut limit = LogLimit::every(Duration::from_secs(10));
        assert_eq!(limit.check(at(0)), Some(0));
        for ms in (100..10_000).step_by(100) {
            assert_eq!(limit.check(at(ms)), None);
        }
        assert_eq!(limit.check(at(10_000)), Some(99));
        assert_eq!(limit.check(at(10_050)), None);
        assert_eq!(limit.check(at(60_000)), Some(1));
    }
}
