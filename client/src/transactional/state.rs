//! The transactional producer's state machine, sans I/O. The shell asks it before every
//! call and reports every outcome; it answers what may happen next.
//!
//! ```text
//! Uninitialized -> Initializing -> Ready -> InTransaction -> Committing -> Ready
//!                                    ^            |      \--> Aborting ----^
//!                                    |            v              ^
//!                                    |       AbortableError -----/
//! any state -- fencing error --> FatalError (every later call fails with that error)
//! Committing -- commit_and_begin --> InTransaction (the next one; the commit goes on
//!               in the background and reports through `previous_done`)
//! ```
//! Invariants: a transaction's sends belong to its generation (a send that started in
//! one never joins the next); commit is refused once anything of the transaction
//! failed; after an unanswered EndTxn(commit) only commit may be called again (the
//! coordinator answers a repeated EndTxn like the first); the epoch only ever moves
//! forward, to what EndTxn answered.

use std::fmt;

use crate::error::ClientError;
use crate::transactional::errors::TxnErrorClass;
use crate::types::ProducerIdAndEpoch;

/// Where a transactional producer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// `init_transactions` has not succeeded yet.
    Uninitialized,
    /// `init_transactions` is under way.
    Initializing,
    /// No transaction is open; `begin` opens one.
    Ready,
    InTransaction,
    /// `commit` is under way, or its EndTxn went unanswered (call `commit` again).
    Committing,
    /// `abort` is under way, or its EndTxn went unanswered (call `abort` again).
    Aborting,
    /// Something in the transaction failed: only `abort` is allowed.
    AbortableError,
    /// The instance was fenced (or is unusable): every call fails.
    FatalError,
    /// `close` was called.
    Closed,
}

impl fmt::Display for TxnState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TxnState::Uninitialized => "uninitialized (call init_transactions)",
            TxnState::Initializing => "initializing",
            TxnState::Ready => "ready (no transaction open)",
            TxnState::InTransaction => "in a transaction",
            TxnState::Committing => "committing",
            TxnState::Aborting => "aborting",
            TxnState::AbortableError => "in an abortable error",
            TxnState::FatalError => "in a fatal error",
            TxnState::Closed => "closed",
        })
    }
}

/// How to end the open transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EndPlan {
    pub producer: ProducerIdAndEpoch,
    /// Some partition was (maybe) registered with the coordinator, so the coordinator
    /// may hold the transaction open: EndTxn is needed. Otherwise it ends locally.
    pub needs_end_txn: bool,
}

#[derive(Debug)]
pub(crate) struct TxnMachine {
    state: TxnState,
    /// The error of `AbortableError` and `FatalError`.
    error: Option<ClientError>,
    producer: Option<ProducerIdAndEpoch>,
    generation: u64,
    registered: bool,
}

impl Default for TxnMachine {
    fn default() -> Self {
        TxnMachine {
            state: TxnState::Uninitialized,
            error: None,
            producer: None,
            generation: 0,
            registered: false,
        }
    }
}

impl TxnMachine {
    pub(crate) fn state(&self) -> TxnState {
        self.state
    }

    pub(crate) fn producer(&self) -> Option<ProducerIdAndEpoch> {
        self.producer
    }

    /// Why `what` cannot happen now: the stored error in an error state, else
    /// [`ClientError::IllegalState`] (or `Closed`).
    fn refuse(&self, what: &str) -> ClientError {
        match (self.state, &self.error) {
            (TxnState::FatalError | TxnState::AbortableError, Some(e)) => e.clone(),
            (TxnState::Closed, _) => ClientError::Closed,
            (state, _) => {
                ClientError::IllegalState(format!("cannot {what}: the producer is {state}"))
            }
        }
    }

    fn identity(&self) -> Result<ProducerIdAndEpoch, ClientError> {
        self.producer.ok_or_else(|| {
            ClientError::IllegalState("no producer id: call init_transactions".into())
        })
    }

    pub(crate) fn start_init(&mut self) -> Result<(), ClientError> {
        match self.state {
            TxnState::Uninitialized => {
                self.state = TxnState::Initializing;
                Ok(())
            }
            _ => Err(self.refuse("initialise transactions")),
        }
    }

    pub(crate) fn init_done(
        &mut self,
        result: Result<ProducerIdAndEpoch, ClientError>,
    ) -> Result<(), ClientError> {
        if self.state != TxnState::Initializing {
            return Err(self.refuse("finish initialising"));
        }
        match result {
            Ok(producer) => {
                self.producer = Some(producer);
                self.state = TxnState::Ready;
                Ok(())
            }
            Err(e) if e.txn_class() == TxnErrorClass::Fatal => Err(self.fatal(e)),
            Err(e) => {
                // Nothing changed at the coordinator that a later init cannot redo.
                self.state = TxnState::Uninitialized;
                Err(e)
            }
        }
    }

    /// Opens a transaction; returns its generation.
    pub(crate) fn begin(&mut self) -> Result<u64, ClientError> {
        match self.state {
            TxnState::Ready => {
                self.generation += 1;
                self.registered = false;
                self.state = TxnState::InTransaction;
                Ok(self.generation)
            }
            _ => Err(self.refuse("begin a transaction")),
        }
    }

    /// `commit_and_begin`: the commit just started (`start_commit`) goes on in the
    /// background and the next transaction opens at once; returns its generation. Its
    /// identity is the one [`previous_done`](Self::previous_done) leaves.
    pub(crate) fn begin_after_commit(&mut self) -> Result<u64, ClientError> {
        match self.state {
            TxnState::Committing => {
                self.generation += 1;
                self.registered = false;
                self.state = TxnState::InTransaction;
                Ok(self.generation)
            }
            _ => Err(self.refuse("begin the next transaction")),
        }
    }

    /// The end of a commit that went on in the background: `next`, the identity the
    /// producer moves to (when the coordinator answered one); `failure`, why the
    /// committed transaction did not commit (`None`: it did). A transaction that did not
    /// commit takes the one begun after it down too: that one becomes abortable (or the
    /// producer fenced). Returns the failure as the caller should report it.
    pub(crate) fn previous_done(
        &mut self,
        next: Option<ProducerIdAndEpoch>,
        failure: Option<ClientError>,
    ) -> Result<(), ClientError> {
        if let Some(next) = next {
            self.producer = Some(next);
        }
        match failure {
            None => Ok(()),
            Some(e) => Err(self.fail(e)),
        }
    }

    /// A send may join the open transaction (of `generation`, if given): its generation
    /// and the identity its batches carry.
    pub(crate) fn check_send(
        &self,
        generation: Option<u64>,
    ) -> Result<(u64, ProducerIdAndEpoch), ClientError> {
        match self.state {
            TxnState::InTransaction if generation.is_none_or(|g| g == self.generation) => {
                Ok((self.generation, self.identity()?))
            }
            TxnState::InTransaction => Err(ClientError::IllegalState(
                "the transaction this record was sent in has ended".into(),
            )),
            _ => Err(self.refuse("send")),
        }
    }

    /// A partition is about to be registered: from now on the coordinator may hold the
    /// transaction open.
    pub(crate) fn will_register(
        &mut self,
        generation: u64,
    ) -> Result<ProducerIdAndEpoch, ClientError> {
        let (_, producer) = self.check_send(Some(generation))?;
        self.registered = true;
        Ok(producer)
    }

    /// Something of the open transaction failed (a send, a registration): the
    /// transaction can no longer commit, or the instance is fenced. Returns the error to
    /// report.
    pub(crate) fn fail(&mut self, error: ClientError) -> ClientError {
        let error = error.into_abortable();
        if error.txn_class() == TxnErrorClass::Fatal {
            return self.fatal(error);
        }
        if matches!(self.state, TxnState::InTransaction | TxnState::Committing) {
            self.state = TxnState::AbortableError;
            self.error = Some(error.clone());
        }
        error
    }

    fn fatal(&mut self, error: ClientError) -> ClientError {
        match (self.state, &self.error) {
            // The first fatal error is the one every later call reports.
            (TxnState::FatalError, Some(first)) => first.clone(),
            (TxnState::Closed, _) => error,
            _ => {
                self.state = TxnState::FatalError;
                self.error = Some(error.clone());
                error
            }
        }
    }

    pub(crate) fn start_commit(&mut self) -> Result<EndPlan, ClientError> {
        match self.state {
            TxnState::InTransaction | TxnState::Committing => {
                let producer = self.identity()?;
                self.state = TxnState::Committing;
                Ok(EndPlan {
                    producer,
                    needs_end_txn: self.registered,
                })
            }
            _ => Err(self.refuse("commit")),
        }
    }

    pub(crate) fn start_abort(&mut self) -> Result<EndPlan, ClientError> {
        match self.state {
            TxnState::InTransaction | TxnState::AbortableError | TxnState::Aborting => {
                let producer = self.identity()?;
                self.state = TxnState::Aborting;
                self.error = None;
                Ok(EndPlan {
                    producer,
                    needs_end_txn: self.registered,
                })
            }
            TxnState::Committing => Err(ClientError::IllegalState(
                "a commit is under way (its answer may have been lost): call commit again to finish it".into(),
            )),
            _ => Err(self.refuse("abort")),
        }
    }

    /// The end of `commit` or `abort`: `Ok(Some(next))` the coordinator ended it and
    /// `next` is the identity the producer moves to (the next epoch, or a fresh producer
    /// id once the epochs ran out); `Ok(None)` it ended locally (nothing was registered).
    pub(crate) fn end_done(
        &mut self,
        commit: bool,
        result: Result<Option<ProducerIdAndEpoch>, ClientError>,
    ) -> Result<(), ClientError> {
        let expected = if commit {
            TxnState::Committing
        } else {
            TxnState::Aborting
        };
        if self.state != expected {
            return Err(self.refuse("end the transaction"));
        }
        match result {
            Ok(next) => {
                if let Some(next) = next {
                    self.producer = Some(next);
                }
                self.ready();
                Ok(())
            }
            Err(e) if e.txn_class() == TxnErrorClass::Fatal => Err(self.fatal(e)),
            // The coordinator holds no open transaction of this epoch: nothing was
            // begun at any partition (BEGIN follows registration), so nothing can become
            // visible; the epoch did not move.
            Err(e) if !commit && e.code() == Some(idem_proto::ErrorCode::InvalidTxnState) => {
                self.ready();
                Ok(())
            }
            // Unanswered: stay, the caller calls the same method again.
            Err(e) if e.txn_class() == TxnErrorClass::Retriable || !commit => Err(e),
            Err(e) => {
                let e = e.into_abortable();
                self.state = TxnState::AbortableError;
                self.error = Some(e.clone());
                Err(e)
            }
        }
    }

    fn ready(&mut self) {
        self.state = TxnState::Ready;
        self.error = None;
        self.registered = false;
    }

    /// Closed for good; a fatal error stays the answer to every later call.
    pub(crate) fn close(&mut self) {
        if self.state != TxnState::FatalError {
            self.state = TxnState::Closed;
            self.error = None;
        }
    }
}

#[cfg(test)]
mod tests;
