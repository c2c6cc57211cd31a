//! A byte-rate quota, decided purely (issue 29, "Limits and quotas"): how long to hold
//! back a client whose bytes over the recent window exceed its rate, as Kafka's client
//! quotas do. The rate is measured over `samples` consecutive intervals of
//! `sample_ms` (the oldest dropped as time moves on), and a client over its quota is
//! told to wait until the window's bytes fit the rate again:
//! `throttle = (bytes_in_window / rate) - window_elapsed`, never negative. A client
//! that waits each time before it sends again is held to the rate over any long run,
//! and one under the rate is never held at all.
//!
//! Meant for one per principal and kind (produce, fetch), the throttle being the time
//! the answer is delayed and the `throttle_time_ms` it carries; not wired into the
//! servers yet (docs/operations.md, "Limits").

use std::collections::VecDeque;

/// One client's bytes over the recent window, against its rate.
#[derive(Debug, Clone)]
pub struct ByteRate {
    bytes_per_second: u64,
    sample_ms: i64,
    samples: usize,
    /// (start of the sample's interval, bytes recorded in it), oldest first.
    window: VecDeque<(i64, u64)>,
}

impl ByteRate {
    /// A quota of `bytes_per_second` (at least 1) measured over `samples` (at least 1)
    /// intervals of `sample_ms` (at least 1).
    pub fn new(bytes_per_second: u64, sample_ms: i64, samples: usize) -> ByteRate {
        ByteRate {
            bytes_per_second: bytes_per_second.max(1),
            sample_ms: sample_ms.max(1),
            samples: samples.max(1),
            window: VecDeque::new(),
        }
    }

    /// Records `bytes` at `now_ms` and returns how many milliseconds the client must
    /// wait before its next request for the window to fit the rate again (0: it
    /// does).
    pub fn record(&mut self, now_ms: i64, bytes: u64) -> i64 {
        let current = now_ms - now_ms.rem_euclid(self.sample_ms);
        // Intervals that fell out of the window are forgotten.
        let oldest_kept = current - self.sample_ms * (self.samples as i64 - 1);
        while self
            .window
            .front()
            .is_some_and(|(start, _)| *start < oldest_kept)
        {
            self.window.pop_front();
        }
        match self.window.back_mut() {
            Some((start, sum)) if *start == current => *sum = sum.saturating_add(bytes),
            _ => self.window.push_back((current, bytes)),
        }
        let total: u64 = self.window.iter().map(|(_, b)| *b).sum();
        // The window spans from its oldest interval's start to now; a young window
        // counts as full, so a first burst is not judged over a few milliseconds.
        let full_ms = self.sample_ms * self.samples as i64;
        let first = self.window.front().map_or(current, |(start, _)| *start);
        let elapsed_ms = (now_ms - first).max(full_ms - self.sample_ms).max(1);
        let allowed_ms =
            i64::try_from(total.saturating_mul(1000) / self.bytes_per_second).unwrap_or(i64::MAX);
        (allowed_ms - elapsed_ms).max(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn given_a_client_under_its_rate_then_it_is_never_held() {
        let mut quota = ByteRate::new(1000, 1000, 10);
        for second in 0..60 {
            assert_eq!(quota.record(second * 1000, 900), 0, "second {second}");
        }
    }

    #[test]
    fn given_a_burst_over_the_rate_then_the_wait_brings_it_back_to_the_rate() {
        let mut quota = ByteRate::new(1000, 1000, 10);
        // 20 s worth of bytes at once: wait until 20 s have passed since the window began.
        let wait = quota.record(0, 20_000);
        assert_eq!(wait, 20_000 - 9_000);
    }

    proptest! {
        /// A client sending as fast as it is let (it waits each throttle out before the
        /// next request), with requests of any size up to a tenth of a second's quota,
        /// never moves more than 10% over its rate in a long run.
        #[test]
        fn a_client_that_obeys_the_throttle_stays_within_ten_percent_over_its_rate(
            rate in 1_000u64..10_000_000,
            sizes in prop::collection::vec(1u64..100_000, 1..40),
            think_ms in 0i64..20,
        ) {
            let mut quota = ByteRate::new(rate, 1000, 11);
            let mut now = 0i64;
            let mut sent = 0u64;
            let run_ms = 300_000i64;
            let mut i = 0usize;
            while now < run_ms {
                // Requests are at most a tenth of a second's quota, as the SDK's batches
                // are against any useful rate.
                let bytes = sizes[i % sizes.len()].min(rate / 10).max(1);
                i += 1;
                sent += bytes;
                let wait = quota.record(now, bytes);
                now += think_ms.max(1) + wait;
            }
            let observed = sent as f64 * 1000.0 / now as f64;
            prop_assert!(observed <= rate as f64 * 1.10, "observed {observed} over {rate}");
        }

        /// A client that could send far faster than its rate (requests of a tenth of a
        /// second's quota, little time between them) and waits each throttle out gets
        /// its rate, within 10%: the quota holds it back, it does not starve it.
        #[test]
        fn a_fast_client_that_obeys_the_throttle_gets_its_rate(
            rate in 1_000u64..10_000_000,
            think_ms in 0i64..20,
        ) {
            let mut quota = ByteRate::new(rate, 1000, 11);
            let bytes = rate / 10;
            let (mut now, mut sent) = (0i64, 0u64);
            while now < 300_000 {
                sent += bytes;
                now += think_ms.max(1) + quota.record(now, bytes);
            }
            let observed = sent as f64 * 1000.0 / now as f64;
            prop_assert!(
                (rate as f64 * 0.90..=rate as f64 * 1.10).contains(&observed),
                "observed {observed} against {rate}"
            );
        }

        /// The throttle never goes negative, and recording nothing more never makes a
        /// later wait longer.
        #[test]
        fn the_wait_is_never_negative_and_shrinks_as_time_passes(
            rate in 1u64..1_000_000,
            bytes in 0u64..10_000_000,
            later in 1i64..100_000,
        ) {
            let mut quota = ByteRate::new(rate, 1000, 11);
            let first = quota.record(0, bytes);
            let second = quota.record(later, 0);
            prop_assert!(first >= 0 && second >= 0);
            prop_assert!(second <= first.max(0));
        }
    }
}
