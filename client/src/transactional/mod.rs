//! The transactional producer: records sent between `begin` and `commit` become
//! visible to read_committed consumers all together, or (after `abort`) never.
//!
//! How it works (docs/transactions.md): `init_transactions` gets the transactional id's
//! producer id at a new epoch from its coordinator (fencing any older instance). The
//! first `send` to a partition in a transaction queues the partition's registration
//! with the coordinator (AddPartitionsToTxn, batched across partitions: see
//! `registrar`) without waiting for it; no batch of the partition leaves before it is
//! answered. The partition gets its own task on the exactly-once data path (acks=all, at most 5 batches in
//! flight, ordered retries, sequences from 0) under the transaction's identity, with
//! transactional batches. `commit` closes those tasks, waits for every record handed
//! over, and commits only if none failed; the coordinator's answer carries the next
//! epoch, which the next transaction uses.
//!
//! Invariant: a record is in the transaction during which `send` accepted it; a
//! transaction with any failed record cannot commit. All methods take `&self`; the
//! producer is cheap to clone and every clone shares the state.

pub mod config;
pub mod errors;
pub mod pipelined;
pub(crate) mod registrar;
pub mod state;
mod timing;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::config::TransactionalConfig;
use self::registrar::{known_identity, IdentityGate, Registrar};
use self::state::{EndPlan, TxnMachine, TxnState};
use self::timing::micros;
use crate::connection::Connection;
use crate::coordinator::CoordinatorLink;
use crate::error::ClientError;
use crate::partitioner::TopicPartitioners;
use crate::producer::config::ProducerConfig;
use crate::producer::sender::{PartitionMsg, PartitionSender, TxnBinding};
use crate::producer::{prepare, DeliveryFuture, ProducerRecord};
use crate::types::{GroupMetadata, ProducerIdAndEpoch};

/// Records a partition task may have queued in its channel before `send` waits.
const CHANNEL_CAPACITY: usize = 1024;

/// When the end of a transaction began and when its records were all answered: the
/// debug event of its end reports how long the drain and EndTxn took, the two halves
/// of what a transaction boundary costs (docs/benchmarks.md reads them).
#[derive(Debug, Clone, Copy)]
struct EndTimes {
    started: Instant,
    drained: Instant,
}

impl EndTimes {
    fn start() -> Self {
        let now = Instant::now();
        EndTimes {
            started: now,
            drained: now,
        }
    }

    fn drained(self) -> Self {
        EndTimes {
            drained: Instant::now(),
            ..self
        }
    }
}

/// A producer whose records are written in transactions; cheap to clone.
#[derive(Debug, Clone)]
pub struct TransactionalProducer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: TransactionalConfig,
    producer_config: Arc<ProducerConfig>,
    transactional_id: Arc<str>,
    conn: Connection,
    coordinator: Arc<CoordinatorLink>,
    /// The state machine and the open transaction's partition tasks, under one lock: a
    /// send either takes its partition's channel before `commit` takes the tasks (and
    /// `commit` then waits for its record) or is refused.
    shared: Mutex<Shared>,
    /// Serialises the calls that talk to the coordinator (init, commit, abort, and a
    /// pipelined commit's background task, which holds it until its commit is decided),
    /// so none overlaps another of the same producer. Registrations need no lock: they
    /// belong to partition tasks, which commit and abort drain before EndTxn.
    control: Arc<tokio::sync::Mutex<()>>,
    partitioners: TopicPartitioners,
}

#[derive(Debug, Default)]
struct Shared {
    machine: TxnMachine,
    open: OpenTxn,
}

/// The partition tasks of the open transaction.
#[derive(Debug, Default)]
struct OpenTxn {
    /// Registers the transaction's partitions; started by the first partition.
    registrar: Option<Registrar>,
    /// By topic, then partition (looked up by `&str` on every send: no allocation).
    senders: HashMap<String, HashMap<i32, mpsc::Sender<PartitionMsg>>>,
    tasks: Vec<JoinHandle<()>>,
    /// The first failed batch of the transaction.
    failures: Arc<Mutex<Option<ClientError>>>,
    /// Set when the transaction was begun while the one before it still commits
    /// (`commit_and_begin`): its registrations wait for that commit's answer.
    identity: Option<IdentityGate>,
}

impl OpenTxn {
    fn sender(&self, topic: &str, partition: i32) -> Option<&mpsc::Sender<PartitionMsg>> {
        self.senders.get(topic)?.get(&partition)
    }
}

impl TransactionalProducer {
    /// Validates `config` and connects to the bootstrap broker; talks to no coordinator
    /// yet (see [`TransactionalProducer::init_transactions`]).
    pub async fn connect(config: TransactionalConfig) -> Result<Self, ClientError> {
        let partitioners = TopicPartitioners::new(config.batch_size);
        config.validate()?;
        let conn = Connection::connect_with(
            &config.bootstrap,
            config.request_timeout,
            config.credentials.clone(),
            config.tls.clone(),
        )
        .await?
        .with_metadata_max_age(config.metadata_max_age);
        Ok(TransactionalProducer {
            inner: Arc::new(Inner {
                producer_config: Arc::new(config.producer_config()),
                transactional_id: Arc::from(config.transactional_id.as_str()),
                coordinator: Arc::new(CoordinatorLink::new(conn.clone())),
                conn,
                config,
                shared: Mutex::new(Shared::default()),
                control: Arc::new(tokio::sync::Mutex::new(())),
                partitioners,
            }),
        })
    }

    pub fn config(&self) -> &TransactionalConfig {
        &self.inner.config
    }

    /// The producer id and epoch the next batch carries; `None` before
    /// `init_transactions` succeeded.
    pub fn producer_id(&self) -> Option<ProducerIdAndEpoch> {
        self.shared().ok().and_then(|s| s.machine.producer())
    }

    /// Where the producer is (for logs and operators).
    pub fn state(&self) -> TxnState {
        self.shared()
            .map(|s| s.machine.state())
            .unwrap_or(TxnState::FatalError)
    }

    /// Finds the coordinator and gets the transactional id's producer id at its next
    /// epoch: any older instance is fenced, and its open transaction aborted. Retries a
    /// coordinator that moved, is loading or is still ending the previous instance's
    /// transaction, within `delivery_timeout`.
    pub async fn init_transactions(&self) -> Result<(), ClientError> {
        let _control = self.inner.control.lock().await;
        self.shared()?.machine.start_init()?;
        let result = self
            .inner
            .coordinator
            .init_producer_id(
                &self.inner.transactional_id,
                self.inner.config.transaction_timeout_ms(),
                None,
                self.deadline(),
            )
            .await;
        if let Ok(p) = &result {
            tracing::info!(
                transactional_id = %self.inner.transactional_id,
                producer_id = p.producer_id,
                producer_epoch = p.producer_epoch,
                "transactional producer ready"
            );
        }
        self.shared()?.machine.init_done(result)
    }

    /// Opens a transaction.
    pub fn begin(&self) -> Result<(), ClientError> {
        let mut shared = self.shared()?;
        shared.machine.begin()?;
        shared.open = OpenTxn::default();
        Ok(())
    }

    /// Adds a record to the open transaction. On the partition's first record of the
    /// transaction this registers the partition with the coordinator first (and waits
    /// for that); otherwise it waits only for metadata and buffer space. The future
    /// resolves once the record is acknowledged (it is visible to read_committed
    /// consumers only after `commit`) or failed; a failure makes the transaction
    /// abortable, whether or not the future is awaited.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ClientError> {
        let (generation, _) = self.check_send(None)?;
        let (topic, partition, record, size) = prepare(record)?;
        let count = self.inner.conn.partition_count(&topic).await?;
        let partition = self.inner.partitioners.partition_for(
            &topic,
            partition,
            record.key.as_deref(),
            size,
            count,
        )?;
        let sender = match self.partition_sender(generation, &topic, partition)? {
            Some(sender) => sender,
            None => self.join(generation, &topic, partition)?,
        };
        let (ticket, rx) = oneshot::channel();
        sender
            .send(PartitionMsg::Record { record, ticket })
            .await
            .map_err(|_| ClientError::Closed)?;
        Ok(DeliveryFuture::new(rx))
    }

    /// Stores a consumer group member's offsets (the next offset to read, per partition)
    /// inside the open transaction (KIP-447): they become the group's committed offsets
    /// with the transaction's commit and vanish with its abort, so the records a
    /// consume-transform-produce loop wrote and the input it consumed are decided
    /// together. `group` comes from the consumer
    /// ([`GroupConsumer::group_metadata`](crate::GroupConsumer::group_metadata)): the
    /// coordinator refuses the offsets (STALE_MEMBER_EPOCH) of a member whose epoch moved
    /// on, a zombie whose partitions may be someone else's now, and the transaction
    /// must then abort.
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &[((String, i32), i64)],
        group: &GroupMetadata,
    ) -> Result<(), ClientError> {
        let _control = self.inner.control.lock().await;
        let (_, producer) = self.check_send(None)?;
        let deadline = self.deadline();
        let tid = &self.inner.transactional_id;
        let coordinator = &self.inner.coordinator;
        let stored = async {
            coordinator
                .add_offsets(tid, producer, &group.group_id, deadline)
                .await?;
            coordinator
                .txn_offset_commit(tid, producer, group, offsets, deadline)
                .await
        }
        .await;
        match stored {
            Ok(()) => Ok(()),
            Err(e) => Err(self.shared()?.machine.fail(e)),
        }
    }

    /// Commits the open transaction: waits until every record sent in it is
    /// acknowledged; if any failed, the transaction cannot commit (abortable error, or
    /// the fatal error that failed it). Otherwise EndTxn(commit), whose answer carries
    /// the epoch the next transaction uses. An unanswered EndTxn leaves the producer
    /// committing: call `commit` again (a repeated EndTxn gets the first one's answer).
    pub async fn commit(&self) -> Result<(), ClientError> {
        let _control = self.inner.control.lock().await;
        let (plan, open) = {
            let mut shared = self.shared()?;
            let plan = shared.machine.start_commit()?;
            (plan, std::mem::take(&mut shared.open))
        };
        let times = EndTimes::start();
        if let Some(failure) = drain(open).await {
            let mut shared = self.shared()?;
            return Err(shared.machine.fail(failure));
        }
        let times = times.drained();
        let result = self.end_txn(plan, true).await;
        self.log_end("committed", plan.producer, &result, times);
        self.shared()?.machine.end_done(true, result)
    }

    /// Aborts the open transaction: waits for the records already handed over (each
    /// acknowledged or failed), then EndTxn(abort); nothing of the transaction becomes
    /// visible to read_committed consumers. Allowed after an abortable error.
    pub async fn abort(&self) -> Result<(), ClientError> {
        let _control = self.inner.control.lock().await;
        let (plan, open) = {
            let mut shared = self.shared()?;
            let plan = shared.machine.start_abort()?;
            (plan, std::mem::take(&mut shared.open))
        };
        let times = EndTimes::start();
        // Failures of the aborted transaction no longer matter; fencing does.
        if let Some(failure) = drain(open).await {
            let mut shared = self.shared()?;
            let reported = shared.machine.fail(failure);
            if shared.machine.state() == TxnState::FatalError {
                return Err(reported);
            }
        }
        let times = times.drained();
        let result = self.end_txn(plan, false).await;
        self.log_end("aborted", plan.producer, &result, times);
        self.shared()?.machine.end_done(false, result)
    }

    /// Aborts an open transaction (so it does not hold back read_committed consumers
    /// until its timeout), waits for the partition tasks, and refuses every later call.
    pub async fn close(&self) {
        let open_txn = matches!(
            self.state(),
            TxnState::InTransaction | TxnState::AbortableError | TxnState::Aborting
        );
        if open_txn {
            if let Err(e) = self.abort().await {
                tracing::warn!(error = %e, "closing: the open transaction could not be aborted; its timeout will abort it");
            }
        }
        let _control = self.inner.control.lock().await;
        let open = match self.shared() {
            Ok(mut shared) => {
                shared.machine.close();
                std::mem::take(&mut shared.open)
            }
            Err(_) => return,
        };
        drain(open).await;
    }

    fn shared(&self) -> Result<MutexGuard<'_, Shared>, ClientError> {
        self.inner
            .shared
            .lock()
            .map_err(|_| ClientError::Fatal("transactional producer state poisoned".into()))
    }

    /// EndTxn for the transaction `plan` ends, if the coordinator may hold it open:
    /// `Some(next)`, the identity the coordinator moved the producer to; `None`, it
    /// ended locally.
    ///
    /// Every ended transaction bumps the epoch, so a producer reaches the last one
    /// (32,767) after that many transactions: at 10 a second, within an hour. A
    /// transaction at the last epoch could not be ended (its markers need the next), so
    /// the producer then renews itself right away: InitProducerId naming its current
    /// identity, answered with a fresh producer id at epoch 0 unless another instance
    /// took over meanwhile (PRODUCER_FENCED).
    async fn end_txn(
        &self,
        plan: EndPlan,
        commit: bool,
    ) -> Result<Option<ProducerIdAndEpoch>, ClientError> {
        if !plan.needs_end_txn {
            return Ok(None);
        }
        let coordinator = &self.inner.coordinator;
        let tid = &self.inner.transactional_id;
        let epoch = coordinator
            .end_txn(tid, plan.producer, commit, self.deadline())
            .await?;
        let next = ProducerIdAndEpoch {
            producer_id: plan.producer.producer_id,
            producer_epoch: epoch,
        };
        if epoch < i16::MAX {
            return Ok(Some(next));
        }
        let timeout_ms = self.inner.config.transaction_timeout_ms();
        match coordinator
            .init_producer_id(tid, timeout_ms, Some(next), self.deadline())
            .await
        {
            Ok(renewed) => {
                tracing::info!(transactional_id = %tid, from = ?next, to = ?renewed, "the producer epoch ran out: renewed under a fresh producer id");
                Ok(Some(renewed))
            }
            Err(e) => Err(ClientError::Fatal(format!(
                "the transaction was {} but the producer, out of epochs, could not renew its producer id: {e}",
                if commit { "committed" } else { "aborted" }
            ))),
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.inner.config.delivery_timeout
    }

    /// Whether a send may join the open transaction (of `generation`): a batch of it
    /// that already failed makes the transaction abortable (or the producer fenced)
    /// before any further record joins.
    fn check_send(
        &self,
        generation: Option<u64>,
    ) -> Result<(u64, ProducerIdAndEpoch), ClientError> {
        let mut shared = self.shared()?;
        let failed = shared.open.failures.lock().ok().and_then(|f| f.clone());
        if let Some(failure) = failed {
            if shared.machine.state() == TxnState::InTransaction {
                return Err(shared.machine.fail(failure));
            }
        }
        shared.machine.check_send(generation)
    }

    /// The channel of a partition already in the transaction of `generation`.
    fn partition_sender(
        &self,
        generation: u64,
        topic: &str,
        partition: i32,
    ) -> Result<Option<mpsc::Sender<PartitionMsg>>, ClientError> {
        let shared = self.shared()?;
        shared.machine.check_send(Some(generation))?;
        Ok(shared.open.sender(topic, partition).cloned())
    }

    /// Adds the partition to the open transaction (once, however many sends race for
    /// it): queues its registration with the coordinator and starts its task, which
    /// sends nothing until the registration is answered. Does not wait: records keep
    /// accumulating meanwhile, and a refused registration fails them (the transaction
    /// becomes abortable, or the producer fenced).
    fn join(
        &self,
        generation: u64,
        topic: &str,
        partition: i32,
    ) -> Result<mpsc::Sender<PartitionMsg>, ClientError> {
        let mut shared = self.shared()?;
        shared.machine.check_send(Some(generation))?;
        if let Some(sender) = shared.open.sender(topic, partition) {
            return Ok(sender.clone());
        }
        let producer = shared.machine.will_register(generation)?;
        let identity = shared
            .open
            .identity
            .clone()
            .unwrap_or_else(|| known_identity(producer));
        let registrar = shared.open.registrar.get_or_insert_with(|| {
            Registrar::spawn(
                self.inner.coordinator.clone(),
                self.inner.transactional_id.clone(),
                identity,
                self.inner.config.delivery_timeout,
            )
        });
        let registered = registrar.register(topic, partition);
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let binding = TxnBinding {
            failures: shared.open.failures.clone(),
        };
        let task = PartitionSender::spawn(
            Arc::from(topic),
            partition,
            self.inner.conn.clone(),
            self.inner.producer_config.clone(),
            None,
            Some((binding, registered)),
            rx,
        );
        shared.open.tasks.push(task);
        shared
            .open
            .senders
            .entry(topic.to_string())
            .or_default()
            .insert(partition, tx.clone());
        Ok(tx)
    }

    fn log_end(
        &self,
        outcome: &str,
        producer: ProducerIdAndEpoch,
        result: &Result<Option<ProducerIdAndEpoch>, ClientError>,
        times: EndTimes,
    ) {
        match result {
            Ok(next) => tracing::debug!(
                transactional_id = %self.inner.transactional_id,
                producer_id = producer.producer_id,
                producer_epoch = producer.producer_epoch,
                next = ?next,
                drain_us = micros(times.drained - times.started),
                end_txn_us = micros(times.drained.elapsed()),
                "transaction {outcome}"
            ),
            Err(e) => tracing::warn!(
                transactional_id = %self.inner.transactional_id,
                producer_id = producer.producer_id,
                producer_epoch = producer.producer_epoch,
                error = %e,
                "transaction not {outcome}"
            ),
        }
    }
}

/// Closes the transaction's partition channels and waits until every record handed to
/// them is acknowledged or failed; returns the first failure.
async fn drain(open: OpenTxn) -> Option<ClientError> {
    let OpenTxn {
        registrar,
        senders,
        tasks,
        failures,
        identity: _,
    } = open;
    // The registrar answers what is queued, then ends with the transaction.
    drop(registrar);
    // A send that took a channel before this point still delivers into it: its task
    // ends only when that clone is gone too.
    drop(senders);
    for task in tasks {
        if let Err(e) = task.await {
            tracing::error!(error = %e, "a partition task of the transaction ended abnormally");
            if let Ok(mut first) = failures.lock() {
                first.get_or_insert_with(|| {
                    ClientError::Fatal(format!("a partition task ended abnormally: {e}"))
                });
            }
        }
    }
    failures.lock().ok().and_then(|mut f| f.take())
}
