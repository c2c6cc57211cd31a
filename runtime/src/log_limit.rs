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
