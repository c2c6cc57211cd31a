//! Latency samples in an HdrHistogram: microsecond resolution, 3 significant digits,
//! up to ten minutes (longer samples are clamped rather than dropped, so a stall still
//! shows as the maximum).

use std::time::Duration;

use hdrhistogram::Histogram;

const MAX_MICROS: u64 = 600_000_000;

#[derive(Debug, Clone)]
pub struct Latencies {
    histogram: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies::new()
    }
}

/// The figures a report prints, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Latencies {
    pub fn new() -> Self {
        let histogram =
            Histogram::new_with_bounds(1, MAX_MICROS, 3).expect("constant bounds are valid");
        Latencies { histogram }
    }

    pub fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.histogram
            .saturating_record(micros.clamp(1, MAX_MICROS));
    }

    pub fn merge(&mut self, other: &Latencies) {
        // Same bounds on both sides; saturate rather than fail on the impossible.
        for value in other.histogram.iter_recorded() {
            self.histogram
                .saturating_record_n(value.value_iterated_to(), value.count_at_value());
        }
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    pub fn percentiles(&self) -> Percentiles {
        if self.histogram.is_empty() {
            return Percentiles::default();
        }
        let ms = |micros: u64| micros as f64 / 1000.0;
        Percentiles {
            p50_ms: ms(self.histogram.value_at_quantile(0.50)),
            p99_ms: ms(self.histogram.value_at_quantile(0.99)),
            p999_ms: ms(self.histogram.value_at_quantile(0.999)),
            max_ms: ms(self.histogram.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_follow_the_samples_and_merge() {
        let mut a = Latencies::new();
        for ms in 1..=100 {
            a.record(Duration::from_millis(ms));
        }
        let mut b = Latencies::new();
        b.record(Duration::from_secs(3600));
        a.merge(&b);
        assert_eq!(a.count(), 101);
        let p = a.percentiles();
        assert!((p.p50_ms - 51.0).abs() < 0.1, "{p:?}");
        assert!(p.p50_ms <= p.p99_ms && p.p99_ms <= p.p999_ms && p.p999_ms <= p.max_ms);
        assert!((p.max_ms - 600_000.0).abs() < 600.0, "clamped: {p:?}");
        assert_eq!(Latencies::new().percentiles(), Percentiles::default());
    }
}
