//! Awaiting an observable state with a deadline, in the style of openraft's `Wait`: a
//! test names what it awaits and how long it may take, a probe asks the cluster (admin
//! API, Metadata, a log) whether the state is reached, and the wait fails naming the
//! state and the last thing the probe saw. The poll interval is only how often to ask;
//! nothing here stands in for "long enough".

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long a test waits for a state a healthy cluster reaches in a few seconds: generous,
/// because CI machines are slow and shared.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// How often a probe asks again: short enough not to slow a test down, long enough not
/// to load the 2-core machines the suite runs on.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// What a probe saw: the awaited state with its value, or what there is instead (kept
/// for the failure message).
#[derive(Debug)]
pub enum Seen<T> {
    Reached(T),
    Not(String),
}

impl<T> From<Option<T>> for Seen<T> {
    fn from(value: Option<T>) -> Seen<T> {
        match value {
            Some(value) => Seen::Reached(value),
            None => Seen::Not("not yet".into()),
        }
    }
}

/// Calls `probe` until it reports the awaited state, and returns the state's value and
/// how long it took; panics naming `what` and the last observation once `within` has
/// passed since the call.
pub async fn wait_until<T, S, F, Fut>(within: Duration, what: &str, probe: F) -> (T, Duration)
where
    S: Into<Seen<T>>,
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
{
    match try_wait_until(within, probe).await {
        Ok(reached) => reached,
        Err((waited, last)) => panic!("{what}: not reached within {waited:?}; last seen: {last}"),
    }
}

/// [`wait_until`] returning the time waited and the last observation instead of
/// panicking.
pub async fn try_wait_until<T, S, F, Fut>(
    within: Duration,
    mut probe: F,
) -> Result<(T, Duration), (Duration, String)>
where
    S: Into<Seen<T>>,
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
{
    let started = Instant::now();
    loop {
        let last = match probe().await.into() {
            Seen::Reached(value) => return Ok((value, started.elapsed())),
            Seen::Not(last) => last,
        };
        if started.elapsed() >= within {
            return Err((started.elapsed(), last));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// A probe's answer from a value and whether it is the awaited one, keeping the value's
/// debug form when it is not.
pub fn seen_if<T: Debug>(value: T, reached: bool) -> Seen<T> {
    if reached {
        Seen::Reached(value)
    } else {
        Seen::Not(format!("{value:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_value_of_the_first_probe_that_reaches_the_state_is_returned() {
        let mut calls = 0;
        let (value, _) = wait_until(Duration::from_secs(5), "the third call", || {
            calls += 1;
            let n = calls;
            async move { (n >= 3).then_some(n) }
        })
        .await;
        assert_eq!(value, 3);
    }

    #[tokio::test]
    async fn a_state_never_reached_fails_with_the_last_observation() {
        let mut calls = 0;
        let failed = try_wait_until(Duration::from_millis(120), || {
            calls += 1;
            let n = calls;
            async move { Seen::<()>::Not(format!("call {n}")) }
        })
        .await;
        let (waited, last) = failed.expect_err("never reached");
        assert!(waited >= Duration::from_millis(120));
        assert!(last.starts_with("call "), "{last}");
    }
}
