//! When to refresh the metadata cache, sans I/O: at most one refresh in flight (every
//! caller that wants one while it runs joins it), and refreshes start at least
//! `min_interval` apart, so a burst of errors (every partition of a dead leader failing
//! at once, a consumer polling a broker that refuses connections) costs one metadata
//! request, not one per error.

use std::time::{Duration, Instant};

/// Least time between the starts of two refreshes.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_millis(50);

/// What a caller that wants fresh metadata does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshPlan {
    /// A refresh is already under way (or scheduled): wait for that one.
    Join,
    /// Start a refresh, sending its request at `at` (now, or once `min_interval` has
    /// passed since the previous one started). Report its end with
    /// [`RefreshGate::finished`].
    Start { at: Instant },
}

/// Coalesces and rate-limits metadata refreshes.
#[derive(Debug, Clone)]
pub struct RefreshGate {
    min_interval: Duration,
    last_start: Option<Instant>,
    in_flight: bool,
}

impl Default for RefreshGate {
    fn default() -> Self {
        RefreshGate::new(MIN_REFRESH_INTERVAL)
    }
}

impl RefreshGate {
    pub fn new(min_interval: Duration) -> Self {
        RefreshGate {
            min_interval,
            last_start: None,
            in_flight: false,
        }
    }

    /// A caller wants a refresh at `now`.
    pub fn plan(&mut self, now: Instant) -> RefreshPlan {
        if self.in_flight {
            return RefreshPlan::Join;
        }
        let at = match self.last_start {
            Some(last) => now.max(last + self.min_interval),
            None => now,
        };
        self.in_flight = true;
        self.last_start = Some(at);
        RefreshPlan::Start { at }
    }

    /// The refresh started by the last [`RefreshPlan::Start`] ended (well or not).
    pub fn finished(&mut self) {
        self.in_flight = false;
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_millis(50);

    #[test]
    fn given_no_refresh_yet_then_the_first_starts_at_once() {
        let mut gate = RefreshGate::new(MIN);
        let now = Instant::now();
        assert_eq!(gate.plan(now), RefreshPlan::Start { at: now });
        assert!(gate.in_flight());
    }

    #[test]
    fn given_a_refresh_in_flight_then_every_other_caller_joins_it() {
        let mut gate = RefreshGate::new(MIN);
        let now = Instant::now();
        assert!(matches!(gate.plan(now), RefreshPlan::Start { .. }));
        for i in 1..10 {
            assert_eq!(
                gate.plan(now + Duration::from_secs(i)),
                RefreshPlan::Join,
                "however long it takes"
            );
        }
        gate.finished();
        assert!(!gate.in_flight());
        assert!(matches!(
            gate.plan(now + Duration::from_secs(10)),
            RefreshPlan::Start { .. }
        ));
    }

    #[test]
    fn given_a_refresh_just_finished_then_the_next_waits_for_the_minimum_interval() {
        let mut gate = RefreshGate::new(MIN);
        let t0 = Instant::now();
        assert_eq!(gate.plan(t0), RefreshPlan::Start { at: t0 });
        gate.finished();
        let t1 = t0 + Duration::from_millis(10);
        assert_eq!(gate.plan(t1), RefreshPlan::Start { at: t0 + MIN });
        // Callers arriving before that scheduled start join it.
        assert_eq!(gate.plan(t1 + Duration::from_millis(5)), RefreshPlan::Join);
        gate.finished();
        // The interval counts from the scheduled start, not from the request.
        let t2 = t0 + MIN + Duration::from_millis(20);
        assert_eq!(gate.plan(t2), RefreshPlan::Start { at: t0 + 2 * MIN });
        gate.finished();
        let late = t0 + Duration::from_secs(5);
        assert_eq!(gate.plan(late), RefreshPlan::Start { at: late });
    }
}
