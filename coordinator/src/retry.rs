//! How the coordinator retries what must eventually succeed. Set-up steps (creating
//! the transaction log, bumping the solo epoch) pause 100 ms doubling to 2 s, jittered
//! so that coordinators restarted together do not come back in lock step. The work of
//! an owned log partition (appending, reading it back, writing markers) retries for as
//! long as the claim holds, and its pauses end early when the claim is lost
//! ([`UntilLost`]) so that the loss is seen at once. No deadline: giving up would leave
//! the coordinator owning nothing while it looks alive; the stop token or the loss of
//! the claim ends the wait instead.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use backon::{ConstantBuilder, ExponentialBuilder, Retryable, Sleeper};

use crate::error::CoordinatorError;
use crate::ownership::token::OwnershipToken;

/// Pauses of a step retried until it succeeds.
pub(crate) fn until_done() -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(2))
        .without_max_times()
        .with_jitter()
}

/// Pauses of a request to a partition leader retried while the claim holds: 50 ms
/// doubling to `max`, without end. Not jittered: these pauses keep the timings they had
/// before backon ran them, which the end-to-end tests' waits were sized against.
fn owned_work(max: Duration) -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(max)
        .without_max_times()
}

/// Pauses between two loads of a claimed partition that failed for a passing reason:
/// a fixed second, without end (each load already retried its requests inside).
pub(crate) fn reload() -> ConstantBuilder {
    ConstantBuilder::new()
        .with_delay(Duration::from_secs(1))
        .without_max_times()
}

/// A backon sleeper whose pause ends early once the claim of `0` is lost: the next
/// attempt then sees the loss and stops instead of waiting out the pause.
pub(crate) struct UntilLost(pub OwnershipToken);

impl Sleeper for UntilLost {
    type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

    fn sleep(&self, pause: Duration) -> Self::Sleep {
        let token = self.0.clone();
        Box::pin(async move {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = token.lost() => {}
            }
        })
    }
}

/// How one attempt of work on an owned partition failed.
#[derive(Debug)]
pub(crate) enum Failed {
    /// For a passing reason (said in the debug log): the attempt goes again after a
    /// pause.
    Again(String),
    /// For good (the claim was lost, the broker refused): no retry.
    Stop(CoordinatorError),
}

/// Runs `attempt` until it succeeds or fails with [`Failed::Stop`], pausing after each
/// [`Failed::Again`] (`on_retry` sees its reason first) 50 ms doubling to `max_pause`,
/// a pause cut short when `token`'s claim is lost. `attempt` checks the claim itself,
/// so a loss ends the retries at the attempt after it. Never gives up otherwise.
pub(crate) async fn while_owned<T, Fut>(
    token: &OwnershipToken,
    max_pause: Duration,
    mut attempt: impl FnMut() -> Fut,
    mut on_retry: impl FnMut(&str),
) -> Result<T, CoordinatorError>
where
    Fut: Future<Output = Result<T, Failed>>,
{
    loop {
        let outcome = (&mut attempt)
            .retry(owned_work(max_pause))
            .sleep(UntilLost(token.clone()))
            .when(|failed| matches!(failed, Failed::Again(_)))
            .notify(|failed, _| {
                if let Failed::Again(reason) = failed {
                    on_retry(reason);
                }
            })
            .await;
        match outcome {
            Ok(done) => return Ok(done),
            Err(Failed::Stop(e)) => return Err(e),
            // Only if the pauses ran out, which they do not: start over.
            Err(Failed::Again(_)) => {}
        }
    }
}
