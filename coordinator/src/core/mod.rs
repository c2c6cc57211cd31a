//! The coordinator core: the transaction log partitions this coordinator owns, and the
//! shell around the pure decider. For a request on a transactional id it finds the
//! owning partition (NOT_COORDINATOR when not ours, COORDINATOR_LOAD_IN_PROGRESS while
//! loading), takes the id's lock, decides, and carries the effects out in order:
//! Persist = append to the log and wait; BeginPartitions = BEGIN markers and wait;
//! BeginBehindEnd = the same, each partition's behind the previous outcome's marker;
//! WriteMarkers = markers in the background after the reply, then `MarkersWritten` back
//! into the decider and its Complete* persisted; Reply.
//!
//! Invariants: nothing is acted on before it is persisted; a claim whose writes or
//! markers a broker fenced is dropped at once (and released so it is claimed anew
//! under a higher epoch); a loaded partition serves only after every prepared outcome
//! found in it reached all its partitions and was completed.

pub mod end_signals;
pub mod marker_fate;
pub mod markers;
pub mod parking;
pub mod partition;
mod refusal;
pub mod successor;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::future::join_all;
use idem_client::{ClientError, Connection};
use idem_proto::txn::{txn_log_partition, TXN_LOG_TOPIC};
use idem_proto::v1::ControlType;
use idem_proto::ErrorCode;

use crate::claim_slots::{claim_writer, give_back, load_while_owned, remove_claim, ClaimSlot};
use crate::clock::now_ms;
use crate::error::CoordinatorError;
use crate::log::loader;
use crate::ownership::token::OwnershipToken;
use crate::ownership::{Claim, OwnerInfo, Ownership};
use crate::producer_ids::SharedProducerIds;
use crate::txn::decide::{
    decide, is_expired, Context, Decision, Effect, Reply, Request, TopicPartition, TxnError,
    TxnMetadata,
};
use crate::txn::state::TxnState;
use crate::txn::tally::TxnTally;

use self::end_signals::Progress;
use self::markers::{write_markers, write_markers_once, MarkerJob};
use self::parking::{park_behind_holder, park_until_completed, Turn};
use self::partition::LogPartition;
use self::successor::Parked;
use crate::topic_catalog::TopicCatalog;

pub use self::refusal::{txn_error_code, Refusal};

/// How long a request waits for its id's previous transaction to complete before it is
/// answered CONCURRENT_TRANSACTIONS (and the producer retries after a backoff).
const COMPLETION_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy)]
pub struct CoreSettings {
    pub coordinator_id: i32,
    pub max_transaction_timeout_ms: i32,
    pub transactional_id_expiration_ms: i64,
}

enum Slot {
    Loading {
        coordinator_epoch: i32,
        token: OwnershipToken,
    },
    Ready(Arc<LogPartition>),
}

impl ClaimSlot for Slot {
    fn coordinator_epoch(&self) -> i32 {
        match self {
            Slot::Loading {
                coordinator_epoch, ..
            } => *coordinator_epoch,
            Slot::Ready(part) => part.coordinator_epoch,
        }
    }
}

pub struct Coordinator {
    settings: CoreSettings,
    conn: Connection,
    /// Whether a topic a marker must reach still exists.
    catalog: Arc<dyn TopicCatalog>,
    pids: SharedProducerIds,
    ownership: Arc<dyn Ownership>,
    /// `__transaction_state`'s partition count; 0 until known.
    partition_count: AtomicI32,
    slots: RwLock<HashMap<i32, Slot>>,
}

impl Coordinator {
    pub fn new(
        settings: CoreSettings,
        conn: Connection,
        catalog: Arc<dyn TopicCatalog>,
        pids: SharedProducerIds,
        ownership: Arc<dyn Ownership>,
    ) -> Arc<Self> {
        Arc::new(Coordinator {
            settings,
            conn,
            catalog,
            pids,
            ownership,
            partition_count: AtomicI32::new(0),
            slots: RwLock::new(HashMap::new()),
        })
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    pub fn coordinator_id(&self) -> i32 {
        self.settings.coordinator_id
    }

    pub fn set_partition_count(&self, partitions: i32) {
        self.partition_count.store(partitions, Ordering::SeqCst);
    }

    pub fn partition_count(&self) -> Option<i32> {
        Some(self.partition_count.load(Ordering::SeqCst)).filter(|n| *n > 0)
    }

    /// The transaction log partition of `transactional_id`.
    pub fn log_partition_of(&self, transactional_id: &str) -> Result<i32, Refusal> {
        let partitions = self.partition_count().ok_or_else(|| {
            Refusal::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("{TXN_LOG_TOPIC} is not known yet"),
            )
        })?;
        Ok(txn_log_partition(transactional_id, partitions))
    }

    // ---- ownership ------------------------------------------------------------------

    /// A new claim: the partition is loading until its state is read back and its
    /// prepared outcomes are finished.
    pub fn on_claim(self: &Arc<Self>, claim: Claim) {
        if let Ok(mut slots) = self.slots.write() {
            slots.insert(
                claim.partition,
                Slot::Loading {
                    coordinator_epoch: claim.coordinator_epoch,
                    token: claim.token.clone(),
                },
            );
        }
        tokio::spawn(self.clone().load(claim));
    }

    fn remove_slot(&self, partition: i32, coordinator_epoch: i32) {
        if remove_claim(&self.slots, partition, coordinator_epoch) {
            tracing::warn!(
                partition,
                coordinator_epoch,
                "stopped serving a transaction log partition"
            );
        }
    }

    /// Stops serving a claim a broker fenced (or that failed) and gives it back.
    fn lose(&self, partition: i32, coordinator_epoch: i32, token: &OwnershipToken) {
        self.remove_slot(partition, coordinator_epoch);
        give_back(&self.ownership, partition, coordinator_epoch, token);
    }

    async fn load(self: Arc<Self>, claim: Claim) {
        let started = std::time::Instant::now();
        let Some(writer) = claim_writer(&self.conn, TXN_LOG_TOPIC, &claim) else {
            self.lose(claim.partition, claim.coordinator_epoch, &claim.token);
            return;
        };
        let loaded = load_while_owned(&claim, TXN_LOG_TOPIC, || {
            loader::load(
                &self.conn,
                &writer,
                claim.partition,
                claim.coordinator_epoch,
                &claim.token,
            )
        })
        .await;
        let Claim {
            partition,
            coordinator_epoch,
            token,
            ..
        } = claim;
        let txns = match loaded {
            Ok(txns) => txns,
            Err(CoordinatorError::OwnershipLost { reason, .. }) => {
                tracing::warn!(partition, coordinator_epoch, %reason, "claim lost while loading");
                self.lose(partition, coordinator_epoch, &token);
                return;
            }
            Err(e @ CoordinatorError::CorruptLog { .. }) => {
                // Serving without this record could forget an open transaction.
                tracing::error!(partition, coordinator_epoch, error = %e, "the transaction log partition cannot be loaded; it stays unavailable");
                return;
            }
            Err(e) => {
                // Only if the pauses ran out, which they do not (see retry::reload).
                tracing::error!(partition, coordinator_epoch, error = %e, "loading stopped retrying; the partition stays unavailable");
                return;
            }
        };
        let part = Arc::new(LogPartition::new(
            partition,
            coordinator_epoch,
            token.clone(),
            writer,
            txns,
        ));
        // The design's order: every outcome prepared by an earlier owner reaches its
        // partitions and is completed before this owner answers anything.
        let prepared: Vec<TxnMetadata> = part
            .snapshot()
            .into_iter()
            .filter(|m| {
                matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
                    || m.pending_end.is_some()
            })
            .collect();
        if !prepared.is_empty() {
            tracing::info!(
                partition,
                count = prepared.len(),
                "finishing prepared transactions found in the log"
            );
        }
        let finished = join_all(prepared.iter().map(|meta| {
            let job = end_markers(&part, meta);
            let part = part.clone();
            let this = self.clone();
            let id = meta.transactional_id.clone();
            async move { this.finish(&part, &id, &job).await }
        }))
        .await;
        for result in finished {
            if let Err(e) = result {
                tracing::warn!(partition, error = %e, "finishing a prepared transaction failed");
                self.lose(partition, coordinator_epoch, &token);
                return;
            }
        }
        let installed = self.slots.write().is_ok_and(|mut slots| {
            let current = matches!(
                slots.get(&partition),
                Some(Slot::Loading { coordinator_epoch: e, .. }) if *e == coordinator_epoch
            );
            if current && !token.is_lost() {
                slots.insert(partition, Slot::Ready(part.clone()));
            }
            current
        });
        if !installed {
            return;
        }
        metrics::histogram!("idem_txn_log_slice_load_seconds")
            .record(started.elapsed().as_secs_f64());
        tracing::info!(
            partition,
            coordinator_epoch,
            "serving the transaction log partition"
        );
        token.lost().await;
        self.remove_slot(partition, coordinator_epoch);
    }

    // ---- requests -------------------------------------------------------------------

    /// The loaded partition owning `transactional_id`, or why there is none.
    fn serving(&self, transactional_id: &str) -> Result<Arc<LogPartition>, Refusal> {
        let partition = self.log_partition_of(transactional_id)?;
        if !self.ownership.holds_lease() {
            return Err(Refusal::new(
                ErrorCode::NotCoordinator,
                "this coordinator's lease may have lapsed",
            ));
        }
        let slots = self
            .slots
            .read()
            .map_err(|_| Refusal::new(ErrorCode::UnknownServerError, "state poisoned"))?;
        match slots.get(&partition) {
            None => Err(Refusal::new(
                ErrorCode::NotCoordinator,
                format!("{TXN_LOG_TOPIC} partition {partition} is not owned here"),
            )),
            Some(Slot::Loading { .. }) => Err(Refusal::new(
                ErrorCode::CoordinatorLoadInProgress,
                format!("{TXN_LOG_TOPIC} partition {partition} is loading"),
            )),
            Some(Slot::Ready(part)) if part.token.is_lost() => Err(Refusal::new(
                ErrorCode::NotCoordinator,
                format!("{TXN_LOG_TOPIC} partition {partition} is no longer owned here"),
            )),
            Some(Slot::Ready(part)) => Ok(part.clone()),
        }
    }

    /// Decides and carries out a producer's request; the answer comes once everything
    /// before the decider's reply is done.
    pub async fn handle(
        self: &Arc<Self>,
        transactional_id: &str,
        request: Request,
    ) -> Result<Reply, Refusal> {
        if transactional_id.is_empty() {
            return Err(Refusal::new(
                ErrorCode::InvalidRequest,
                "the transactional id is empty",
            ));
        }
        let part = self.serving(transactional_id)?;
        if let Request::AddPartitions { partitions, .. } = &request {
            self.check_partitions(partitions).await?;
        }
        // A request that finds the previous transaction still completing (its markers
        // being written) waits for it here rather than sending the producer away to
        // retry after a backoff: a producer's next transaction starts right after its
        // commit, while the commit's markers are still on their way.
        let deadline = tokio::time::Instant::now() + COMPLETION_WAIT;
        loop {
            let completed = part.completed.notified();
            tokio::pin!(completed);
            completed.as_mut().enable();
            let reply = self
                .run_request(&part, transactional_id, request.clone())
                .await?;
            match reply {
                Some(Reply::Error(TxnError::ConcurrentTransactions))
                    if tokio::time::Instant::now() < deadline =>
                {
                    if matches!(request, Request::AddPartitions { .. }) {
                        if let Some(answer) =
                            park_until_completed(&part, transactional_id, &request, deadline).await
                        {
                            return answer;
                        }
                        continue;
                    }
                    // Past the deadline the loop decides once more, then answers.
                    let _ = tokio::time::timeout_at(deadline, completed).await;
                }
                reply => {
                    return reply.ok_or_else(|| {
                        Refusal::new(ErrorCode::UnknownServerError, "no answer was decided")
                    })
                }
            }
        }
    }

    /// Every partition exists (so its transaction can always be ended) and none is the
    /// transaction log itself.
    async fn check_partitions(&self, partitions: &[TopicPartition]) -> Result<(), Refusal> {
        let topics: BTreeSet<&str> = partitions.iter().map(|tp| tp.topic.as_str()).collect();
        for topic in topics {
            if topic == TXN_LOG_TOPIC {
                return Err(Refusal::new(
                    ErrorCode::InvalidRequest,
                    format!("{TXN_LOG_TOPIC} cannot take part in a transaction"),
                ));
            }
            let count = match self.conn.partition_count(topic).await {
                Ok(count) => count,
                Err(ClientError::UnknownTopic { .. }) => {
                    return Err(Refusal::new(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("unknown topic {topic}"),
                    ))
                }
                Err(e) => {
                    return Err(Refusal::new(
                        ErrorCode::CoordinatorNotAvailable,
                        format!("cannot read the metadata of {topic}: {e}"),
                    ))
                }
            };
            if let Some(bad) = partitions
                .iter()
                .find(|tp| tp.topic == topic && !(0..count).contains(&tp.partition))
            {
                return Err(Refusal::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("{topic} has no partition {}", bad.partition),
                ));
            }
        }
        Ok(())
    }

    async fn run_request(
        self: &Arc<Self>,
        part: &Arc<LogPartition>,
        transactional_id: &str,
        request: Request,
    ) -> Result<Option<Reply>, Refusal> {
        let lock = part.lock_for(transactional_id);
        let guard = match lock.clone().try_lock_owned() {
            Ok(guard) => guard,
            // Busy: a registration joins the ones waiting for the holder, which carries
            // them out as one before it lets go.
            Err(_) if matches!(request, Request::AddPartitions { .. }) => {
                match park_behind_holder(part, transactional_id, &request, &lock).await {
                    Turn::Answered(answer) => return answer.map(Some),
                    Turn::Mine(guard) => guard,
                }
            }
            Err(_) => lock.lock_owned().await,
        };
        if part.token.is_lost() || !self.ownership.holds_lease() {
            return Err(Refusal::new(
                ErrorCode::NotCoordinator,
                "ownership lost while waiting",
            ));
        }
        let current = part.get(transactional_id);
        let effects = self
            .decide_with_fresh_id(transactional_id, current.as_ref(), &request)
            .await?;
        let outcome = self.carry_out(part, transactional_id, effects, None).await;
        if outcome.is_ok() && part.successors.any(transactional_id) {
            // The registrations that parked meanwhile are carried out under the lock
            // after this answer, which does not wait for theirs.
            let this = self.clone();
            let part = part.clone();
            let id = transactional_id.to_string();
            tokio::spawn(async move {
                this.carry_out_parked(&part, &id).await;
                drop(guard);
            });
        } else {
            drop(guard);
        }
        let (reply, end) = outcome?;
        if let Some(job) = end {
            self.spawn_finish(part, transactional_id, job);
        }
        Ok(reply)
    }

    /// Carries out the registrations that parked while the caller held the id's lock,
    /// each round's as one decision; the caller still holds the lock. Registrations
    /// waiting for a prepared outcome's completion are left to it (a transaction begun
    /// behind an outcome takes its registrations at once).
    async fn carry_out_parked(self: &Arc<Self>, part: &Arc<LogPartition>, transactional_id: &str) {
        loop {
            let current = part.get(transactional_id);
            if current.as_ref().is_some_and(|m| m.state.is_completing()) {
                return;
            }
            let Some(parked) = part.successors.take(transactional_id) else {
                return;
            };
            let outcome = match self
                .decide_with_fresh_id(transactional_id, current.as_ref(), &parked.request)
                .await
            {
                Ok(effects) => self.carry_out(part, transactional_id, effects, None).await,
                Err(refusal) => Err(refusal),
            };
            let failed = outcome.is_err();
            parked.answer(self.answer_of(part, transactional_id, outcome));
            if failed {
                return;
            }
        }
    }

    /// The answer to a parked request whose effects were carried out; its end markers
    /// (if any) are written in the background.
    fn answer_of(
        self: &Arc<Self>,
        part: &Arc<LogPartition>,
        transactional_id: &str,
        outcome: Result<(Option<Reply>, Option<MarkerJob>), Refusal>,
    ) -> Result<Reply, Refusal> {
        let answer = outcome.and_then(|(reply, end)| {
            if let Some(job) = end {
                self.spawn_finish(part, transactional_id, job);
            }
            reply
                .ok_or_else(|| Refusal::new(ErrorCode::UnknownServerError, "no answer was decided"))
        });
        if let Err(refusal) = &answer {
            tracing::warn!(partition = part.index, transactional_id, code = ?refusal.code, message = %refusal.message, "a parked registration failed");
        }
        answer
    }

    /// Writes a prepared outcome's end markers and completes it, in the background.
    fn spawn_finish(
        self: &Arc<Self>,
        part: &Arc<LogPartition>,
        transactional_id: &str,
        job: MarkerJob,
    ) {
        let this = self.clone();
        let part = part.clone();
        let id = transactional_id.to_string();
        tokio::spawn(async move {
            if let Err(e) = this.finish(&part, &id, &job).await {
                tracing::warn!(partition = part.index, transactional_id = %id, error = %e, "completing a transaction failed");
                this.refuse(&part, e);
            }
        });
    }

    async fn decide_with_fresh_id(
        &self,
        transactional_id: &str,
        current: Option<&TxnMetadata>,
        request: &Request,
    ) -> Result<Vec<Effect>, Refusal> {
        let mut ctx = Context {
            now_ms: now_ms(),
            max_timeout_ms: self.settings.max_transaction_timeout_ms,
            fresh_producer_id: None,
        };
        if let Decision::Act(effects) = decide(transactional_id, current, request, ctx) {
            return Ok(effects);
        }
        let producer_id = self.pids.next_producer_id().await.map_err(|e| {
            Refusal::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("no producer id: {e}"),
            )
        })?;
        ctx.fresh_producer_id = Some(producer_id);
        match decide(transactional_id, current, request, ctx) {
            Decision::Act(effects) => Ok(effects),
            Decision::NeedsFreshProducerId => Err(Refusal::new(
                ErrorCode::UnknownServerError,
                "the decider asked twice for a producer id",
            )),
        }
    }

    /// Carries out the effects in order; the end markers (if any) are handed back to be
    /// written after the id's lock is released. `completing`, the Complete record of
    /// the id's previous transaction, is persisted first: in the same append as the
    /// effects' first record when they start with one.
    async fn carry_out(
        &self,
        part: &LogPartition,
        transactional_id: &str,
        effects: Vec<Effect>,
        mut completing: Option<TxnMetadata>,
    ) -> Result<(Option<Reply>, Option<MarkerJob>), Refusal> {
        let mut reply = None;
        let mut end = None;
        for effect in effects {
            let effect = match (completing.take(), effect) {
                (Some(done), Effect::Persist(meta)) => {
                    part.persist_all(vec![done, meta])
                        .await
                        .map_err(|e| self.refuse(part, e))?;
                    continue;
                }
                (Some(done), other) => {
                    part.persist(done).await.map_err(|e| self.refuse(part, e))?;
                    other
                }
                (None, other) => other,
            };
            match effect {
                Effect::Persist(meta) => {
                    part.persist(meta).await.map_err(|e| self.refuse(part, e))?;
                }
                Effect::BeginPartitions {
                    producer_id,
                    producer_epoch,
                    partitions,
                } => {
                    let job = begin_job(
                        part,
                        transactional_id,
                        producer_id,
                        producer_epoch,
                        partitions,
                    );
                    write_markers(&self.conn, &*self.catalog, &job, &part.token)
                        .await
                        .map_err(|e| self.refuse(part, e))?;
                }
                Effect::WriteMarkers {
                    producer_id,
                    producer_epoch,
                    commit,
                    partitions,
                    at_transaction_epoch,
                } => {
                    let job = end_job(
                        part,
                        transactional_id,
                        producer_id,
                        producer_epoch,
                        commit,
                        partitions,
                        at_transaction_epoch,
                    );
                    // Registered under the id's lock: whoever takes it next finds it.
                    part.end_signals.start(&job);
                    end = Some(job);
                }
                Effect::BeginBehindEnd {
                    producer_id,
                    producer_epoch,
                    partitions,
                    end,
                } => {
                    let begin = begin_job(
                        part,
                        transactional_id,
                        producer_id,
                        producer_epoch,
                        partitions,
                    );
                    let end = end_job(
                        part,
                        transactional_id,
                        producer_id,
                        producer_epoch,
                        end.commit,
                        end.partitions,
                        false,
                    );
                    self.begin_behind_end(part, begin, &end).await?;
                }
                Effect::Reply(r) => reply = Some(r),
            }
        }
        if let Some(done) = completing {
            part.persist(done).await.map_err(|e| self.refuse(part, e))?;
        }
        Ok((reply, end))
    }

    /// BEGINs a transaction begun behind the outcome whose markers are `end`. Each
    /// BEGIN is sent at once: a leader that `end`'s marker has reached appends the BEGIN
    /// behind it (the new transaction's data, acknowledged only past the high
    /// watermark, then takes both along to every replica), one it has not reached yet
    /// refuses it (the transaction the marker closes is still open there). Only the
    /// partitions not begun that way wait for `end`'s markers and are begun again, as
    /// every BEGIN did before; at replication factor 3 the others no longer wait for
    /// the markers' replication and answer.
    async fn begin_behind_end(
        &self,
        part: &LogPartition,
        begin: MarkerJob,
        end: &MarkerJob,
    ) -> Result<(), Refusal> {
        // A leader that does not answer is not waited for longer than the markers are.
        let left = tokio::time::timeout(
            COMPLETION_WAIT,
            write_markers_once(&self.conn, &*self.catalog, &begin),
        )
        .await
        .unwrap_or_else(|_| begin.partitions.clone());
        if left.is_empty() {
            return Ok(());
        }
        tracing::debug!(
            producer_id = begin.producer_id,
            epoch = begin.producer_epoch,
            partitions = left.len(),
            "BEGIN behind the end markers"
        );
        self.await_end_markers(part, end).await?;
        let rest = MarkerJob {
            partitions: left,
            ..begin
        };
        write_markers(&self.conn, &*self.catalog, &rest, &part.token)
            .await
            .map_err(|e| self.refuse(part, e))
    }

    /// Waits for the markers of the outcome a new transaction began behind, or writes
    /// them when no task of this coordinator is (a broker answers markers already in
    /// its log without appending them again).
    async fn await_end_markers(&self, part: &LogPartition, job: &MarkerJob) -> Result<(), Refusal> {
        let Some(mut progress) = part.end_signals.watch(job.producer_id, job.producer_epoch) else {
            return write_markers(&self.conn, &*self.catalog, job, &part.token)
                .await
                .map_err(|e| self.refuse(part, e));
        };
        let waited = tokio::time::timeout(
            COMPLETION_WAIT,
            progress.wait_for(|p| *p != Progress::Writing),
        )
        .await
        .map(|seen| seen.map(|p| *p));
        match waited {
            Ok(Ok(Progress::Written)) => Ok(()),
            Ok(_) => Err(Refusal::new(
                ErrorCode::CoordinatorNotAvailable,
                "writing the markers of the previous transaction failed",
            )),
            // Retriable: the new transaction is persisted, and the retry sends its BEGINs
            // once the markers are written.
            Err(_) => Err(Refusal::new(
                ErrorCode::ConcurrentTransactions,
                "the markers of the previous transaction are still being written",
            )),
        }
    }

    /// Writes the end markers of a prepared outcome, then completes it.
    async fn finish(
        self: &Arc<Self>,
        part: &Arc<LogPartition>,
        transactional_id: &str,
        job: &MarkerJob,
    ) -> Result<(), CoordinatorError> {
        let written = write_markers(&self.conn, &*self.catalog, job, &part.token).await;
        let progress = match written {
            Ok(()) => Progress::Written,
            Err(_) => Progress::Failed,
        };
        part.end_signals.report(job, progress);
        let completed = match written {
            Ok(()) => self.complete(part, transactional_id, job).await,
            Err(e) => Err(e),
        };
        part.end_signals.remove(job);
        completed
    }

    /// Completes the outcome `job` wrote the markers of, under the id's lock.
    async fn complete(
        self: &Arc<Self>,
        part: &Arc<LogPartition>,
        transactional_id: &str,
        job: &MarkerJob,
    ) -> Result<(), CoordinatorError> {
        let lock = part.lock_for(transactional_id);
        let _guard = lock.lock().await;
        let current = part.get(transactional_id);
        // Only the outcome these markers belong to is completed.
        let matches = current.as_ref().is_some_and(|m| {
            m.producer_id == job.producer_id && m.producer_epoch == job.producer_epoch
        });
        if !matches {
            return Ok(());
        }
        let ctx = Context {
            now_ms: now_ms(),
            max_timeout_ms: self.settings.max_transaction_timeout_ms,
            fresh_producer_id: None,
        };
        if let Decision::Act(effects) = decide(
            transactional_id,
            current.as_ref(),
            &Request::MarkersWritten,
            ctx,
        ) {
            for effect in effects {
                match effect {
                    Effect::Persist(meta) => {
                        // The markers are written: the transaction ends here, `txn_start_ms`
                        // (its first partition added) to now.
                        metrics::histogram!(
                            "idem_transaction_duration_seconds",
                            "outcome" => meta.state.name()
                        )
                        .record((ctx.now_ms - meta.txn_start_ms).max(0) as f64 / 1000.0);
                        match part.successors.take(transactional_id) {
                            Some(parked) => {
                                self.complete_with(part, transactional_id, meta, parked)
                                    .await
                            }
                            None => part.persist(meta).await?,
                        }
                    }
                    other => {
                        tracing::warn!(?other, "unexpected effect of MarkersWritten ignored")
                    }
                }
            }
            self.carry_out_parked(part, transactional_id).await;
        }
        Ok(())
    }

    /// Completes the id's transaction (`done` is its Complete record) together with the
    /// registration parked for its next one, and answers that registration. Runs under
    /// the id's lock.
    async fn complete_with(
        self: &Arc<Self>,
        part: &Arc<LogPartition>,
        transactional_id: &str,
        done: TxnMetadata,
        parked: Parked,
    ) {
        let outcome = match self
            .decide_with_fresh_id(transactional_id, Some(&done), &parked.request)
            .await
        {
            Ok(effects) => {
                self.carry_out(part, transactional_id, effects, Some(done))
                    .await
            }
            Err(refusal) => match part.persist(done).await {
                Ok(()) => Err(refusal),
                Err(e) => Err(self.refuse(part, e)),
            },
        };
        parked.answer(self.answer_of(part, transactional_id, outcome));
    }

    /// The answer for a failed effect; a fenced claim is dropped.
    fn refuse(&self, part: &LogPartition, error: CoordinatorError) -> Refusal {
        match error {
            CoordinatorError::OwnershipLost { reason, .. } => {
                tracing::warn!(partition = part.index, coordinator_epoch = part.coordinator_epoch, %reason, "ownership lost");
                self.lose(part.index, part.coordinator_epoch, &part.token);
                Refusal::new(ErrorCode::NotCoordinator, reason)
            }
            CoordinatorError::Refused { code, message, .. } => Refusal::new(code, message),
            // Not retriable: the same request would be decided the same way again.
            illegal @ CoordinatorError::IllegalChange { .. } => {
                tracing::error!(partition = part.index, error = %illegal, "a decision broke the transaction log's rules");
                Refusal::new(ErrorCode::UnknownServerError, illegal.to_string())
            }
            other => Refusal::new(ErrorCode::CoordinatorNotAvailable, other.to_string()),
        }
    }

    /// Feeds `Tick` to every open transaction past its timeout, and `Expire` to every
    /// idle transactional id past its expiration.
    pub fn tick(self: &Arc<Self>) {
        let now = now_ms();
        let idle_ms = self.settings.transactional_id_expiration_ms;
        for part in self.ready_partitions() {
            for meta in part.snapshot() {
                // One begun behind a pending end waits for its markers first.
                let timed_out = meta.state == TxnState::Ongoing
                    && meta.pending_end.is_none()
                    && now - meta.txn_start_ms > i64::from(meta.timeout_ms);
                let (request, what) = if timed_out {
                    (Request::Tick, "transaction timed out; aborting")
                } else if is_expired(&meta, idle_ms, now) {
                    (
                        Request::Expire { idle_ms },
                        "transactional id idle past its expiration; retiring it",
                    )
                } else {
                    continue;
                };
                if !part.start_tick(&meta.transactional_id) {
                    continue;
                }
                let this = self.clone();
                let part = part.clone();
                tokio::spawn(async move {
                    let id = meta.transactional_id;
                    tracing::info!(partition = part.index, transactional_id = %id, producer_id = meta.producer_id, epoch = meta.producer_epoch, "{what}");
                    if let Err(refusal) = this.run_request(&part, &id, request).await {
                        tracing::warn!(transactional_id = %id, code = ?refusal.code, message = %refusal.message, "timer-driven request failed");
                    }
                    part.end_tick(&id);
                });
            }
        }
    }

    fn ready_partitions(&self) -> Vec<Arc<LogPartition>> {
        let Ok(slots) = self.slots.read() else {
            return Vec::new();
        };
        let mut parts: Vec<Arc<LogPartition>> = slots
            .values()
            .filter_map(|s| match s {
                Slot::Ready(part) if !part.token.is_lost() => Some(part.clone()),
                _ => None,
            })
            .collect();
        parts.sort_by_key(|p| p.index);
        parts
    }

    // ---- admin ----------------------------------------------------------------------

    /// Who owns `transactional_id`, as this coordinator knows it.
    pub fn find_coordinator(&self, transactional_id: &str) -> Result<(i32, OwnerInfo), Refusal> {
        let partition = self.log_partition_of(transactional_id)?;
        match self.ownership.owner_of(partition) {
            Some(owner) => Ok((partition, owner)),
            None => Err(Refusal::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("no coordinator owns {TXN_LOG_TOPIC} partition {partition} yet"),
            )),
        }
    }

    /// Transactions of every loaded partition in one of `states` (all when empty), and
    /// the loaded partitions.
    pub fn list(&self, states: &[TxnState]) -> (Vec<(i32, TxnMetadata)>, Vec<i32>) {
        if !self.ownership.holds_lease() {
            return (Vec::new(), Vec::new());
        }
        let parts = self.ready_partitions();
        let owned = parts.iter().map(|p| p.index).collect();
        let mut txns: Vec<(i32, TxnMetadata)> = parts
            .iter()
            .flat_map(|part| {
                part.snapshot()
                    .into_iter()
                    .filter(|m| states.is_empty() || states.contains(&m.state))
                    .map(|m| (part.index, m))
            })
            .collect();
        txns.sort_by(|a, b| a.1.transactional_id.cmp(&b.1.transactional_id));
        (txns, owned)
    }

    /// The transactions of every loaded slice, counted by state (the metrics' gauges),
    /// and how many slices are loaded; nothing without the lease, as [`Self::list`].
    pub fn tally(&self, now_ms: i64) -> (TxnTally, usize) {
        let mut tally = TxnTally::default();
        if !self.ownership.holds_lease() {
            return (tally, 0);
        }
        let parts = self.ready_partitions();
        for part in &parts {
            part.tally_into(&mut tally, now_ms);
        }
        (tally, parts.len())
    }

    pub fn describe(&self, transactional_id: &str) -> Result<(i32, TxnMetadata), Refusal> {
        let part = self.serving(transactional_id)?;
        part.get(transactional_id)
            .map(|m| (part.index, m))
            .ok_or_else(|| {
                Refusal::new(
                    ErrorCode::TransactionalIdNotFound,
                    format!("no transactional id {transactional_id:?}"),
                )
            })
    }

    /// Whether this coordinator can answer for the transaction log: it knows the log's
    /// partition count, every partition has an owner (this coordinator or another: a
    /// partition nobody owns yet is one this coordinator may be about to claim), and
    /// every slice it claimed is loaded. A coordinator that owns nothing because the
    /// others own everything (one restarted after they took its slices over) serves:
    /// it answers FindCoordinator and refuses the rest with NOT_COORDINATOR, and
    /// reporting it unhealthy would stall a rolling restart forever.
    pub fn serves_every_claimed_slice(&self) -> bool {
        let Some(partitions) = self.partition_count() else {
            return false;
        };
        let every_partition_owned =
            (0..partitions).all(|partition| self.ownership.owner_of(partition).is_some());
        every_partition_owned
            && self
                .slots
                .read()
                .is_ok_and(|slots| slots.values().all(|slot| matches!(slot, Slot::Ready(_))))
    }

    /// Gives up every partition (clean shutdown).
    pub async fn leave(&self) {
        self.ownership.leave().await;
        if let Ok(mut slots) = self.slots.write() {
            for (_, slot) in slots.drain() {
                match slot {
                    Slot::Loading { token, .. } => token.lose(),
                    Slot::Ready(part) => part.token.lose(),
                };
            }
        }
    }
}

/// The end markers of a prepared outcome read back from the log, or of the outcome a
/// transaction read back began behind.
fn end_markers(part: &LogPartition, meta: &TxnMetadata) -> MarkerJob {
    match &meta.pending_end {
        Some(end) => end_job(
            part,
            &meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
            end.commit,
            end.partitions.clone(),
            // Only an end that moved the epoch on has a transaction begin behind it.
            false,
        ),
        None => end_job(
            part,
            &meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
            meta.state == TxnState::PrepareCommit,
            meta.partitions.clone(),
            meta.kept_epoch,
        ),
    }
}

/// The markers of `control` this partition's owner writes for a producer.
fn marker_job(
    part: &LogPartition,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    control: ControlType,
    partitions: BTreeSet<TopicPartition>,
) -> MarkerJob {
    MarkerJob {
        transactional_id: transactional_id.to_string(),
        log_partition: part.index,
        producer_id,
        producer_epoch,
        control,
        coordinator_epoch: part.coordinator_epoch,
        partitions,
        at_transaction_epoch: false,
    }
}

fn begin_job(
    part: &LogPartition,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partitions: BTreeSet<TopicPartition>,
) -> MarkerJob {
    marker_job(
        part,
        transactional_id,
        producer_id,
        producer_epoch,
        ControlType::Begin,
        partitions,
    )
}

/// `at_transaction_epoch`: the marker carries the ended transaction's own epoch, which
/// its producer keeps (`TxnMetadata::kept_epoch`), not the next one.
fn end_job(
    part: &LogPartition,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    partitions: BTreeSet<TopicPartition>,
    at_transaction_epoch: bool,
) -> MarkerJob {
    let control = if commit {
        ControlType::Commit
    } else {
        ControlType::Abort
    };
    MarkerJob {
        at_transaction_epoch,
        ..marker_job(
            part,
            transactional_id,
            producer_id,
            producer_epoch,
            control,
            partitions,
        )
    }
}
