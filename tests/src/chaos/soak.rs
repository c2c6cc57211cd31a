//! A soak's settings, as `scripts/chaos.sh` passes them to the `#[ignore]`d soak tests:
//! `IDEM_CHAOS_DURATION` (seconds of faults, default 600) and `IDEM_CHAOS_SEED`
//! (default 42); a value that is not a number is refused.

use std::time::Duration;

/// How long the soak injects faults.
pub fn duration() -> Duration {
    Duration::from_secs(number("IDEM_CHAOS_DURATION", 600))
}

/// The seed of the soak's workload and nemesis.
pub fn seed() -> u64 {
    number("IDEM_CHAOS_SEED", 42)
}

fn number(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{var}={value:?} is not a number")),
        Err(_) => default,
    }
}
