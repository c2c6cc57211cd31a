//! How long to hold a principal's response so that its bytes stay under its byte-rate
//! quota: a token bucket per principal that may go into debt. Pure: the service asks
//! with the principal, its quota, the bytes of the request and the clock.
//!
//! The bucket holds at most one second of the quota (the burst a principal may send
//! at once after being idle) and refills at the quota. A request's bytes are taken
//! whole, even past empty; the debt is what the principal sent ahead of its quota, and
//! the answer is how long the quota takes to pay it back. The broker holds the
//! response that long (as Kafka did before KIP-219, and still tells the client the
//! time in `throttle_time_ms`), so a client that waits for its responses cannot run
//! ahead: over a run of T seconds it is granted at most `quota * (T + 1)` bytes plus
//! the requests it has in flight (bounded by the per-connection in-flight limit), as
//! long as no single request carries more than [`MAX_THROTTLE_MS`] of its quota.
//! Holding a response is a timer, not a thread: other principals are not slowed.

use std::collections::HashMap;

/// The longest a response is held. The debt itself is kept, so a principal that sent
/// a batch larger than this many milliseconds of its quota is held again on its next
/// request: the cap bounds one wait (under the RPC timeout, so a client does not
/// time out and resend what was appended), not the rate.
pub const MAX_THROTTLE_MS: u64 = 10_000;

/// Buckets kept before idle, full ones are forgotten (a full bucket is what a new
/// principal starts with, so forgetting it changes no answer).
const FORGET_ABOVE: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Bytes the principal may still send at once; negative: its debt.
    balance: f64,
    at_ms: i64,
}

/// One bucket per principal, for one kind of traffic (produce or fetch).
#[derive(Debug, Default)]
pub struct ByteRateLimiter {
    buckets: HashMap<String, Bucket>,
}

impl ByteRateLimiter {
    /// Takes `bytes` from `principal`'s bucket at `now_ms`, its quota being
    /// `bytes_per_second` (at least 1), and returns how many milliseconds to hold
    /// the response (0: within the quota).
    pub fn record(
        &mut self,
        principal: &str,
        bytes_per_second: u64,
        bytes: u64,
        now_ms: i64,
    ) -> u64 {
        let rate = bytes_per_second.max(1) as f64;
        let burst = rate;
        if self.buckets.len() > FORGET_ABOVE {
            self.forget_full(now_ms, rate);
        }
        let bucket = self.buckets.entry(principal.to_string()).or_insert(Bucket {
            balance: burst,
            at_ms: now_ms,
        });
        // A clock that stepped back refills nothing.
        let elapsed_ms = (now_ms - bucket.at_ms).max(0) as f64;
        bucket.balance = (bucket.balance + elapsed_ms * rate / 1000.0).min(burst);
        bucket.at_ms = bucket.at_ms.max(now_ms);
        bucket.balance -= bytes as f64;
        if bucket.balance >= 0.0 {
            return 0;
        }
        let pay_back_ms = (-bucket.balance * 1000.0 / rate).ceil();
        (pay_back_ms as u64).clamp(1, MAX_THROTTLE_MS)
    }

    /// Drops the buckets that have refilled (assuming `rate` for all: a bucket of a
    /// lower quota only refills sooner, so none in debt is forgotten early enough to
    /// matter by more than one burst).
    fn forget_full(&mut self, now_ms: i64, rate: f64) {
        self.buckets.retain(|_, bucket| {
            let refilled = bucket.balance + (now_ms - bucket.at_ms).max(0) as f64 * rate / 1000.0;
            refilled < rate
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn given_a_burst_within_one_second_of_quota_then_nothing_is_held() {
        let mut limiter = ByteRateLimiter::default();
        assert_eq!(limiter.record("User:a", 1000, 600, 0), 0);
        assert_eq!(limiter.record("User:a", 1000, 400, 0), 0);
        // Empty now: 500 bytes more are half a second of quota.
        assert_eq!(limiter.record("User:a", 1000, 500, 0), 500);
        // Another principal has its own bucket.
        assert_eq!(limiter.record("User:b", 1000, 1000, 0), 0);
        // 300 ms later, 300 bytes of the 500 of debt are paid back.
        assert_eq!(limiter.record("User:a", 1000, 100, 300), 300);
    }

    #[test]
    fn given_a_huge_batch_then_one_wait_is_capped_but_the_debt_is_kept() {
        let mut limiter = ByteRateLimiter::default();
        // 1000 bytes/s: 61 000 bytes is 60 s past the burst.
        assert_eq!(limiter.record("User:a", 1000, 61_000, 0), MAX_THROTTLE_MS);
        // After the capped wait the principal is still 50 s in debt.
        assert_eq!(limiter.record("User:a", 1000, 1, 10_000), MAX_THROTTLE_MS);
        assert_eq!(limiter.record("User:a", 1000, 0, 59_000), 1_001);
    }

    proptest! {
        /// A client that waits out every hold, sending requests of at most
        /// [`MAX_THROTTLE_MS`] of its quota each, is granted at most one burst plus
        /// its last request more than its quota allows over the time it ran; and a
        /// client that sends within its quota is never held.
        #[test]
        fn a_client_that_waits_is_held_to_its_quota(
            rate in 100u64..100_000,
            // Each request's size in hundredths of a second of quota: up to 10 s.
            hundredths in prop::collection::vec(0u64..1_000, 1..200),
            think_ms in 0i64..50,
        ) {
            let mut limiter = ByteRateLimiter::default();
            let mut now = 0i64;
            let mut sent = 0u64;
            let mut held_ms = 0u64;
            let sizes: Vec<u64> = hundredths.iter().map(|h| rate * h / 100).collect();
            for size in &sizes {
                let hold = limiter.record("User:a", rate, *size, now);
                prop_assert!(hold <= MAX_THROTTLE_MS);
                held_ms += hold;
                sent += size;
                now += hold as i64 + think_ms;
                let allowed = rate as f64 * (1.0 + now as f64 / 1000.0) + *size as f64;
                prop_assert!(sent as f64 <= allowed + 1.0, "{sent} bytes by {now} ms at {rate}/s");
            }
            let within = sizes.iter().all(|s| *s * 1000 <= rate * think_ms as u64);
            if within {
                prop_assert_eq!(held_ms, 0);
            }
        }
    }
}
