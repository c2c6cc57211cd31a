//! Where the end markers of each outcome being completed stand, so that a transaction
//! begun behind that outcome (`Effect::BeginBehindEnd`) sends the BEGINs a leader refused
//! (the marker had not reached it yet) again the moment the markers are written,
//! without waiting for the outcome's completion to be persisted.
//!
//! An outcome is known by its producer id and the epoch its markers carry: one id and
//! epoch end at most one transaction. The entry is registered under the id's lock, when
//! the markers are handed to a background task, so a request that takes the lock next
//! finds it; it is removed once the completion is persisted.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

use super::markers::MarkerJob;

/// How far a marker job got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Writing,
    Written,
    Failed,
}

#[derive(Debug, Default)]
pub struct EndSignals {
    jobs: Mutex<HashMap<(i64, i16), watch::Sender<Progress>>>,
}

impl EndSignals {
    /// `job`'s markers are about to be written.
    pub fn start(&self, job: &MarkerJob) {
        if let Ok(mut jobs) = self.jobs.lock() {
            let (sender, _) = watch::channel(Progress::Writing);
            jobs.insert((job.producer_id, job.producer_epoch), sender);
        }
    }

    /// `job`'s markers are written (or failed); its waiters go on.
    pub fn report(&self, job: &MarkerJob, progress: Progress) {
        if let Ok(jobs) = self.jobs.lock() {
            if let Some(sender) = jobs.get(&(job.producer_id, job.producer_epoch)) {
                sender.send_replace(progress);
            }
        }
    }

    /// `job`'s outcome is completed: nobody waits for it any more.
    pub fn remove(&self, job: &MarkerJob) {
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.remove(&(job.producer_id, job.producer_epoch));
        }
    }

    /// A view of the markers of `producer_id` at `producer_epoch`; `None` when no task
    /// of this coordinator is writing them.
    pub fn watch(
        &self,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Option<watch::Receiver<Progress>> {
        let jobs = self.jobs.lock().ok()?;
        jobs.get(&(producer_id, producer_epoch))
            .map(watch::Sender::subscribe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_proto::v1::ControlType;

    fn job(producer_epoch: i16) -> MarkerJob {
        MarkerJob {
            transactional_id: "t".into(),
            log_partition: 0,
            producer_id: 7,
            producer_epoch,
            control: ControlType::Commit,
            coordinator_epoch: 1,
            partitions: Default::default(),
            at_transaction_epoch: false,
        }
    }

    #[tokio::test]
    async fn a_waiter_sees_the_report_of_its_own_job_only() {
        let signals = EndSignals::default();
        signals.start(&job(1));
        let mut first = signals.watch(7, 1).expect("registered");
        assert!(signals.watch(7, 2).is_none(), "another epoch");
        assert!(signals.watch(8, 1).is_none(), "another producer");
        assert_eq!(*first.borrow(), Progress::Writing);
        signals.report(&job(2), Progress::Written);
        assert_eq!(*first.borrow(), Progress::Writing, "not its job");
        signals.report(&job(1), Progress::Written);
        first.changed().await.expect("changed");
        assert_eq!(*first.borrow(), Progress::Written);
        signals.remove(&job(1));
        assert!(signals.watch(7, 1).is_none(), "removed");
        assert!(first.changed().await.is_err(), "the sender is gone");
    }
}
