//! The Fetch long-poll: a read of some partitions is made again each time what its
//! reader may see grows, until it finds `min_bytes`, finds something the reader must
//! hear at once, or its wait is over. Each watch is marked seen before the read, so an
//! append landing between the read and the wait still wakes it.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::Partition;

/// Longest a Fetch may wait for data, whatever the client asks.
pub const MAX_FETCH_WAIT: Duration = Duration::from_secs(30);

/// Who reads a partition, which decides what growth can give them more to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// A follower reads up to the log end.
    Follower,
    /// A consumer reads up to the high watermark or, read_committed, the last stable
    /// offset (which a marker can move without any new record).
    Consumer { read_committed: bool },
}

/// What one read found, as far as the long-poll cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadSummary {
    /// Record bytes found.
    pub bytes: usize,
    /// The answer must go now even if short: a refusal, or a position moved past
    /// filtered batches that the reader must learn of before the wait is over.
    pub answer_now: bool,
}

impl Partition {
    /// The offset whose growth can give `reader` more to read.
    pub fn watch_readable_end(&self, reader: Reader) -> watch::Receiver<i64> {
        match reader {
            Reader::Follower => self.watch_log_end(),
            Reader::Consumer {
                read_committed: true,
            } => self.watch_last_stable_offset(),
            Reader::Consumer {
                read_committed: false,
            } => self.watch_high_watermark(),
        }
    }
}

/// Reads with `read` until it finds at least `min_bytes` (at least 1), must answer now,
/// or `wait` (capped at [`MAX_FETCH_WAIT`]) is over; waits between reads for any of
/// `watches` to move. With nothing to watch, the first read is the answer.
pub async fn long_poll<T>(
    mut watches: Vec<watch::Receiver<i64>>,
    wait: Duration,
    min_bytes: usize,
    mut read: impl FnMut() -> (T, ReadSummary),
) -> T {
    let deadline = Instant::now() + wait.min(MAX_FETCH_WAIT);
    let min_bytes = min_bytes.max(1);
    loop {
        for w in &mut watches {
            w.mark_unchanged();
        }
        let (answer, found) = read();
        if found.bytes >= min_bytes
            || found.answer_now
            || watches.is_empty()
            || Instant::now() >= deadline
        {
            return answer;
        }
        if tokio::time::timeout_at(deadline, any_changed(&mut watches))
            .await
            .is_err()
        {
            return read().0;
        }
    }
}

/// Resolves when any of the watched offsets changes (or its partition goes away).
async fn any_changed(watches: &mut [watch::Receiver<i64>]) {
    let changes: Vec<_> = watches.iter_mut().map(|w| Box::pin(w.changed())).collect();
    let _ = futures::future::select_all(changes).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(bytes: usize) -> ReadSummary {
        ReadSummary {
            bytes,
            answer_now: false,
        }
    }

    #[tokio::test]
    async fn given_enough_bytes_when_polling_then_first_read_answers() {
        let (_tx, rx) = watch::channel(0);
        let mut reads = 0;
        let answer = long_poll(vec![rx], Duration::from_secs(10), 5, || {
            reads += 1;
            (reads, summary(5))
        })
        .await;
        assert_eq!(answer, 1);
    }

    #[tokio::test]
    async fn given_answer_now_when_polling_then_short_read_answers() {
        let (_tx, rx) = watch::channel(0);
        let answer = long_poll(vec![rx], Duration::from_secs(10), 5, || {
            (
                "moved",
                ReadSummary {
                    bytes: 0,
                    answer_now: true,
                },
            )
        })
        .await;
        assert_eq!(answer, "moved");
    }

    #[tokio::test]
    async fn given_nothing_to_watch_when_polling_then_first_read_answers() {
        let answer = long_poll(Vec::new(), Duration::from_secs(10), 5, || (7, summary(0))).await;
        assert_eq!(answer, 7);
    }

    #[tokio::test]
    async fn given_short_read_when_watched_offset_moves_then_it_reads_again() {
        let (tx, rx) = watch::channel(0);
        let mut reads = 0;
        let poll = long_poll(vec![rx], Duration::from_secs(10), 5, move || {
            reads += 1;
            // The first read is short; the one after the wake-up finds enough.
            (reads, summary(if reads == 1 { 0 } else { 5 }))
        });
        let (answer, sent) = tokio::join!(poll, async move { tx.send(10) });
        assert!(sent.is_ok());
        assert_eq!(answer, 2);
    }

    #[tokio::test]
    async fn given_short_reads_when_wait_is_over_then_last_read_answers() {
        let (_tx, rx) = watch::channel(0);
        let mut reads = 0;
        let answer = long_poll(vec![rx], Duration::from_millis(20), 5, || {
            reads += 1;
            (reads, summary(1))
        })
        .await;
        // One read before the wait, one after it.
        assert_eq!(answer, 2);
    }
}
