//! The transaction coordinator's decisions as a pure function: given what is known of a
//! transactional id and a request, the new metadata and the effects to carry out, in
//! order. The shell persists every `Persist` to `__transaction_state` before carrying
//! out the next effect, writes markers, and sends the reply; nothing here does I/O.
//!
//! A partition joins a transaction in two steps, in this order: the registration is
//! persisted, then a BEGIN marker opens the transaction at the partition's leader
//! (`Effect::BeginPartitions`). So every transaction open in any partition is one this
//! coordinator will end, and no transaction can hang.
//!
//! Every transaction that completes moves the producer to the next epoch (its markers
//! carry that epoch), so a delayed write of transaction N is fenced by the broker and
//! can never land in transaction N+1. A retried `EndTxn` of the previous epoch with the
//! same outcome is answered again; anything older is fenced.
//!
//! The exception is an `EndTxn` that asks to keep the epoch (`keep_epoch`: Kafka's
//! transaction version 1, for Kafka clients such as librdkafka that change their epoch
//! only through InitProducerId; docs/kafka.md). Its markers carry the transaction's own
//! epoch, the producer stays at it, a retry of that epoch and outcome is answered
//! again, and the next transaction registers only once the markers are written (no
//! BEGIN can go behind an end at the same epoch). A new instance and a timeout still
//! move the epoch on and fence.

use std::collections::BTreeSet;

use crate::txn::state::TxnState;

/// A partition a transaction wrote to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

/// What the coordinator persists for a transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    /// When the open transaction added its first partition (coordinator clock).
    pub txn_start_ms: i64,
    pub last_update_ms: i64,
    /// The current outcome was asked for by the producer's EndTxn (not forced by a
    /// timeout or a new instance): only then is a retried EndTxn answered again.
    pub ended_by_producer: bool,
    /// That EndTxn kept the producer's epoch (`keep_epoch`): its markers carry the
    /// transaction's own epoch and its retry names the same epoch, not the one before.
    pub kept_epoch: bool,
    /// The identity a renewal (an InitProducerId naming the caller's current producer
    /// id and epoch) replaced to reach this one: a retry of that renewal is answered
    /// with this identity again instead of being taken for a zombie.
    pub renewed_from: Option<ProducerIdentity>,
    /// Set on an Ongoing transaction that began while its predecessor's markers were
    /// still being written; cleared once they are.
    pub pending_end: Option<PendingEnd>,
}

impl TxnMetadata {
    /// Markers are being written, of a prepared outcome or of the outcome a new
    /// transaction began behind: the id answers `CONCURRENT_TRANSACTIONS` to anything
    /// but their completion and (behind an outcome) its producer's registrations.
    pub fn is_completing(&self) -> bool {
        self.state.is_completing() || self.pending_end.is_some()
    }
}

#[cfg(test)]
impl TxnMetadata {
    /// An id at `state` with no partitions and no history, for tests to adjust.
    pub(crate) fn for_tests(
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        state: TxnState,
    ) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.into(),
            producer_id,
            producer_epoch,
            timeout_ms: 60_000,
            state,
            partitions: BTreeSet::new(),
            txn_start_ms: -1,
            last_update_ms: 0,
            ended_by_producer: false,
            kept_epoch: false,
            renewed_from: None,
            pending_end: None,
        }
    }
}

/// The decided outcome of an id's previous transaction whose markers may not all be
/// written yet, kept on the next transaction that began behind it. In Kafka's states
/// the id went PrepareCommit -> CompleteCommit -> Ongoing; the CompleteCommit is what
/// is pending. The markers carry the id's current epoch (the one the outcome moved the
/// producer to, at which the new transaction runs); a loader that finds this resends
/// them, which a broker answers without appending when they are already there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEnd {
    pub commit: bool,
    pub partitions: BTreeSet<TopicPartition>,
}

/// A producer id and epoch, as a renewing producer names its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdentity {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    InitProducerId {
        timeout_ms: i32,
        /// Set by a running instance renewing itself: act only if this is still the
        /// id's current identity.
        renewing: Option<ProducerIdentity>,
    },
    AddPartitions {
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<TopicPartition>,
    },
    EndTxn {
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        /// Kafka's transaction version 1: the producer keeps its epoch (see the module).
        keep_epoch: bool,
    },
    /// Internal: every marker of the prepared outcome is written.
    MarkersWritten,
    /// Internal: the coordinator's timer; aborts a transaction open past its timeout.
    Tick,
    /// Operators: abort the open transaction under the next epoch (fencing its
    /// producer), as a timeout would.
    Abort,
    /// Internal: the coordinator's timer; an id with no transaction under way and no
    /// change for longer than `idle_ms` is retired (persisted as Dead, then forgotten),
    /// as Kafka's `transactional.id.expiration.ms` does.
    Expire { idle_ms: i64 },
}

/// Why a request is refused (each maps to the wire code of the same name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnError {
    /// A newer instance of this transactional id exists (fatal for the caller).
    ProducerFenced,
    /// The producer id does not belong to this transactional id.
    InvalidProducerIdMapping,
    /// Markers of the previous outcome are still being written (retriable).
    ConcurrentTransactions,
    /// The request does not fit the transaction's state.
    InvalidTxnState,
    /// Timeout not within `1..=max`.
    InvalidTransactionTimeout,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    ProducerId {
        producer_id: i64,
        producer_epoch: i16,
    },
    /// Success; for `EndTxn`, the epoch the producer uses from now on.
    Ok {
        producer_epoch: i16,
    },
    Error(TxnError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Make this the durable state (append to `__transaction_state`, acks=all) before
    /// anything that follows.
    Persist(TxnMetadata),
    /// Write COMMIT or ABORT control batches with this producer id and epoch to every
    /// partition; report `MarkersWritten` once all leaders accepted them.
    WriteMarkers {
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        partitions: BTreeSet<TopicPartition>,
        /// The epoch is the transaction's own (kept), not the next one: the broker then
        /// closes a transaction open at exactly this epoch.
        at_transaction_epoch: bool,
    },
    /// Write a BEGIN control batch for this producer id and (the transaction's) epoch
    /// to every partition, and wait until every leader accepted it: only then may the
    /// producer write there. Repeating it is harmless (the broker answers a BEGIN of an
    /// already open transaction without appending).
    BeginPartitions {
        producer_id: i64,
        producer_epoch: i16,
        partitions: BTreeSet<TopicPartition>,
    },
    /// Write a BEGIN for a transaction that began behind the outcome `end` of the one
    /// before it (its `pending_end`), in every partition, and wait until every leader
    /// accepted it. A leader that `end`'s marker has not reached yet refuses the BEGIN
    /// (the transaction it closes is still open there); those partitions wait for
    /// `end`'s markers, written here when nobody else is writing them, and are begun
    /// again.
    BeginBehindEnd {
        producer_id: i64,
        producer_epoch: i16,
        partitions: BTreeSet<TopicPartition>,
        end: PendingEnd,
    },
    Reply(Reply),
}

/// What the shell supplies: the clock, limits, and a fresh producer id when the
/// decider asked for one.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    pub now_ms: i64,
    pub max_timeout_ms: i32,
    pub fresh_producer_id: Option<i64>,
}

/// The outcome of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Carry these out in order.
    Act(Vec<Effect>),
    /// Ask again with `Context::fresh_producer_id` set (a new id, or an epoch that
    /// cannot be bumped any further).
    NeedsFreshProducerId,
}

/// Decides what `request` does to `transactional_id`, whose persisted metadata is
/// `current` (`None` for an id never seen).
pub fn decide(
    transactional_id: &str,
    current: Option<&TxnMetadata>,
    request: &Request,
    ctx: Context,
) -> Decision {
    match request {
        Request::InitProducerId {
            timeout_ms,
            renewing,
        } => init_producer_id(transactional_id, current, *timeout_ms, *renewing, ctx),
        Request::AddPartitions {
            producer_id,
            producer_epoch,
            partitions,
        } => match current {
            None => reply(TxnError::InvalidProducerIdMapping),
            Some(meta) => add_partitions(meta, *producer_id, *producer_epoch, partitions, ctx),
        },
        Request::EndTxn {
            producer_id,
            producer_epoch,
            commit,
            keep_epoch,
        } => match current {
            None => reply(TxnError::InvalidProducerIdMapping),
            Some(meta) => end_txn(
                meta,
                EndAsked {
                    producer_id: *producer_id,
                    producer_epoch: *producer_epoch,
                    commit: *commit,
                    keep_epoch: *keep_epoch,
                },
                ctx,
            ),
        },
        Request::MarkersWritten => match current {
            Some(meta) => markers_written(meta, ctx),
            None => Decision::Act(Vec::new()),
        },
        Request::Tick => match current {
            Some(meta)
                if meta.state == TxnState::Ongoing
                    && meta.pending_end.is_none()
                    && ctx.now_ms - meta.txn_start_ms > i64::from(meta.timeout_ms) =>
            {
                abort_with_next_epoch(meta, ctx, None)
            }
            _ => Decision::Act(Vec::new()),
        },
        Request::Expire { idle_ms } => match current {
            Some(meta) if is_expired(meta, *idle_ms, ctx.now_ms) => {
                Decision::Act(vec![Effect::Persist(TxnMetadata {
                    state: TxnState::Dead,
                    partitions: BTreeSet::new(),
                    last_update_ms: ctx.now_ms,
                    ..meta.clone()
                })])
            }
            _ => Decision::Act(Vec::new()),
        },
        Request::Abort => match current {
            Some(meta) if meta.pending_end.is_some() => reply(TxnError::ConcurrentTransactions),
            Some(meta) if meta.state == TxnState::Ongoing => {
                let producer_epoch = meta.producer_epoch.saturating_add(1);
                match abort_with_next_epoch(meta, ctx, None) {
                    Decision::Act(mut effects) => {
                        effects.push(Effect::Reply(Reply::Ok { producer_epoch }));
                        Decision::Act(effects)
                    }
                    other => other,
                }
            }
            _ => reply(TxnError::InvalidTxnState),
        },
    }
}

/// Whether `meta` may be retired: nothing under way (Empty or Complete*) and idle for
/// longer than `idle_ms`.
pub fn is_expired(meta: &TxnMetadata, idle_ms: i64, now_ms: i64) -> bool {
    matches!(
        meta.state,
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
    ) && now_ms.saturating_sub(meta.last_update_ms) > idle_ms
}

fn reply(error: TxnError) -> Decision {
    Decision::Act(vec![Effect::Reply(Reply::Error(error))])
}

fn init_producer_id(
    id: &str,
    current: Option<&TxnMetadata>,
    timeout_ms: i32,
    renewing: Option<ProducerIdentity>,
    ctx: Context,
) -> Decision {
    if timeout_ms < 1 || timeout_ms > ctx.max_timeout_ms {
        return reply(TxnError::InvalidTransactionTimeout);
    }
    if let Some(renewing) = renewing {
        let Some(meta) = current else {
            return reply(TxnError::InvalidProducerIdMapping);
        };
        if meta.state == TxnState::Empty && meta.renewed_from == Some(renewing) {
            // A retry of the renewal that made this identity: its answer was lost.
            return Decision::Act(vec![Effect::Reply(Reply::ProducerId {
                producer_id: meta.producer_id,
                producer_epoch: meta.producer_epoch,
            })]);
        }
        if meta.producer_id != renewing.producer_id
            || meta.producer_epoch != renewing.producer_epoch
        {
            return reply(TxnError::ProducerFenced);
        }
    }
    let Some(meta) = current else {
        let Some(producer_id) = ctx.fresh_producer_id else {
            return Decision::NeedsFreshProducerId;
        };
        return start_empty(id, producer_id, 0, timeout_ms, None, ctx);
    };
    if meta.pending_end.is_some() {
        return reply(TxnError::ConcurrentTransactions);
    }
    match meta.state {
        // A new instance takes over an open transaction: abort it under the next epoch
        // (fencing the old instance); the caller retries and finds it settled.
        TxnState::Ongoing => {
            abort_with_next_epoch(meta, ctx, Some(TxnError::ConcurrentTransactions))
        }
        s if s.is_completing() => reply(TxnError::ConcurrentTransactions),
        TxnState::Dead => reply(TxnError::InvalidTxnState),
        // The last epoch is never handed out: a transaction at it could not be ended
        // (its markers need the next epoch). EndTxn may move a producer to it; the SDK
        // then renews, and lands here.
        _ => match meta.producer_epoch.checked_add(1).filter(|e| *e < i16::MAX) {
            Some(epoch) => start_empty(id, meta.producer_id, epoch, timeout_ms, renewing, ctx),
            None => match ctx.fresh_producer_id {
                Some(producer_id) => start_empty(id, producer_id, 0, timeout_ms, renewing, ctx),
                None => Decision::NeedsFreshProducerId,
            },
        },
    }
}

fn start_empty(
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
    timeout_ms: i32,
    renewed_from: Option<ProducerIdentity>,
    ctx: Context,
) -> Decision {
    let next = TxnMetadata {
        transactional_id: id.to_string(),
        producer_id,
        producer_epoch,
        timeout_ms,
        state: TxnState::Empty,
        partitions: BTreeSet::new(),
        txn_start_ms: -1,
        last_update_ms: ctx.now_ms,
        ended_by_producer: false,
        kept_epoch: false,
        renewed_from,
        pending_end: None,
    };
    Decision::Act(vec![
        Effect::Persist(next),
        Effect::Reply(Reply::ProducerId {
            producer_id,
            producer_epoch,
        }),
    ])
}

/// Checks that a request comes from the current producer instance.
fn check_producer(
    meta: &TxnMetadata,
    producer_id: i64,
    producer_epoch: i16,
) -> Result<(), TxnError> {
    if producer_id != meta.producer_id {
        return Err(TxnError::InvalidProducerIdMapping);
    }
    if producer_epoch != meta.producer_epoch {
        return Err(TxnError::ProducerFenced);
    }
    Ok(())
}

fn add_partitions(
    meta: &TxnMetadata,
    producer_id: i64,
    producer_epoch: i16,
    partitions: &[TopicPartition],
    ctx: Context,
) -> Decision {
    if let Err(e) = check_producer(meta, producer_id, producer_epoch) {
        return reply(e);
    }
    if producer_epoch == i16::MAX {
        // A transaction at the last epoch could not end (its markers need the next):
        // the producer renews first (InitProducerId), as the SDK does.
        return reply(TxnError::ProducerFenced);
    }
    // Prepare* -> Complete* (pending) -> Ongoing, each step one the table allows.
    // Not behind an end that kept the epoch: its markers and this BEGIN would carry the
    // same epoch, and a broker could not tell the BEGIN from a repeat of the old one.
    let ended_by_this_producer = meta.ended_by_producer
        && !meta.kept_epoch
        && meta
            .state
            .completion()
            .is_some_and(|done| done.can_transition_to(TxnState::Ongoing));
    if ended_by_this_producer && meta.pending_end.is_none() && !partitions.is_empty() {
        return begin_behind_end(meta, partitions, ctx);
    }
    // An Ongoing begun behind an outcome still pending takes its producer's
    // registrations like any Ongoing; only their BEGINs go behind the outcome's markers.
    // The outcome stays pending (only its markers' completion clears it), so no new
    // outcome can be decided before it is everywhere.
    let behind = meta
        .pending_end
        .as_ref()
        .filter(|_| meta.state == TxnState::Ongoing && !partitions.is_empty());
    if meta.is_completing() && behind.is_none() {
        return reply(TxnError::ConcurrentTransactions);
    }
    if !meta.state.can_transition_to(TxnState::Ongoing) {
        return reply(TxnError::InvalidTxnState);
    }
    let ok = Effect::Reply(Reply::Ok { producer_epoch });
    // BEGIN goes to every partition asked for, also on a retry: the first attempt may
    // have persisted the registration and then lost its markers.
    let begin = (!partitions.is_empty()).then(|| {
        let partitions = partitions.iter().cloned().collect();
        match behind {
            Some(end) => Effect::BeginBehindEnd {
                producer_id,
                producer_epoch,
                partitions,
                end: end.clone(),
            },
            None => Effect::BeginPartitions {
                producer_id,
                producer_epoch,
                partitions,
            },
        }
    });
    if meta.state == TxnState::Ongoing && partitions.iter().all(|p| meta.partitions.contains(p)) {
        // A retry: nothing new to persist.
        return Decision::Act(begin.into_iter().chain([ok]).collect());
    }
    let mut next = meta.clone();
    if meta.state != TxnState::Ongoing {
        next.partitions.clear();
        next.txn_start_ms = ctx.now_ms;
        next.ended_by_producer = false;
        next.kept_epoch = false;
    }
    next.state = TxnState::Ongoing;
    next.partitions.extend(partitions.iter().cloned());
    next.last_update_ms = ctx.now_ms;
    // Persisted before BEGIN: every transaction a partition opens is one the
    // coordinator knows it must end.
    let mut effects = vec![Effect::Persist(next)];
    effects.extend(begin);
    effects.push(ok);
    Decision::Act(effects)
}

/// The producer that ended the id's transaction starts its next one while the markers
/// of that end are still being written: the new transaction is persisted at once, with
/// the outcome as its `pending_end`, and its BEGINs go out right after that append,
/// each partition's behind the outcome's marker there (`Effect::BeginBehindEnd`). The
/// registration's answer then waits for one append alongside the markers instead of
/// the markers and then an append, and at replication factor 3 not for the markers'
/// replication before the BEGINs are sent.
fn begin_behind_end(meta: &TxnMetadata, partitions: &[TopicPartition], ctx: Context) -> Decision {
    let end = PendingEnd {
        commit: meta.state == TxnState::PrepareCommit,
        partitions: meta.partitions.clone(),
    };
    let mut next = meta.clone();
    next.pending_end = Some(end.clone());
    next.state = TxnState::Ongoing;
    next.partitions = partitions.iter().cloned().collect();
    next.txn_start_ms = ctx.now_ms;
    next.last_update_ms = ctx.now_ms;
    next.ended_by_producer = false;
    Decision::Act(vec![
        Effect::Persist(next.clone()),
        Effect::BeginBehindEnd {
            producer_id: meta.producer_id,
            producer_epoch: meta.producer_epoch,
            partitions: next.partitions,
            end,
        },
        Effect::Reply(Reply::Ok {
            producer_epoch: meta.producer_epoch,
        }),
    ])
}

/// What an EndTxn asks.
#[derive(Debug, Clone, Copy)]
struct EndAsked {
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    keep_epoch: bool,
}

fn end_txn(meta: &TxnMetadata, asked: EndAsked, ctx: Context) -> Decision {
    let EndAsked {
        producer_id,
        producer_epoch,
        commit,
        keep_epoch,
    } = asked;
    if producer_id != meta.producer_id {
        return reply(TxnError::InvalidProducerIdMapping);
    }
    let (prepared, completed) = if commit {
        (TxnState::PrepareCommit, TxnState::CompleteCommit)
    } else {
        (TxnState::PrepareAbort, TxnState::CompleteAbort)
    };
    // A retry of this producer's EndTxn: of the epoch before, which the end moved it
    // on from; or, when the end kept the epoch, of the same one. After a timeout or a
    // takeover the producer is fenced instead.
    let ended_at = if meta.kept_epoch {
        Some(meta.producer_epoch)
    } else {
        meta.producer_epoch.checked_sub(1)
    };
    let retried = meta.ended_by_producer && ended_at == Some(producer_epoch);
    if retried && (meta.state == prepared || meta.state == completed) {
        return Decision::Act(vec![Effect::Reply(Reply::Ok {
            producer_epoch: meta.producer_epoch,
        })]);
    }
    if retried && (meta.state.is_completing() || meta.state.is_settled()) {
        return reply(TxnError::InvalidTxnState); // the other outcome was decided
    }
    if producer_epoch != meta.producer_epoch {
        return reply(TxnError::ProducerFenced);
    }
    match meta.state {
        _ if meta.pending_end.is_some() => reply(TxnError::ConcurrentTransactions),
        TxnState::Ongoing => {
            let epoch = if keep_epoch {
                meta.producer_epoch
            } else {
                let Some(epoch) = meta.producer_epoch.checked_add(1) else {
                    // Out of epochs: abort-only via InitProducerId, which takes a new id.
                    return reply(TxnError::ProducerFenced);
                };
                epoch
            };
            let mut next = meta.clone();
            next.state = prepared;
            next.producer_epoch = epoch;
            next.last_update_ms = ctx.now_ms;
            next.ended_by_producer = true;
            next.kept_epoch = keep_epoch;
            let markers = Effect::WriteMarkers {
                producer_id,
                producer_epoch: epoch,
                commit,
                partitions: next.partitions.clone(),
                at_transaction_epoch: keep_epoch,
            };
            Decision::Act(vec![
                Effect::Persist(next),
                Effect::Reply(Reply::Ok {
                    producer_epoch: epoch,
                }),
                markers,
            ])
        }
        s if s.is_completing() => reply(TxnError::ConcurrentTransactions),
        _ => reply(TxnError::InvalidTxnState),
    }
}

/// Aborts an open transaction under the next epoch, fencing the current producer.
fn abort_with_next_epoch(meta: &TxnMetadata, ctx: Context, answer: Option<TxnError>) -> Decision {
    let mut next = meta.clone();
    // An exhausted epoch still aborts (markers at i16::MAX); InitProducerId then moves
    // the id to a fresh producer id.
    next.producer_epoch = meta.producer_epoch.saturating_add(1);
    next.state = TxnState::PrepareAbort;
    next.last_update_ms = ctx.now_ms;
    next.ended_by_producer = false;
    next.kept_epoch = false;
    let mut effects = vec![
        Effect::Persist(next.clone()),
        Effect::WriteMarkers {
            producer_id: next.producer_id,
            producer_epoch: next.producer_epoch,
            commit: false,
            partitions: next.partitions.clone(),
            at_transaction_epoch: false,
        },
    ];
    if let Some(error) = answer {
        effects.push(Effect::Reply(Reply::Error(error)));
    }
    Decision::Act(effects)
}

fn markers_written(meta: &TxnMetadata, ctx: Context) -> Decision {
    if meta.pending_end.is_some() {
        let mut next = meta.clone();
        next.pending_end = None;
        next.last_update_ms = ctx.now_ms;
        return Decision::Act(vec![Effect::Persist(next)]);
    }
    let Some(completed) = meta.state.completion() else {
        return Decision::Act(Vec::new()); // a late report: nothing to complete
    };
    let mut next = meta.clone();
    next.state = completed;
    next.partitions.clear();
    next.txn_start_ms = -1;
    next.last_update_ms = ctx.now_ms;
    Decision::Act(vec![Effect::Persist(next)])
}

#[cfg(test)]
mod tests;
