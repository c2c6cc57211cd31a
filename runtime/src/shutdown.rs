//! One shutdown tree per process: a root [`CancellationToken`] cancelled by SIGINT or
//! SIGTERM (or by whoever embeds the servers), a child token per server, and
//! [`Duties`] that track every background task of a server so a stop waits for each
//! to return instead of aborting it half-way. No task outlives the server that spawned
//! it, and none is stopped in the middle of an iteration it has not offered to end.

use std::future::Future;

pub use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Resolves on SIGINT (Ctrl-C) or SIGTERM. A signal that cannot be listened for is
/// logged and never fires: the process then stops on the other, or on SIGKILL.
pub async fn signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

/// The root of a process's shutdown tree: cancelled on SIGINT or SIGTERM.
pub fn on_signal() -> CancellationToken {
    let root = CancellationToken::new();
    let cancel = root.clone();
    tokio::spawn(async move {
        signal().await;
        tracing::info!("stop signal received");
        cancel.cancel();
    });
    root
}

/// The background duties of one server (expiry timers, watches, keep-alives), stopped
/// together: [`Duties::stop`] cancels their token and waits until every one returned.
#[derive(Debug, Clone)]
pub struct Duties {
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Duties {
    /// Duties stopped by [`Duties::stop`] or when `parent` is cancelled, whichever
    /// comes first.
    pub fn under(parent: &CancellationToken) -> Duties {
        Duties {
            token: parent.child_token(),
            tracker: TaskTracker::new(),
        }
    }

    /// The token this server's duties watch; give a child of it to a duty that must
    /// end an iteration cleanly rather than be dropped at its next await.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Runs `duty` until it returns or the duties stop; on a stop the duty is dropped at
    /// its next await point, which is right for duties whose every await is a wait
    /// (a timer, a watch, a channel). A duty with work that must not be cut short
    /// selects on [`Duties::token`] itself and returns between pieces of work.
    pub fn spawn<F>(&self, name: &'static str, duty: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let token = self.token.clone();
        self.tracker.spawn(async move {
            if token.run_until_cancelled(duty).await.is_some() {
                tracing::debug!(duty = name, "duty ended by itself");
            }
        });
    }

    /// Runs the duty `start` makes from a child of [`Duties::token`]: the duty itself
    /// watches the token and returns between pieces of work (a flush, a write) that
    /// must not be cut short.
    pub fn spawn_cooperative<F>(&self, start: impl FnOnce(CancellationToken) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(start(self.token.child_token()));
    }

    /// [`Duties::spawn_cooperative`], returning the duty's own token: cancelling it
    /// stops this duty alone (a fetcher whose leader is followed no more), and
    /// [`Duties::stop`] still waits for it.
    pub fn spawn_stoppable<F>(
        &self,
        start: impl FnOnce(CancellationToken) -> F,
    ) -> CancellationToken
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let own = self.token.child_token();
        self.tracker.spawn(start(own.clone()));
        own
    }

    /// Cancels every duty and waits until all returned.
    pub async fn stop(&self) {
        self.token.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn given_running_duties_when_stopped_then_stop_returns_after_each_ended() {
        let root = CancellationToken::new();
        let duties = Duties::under(&root);
        let ended = Arc::new(AtomicBool::new(false));
        let flag = ended.clone();
        duties.spawn_cooperative(|stop| async move {
            stop.cancelled().await;
            // Work that must finish before the stop completes.
            tokio::task::yield_now().await;
            flag.store(true, Ordering::SeqCst);
        });
        duties.spawn("waiting forever", std::future::pending());
        duties.stop().await;
        assert!(ended.load(Ordering::SeqCst));
        assert!(
            !root.is_cancelled(),
            "a server's stop leaves the process root alone"
        );
    }

    #[tokio::test]
    async fn given_one_stoppable_duty_stopped_then_it_alone_ends_and_stop_waits_for_the_rest() {
        let duties = Duties::under(&CancellationToken::new());
        let one = duties.spawn_stoppable(|stop| async move { stop.cancelled().await });
        let other = duties.spawn_stoppable(|stop| async move { stop.cancelled().await });
        one.cancel();
        assert!(!other.is_cancelled());
        duties.stop().await;
        assert!(other.is_cancelled());
    }

    #[tokio::test]
    async fn given_the_root_cancelled_then_every_server_duty_sees_it() {
        let root = CancellationToken::new();
        let duties = Duties::under(&root);
        root.cancel();
        assert!(duties.token().is_cancelled());
        duties.stop().await;
    }
}
