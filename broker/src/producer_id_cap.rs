//! A cap on new producer ids per principal per minute (KIP-936): a client that asks
//! for a fresh producer id for every message (a misconfigured producer restarted in a
//! loop, or an attacker) fills every partition leader's producer state until the
//! broker runs out of memory. Each broker counts the ids it handed out to each
//! principal over the last minute and refuses more than the cap with
//! `THROTTLING_QUOTA_EXCEEDED`, saying when the next will be granted. Pure: the
//! service asks with the request's principal and the clock.
//!
//! Only fresh ids count: an epoch bump (KIP-360) reuses its producer's id and state.
//! A refusal records nothing, so a client that keeps retrying is granted again as
//! soon as its oldest id in the window is a minute old.

use std::collections::{HashMap, VecDeque};

/// The window the cap counts over.
pub const WINDOW_MS: i64 = 60_000;

/// Ids granted per principal over the last [`WINDOW_MS`].
#[derive(Debug)]
pub struct ProducerIdCap {
    per_minute: usize,
    granted: HashMap<String, VecDeque<i64>>,
}

impl ProducerIdCap {
    /// At most `per_minute` (at least 1) fresh ids per principal per minute.
    pub fn new(per_minute: usize) -> ProducerIdCap {
        ProducerIdCap {
            per_minute: per_minute.max(1),
            granted: HashMap::new(),
        }
    }

    /// Grants `principal` a fresh id at `now_ms` (and counts it), or says in how many
    /// milliseconds one will be granted.
    pub fn admit(&mut self, principal: &str, now_ms: i64) -> Result<(), i64> {
        let times = self.granted.entry(principal.to_string()).or_default();
        while times.front().is_some_and(|t| *t <= now_ms - WINDOW_MS) {
            times.pop_front();
        }
        if times.len() >= self.per_minute {
            let oldest = times.front().copied().unwrap_or(now_ms);
            return Err((oldest + WINDOW_MS - now_ms).max(1));
        }
        times.push_back(now_ms);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn given_the_cap_reached_then_the_refusal_says_when_the_oldest_ages_out() {
        let mut cap = ProducerIdCap::new(2);
        assert_eq!(cap.admit("User:a", 1_000), Ok(()));
        assert_eq!(cap.admit("User:a", 5_000), Ok(()));
        assert_eq!(cap.admit("User:a", 6_000), Err(55_000));
        // Another principal has a cap of its own.
        assert_eq!(cap.admit("User:b", 6_000), Ok(()));
        // A minute after the first grant, one more.
        assert_eq!(cap.admit("User:a", 61_000), Ok(()));
        assert_eq!(cap.admit("User:a", 61_001), Err(3_999));
    }

    proptest! {
        /// Whatever the requests, no principal is granted more than the cap within any
        /// minute, a refusal changes nothing, and a principal's grants do not depend on
        /// anyone else's requests.
        #[test]
        fn no_minute_holds_more_grants_than_the_cap(
            cap in 1usize..6,
            requests in prop::collection::vec((0..3u8, 0i64..5_000), 1..200),
        ) {
            let mut shared = ProducerIdCap::new(cap);
            let mut alone: HashMap<u8, ProducerIdCap> = HashMap::new();
            let mut now = 0i64;
            let mut grants: HashMap<u8, Vec<i64>> = HashMap::new();
            for (who, step) in requests {
                now += step;
                let principal = format!("User:{who}");
                let verdict = shared.admit(&principal, now);
                let own = alone.entry(who).or_insert_with(|| ProducerIdCap::new(cap));
                prop_assert_eq!(verdict, own.admit(&principal, now));
                match verdict {
                    Ok(()) => grants.entry(who).or_default().push(now),
                    Err(wait) => prop_assert!((1..=WINDOW_MS).contains(&wait)),
                }
            }
            for times in grants.values() {
                for (i, t) in times.iter().enumerate() {
                    let in_window = times[i..].iter().take_while(|u| **u < t + WINDOW_MS).count();
                    prop_assert!(in_window <= cap, "{in_window} grants within a minute of {t}");
                }
            }
        }
    }
}
