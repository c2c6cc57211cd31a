//! How the coordinator retries a set-up step that must eventually succeed (creating
//! the transaction log, bumping the solo epoch): 100 ms doubling to 2 s, jittered so
//! that coordinators restarted together do not come back in lock step, for as long as
//! the duty runs. No deadline: giving up would leave the coordinator owning nothing
//! while it looks alive; its stop token ends the wait instead.

use std::time::Duration;

use backon::ExponentialBuilder;

/// Pauses of a step retried until it succeeds.
pub(crate) fn until_done() -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(2))
        .without_max_times()
        .with_jitter()
}
