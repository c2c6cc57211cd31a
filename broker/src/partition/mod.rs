//! One partition on this broker: its log, its producer state, its transaction index,
//! and the rule that ties them together: a batch (or transaction marker) is checked
//! against the producer state and appended under one lock, so a duplicate can never be
//! appended twice and a transaction never left open by accident. With `every-append`
//! flushing, concurrent appends share one fsync (group commit) and the high watermark
//! only covers what is on disk, so a consumer never sees a record a crash could take
//! back. The last stable offset (LSO) bounds what read_committed consumers see.

mod consumer_read;
mod delete_records;
pub mod delete_target;
pub mod long_poll;
mod marker;
mod retention;
mod time_lookup;
mod txn_recovery;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use idem_proto::batch::{self, BatchHeader};
use idem_proto::control::{self, ControlMarker};
use tokio::sync::watch;
use tracing::Instrument;

use crate::error::BrokerError;
use crate::log::{AppendInfo, FlushPolicy, LogConfig, PartitionLog, ReadLimit};
use crate::producer_state::{self, BatchMetadata, Decision, ProducerStateTable, SnapshotBounds};
use crate::replication::epoch_history::EpochHistory;
use crate::replication::replica_set::{ReplicaSet, Role};
use crate::topic_config::{TopicConfig, TopicDefaults, TopicSettings};
use crate::txn_index::TxnIndex;
use txn_recovery::recover_transactions;

pub use consumer_read::{stored_batches, ConsumerRead};
pub use marker::OpenTransaction;
pub use time_lookup::TimeTarget;

/// `acks` value asking for every in-sync replica.
pub const ACKS_ALL: i32 = -1;

/// How long a produced batch that is ahead of its producer's sequence waits for the
/// batches before it. A producer has up to 5 requests of a partition in flight and the
/// broker serves them concurrently, so a later batch can reach the partition first;
/// refusing it at once would cost the producer a retry and its backoff. Concurrent
/// requests arrive within a few milliseconds of each other. A gap still open after this
/// long means the earlier batch was refused or lost, and the producer resends it only
/// once its later batches are answered, so waiting longer only delays that: 500 ms here
/// gave exactly-once producers a 500 ms p99.9 after the first batches of a new topic
/// were refused UNKNOWN_TOPIC_OR_PARTITION.
const SEQUENCE_GAP_WAIT: Duration = Duration::from_millis(50);
/// Gap waits at least this long are logged: they are the tail latency of the producer.
const SLOW_GAP_MS: u128 = 10;

/// Settings every partition of a broker shares.
#[derive(Debug, Clone)]
pub struct PartitionSettings {
    pub log: LogConfig,
    pub max_batch_bytes: usize,
    pub producer_id_expiration_ms: i64,
    /// What a topic that does not set its own config gets.
    pub topic_defaults: TopicDefaults,
}

/// What a successful produce to this partition answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Offset of the batch's first record; for a duplicate, the original one.
    pub base_offset: i64,
    pub duplicate: bool,
    pub log_start_offset: i64,
}

/// A batch [`Partition::begin_append`] put in the log (or found a duplicate), waiting
/// for [`Partition::settle_append`].
#[derive(Debug)]
pub struct AppendedBatch {
    outcome: AppendOutcome,
    /// The log end after the batch: what must be durable and replicated.
    durable_end: i64,
    acks: i32,
    timeout: Duration,
    leader_epoch: i32,
    /// (arrival, appended) when the produce timing log is on.
    appended_at: Option<(tokio::time::Instant, tokio::time::Instant)>,
    span: tracing::Span,
}

/// What a follower's fetch gets from the leader.
#[derive(Debug)]
pub struct FollowerRead {
    pub records: Vec<u8>,
    pub offsets: PartitionOffsets,
    /// The follower, outside the ISR, has just caught up: the ISR may take it back now.
    pub may_rejoin: bool,
}

/// Offsets of a partition as a client sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub log_end_offset: i64,
    /// Where read_committed consumers stop (<= the high watermark).
    pub last_stable_offset: i64,
}

struct PartitionInner {
    log: PartitionLog,
    producers: ProducerStateTable,
    txns: TxnIndex,
}

pub struct Partition {
    topic: String,
    index: i32,
    dir: PathBuf,
    settings: PartitionSettings,
    /// The topic's config in effect (retention, segment size, batch limit), replaced
    /// when the topic's config is altered.
    topic_settings: Mutex<TopicSettings>,
    inner: Mutex<PartitionInner>,
    /// Offset below which every batch is on disk; the group-commit lock.
    durable: tokio::sync::Mutex<i64>,
    /// Woken after every append: batches waiting for an earlier one re-check.
    appended: tokio::sync::Notify,
    /// The high watermark; fetches wait on it for new data.
    high_watermark: watch::Sender<i64>,
    /// The last stable offset; read_committed fetches wait on it.
    last_stable: watch::Sender<i64>,
    /// The log end (everything appended, durable or not); followers wait on it.
    log_end: watch::Sender<i64>,
    /// What this broker has made durable itself: the leader's own bound on the HW.
    local_end: AtomicI64,
    replicas: Mutex<ReplicaSet>,
    /// Where each leader epoch starts in this replica's log.
    epochs: Mutex<EpochHistory>,
    /// Whether this replica must leave the ISR before it may lead (see
    /// [`Partition::must_leave_isr`]).
    leave_isr_pending: AtomicBool,
    /// The log's start, as last moved under the partition lock: a follower compares its
    /// leader's start with it on every fetch answer without taking the lock.
    log_start: AtomicI64,
    /// This broker is no longer a replica (see [`Partition::retire`]); set under the
    /// partition lock, so no append follows it.
    retired: AtomicBool,
}

impl Partition {
    /// Opens (or creates) the partition in `dir`: recovers the log, then rebuilds the
    /// producer state from the newest usable snapshot plus the batches after it.
    pub fn open(
        topic: &str,
        index: i32,
        dir: &Path,
        settings: PartitionSettings,
        broker_id: i32,
    ) -> Result<Self, BrokerError> {
        let reopened = dir.exists();
        // The log reports any torn tail it cut (a warning with the reason).
        let (log, report) = PartitionLog::open(dir, settings.log.clone())?;
        let leave_isr =
            report.reason.is_some() || (reopened && settings.log.flush != FlushPolicy::EveryAppend);
        let producers = rebuild_producer_state(dir, &log, now_ms())?;
        let log_end = log.log_end_offset();
        // Opening makes the whole log visible (see `high_watermark` below).
        let epochs = epoch_history(&log)?;
        let log_start = log.log_start_offset();
        let txns = recover_transactions(dir, &log, log_end)?;
        let (high_watermark, _) = watch::channel(log_end);
        let (last_stable, _) = watch::channel(txns.last_stable_offset(log_end));
        let (log_end_watch, _) = watch::channel(log_end);
        let topic_settings = Mutex::new(TopicConfig::default().resolve(&settings.topic_defaults));
        Ok(Partition {
            topic: topic.to_string(),
            index,
            dir: dir.to_path_buf(),
            settings,
            topic_settings,
            inner: Mutex::new(PartitionInner {
                log,
                producers,
                txns,
            }),
            durable: tokio::sync::Mutex::new(log_end),
            appended: tokio::sync::Notify::new(),
            high_watermark,
            last_stable,
            log_end: log_end_watch,
            local_end: AtomicI64::new(log_end),
            replicas: Mutex::new(ReplicaSet::sole(broker_id)),
            epochs: Mutex::new(epochs),
            log_start: AtomicI64::new(log_start),
            leave_isr_pending: AtomicBool::new(leave_isr),
            retired: AtomicBool::new(false),
        })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn index(&self) -> i32 {
        self.index
    }

    /// Validates and appends one produced batch, or answers a duplicate with the
    /// offsets it got the first time. Bad input changes nothing.
    pub async fn append(
        &self,
        records: &[u8],
        acks: i32,
        timeout: Duration,
    ) -> Result<AppendOutcome, BrokerError> {
        let appended = self.begin_append(records, acks, timeout).await?;
        self.settle_append(appended).await
    }

    /// The first half of [`Partition::append`]: the batch is checked and in the log (or
    /// known as a duplicate), not yet durable or replicated. A caller holding several
    /// batches (a produce request's partitions, a Kafka connection's pipelined
    /// requests) appends them in order and then settles them together, so their fsyncs
    /// and replication waits overlap instead of queueing one behind another.
    pub async fn begin_append(
        &self,
        records: &[u8],
        acks: i32,
        timeout: Duration,
    ) -> Result<AppendedBatch, BrokerError> {
        // The produce's steps in a trace (docs/operations.md, "Traces"): DEBUG, so only
        // an exporter enables them; the fields are filled as they become known.
        let span = tracing::debug_span!(
            "append",
            topic = %self.topic,
            partition = self.index,
            acks,
            producer_id = tracing::field::Empty,
            base_sequence = tracing::field::Empty,
            base_offset = tracing::field::Empty,
            duplicate = tracing::field::Empty,
        );
        if acks == ACKS_ALL {
            if let Some((isr, min)) = self.insync_shortfall() {
                return Err(BrokerError::NotEnoughReplicas { isr, min });
            }
        }
        // One read of the topic's settings per produce (a clone under a mutex).
        let topic = self.topic_settings();
        let limit = self.settings.max_batch_bytes.min(topic.max_message_bytes);
        if records.len() > limit {
            return Err(BrokerError::MessageTooLarge {
                size: records.len(),
                limit,
            });
        }
        let header = batch::validate_produced(records)?;
        span.record("producer_id", header.producer_id);
        span.record("base_sequence", header.base_sequence);
        refuse_unsupported_batch(&header)?;
        if !header.is_control() && topic.cleanup_policy.compact {
            refuse_unkeyed(records)?;
        }
        // Every batch records the leader epoch it was written in (followers' truncation
        // after a failover compares epochs).
        let leader_epoch = self.replica_set().leader_epoch;
        let arrived = tokio::time::Instant::now();
        let gap_deadline = arrived + SEQUENCE_GAP_WAIT.min(timeout);
        let mut waited = false;
        let result = loop {
            match self.check_and_append(&header, records, leader_epoch) {
                Err(e) if is_sequence_gap(&e) && tokio::time::Instant::now() < gap_deadline => {
                    waited = true;
                    // Only a batch that found a gap registers for wake-ups (the common
                    // path stays as it was), then looks once more: an append between
                    // the refusal and the registration is not missed.
                    let appended = self.appended.notified();
                    tokio::pin!(appended);
                    appended.as_mut().enable();
                    match self.check_and_append(&header, records, leader_epoch) {
                        Err(e) if is_sequence_gap(&e) => {
                            // Past the deadline the loop checks once more, then refuses.
                            let _ = tokio::time::timeout_at(gap_deadline, appended).await;
                        }
                        result => break result,
                    }
                }
                result => break result,
            }
        };
        if waited {
            // A long wait means an earlier batch of the producer was late or lost.
            let waited_ms = arrived.elapsed().as_millis();
            if waited_ms >= SLOW_GAP_MS {
                tracing::info!(topic = %self.topic, partition = self.index, producer_id = header.producer_id, base_sequence = header.base_sequence, waited_ms, appended = result.is_ok(), "batch waited for an earlier batch of its producer");
            }
        }
        let (outcome, durable_end) = result?;
        span.record("base_offset", outcome.base_offset);
        span.record("duplicate", outcome.duplicate);
        if outcome.duplicate {
            tracing::debug!(
                topic = %self.topic,
                partition = self.index,
                producer_id = header.producer_id,
                base_sequence = header.base_sequence,
                base_offset = outcome.base_offset,
                "duplicate batch answered with its original offsets"
            );
        }
        // Where a produce's time goes, for latency work (docs/benchmarks.md): the
        // append (with any wait for an earlier batch), the local fsync, and the wait for
        // the in-sync followers. The clock is read only when that log is on.
        let timed = tracing::enabled!(tracing::Level::DEBUG);
        let appended_at = timed
            .then(tokio::time::Instant::now)
            .map(|at| (arrived, at));
        Ok(AppendedBatch {
            outcome,
            durable_end,
            acks,
            timeout,
            leader_epoch,
            appended_at,
            span,
        })
    }

    /// The second half of [`Partition::append`]: waits until `appended` is durable
    /// (per the flush policy) and, for acks=all, on every in-sync replica.
    pub async fn settle_append(
        &self,
        appended: AppendedBatch,
    ) -> Result<AppendOutcome, BrokerError> {
        let AppendedBatch {
            outcome,
            durable_end,
            acks,
            timeout,
            leader_epoch,
            appended_at,
            span,
        } = appended;
        self.make_visible(durable_end)
            .instrument(tracing::debug_span!(parent: &span, "fsync", end = durable_end))
            .await?;
        let synced_at = appended_at.map(|_| tokio::time::Instant::now());
        if acks == ACKS_ALL {
            self.await_high_watermark(durable_end, timeout, leader_epoch)
                .instrument(tracing::debug_span!(parent: &span, "await_isr", end = durable_end))
                .await?;
        }
        if let (Some((arrived, appended_at)), Some(synced_at)) = (appended_at, synced_at) {
            // sync_us includes any wait between the two halves (the caller's other
            // batches being appended first).
            tracing::debug!(
                topic = %self.topic,
                partition = self.index,
                append_us = micros(appended_at - arrived),
                sync_us = micros(synced_at - appended_at),
                replicate_us = micros(synced_at.elapsed()),
                "produce timing"
            );
        }
        Ok(outcome)
    }

    /// acks=all: waits until every in-sync replica has the batch, appended by this
    /// replica as leader in `leader_epoch`. A high watermark past `end` proves that only
    /// while this replica still leads in that epoch: once deposed, it follows another
    /// leader whose log may hold other records at those offsets (its own tail was cut),
    /// and its high watermark then moves past `end` with that leader's records. Found by
    /// a chaos run isolating leaders: two producers were acknowledged the same offset.
    async fn await_high_watermark(
        &self,
        end: i64,
        timeout: Duration,
        leader_epoch: i32,
    ) -> Result<(), BrokerError> {
        let mut hw = self.high_watermark.subscribe();
        let still_leading = || {
            let replicas = self.replica_set();
            replicas.role == Role::Leader && replicas.leader_epoch == leader_epoch
        };
        // Deposed, the wait ends at once: its new leader may never write past `end` (a
        // coordinator whose fence went to the old leader waits for that answer before
        // it writes anything else), and waiting out the timeout left a transaction log
        // slice unserved for 10 s after an etcd pause.
        let ended =
            |hw: &i64| *hw >= end || self.retired.load(Ordering::SeqCst) || !still_leading();
        let replicated = tokio::time::timeout(timeout, hw.wait_for(ended))
            .await
            .is_ok_and(|waited| waited.is_ok());
        if !replicated {
            return Err(BrokerError::ReplicationTimedOut { end, timeout });
        }
        if !still_leading() {
            return Err(BrokerError::LeadershipLostAfterAppend {
                topic: self.topic.clone(),
                partition: self.index,
                epoch: leader_epoch,
            });
        }
        // The HW may have passed `end` only because the ISR shrank: then fewer replicas
        // than promised hold the batch (Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND).
        if let Some((isr, min)) = self.insync_shortfall() {
            return Err(BrokerError::NotEnoughReplicasAfterAppend { isr, min });
        }
        Ok(())
    }

    /// `(isr, min)` when fewer replicas are in sync than `min.insync.replicas`.
    fn insync_shortfall(&self) -> Option<(i32, i32)> {
        let replicas = self.replica_set();
        let (isr, min) = (replicas.isr.len() as i32, replicas.min_insync_replicas);
        (isr < min).then_some((isr, min))
    }

    /// Under the partition lock: a duplicate gets its original offsets, anything the
    /// producer state accepts is appended.
    fn check_and_append(
        &self,
        header: &BatchHeader,
        buf: &[u8],
        leader_epoch: i32,
    ) -> Result<(AppendOutcome, i64), BrokerError> {
        let mut inner = self.lock();
        if let Some(original) = check_producer(&inner.producers, header)? {
            let outcome = AppendOutcome {
                base_offset: original.first_offset,
                duplicate: true,
                log_start_offset: inner.log.log_start_offset(),
            };
            return Ok((outcome, original.last_offset + 1));
        }
        let info = self.append_to_log(&mut inner, buf, leader_epoch)?;
        let outcome = AppendOutcome {
            base_offset: info.base_offset,
            duplicate: false,
            log_start_offset: inner.log.log_start_offset(),
        };
        Ok((outcome, info.last_offset + 1))
    }

    /// Appends one batch (offsets are the log end's) and updates everything derived
    /// from the log the same way on leader and follower: the leader-epoch history, a
    /// producer snapshot when a segment rolled, the producer state and the transaction
    /// index, read from the header as stored (and a control batch's marker), so both
    /// replicas derive identical state from identical bytes.
    fn append_to_log(
        &self,
        inner: &mut PartitionInner,
        buf: &[u8],
        leader_epoch: i32,
    ) -> Result<AppendInfo, BrokerError> {
        if self.retired.load(Ordering::SeqCst) {
            return Err(BrokerError::NotLeaderOrFollower {
                topic: self.topic.clone(),
                partition: self.index,
                leader: -1,
            });
        }
        // Read the marker before appending: a control batch whose record cannot be read
        // must not reach the log, where it would be a transaction end nobody can apply.
        let marker = read_marker(buf)?;
        let sealed_base = inner.log.active_segment_base();
        let info = inner.log.append(buf, leader_epoch)?;
        self.epoch_history().record(leader_epoch, info.base_offset);
        if let Some(rolled_at) = info.rolled_at {
            self.segment_sealed(inner, sealed_base, rolled_at);
        }
        inner.producers.apply_batch(&info.stored, marker, now_ms());
        inner.txns.apply(&info.stored, marker);
        inner.txns.prune_stable(*self.high_watermark.borrow());
        self.publish_last_stable(inner);
        self.appended.notify_waiters();
        Ok(info)
    }

    /// After the segment at `sealed_base` was sealed and a new one started at
    /// `rolled_at` (the log end): the producer state and the transaction index hold
    /// exactly the state as of `rolled_at`, so both are persisted for it.
    fn segment_sealed(&self, inner: &PartitionInner, sealed_base: i64, rolled_at: i64) {
        let bounds = self.snapshot_bounds(inner);
        if let Err(e) =
            producer_state::write_snapshot(&self.dir, rolled_at, &inner.producers, bounds)
        {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "producer state snapshot failed");
        }
        txn_recovery::write_file(&self.dir, &inner.txns.seal(sealed_base, rolled_at));
    }

    /// Where the log stands for pruning producer snapshots: the newest one at or below
    /// the high watermark must survive, as a truncation may cut back to it.
    fn snapshot_bounds(&self, inner: &PartitionInner) -> SnapshotBounds {
        SnapshotBounds {
            log_start: inner.log.first_segment_base(),
            high_watermark: *self.high_watermark.borrow(),
            log_end: inner.log.log_end_offset(),
        }
    }

    /// Recomputes the LSO from the transaction index and the high watermark, waking
    /// read_committed fetches when it moved. Called with the partition lock held.
    fn publish_last_stable(&self, inner: &PartitionInner) {
        let lso = inner.txns.last_stable_offset(*self.high_watermark.borrow());
        self.last_stable.send_if_modified(|current| {
            let moved = *current != lso;
            *current = lso;
            moved
        });
    }

    /// Whether this broker stopped replicating the partition (see [`Partition::retire`]).
    fn is_retired(&self) -> bool {
        self.retired.load(Ordering::SeqCst)
    }

    /// The topic's config in effect.
    pub fn topic_settings(&self) -> TopicSettings {
        self.topic_settings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Applies the topic's config (at open, and whenever the topic's config changes):
    /// the next segment rolls at the new size, retention uses the new limits.
    pub fn set_topic_settings(&self, settings: TopicSettings) {
        self.lock().log.set_segment_bytes(settings.segment_bytes);
        *self
            .topic_settings
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = settings;
    }

    fn replica_set(&self) -> MutexGuard<'_, ReplicaSet> {
        self.replicas.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies the catalog's view of this partition to this replica.
    pub fn set_replication(
        &self,
        role: Role,
        leader_epoch: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        min_isr: i32,
    ) {
        let deposed = {
            let mut set = self.replica_set();
            let led_in = (set.role == Role::Leader).then_some(set.leader_epoch);
            set.update(role, leader_epoch, replicas, isr, min_isr, now_ms());
            led_in.is_some_and(|epoch| role != Role::Leader || leader_epoch != epoch)
        };
        if role == Role::Leader {
            self.update_high_watermark();
        }
        if deposed {
            // Wake the acks=all waits of the leadership that ended: they fail now rather
            // than at their timeout.
            self.high_watermark.send_modify(|_| {});
        }
    }

    pub fn replication(&self) -> ReplicaSet {
        self.replica_set().clone()
    }

    /// Whether this replica acts as the partition's leader.
    pub fn is_leader(&self) -> bool {
        self.replica_set().is_leader()
    }

    /// This broker is no longer one of the partition's replicas (a reassignment moved
    /// it away): nothing is appended any more, and an acks=all produce still waiting
    /// for the in-sync replicas ends at once as a lost leadership (REQUEST_TIMED_OUT:
    /// the new leader may hold the batch) instead of at its timeout. The registry has
    /// already stopped handing this partition out.
    pub fn retire(&self) {
        {
            let _inner = self.lock();
            self.retired.store(true, Ordering::SeqCst);
        }
        {
            let mut replicas = self.replica_set();
            let (epoch, replicas_now, isr, min) = (
                replicas.leader_epoch,
                replicas.replicas.clone(),
                replicas.isr.clone(),
                replicas.min_insync_replicas,
            );
            replicas.update(
                Role::Follower { leader: -1 },
                epoch,
                replicas_now,
                isr,
                min,
                now_ms(),
            );
        }
        // Wake the acks=all waits, which re-check and see the lost leadership.
        self.high_watermark.send_modify(|_| {});
    }

    /// Leader: recomputes the high watermark from its own durable end and the ISR.
    fn update_high_watermark(&self) {
        let local_end = self.local_end.load(Ordering::SeqCst);
        let current = *self.high_watermark.borrow();
        let hw = self.replica_set().high_watermark(local_end, current);
        self.advance_high_watermark(hw);
    }

    /// Leader side of a follower fetch: records how far `follower` has come and returns
    /// the batches from `offset` up to the log end, with the high watermark.
    pub fn read_for_follower(
        &self,
        follower: i32,
        offset: i64,
        limit: ReadLimit,
        leader_epoch: Option<i32>,
    ) -> Result<FollowerRead, BrokerError> {
        self.check_epoch(leader_epoch)?;
        let (records, log_end) = {
            let inner = self.lock();
            let log_end = check_in_range(&inner.log, offset)?;
            let records = if offset == log_end {
                Vec::new()
            } else {
                inner.log.read_within(offset, limit, log_end)?
            };
            (records, log_end)
        };
        let may_rejoin = self
            .replica_set()
            .record_fetch(follower, offset, log_end, now_ms());
        self.update_high_watermark();
        Ok(FollowerRead {
            records,
            offsets: self.offsets(),
            may_rejoin,
        })
    }

    /// Whether this replica may have lost records it had already fetched and reported to
    /// its leader, which the leader may have acknowledged on its word: its recovery cut
    /// data from the log (a torn or corrupt tail, or less than the recovery point), or
    /// the flush policy lets a crash drop appended data unseen (anything but
    /// every-append; the rule then holds for every reopened log, clean shutdown or
    /// not, since no marker tells them apart). Such
    /// a replica leaves the ISR before it takes part in any election and rejoins by
    /// catching up (see `cluster::isr_exit`).
    pub fn must_leave_isr(&self) -> bool {
        self.leave_isr_pending.load(Ordering::SeqCst)
    }

    /// The catalog no longer counts this replica in sync (or never must stop doing so).
    pub fn isr_left(&self) {
        self.leave_isr_pending.store(false, Ordering::SeqCst);
    }

    /// A fetcher that names an epoch must name this replica's current one.
    pub fn check_epoch(&self, leader_epoch: Option<i32>) -> Result<(), BrokerError> {
        let Some(asked) = leader_epoch else {
            return Ok(());
        };
        let current = self.replica_set().leader_epoch;
        match asked.cmp(&current) {
            std::cmp::Ordering::Equal => Ok(()),
            std::cmp::Ordering::Less => Err(BrokerError::FencedLeaderEpoch { asked, current }),
            std::cmp::Ordering::Greater => Err(BrokerError::NotLeaderOrFollower {
                topic: self.topic.clone(),
                partition: self.index,
                leader: -1,
            }),
        }
    }

    /// Follower side: appends batches fetched from `leader` in `leader_epoch` at the
    /// offsets the leader gave them, makes them durable, and rebuilds producer state
    /// from them exactly as the leader did. Returns the new log end. Refused unless
    /// this replica still follows that leader in that epoch (a fetch answered just
    /// before this broker took over must not land in its log).
    pub async fn append_replicated(
        &self,
        records: &[u8],
        leader: i32,
        leader_epoch: i32,
    ) -> Result<i64, BrokerError> {
        let (role, current_epoch) = {
            let replicas = self.replica_set();
            (replicas.role, replicas.leader_epoch)
        };
        if role != (Role::Follower { leader }) || current_epoch != leader_epoch {
            return Err(BrokerError::NotLeaderOrFollower {
                topic: self.topic.clone(),
                partition: self.index,
                leader: -1,
            });
        }
        // A follower's copy in a trace (docs/operations.md, "Traces"): DEBUG, so only an
        // exporter enables it.
        let span = tracing::debug_span!(
            "replicate",
            topic = %self.topic,
            partition = self.index,
            leader,
            leader_epoch,
            bytes = records.len(),
            log_end = tracing::field::Empty,
        );
        // Where a follower's share of an acks=all produce goes (docs/benchmarks.md), read
        // only when that debug log is on: the append, then the fsync.
        let started = tracing::enabled!(tracing::Level::DEBUG).then(tokio::time::Instant::now);
        {
            let mut inner = self.lock();
            for item in batch::Batches::new(records) {
                let (header, bytes) = item?;
                let log_end = inner.log.log_end_offset();
                if header.last_offset() < log_end {
                    continue; // the leader answered from the start of a batch we have
                }
                if header.is_filler() && header.base_offset < log_end {
                    // The leader's cleaner merged removed batches into one filler, over
                    // offsets this replica holds as separate batches: the part past the
                    // log end stands for the same (record-less) offsets.
                    let delta = i32::try_from(header.last_offset() - log_end).map_err(|_| {
                        BrokerError::InvalidRequest("filler spans too many offsets".into())
                    })?;
                    let rest = batch::filler(
                        log_end,
                        delta,
                        header.partition_leader_epoch,
                        header.max_timestamp,
                    );
                    self.append_to_log(&mut inner, &rest, header.partition_leader_epoch)?;
                    continue;
                }
                if header.base_offset != log_end {
                    return Err(BrokerError::InvalidRequest(format!(
                        "replicated batch starts at {} but the log ends at {log_end}",
                        header.base_offset
                    )));
                }
                self.append_to_log(&mut inner, bytes, header.partition_leader_epoch)?;
            }
        }
        let log_end = self.lock().log.log_end_offset();
        span.record("log_end", log_end);
        let appended_at = started.map(|_| tokio::time::Instant::now());
        self.sync_to(log_end)
            .instrument(tracing::debug_span!(parent: &span, "fsync", end = log_end))
            .await?;
        if let (Some(started), Some(appended_at)) = (started, appended_at) {
            tracing::debug!(
                topic = %self.topic,
                partition = self.index,
                append_us = micros(appended_at - started),
                sync_us = micros(appended_at.elapsed()),
                "replica timing"
            );
        }
        self.log_end.send_replace(log_end);
        Ok(log_end)
    }

    /// Follower: the leader's high watermark, bounded by what this replica holds.
    pub fn follow_high_watermark(&self, leader_high_watermark: i64) {
        let local = self.local_end.load(Ordering::SeqCst);
        self.advance_high_watermark(leader_high_watermark.min(local));
    }

    /// Follower: drops everything from `offset` on (the leader does not have it) and
    /// rebuilds producer state from what remains.
    pub fn truncate_to(&self, offset: i64) -> Result<(), BrokerError> {
        let mut inner = self.lock();
        // Cut at the start of the batch holding `offset`, so no batch is split.
        let mut boundary = offset;
        inner.log.for_each_header(offset, |header| {
            boundary = header.base_offset.min(offset);
            ControlFlow::Break(())
        })?;
        let offset = boundary;
        inner.log.truncate_to(offset)?;
        self.epoch_history().truncate_from(offset);
        inner.producers = rebuild_producer_state(&self.dir, &inner.log, now_ms())?;
        // A marker past the cut may have closed a transaction that is open again now:
        // only a walk of what remains knows.
        let end = inner.log.log_end_offset();
        let high_watermark = (*self.high_watermark.borrow()).min(end);
        inner.txns = recover_transactions(&self.dir, &inner.log, high_watermark)?;
        self.local_end.fetch_min(end, Ordering::SeqCst);
        self.log_end.send_replace(end);
        self.high_watermark.send_if_modified(|hw| {
            let lowered = *hw > end;
            if lowered {
                *hw = end;
            }
            lowered
        });
        self.publish_last_stable(&inner);
        tracing::warn!(topic = %self.topic, partition = self.index, offset, "truncated the log to match the leader");
        Ok(())
    }

    fn epoch_history(&self) -> MutexGuard<'_, EpochHistory> {
        self.epochs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The epoch of this replica's last batch.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.epoch_history().latest()
    }

    /// Leader side of OffsetForLeaderEpoch: the largest epoch `<= epoch` in this log and
    /// the offset where it ends.
    pub fn epoch_end(&self, epoch: i32) -> (i32, i64) {
        let log_end = self.lock().log.log_end_offset();
        self.epoch_history().end_of(epoch, log_end)
    }

    /// A receiver that changes whenever the log end moves (followers long-poll on it).
    pub fn watch_log_end(&self) -> watch::Receiver<i64> {
        self.log_end.subscribe()
    }

    /// Makes every offset below `end` durable (per the flush policy) and, as far as the
    /// in-sync replicas allow, visible.
    async fn make_visible(&self, end: i64) -> Result<(), BrokerError> {
        self.publish_log_end(end);
        self.sync_to(end).await?;
        self.update_high_watermark();
        Ok(())
    }

    /// Wakes the followers waiting for data below `end`.
    fn publish_log_end(&self, end: i64) {
        self.log_end.send_if_modified(|log_end| {
            let moved = end > *log_end;
            if moved {
                *log_end = end;
            }
            moved
        });
    }

    /// Makes every offset below `end` durable per the flush policy (group commit).
    async fn sync_to(&self, end: i64) -> Result<(), BrokerError> {
        if self.settings.log.flush != FlushPolicy::EveryAppend {
            self.local_end.fetch_max(end, Ordering::SeqCst);
            return Ok(());
        }
        // Group commit: whoever holds the lock fsyncs everything appended so far; the
        // appends queued behind it usually find their offsets already durable.
        let mut durable = self.durable.lock().await;
        // `local_end` below `durable` means a truncation cut what was synced: offsets
        // appended since are new data and need their own fsync.
        if *durable >= end && self.local_end.load(Ordering::SeqCst) >= end {
            return Ok(());
        }
        let sync_point = self.lock().log.sync_point();
        let synced_to = tokio::task::spawn_blocking(move || {
            sync_point.sync().map(|()| sync_point.end_offset())
        })
        .await
        .map_err(|e| BrokerError::Io(std::io::Error::other(e)))??;
        *durable = synced_to;
        self.local_end.fetch_max(synced_to, Ordering::SeqCst);
        Ok(())
    }

    fn advance_high_watermark(&self, offset: i64) {
        let advanced = self.high_watermark.send_if_modified(|hw| {
            let advanced = offset > *hw;
            if advanced {
                *hw = offset;
            }
            advanced
        });
        if advanced {
            let mut inner = self.lock();
            inner.txns.prune_stable(offset);
            self.publish_last_stable(&inner);
        }
    }

    pub fn offsets(&self) -> PartitionOffsets {
        let inner = self.lock();
        let high_watermark = *self.high_watermark.borrow();
        PartitionOffsets {
            log_start_offset: inner.log.log_start_offset(),
            high_watermark,
            log_end_offset: inner.log.log_end_offset(),
            last_stable_offset: inner.txns.last_stable_offset(high_watermark),
        }
    }

    /// A receiver that changes whenever the high watermark advances.
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// A receiver that changes whenever the last stable offset moves.
    pub fn watch_last_stable_offset(&self) -> watch::Receiver<i64> {
        self.last_stable.subscribe()
    }

    /// Whether this partition's producers may expire: not in internal topics
    /// (`__transaction_state`), where the producer epoch is the coordinator's fence and
    /// forgetting it would let a deposed coordinator write again.
    fn producers_expire(&self) -> bool {
        !idem_proto::internal::is_internal_topic(&self.topic)
    }

    /// Forgets producers idle longer than the configured expiration (server clock);
    /// never a producer with an open transaction, never in an internal topic.
    pub fn expire_producers(&self, now_ms: i64) -> usize {
        if !self.producers_expire() {
            return 0;
        }
        let expired = self
            .lock()
            .producers
            .remove_expired(now_ms, self.settings.producer_id_expiration_ms);
        if expired > 0 {
            tracing::info!(topic = %self.topic, partition = self.index, expired, "expired idle producer ids");
        }
        expired
    }

    /// What the metrics report of this partition: the producer ids it keeps state
    /// for, and the bytes of its log on disk.
    pub fn footprint(&self) -> (usize, u64) {
        let inner = self.lock();
        (inner.producers.len(), inner.log.size_bytes())
    }

    /// Flushes on a timer for `interval:<ms>` policies.
    pub fn flush(&self) -> Result<(), BrokerError> {
        let mut inner = self.lock();
        // A retired partition's files are being deleted: nothing of it is worth keeping.
        if self.retired.load(Ordering::SeqCst) {
            return Ok(());
        }
        Ok(inner.log.flush()?)
    }

    /// Clean shutdown: flush the log and snapshot the producer state at the log end,
    /// so the next start needs no replay.
    pub fn shutdown(&self) -> Result<(), BrokerError> {
        let mut inner = self.lock();
        inner.log.flush()?;
        let end = inner.log.log_end_offset();
        let bounds = self.snapshot_bounds(&inner);
        producer_state::write_snapshot(&self.dir, end, &inner.producers, bounds)?;
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, PartitionInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Control batches are written only through `WriteTxnMarkers` (the coordinator), never
/// produced; a transactional batch needs a producer id (whether its transaction is open
/// is the producer state's call).
fn refuse_unsupported_batch(header: &BatchHeader) -> Result<(), BrokerError> {
    if header.is_control() {
        return Err(BrokerError::InvalidRequest(
            "control batches are written only by the transaction coordinator".into(),
        ));
    }
    if header.is_transactional() && !header.has_producer_id() {
        return Err(BrokerError::InvalidRequest(
            "a transactional batch needs a producer id".into(),
        ));
    }
    if header.has_producer_id() && (header.base_sequence < 0 || header.producer_epoch < 0) {
        return Err(BrokerError::InvalidRequest(format!(
            "producer {} sent base sequence {} with epoch {}: both must be >= 0",
            header.producer_id, header.base_sequence, header.producer_epoch
        )));
    }
    Ok(())
}

/// A refusal an earlier batch of the same producer, still in flight, may resolve: the
/// batch is ahead of the sequence the broker expects, or the producer's first batch has
/// not arrived yet.
fn is_sequence_gap(e: &BrokerError) -> bool {
    match e {
        BrokerError::OutOfOrderSequence { expected, got, .. } => {
            // Sequences wrap from i32::MAX to 0; "ahead" is a short way forward.
            let modulus = i64::from(i32::MAX) + 1;
            let ahead = (i64::from(*got) - i64::from(*expected)).rem_euclid(modulus);
            (1..modulus / 2).contains(&ahead)
        }
        BrokerError::UnknownProducerId { .. } => true,
        _ => false,
    }
}

/// `Some(original)` for a duplicate; `None` when the batch is the next one to append.
fn check_producer(
    producers: &ProducerStateTable,
    header: &BatchHeader,
) -> Result<Option<BatchMetadata>, BrokerError> {
    if !header.has_producer_id() {
        return Ok(None);
    }
    let producer_id = header.producer_id;
    match producers.check_data(
        producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.last_sequence(),
        header.is_transactional(),
    ) {
        Decision::Append => Ok(None),
        Decision::Duplicate(original) => {
            // A retry of a batch already appended: answered with its original offsets.
            metrics::counter!("idem_produce_duplicate_batches_total").increment(1);
            Ok(Some(original))
        }
        Decision::OutOfOrder { expected, got } => Err(BrokerError::OutOfOrderSequence {
            producer_id,
            expected,
            got,
        }),
        Decision::InvalidEpoch { current, got } => Err(BrokerError::InvalidProducerEpoch {
            producer_id,
            current,
            got,
        }),
        Decision::UnknownProducerId => Err(BrokerError::UnknownProducerId {
            producer_id,
            sequence: header.base_sequence,
        }),
        Decision::InvalidTxnState(refusal) => Err(BrokerError::InvalidTxnState {
            producer_id,
            refusal,
        }),
    }
}

/// What a control batch says; `None` for data batches.
fn read_marker(buf: &[u8]) -> Result<Option<ControlMarker>, BrokerError> {
    let header = batch::decode_header(buf)?;
    if !header.is_control() {
        return Ok(None);
    }
    Ok(Some(control::decode_control(buf)?))
}

/// A compacted topic keeps each key's latest record: a record without a key could never
/// be compacted, so it is refused (as Kafka does), and nothing of its batch appended.
fn refuse_unkeyed(records: &[u8]) -> Result<(), BrokerError> {
    let mut unkeyed = None;
    batch::retain_records(records, |record| {
        if record.key.is_none() && unkeyed.is_none() {
            unkeyed = Some(record.offset);
        }
        true
    })?;
    match unkeyed {
        Some(delta) => Err(BrokerError::InvalidRecord(format!(
            "record {delta} of the batch has no key; a compacted topic (cleanup.policy \
             compact) keeps each key's latest record and takes only keyed ones"
        ))),
        None => Ok(()),
    }
}

/// A fetch position must lie within the log (the end itself included); returns the end.
fn check_in_range(log: &PartitionLog, offset: i64) -> Result<i64, BrokerError> {
    let (log_start, log_end) = (log.log_start_offset(), log.log_end_offset());
    if offset < log_start || offset > log_end {
        return Err(BrokerError::OffsetOutOfRange {
            offset,
            log_start,
            log_end,
        });
    }
    Ok(log_end)
}

/// The leader-epoch history of a log, from one walk of its batch headers.
fn epoch_history(log: &PartitionLog) -> Result<EpochHistory, BrokerError> {
    let mut history = EpochHistory::default();
    log.for_each_header(log.first_segment_base(), |header| {
        history.record(header.partition_leader_epoch, header.base_offset);
        ControlFlow::Continue(())
    })?;
    Ok(history)
}

fn rebuild_producer_state(
    dir: &Path,
    log: &PartitionLog,
    now_ms: i64,
) -> Result<ProducerStateTable, BrokerError> {
    let log_end = log.log_end_offset();
    producer_state::delete_snapshots_above(dir, log_end)?;
    producer_state_at(dir, log, log_end, now_ms)
}

/// The producer state as of `at` (a batch boundary): the newest usable snapshot at or
/// below it plus the batches from there to `at`.
fn producer_state_at(
    dir: &Path,
    log: &PartitionLog,
    at: i64,
    now_ms: i64,
) -> Result<ProducerStateTable, BrokerError> {
    let (from, mut table) = match producer_state::latest_snapshot(dir, at) {
        Ok(Some((offset, table))) => (offset, table),
        Ok(None) => (log.first_segment_base(), ProducerStateTable::default()),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "no usable producer snapshot; replaying the whole log");
            (log.first_segment_base(), ProducerStateTable::default())
        }
    };
    let mut replayed = 0usize;
    log.for_each_batch(from, |header, marker| {
        if header.base_offset >= at {
            return ControlFlow::Break(());
        }
        if header.base_offset >= from {
            table.apply_batch(header, marker, now_ms);
            replayed += 1;
        }
        ControlFlow::Continue(())
    })?;
    tracing::debug!(dir = %dir.display(), snapshot_offset = from, at, replayed, producers = table.len(), "rebuilt producer state");
    Ok(table)
}

pub use idem_runtime::clock::now_ms;

#[cfg(test)]
mod tests;
