//! A live progress bar on stderr: how far a phase is (records counted, or time spent)
//! and its current rate. Hidden for `--json` and when stderr is not a terminal, so
//! nothing but the report reaches a pipe.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::shutdown::CancellationToken;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;

use super::args::Amount;

const TICK: Duration = Duration::from_millis(200);

/// A bar fed by a shared counter; the caller's tasks only bump the counter.
pub struct Progress {
    bar: ProgressBar,
    count: Arc<AtomicU64>,
    /// Cancelled to end the ticker, which then returns between two ticks.
    stop: CancellationToken,
    ticker: JoinHandle<()>,
}

/// Whether bars may be drawn at all.
pub fn visible(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

impl Progress {
    /// Starts a bar labelled `label` whose end is `amount` (records counted, or time).
    pub fn start(label: &str, amount: Amount, visible: bool) -> Progress {
        let len = match amount {
            Amount::Records(n) => n,
            Amount::Duration(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        };
        let bar = ProgressBar::with_draw_target(
            Some(len),
            if visible {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            },
        );
        let style = ProgressStyle::with_template("{prefix:>26} [{bar:30}] {msg}")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(label.to_string());
        let count = Arc::new(AtomicU64::new(0));
        let stop = CancellationToken::new();
        let ticker = tokio::spawn(tick(bar.clone(), count.clone(), amount, stop.clone()));
        Progress {
            bar,
            count,
            stop,
            ticker,
        }
    }

    /// The counter to bump, one per record done.
    pub fn counter(&self) -> Arc<AtomicU64> {
        self.count.clone()
    }

    /// Stops the ticker, waits for it to end, and erases the bar (which the ticker
    /// can no longer redraw).
    pub async fn finish(self) {
        self.stop.cancel();
        if let Err(e) = self.ticker.await {
            tracing::debug!(error = %e, "the progress ticker failed");
        }
        self.bar.finish_and_clear();
    }
}

async fn tick(bar: ProgressBar, count: Arc<AtomicU64>, amount: Amount, stop: CancellationToken) {
    let started = Instant::now();
    let mut interval = tokio::time::interval(TICK);
    let (mut last_count, mut last_at) = (0u64, started);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            () = stop.cancelled() => return,
        }
        let now = Instant::now();
        let done = count.load(Ordering::Relaxed);
        let rate = (done.saturating_sub(last_count)) as f64
            / now.duration_since(last_at).as_secs_f64().max(1e-3);
        (last_count, last_at) = (done, now);
        match amount {
            Amount::Records(_) => bar.set_position(done),
            Amount::Duration(_) => {
                bar.set_position(u64::try_from(started.elapsed().as_millis()).unwrap_or(0))
            }
        }
        bar.set_message(format!("{done} records, {rate:.0}/s"));
    }
}
