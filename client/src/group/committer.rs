//! A group consumer's offset commits, sent one at a time in the order they were asked
//! for (Kafka guarantees commit order): `commit_async` returns at once with a
//! [`CommitHandle`], `commit` waits for its own turn, so an older commit can never
//! finish after a newer one and overwrite it. One task owns the queue; each commit is
//! answered before the next one is sent.
//!
//! A commit goes out with the member's epoch at the time it is sent (the member may
//! have moved to a newer epoch for a new assignment meanwhile, and the coordinator
//! takes only the current one), unless the member lost its partitions and joined again
//! since it was asked for: its positions may then be older than what another member
//! committed in between, so it is not sent ([`epoch_to_send`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use idem_proto::ErrorCode;
use tokio::sync::{mpsc, oneshot};

use super::member::TopicPartition;
use crate::error::ClientError;

/// Offsets to commit: the next offset to read, per partition.
pub type Offsets = Vec<(TopicPartition, i64)>;

/// The membership a commit belongs to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamp {
    /// How many times the member lost its partitions and joined again.
    pub rejoins: u64,
    pub member_epoch: i32,
}

/// The epoch a commit asked for at `asked` is sent with when the member is at `now`;
/// `None` when the member lost its partitions in between (nothing may be committed for
/// them).
pub fn epoch_to_send(asked: Stamp, now: Stamp) -> Option<i32> {
    (asked.rejoins == now.rejoins).then_some(now.member_epoch)
}

/// The outcome of an asynchronous commit: await it, or drop it (the commit still goes
/// out in its turn; a failure nobody awaits is logged).
#[derive(Debug)]
pub struct CommitHandle {
    answer: oneshot::Receiver<Result<(), ClientError>>,
}

impl Future for CommitHandle {
    type Output = Result<(), ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // A dropped sender: the queue's task is gone (the runtime shut down).
        Pin::new(&mut self.answer)
            .poll(cx)
            .map(|answer| answer.unwrap_or(Err(ClientError::Closed)))
    }
}

enum Job {
    Commit {
        offsets: Offsets,
        asked: Stamp,
        done: oneshot::Sender<Result<(), ClientError>>,
    },
    /// Answered once every commit asked for before it is.
    Flush(oneshot::Sender<()>),
}

/// The queue of one member's commits.
#[derive(Debug)]
pub(crate) struct Committer {
    jobs: mpsc::UnboundedSender<Job>,
    stamp: Arc<Mutex<Stamp>>,
}

impl Committer {
    /// Starts the queue's task; `send(offsets, member_epoch)` commits one batch.
    pub(crate) fn spawn<F, Fut>(mut send: F) -> Committer
    where
        F: FnMut(Offsets, i32) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), ClientError>> + Send,
    {
        let (jobs, mut queue) = mpsc::unbounded_channel::<Job>();
        let stamp = Arc::new(Mutex::new(Stamp::default()));
        let now = stamp.clone();
        tokio::spawn(async move {
            while let Some(job) = queue.recv().await {
                let (offsets, asked, done) = match job {
                    Job::Flush(done) => {
                        let _ = done.send(());
                        continue;
                    }
                    Job::Commit {
                        offsets,
                        asked,
                        done,
                    } => (offsets, asked, done),
                };
                let current = now.lock().map(|s| *s).unwrap_or_default();
                let result = match epoch_to_send(asked, current) {
                    _ if offsets.is_empty() => Ok(()),
                    Some(epoch) => send(offsets, epoch).await,
                    None => Err(ClientError::broker(
                        ErrorCode::StaleMemberEpoch as i32,
                        "the member lost its partitions after this commit was asked for: \
                         nothing was committed",
                    )),
                };
                if let Err(Err(e)) = done.send(result) {
                    tracing::warn!(error = %e, "an asynchronous offset commit failed");
                }
            }
        });
        Committer { jobs, stamp }
    }

    /// The membership commits are asked for in from now on.
    pub(crate) fn set_stamp(&self, stamp: Stamp) {
        if let Ok(mut s) = self.stamp.lock() {
            *s = stamp;
        }
    }

    /// Queues a commit of `offsets` after every one asked for before.
    pub(crate) fn commit(&self, offsets: Offsets) -> CommitHandle {
        let (done, answer) = oneshot::channel();
        let asked = self.stamp.lock().map(|s| *s).unwrap_or_default();
        // If the task is gone the job (and its sender) is dropped: the handle answers
        // `Closed`.
        let _ = self.jobs.send(Job::Commit {
            offsets,
            asked,
            done,
        });
        CommitHandle { answer }
    }

    /// Waits until every commit asked for so far is answered.
    pub(crate) async fn flush(&self) {
        let (done, flushed) = oneshot::channel();
        if self.jobs.send(Job::Flush(done)).is_ok() {
            let _ = flushed.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(offset: i64) -> Offsets {
        vec![(("t".to_string(), 0), offset)]
    }

    #[test]
    fn given_a_newer_epoch_then_a_commit_goes_with_it_unless_the_member_rejoined() {
        let asked = Stamp {
            rejoins: 2,
            member_epoch: 5,
        };
        let moved = Stamp {
            rejoins: 2,
            member_epoch: 7,
        };
        assert_eq!(epoch_to_send(asked, moved), Some(7));
        let rejoined = Stamp {
            rejoins: 3,
            member_epoch: 7,
        };
        assert_eq!(epoch_to_send(asked, rejoined), None);
    }

    /// A fake coordinator: logs when each commit starts and ends; the first one waits
    /// for `gate`.
    fn fake(
        log: Arc<Mutex<Vec<String>>>,
        gate: oneshot::Receiver<()>,
    ) -> impl FnMut(Offsets, i32) -> Pin<Box<dyn Future<Output = Result<(), ClientError>> + Send>>
    {
        let mut gate = Some(gate);
        move |offsets, epoch| {
            let log = log.clone();
            let gate = gate.take();
            Box::pin(async move {
                let name = format!("{}@{epoch}", offsets[0].1);
                log.lock().expect("log").push(format!("start {name}"));
                if let Some(gate) = gate {
                    let _ = gate.await;
                }
                log.lock().expect("log").push(format!("end {name}"));
                Ok(())
            })
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn given_a_slow_commit_then_the_next_is_sent_only_after_it_is_answered() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (open, gate) = oneshot::channel();
        let committer = Committer::spawn(fake(log.clone(), gate));
        committer.set_stamp(Stamp {
            rejoins: 0,
            member_epoch: 1,
        });
        let first = committer.commit(offsets(10));
        let second = committer.commit(offsets(20));
        // Let the task run until the first commit blocks on the gate.
        while log.lock().expect("log").is_empty() {
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        open.send(()).expect("gate");
        second.await.expect("second");
        first.await.expect("first");
        assert_eq!(
            *log.lock().expect("log"),
            ["start 10@1", "end 10@1", "start 20@1", "end 20@1"]
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn given_the_member_lost_its_partitions_then_an_older_commit_is_not_sent() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (open, gate) = oneshot::channel();
        let committer = Committer::spawn(fake(log.clone(), gate));
        committer.set_stamp(Stamp {
            rejoins: 0,
            member_epoch: 3,
        });
        let blocking = committer.commit(offsets(10));
        let stale = committer.commit(offsets(20));
        while log.lock().expect("log").is_empty() {
            tokio::task::yield_now().await;
        }
        // Fenced and joined again before the queued commit's turn; then a new epoch.
        committer.set_stamp(Stamp {
            rejoins: 1,
            member_epoch: 4,
        });
        let fresh = committer.commit(offsets(30));
        open.send(()).expect("gate");
        blocking.await.expect("first");
        let refused = stale.await;
        assert!(
            matches!(
                refused,
                Err(ClientError::Broker {
                    code: ErrorCode::StaleMemberEpoch,
                    ..
                })
            ),
            "{refused:?}"
        );
        fresh.await.expect("fresh");
        committer.flush().await;
        assert_eq!(
            *log.lock().expect("log"),
            ["start 10@3", "end 10@3", "start 30@4", "end 30@4"]
        );
    }
}
