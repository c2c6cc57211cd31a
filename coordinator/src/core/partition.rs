//! One transaction log partition this coordinator owns and has loaded: the persisted
//! metadata of its transactional ids, one lock per id (requests for one id are decided
//! and carried out one at a time), and the writer that persists changes.
//!
//! Invariant: `txns` only ever holds what the log holds — an entry changes only after
//! its record was appended (acks=all).

use crate::txn::tally::TxnTally;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::core::end_signals::EndSignals;
use crate::core::successor::Successors;
use crate::error::CoordinatorError;
use crate::log::record::LogRecord;
use crate::log::writer::TxnLogWriter;
use crate::ownership::token::OwnershipToken;
use crate::txn::change::check_change;
use crate::txn::decide::TxnMetadata;
use crate::txn::state::TxnState;

pub struct LogPartition {
    pub index: i32,
    pub coordinator_epoch: i32,
    pub token: OwnershipToken,
    writer: TxnLogWriter,
    txns: Mutex<HashMap<String, TxnMetadata>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Ids a timer-driven abort is under way for, so ticks do not pile up.
    ticking: Mutex<HashSet<String>>,
    /// Woken whenever an id of this partition stops completing (its markers are
    /// written and that is persisted): requests that found it completing try again.
    pub completed: tokio::sync::Notify,
    /// Registrations parked until their id's previous transaction completes.
    pub successors: Successors,
    /// The end markers being written, for transactions begun behind them.
    pub end_signals: EndSignals,
}

impl LogPartition {
    pub fn new(
        index: i32,
        coordinator_epoch: i32,
        token: OwnershipToken,
        writer: TxnLogWriter,
        txns: HashMap<String, TxnMetadata>,
    ) -> Self {
        LogPartition {
            index,
            coordinator_epoch,
            token,
            writer,
            txns: Mutex::new(txns),
            locks: Mutex::new(HashMap::new()),
            ticking: Mutex::new(HashSet::new()),
            completed: tokio::sync::Notify::new(),
            successors: Successors::default(),
            end_signals: EndSignals::default(),
        }
    }

    /// The lock that serialises requests for `transactional_id`.
    pub fn lock_for(&self, transactional_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        match self.locks.lock() {
            Ok(mut locks) => locks
                .entry(transactional_id.to_string())
                .or_default()
                .clone(),
            // A poisoned map: a fresh lock still serialises nothing wrongly for
            // callers that hold this one; the partition is about to be dropped anyway.
            Err(_) => Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    pub fn get(&self, transactional_id: &str) -> Option<TxnMetadata> {
        self.txns.lock().ok()?.get(transactional_id).cloned()
    }

    /// Counts this slice's transactions into `tally`, in place (no copy).
    pub fn tally_into(&self, tally: &mut TxnTally, now_ms: i64) {
        if let Ok(txns) = self.txns.lock() {
            for txn in txns.values() {
                tally.add(txn, now_ms);
            }
        }
    }

    pub fn snapshot(&self) -> Vec<TxnMetadata> {
        self.txns
            .lock()
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Appends `meta` to the log, then makes it the current state; a Dead id is
    /// forgotten (the next InitProducerId of that id starts afresh).
    pub async fn persist(&self, meta: TxnMetadata) -> Result<(), CoordinatorError> {
        self.persist_all(vec![meta]).await
    }

    /// Appends `metas` to the log in one batch (all or none of them), then makes each
    /// the current state of its id, in order. A change that breaks the log's rules
    /// (`check_change`) is refused before anything is appended.
    pub async fn persist_all(&self, metas: Vec<TxnMetadata>) -> Result<(), CoordinatorError> {
        self.check_changes(&metas)?;
        let records = metas.iter().cloned().map(LogRecord::Txn).collect();
        // How long the append took, for docs/benchmarks.md; the clock is read only when
        // this debug log is on.
        let started = tracing::enabled!(tracing::Level::DEBUG).then(std::time::Instant::now);
        self.writer.append_all(records).await?;
        if let Some(started) = started {
            let us = crate::clock::micros_since(started);
            tracing::debug!(
                partition = self.index,
                records = metas.len(),
                us,
                "txn log appended"
            );
        }
        let mut completed = false;
        if let Ok(mut txns) = self.txns.lock() {
            for meta in metas {
                completed |= !meta.is_completing()
                    && txns
                        .get(&meta.transactional_id)
                        .is_some_and(TxnMetadata::is_completing);
                if meta.state == TxnState::Dead {
                    txns.remove(&meta.transactional_id);
                } else {
                    txns.insert(meta.transactional_id.clone(), meta);
                }
            }
        }
        if completed {
            self.completed.notify_waiters();
        }
        Ok(())
    }

    /// Checks each of `metas` against the id's current state, or against the one before
    /// it in `metas` for the same id. Every change of an id is made under its lock, so
    /// the state checked against is still the current one when the append lands.
    fn check_changes(&self, metas: &[TxnMetadata]) -> Result<(), CoordinatorError> {
        // A poisoned map cannot be trusted: give the partition up, to be loaded afresh.
        let txns = self.txns.lock().map_err(|_| {
            CoordinatorError::ownership_lost(self.index, "transaction state poisoned")
        })?;
        for (i, next) in metas.iter().enumerate() {
            let id = &next.transactional_id;
            let before = metas[..i]
                .iter()
                .rfind(|m| m.transactional_id == *id)
                .or_else(|| txns.get(id));
            check_change(before, next).map_err(|reason| CoordinatorError::IllegalChange {
                transactional_id: id.clone(),
                reason,
            })?;
        }
        Ok(())
    }

    /// Marks a timer-driven check of `id` as running; false when one already is.
    pub fn start_tick(&self, id: &str) -> bool {
        self.ticking
            .lock()
            .is_ok_and(|mut t| t.insert(id.to_string()))
    }

    pub fn end_tick(&self, id: &str) {
        if let Ok(mut t) = self.ticking.lock() {
            t.remove(id);
        }
    }
}
