//! Pipelined commits: `commit_and_begin` seals the open transaction, begins the next
//! one at once and commits the sealed one in the background. The caller keeps sending
//! while the sealed transaction's last batches are acknowledged and its EndTxn is
//! answered, instead of waiting for both as `commit` does: a producer that commits
//! every 100 ms spends those milliseconds producing.
//!
//! Invariants: the next transaction's records leave only once the commit before it is
//! decided (its registrations need the epoch EndTxn answers, and the coordinator
//! writes its BEGIN markers only after the commit's markers); a commit that fails takes
//! the transaction begun after it down too (abortable, or the producer fenced), so no
//! record sent after a failed commit can be committed; at most one commit runs in the
//! background (it holds the calls that talk to the coordinator until it is decided).

use tokio::sync::{oneshot, watch};

use super::errors::TxnErrorClass;
use super::state::EndPlan;
use super::{drain, EndTimes, OpenTxn, TransactionalProducer};
use crate::error::ClientError;
use crate::types::ProducerIdAndEpoch;

/// The outcome of a commit going on in the background (see
/// [`TransactionalProducer::commit_and_begin`]).
#[derive(Debug)]
pub struct PendingCommit {
    outcome: oneshot::Receiver<Result<(), ClientError>>,
}

impl PendingCommit {
    /// Resolves once the transaction is committed, or with why it was not: then it was
    /// aborted (or the producer is fenced, or the outcome could not be learned), and the
    /// transaction begun after it is abortable too.
    pub async fn committed(self) -> Result<(), ClientError> {
        self.outcome.await.unwrap_or(Err(ClientError::Closed))
    }
}

type IdentitySender = watch::Sender<Option<Result<ProducerIdAndEpoch, ClientError>>>;

impl TransactionalProducer {
    /// Commits the open transaction in the background and begins the next one: returns
    /// as soon as the open transaction is sealed (every record `send` accepted so far is
    /// in it, every later one in the next). The next transaction's records are held in
    /// the producer until the commit is decided, then leave under the epoch its EndTxn
    /// answered. The returned [`PendingCommit`] says how the commit ended; if it failed,
    /// the transaction begun here is abortable (abort it, then go on). Waits first for a
    /// commit still going on in the background. After an unanswered `commit`, this
    /// finishes that commit.
    pub async fn commit_and_begin(&self) -> Result<PendingCommit, ClientError> {
        let control = self.inner.control.clone().lock_owned().await;
        let (identity_tx, identity_rx) = watch::channel(None);
        let (plan, sealed) = {
            let mut shared = self.shared()?;
            let plan = shared.machine.start_commit()?;
            let sealed = std::mem::take(&mut shared.open);
            shared.machine.begin_after_commit()?;
            shared.open.identity = Some(identity_rx);
            (plan, sealed)
        };
        let (done, outcome) = oneshot::channel();
        let this = self.clone();
        tokio::spawn(async move {
            let result = this.commit_sealed(plan, sealed, identity_tx).await;
            // Only now may the next commit, abort or close talk to the coordinator.
            drop(control);
            let _ = done.send(result);
        });
        Ok(PendingCommit { outcome })
    }

    /// Drains and commits the sealed transaction; one that cannot commit is aborted
    /// (so its partitions are not held until its timeout). Opens the next
    /// transaction's identity gate with the outcome.
    async fn commit_sealed(
        &self,
        plan: EndPlan,
        sealed: OpenTxn,
        identity: IdentitySender,
    ) -> Result<(), ClientError> {
        let times = EndTimes::start();
        let failure = drain(sealed).await;
        let times = times.drained();
        let committed = match failure {
            Some(failure) => Err(failure.into_abortable()),
            None => self.end_txn(plan, true).await,
        };
        self.log_end("committed", plan.producer, &committed, times);
        let (next, failure) = match committed {
            Ok(next) => (next, None),
            Err(e) => self.after_failed_commit(plan, e).await,
        };
        let mut shared = self.shared()?;
        let result = shared.machine.previous_done(next, failure);
        let gate = match (&result, shared.machine.producer()) {
            (Ok(()), Some(producer)) => Ok(producer),
            (Err(e), _) => Err(e.clone()),
            (Ok(()), None) => Err(ClientError::Fatal("no producer id".into())),
        };
        let _ = identity.send(Some(gate));
        result
    }

    /// What a commit that failed with `error` leaves: the identity to move to and the
    /// error to report. An abortable failure is aborted here; an unanswered EndTxn
    /// leaves the outcome unknown, which no later call of this instance can settle
    /// (the next transaction's records would need its epoch): fatal.
    async fn after_failed_commit(
        &self,
        plan: EndPlan,
        error: ClientError,
    ) -> (Option<ProducerIdAndEpoch>, Option<ClientError>) {
        match error.txn_class() {
            TxnErrorClass::Fatal => (None, Some(error)),
            TxnErrorClass::Retriable => (
                None,
                Some(ClientError::Fatal(format!(
                    "the outcome of a commit is unknown (no answer from the coordinator): {error}"
                ))),
            ),
            TxnErrorClass::Abortable if !plan.needs_end_txn => (None, Some(error)),
            TxnErrorClass::Abortable => {
                // Nothing left to drain: the commit already waited for every record.
                let times = EndTimes::start();
                let aborted = self.end_txn(plan, false).await;
                self.log_end("aborted", plan.producer, &aborted, times);
                match aborted {
                    Ok(next) => (next, Some(error)),
                    // Nothing was open at the coordinator: nothing to abort.
                    Err(e) if e.code() == Some(idem_proto::ErrorCode::InvalidTxnState) => {
                        (None, Some(error))
                    }
                    Err(e) if e.txn_class() == TxnErrorClass::Fatal => (None, Some(e)),
                    Err(e) => (
                        None,
                        Some(ClientError::Fatal(format!(
                            "a transaction that could not commit ({error}) could not be aborted either: {e}"
                        ))),
                    ),
                }
            }
        }
    }
}
