//! The ordering core of one partition's produce path, sans I/O: it takes events (a batch
//! sealed, a response, a new producer identity, time passing) and returns [`Command`]s
//! (send these bytes, complete that batch, fetch a producer id or bump its epoch). The
//! partition's sender task performs the commands; this module never sees a socket or a
//! clock.
//!
//! Invariants (exactly-once mode):
//! - A batch gets its `(producer_id, epoch, base_sequence)` when it is first sent, in
//!   queue order, so sequences are consecutive in send order; every retry resends the
//!   identical bytes.
//! - Batches are pipelined only while nothing has failed, and only within
//!   `max_in_flight` batches of the oldest unacknowledged one (answers may arrive out of
//!   order; the broker detects duplicates among a producer's last 5 batches). After
//!   any failure nothing new is sent until every in-flight request has resolved; then
//!   the batches that were already sent are resent **one at a time, lowest sequence
//!   first**, each only after its predecessor was acknowledged; pipelining resumes when
//!   no previously sent batch is left. So the log order equals the send order.
//! - `OUT_OF_ORDER_SEQUENCE_NUMBER` and `UNKNOWN_PRODUCER_ID` for a batch sent while a
//!   predecessor was unacknowledged are retriable: concurrent requests may reach the
//!   partition out of order. For a batch sent after all its predecessors were
//!   acknowledged they mean the broker lost or expired the producer's state.
//! - A sequence that may have been written is never reused: when the partition cannot
//!   continue its sequence (the case above, or a batch given up with its sequence
//!   assigned), it waits for all in-flight requests, bumps the epoch of the producer id
//!   it was using (KIP-360) and starts again at sequence 0. Batches that were definitely
//!   not written (every attempt refused, or behind such a batch) are re-encoded under
//!   the new epoch; batches that may have been written fail with
//!   [`ClientError::OutcomeUnknown`] (or [`ClientError::DeliveryTimeout`] with
//!   `possibly_written: true`) and are never resent.
//! - The new epoch is what keeps the log in send order across the reset: a request of
//!   the old epoch the client gave up on may still be in transit, and once the partition
//!   has seen the new epoch it refuses it (`INVALID_PRODUCER_EPOCH`) instead of
//!   appending it behind newer batches (a fresh producer id could not do that). Such a
//!   late refusal never reaches this core as a current attempt: the batch was already
//!   completed, and its answers are ignored as stale. `INVALID_PRODUCER_EPOCH` for a
//!   batch of the current epoch is fatal for that batch (something fenced this epoch).
//!
//! Transactional mode (`InflightConfig::transactional`): the same ordering rules, and
//! batches carry the transactional attribute; the producer identity belongs to the
//! transaction, so the partition never bumps its epoch itself. Where the idempotent
//! mode would move to a new epoch, the partition is **broken** instead: every
//! unacknowledged batch and every later one fails with the error that broke it, and the
//! caller must abort the transaction (whose marker bumps the epoch for everyone).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use idem_proto::batch::{self, ProducerInfo, Record};
use idem_proto::ErrorCode;

use super::config::{Delivery, ProducerConfig};
use crate::error::{self, ClientError, ErrorClass};
use crate::types::ProducerIdAndEpoch;

/// Identity of a sealed batch within its partition; increases in seal order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchId(pub u64);

/// The settings the ordering core needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InflightConfig {
    pub delivery: Delivery,
    pub max_in_flight: usize,
    pub delivery_timeout: Duration,
    pub retry_backoff: Duration,
    /// Batches belong to a transaction (exactly-once delivery only): they carry
    /// `ATTR_TRANSACTIONAL`, and a broken sequence fails the partition instead of
    /// bumping the epoch.
    pub transactional: bool,
}

impl From<&ProducerConfig> for InflightConfig {
    fn from(c: &ProducerConfig) -> Self {
        InflightConfig {
            delivery: c.delivery,
            max_in_flight: c.max_in_flight,
            delivery_timeout: c.delivery_timeout,
            retry_backoff: c.retry_backoff,
            transactional: false,
        }
    }
}

impl InflightConfig {
    /// The attributes every data batch is encoded with.
    fn attributes(&self) -> u16 {
        if self.transactional {
            batch::ATTR_TRANSACTIONAL
        } else {
            0
        }
    }
}

/// How one produce attempt ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// `NONE` or `DUPLICATE_SEQUENCE_NUMBER`: the batch is in the log at `base_offset`
    /// (for a duplicate, the offset it got when first appended; -1 if not reported).
    Appended { base_offset: i64 },
    /// The broker answered with an error code.
    Rejected { code: ErrorCode, message: String },
    /// No answer (connection lost, request timeout, malformed answer): the batch may or
    /// may not have been written. Retriable.
    Lost(ClientError),
    /// A failure no retry can fix (e.g. a request the transport refused as too large).
    Failed {
        error: ClientError,
        possibly_written: bool,
    },
}

/// What the sender task must do.
#[derive(Debug, Clone)]
pub enum Command {
    /// Send `records` (one encoded batch) as a produce request and report the result
    /// with [`PartitionInflight::on_outcome`]`(batch, attempt, ..)`.
    Send {
        batch: BatchId,
        attempt: u32,
        producer: ProducerInfo,
        records: Bytes,
    },
    /// The batch is done: the base offset of its records, or why it failed.
    Complete {
        batch: BatchId,
        result: Result<i64, ClientError>,
    },
    /// Obtain a fresh producer id (epoch 0) and report it with
    /// [`PartitionInflight::on_producer_id`]; keep trying until one arrives. Only for a
    /// partition that has no producer id yet.
    InitProducerId,
    /// Abandon the sequences of `current`: obtain the next epoch of its producer id
    /// (KIP-360; a fresh id at epoch 0 once the epoch is exhausted) and report it with
    /// [`PartitionInflight::on_producer_id`]; keep trying until one arrives.
    BumpProducerEpoch { current: ProducerIdAndEpoch },
    /// Leaders or topics changed, or a broker did not answer (its partitions may have a
    /// new leader): refresh the metadata cache before the next attempt looks up the
    /// leader. Emitted before the retry it concerns; retries keep their producer id,
    /// epoch and sequence, so a new leader that already has the batch deduplicates it.
    RefreshMetadata,
}

/// The partition's sending phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Pipelining new batches, up to `max_in_flight`.
    Sending,
    /// A batch failed: nothing is sent until every in-flight request has resolved; then
    /// either retry (`new_producer_id: false`) or move to a new producer identity (the
    /// next epoch of the producer id).
    Draining { new_producer_id: bool },
    /// Resending already-sent batches one at a time, lowest sequence first.
    Retrying,
    /// Waiting for a producer id or a new epoch of it; nothing is sent.
    AwaitingProducerId,
    /// Transactional mode only: the sequence cannot continue under the transaction's
    /// identity. Every batch fails at once with the error that broke it.
    Broken,
}

#[derive(Debug)]
enum Payload {
    /// Not encoded under the current producer id yet.
    Records(Vec<Record>),
    /// Encoded with the entry's `assigned` producer info; resent as-is.
    Encoded(Bytes),
}

#[derive(Debug)]
struct Entry {
    id: BatchId,
    payload: Payload,
    record_count: i32,
    size: usize,
    /// Producer id, epoch and base sequence, fixed at the first send under the current
    /// producer id. `None`: never sent under it.
    assigned: Option<ProducerInfo>,
    /// Attempt number of the request in flight.
    in_flight: Option<u32>,
    /// Whether the request in flight was sent while every predecessor was acknowledged.
    sent_as_head: bool,
    attempts: u32,
    /// Some attempt under the current producer id got no definite "not written".
    maybe_written: bool,
    /// Proven unwritten whatever its attempts say: an earlier sequence of the same
    /// producer id is missing from the log, or the broker has no state for the id.
    cannot_be_written: bool,
    deadline: Instant,
    last_error: Option<ClientError>,
}

impl Entry {
    fn possibly_written(&self) -> bool {
        self.maybe_written && !self.cannot_be_written
    }
}

/// One partition's unacknowledged batches and the rules that order their sending.
#[derive(Debug)]
pub struct PartitionInflight {
    config: InflightConfig,
    producer: Option<ProducerIdAndEpoch>,
    next_sequence: i32,
    /// Unacknowledged batches in seal order. Entries with `assigned` form a prefix, in
    /// sequence order.
    queue: VecDeque<Entry>,
    phase: Phase,
    retry_at: Option<Instant>,
    in_flight: usize,
    next_id: u64,
    buffered_bytes: usize,
    /// Transactional mode: why the sequence broke (the first such error).
    broken_by: Option<ClientError>,
    out: Vec<Command>,
}

impl PartitionInflight {
    /// A partition starting at sequence 0. In exactly-once mode without a producer id it
    /// starts by asking for one (the first call returns [`Command::InitProducerId`]).
    pub fn new(config: InflightConfig, producer: Option<ProducerIdAndEpoch>) -> Self {
        let mut this = PartitionInflight {
            config,
            producer: None,
            next_sequence: 0,
            queue: VecDeque::new(),
            phase: Phase::Sending,
            retry_at: None,
            in_flight: 0,
            next_id: 0,
            buffered_bytes: 0,
            broken_by: None,
            out: Vec::new(),
        };
        if config.delivery.idempotent() {
            match producer {
                Some(p) => this.producer = Some(p),
                None => {
                    this.phase = Phase::AwaitingProducerId;
                    this.out.push(Command::InitProducerId);
                }
            }
        }
        this
    }

    /// Continues an existing sequence (tests of wrap-around).
    pub fn with_next_sequence(mut self, next_sequence: i32) -> Self {
        self.next_sequence = next_sequence;
        self
    }

    /// A sealed batch joins the queue. `size` is its encoded size, `created_at` when its
    /// first record was handed over (the delivery timeout counts from then).
    pub fn push(
        &mut self,
        records: Vec<Record>,
        size: usize,
        created_at: Instant,
        now: Instant,
    ) -> (BatchId, Vec<Command>) {
        let id = BatchId(self.next_id);
        self.next_id += 1;
        if records.is_empty() {
            self.out.push(Command::Complete {
                batch: id,
                result: Err(ClientError::Fatal("empty batch".into())),
            });
            return (id, self.take());
        }
        if let (Phase::Broken, Some(cause)) = (self.phase, &self.broken_by) {
            self.out.push(Command::Complete {
                batch: id,
                result: Err(cause.clone()),
            });
            return (id, self.take());
        }
        self.queue.push_back(Entry {
            id,
            record_count: records.len() as i32,
            payload: Payload::Records(records),
            size,
            assigned: None,
            in_flight: None,
            sent_as_head: false,
            attempts: 0,
            maybe_written: false,
            cannot_be_written: false,
            deadline: created_at + self.config.delivery_timeout,
            last_error: None,
        });
        self.buffered_bytes += size;
        self.settle(now);
        (id, self.take())
    }

    /// The result of attempt `attempt` of `batch`. Stale or unknown reports are ignored.
    pub fn on_outcome(
        &mut self,
        batch: BatchId,
        attempt: u32,
        outcome: Outcome,
        now: Instant,
    ) -> Vec<Command> {
        let Some(idx) = self.index_of(batch) else {
            return self.take();
        };
        if self.queue[idx].in_flight != Some(attempt) {
            return self.take();
        }
        self.queue[idx].in_flight = None;
        self.in_flight -= 1;
        let sent_as_head = self.queue[idx].sent_as_head;
        let idempotent = self.config.delivery.idempotent();
        match outcome {
            Outcome::Appended { base_offset } => self.complete_ok(idx, base_offset),
            Outcome::Lost(err) => {
                self.queue[idx].maybe_written = true;
                // The leader may have died or moved: the retry must look it up afresh.
                self.out.push(Command::RefreshMetadata);
                self.retriable(idx, err);
            }
            Outcome::Failed {
                error,
                possibly_written,
            } => {
                if possibly_written {
                    self.queue[idx].maybe_written = true;
                }
                self.give_up(idx, error);
            }
            Outcome::Rejected { code, message } => {
                let err = ClientError::Broker {
                    code,
                    message,
                    retriable: error::is_retriable(code),
                };
                if error::may_have_written(code) {
                    self.queue[idx].maybe_written = true;
                }
                if error::needs_metadata_refresh(code) {
                    self.out.push(Command::RefreshMetadata);
                }
                match error::classify(code) {
                    ErrorClass::Success => self.complete_ok(idx, -1),
                    ErrorClass::Retriable => self.retriable(idx, err),
                    // Sent behind an unacknowledged predecessor, the batch may simply have
                    // overtaken it (concurrent requests reach the partition in any order):
                    // a gap, or no producer state yet because sequence 0 has not arrived.
                    // Retry in order.
                    ErrorClass::OutOfOrderSequence | ErrorClass::NeedsNewProducerId
                        if idempotent && !sent_as_head =>
                    {
                        self.retriable(idx, err);
                    }
                    // Sent after every predecessor was acknowledged, yet refused: the
                    // broker lost or expired this producer's state. The sequence cannot
                    // continue; this attempt wrote nothing.
                    ErrorClass::OutOfOrderSequence | ErrorClass::NeedsNewProducerId
                        if idempotent =>
                    {
                        self.queue[idx].last_error = Some(err.clone());
                        self.break_sequence(err);
                    }
                    _ => self.give_up(idx, err),
                }
            }
        }
        self.settle(now);
        self.take()
    }

    /// A new producer identity arrived (after [`Command::InitProducerId`] or
    /// [`Command::BumpProducerEpoch`]); sequences start at 0 under it.
    pub fn on_producer_id(&mut self, producer: ProducerIdAndEpoch, now: Instant) -> Vec<Command> {
        if self.phase == Phase::AwaitingProducerId {
            tracing::debug!(
                producer_id = producer.producer_id,
                producer_epoch = producer.producer_epoch,
                "partition continues under a new producer identity"
            );
            self.producer = Some(producer);
            self.next_sequence = 0;
            self.phase = Phase::Sending;
            self.settle(now);
        }
        self.take()
    }

    /// The partition can never send (its transaction registration was refused): every
    /// queued batch, and every later one, fails with `cause`.
    pub fn abandon(&mut self, cause: ClientError) -> Vec<Command> {
        self.broken_by = Some(cause);
        self.fail_broken();
        self.take()
    }

    /// Time passed: expire batches past their delivery timeout, send due retries.
    pub fn tick(&mut self, now: Instant) -> Vec<Command> {
        self.settle(now);
        self.take()
    }

    /// When [`PartitionInflight::tick`] next has something to do, if ever.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let retry = match self.phase {
            Phase::Retrying => self.retry_at,
            _ => None,
        };
        let expiry = self
            .queue
            .front()
            .filter(|e| e.in_flight.is_none())
            .map(|e| e.deadline);
        match (retry, expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// No unacknowledged batch is left.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty()
    }

    /// The oldest batch not yet completed.
    pub fn oldest_pending(&self) -> Option<BatchId> {
        self.queue.front().map(|e| e.id)
    }

    /// Bytes of all unacknowledged batches.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered_bytes
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn producer(&self) -> Option<ProducerIdAndEpoch> {
        self.producer
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn take(&mut self) -> Vec<Command> {
        std::mem::take(&mut self.out)
    }

    fn index_of(&self, batch: BatchId) -> Option<usize> {
        self.queue.iter().position(|e| e.id == batch)
    }

    fn complete_ok(&mut self, idx: usize, base_offset: i64) {
        if let Some(entry) = self.queue.remove(idx) {
            self.buffered_bytes -= entry.size;
            self.out.push(Command::Complete {
                batch: entry.id,
                result: Ok(base_offset),
            });
        }
    }

    /// A failure the same bytes may get past later.
    fn retriable(&mut self, idx: usize, err: ClientError) {
        if !self.config.delivery.retries() {
            self.give_up(idx, err);
            return;
        }
        tracing::debug!(batch = self.queue[idx].id.0, error = %err, "produce failed, will retry in order");
        self.queue[idx].last_error = Some(err);
        self.start_draining(false);
    }

    /// The sequence cannot continue under the current identity: drain, then move to a
    /// new epoch (idempotent) or break the partition (transactional, see the module doc).
    fn break_sequence(&mut self, cause: ClientError) {
        if self.config.transactional {
            self.broken_by.get_or_insert(cause);
        }
        self.start_draining(true);
    }

    fn start_draining(&mut self, new_producer_id: bool) {
        self.phase = match self.phase {
            Phase::AwaitingProducerId => Phase::AwaitingProducerId,
            Phase::Broken => Phase::Broken,
            Phase::Draining {
                new_producer_id: already,
            } => Phase::Draining {
                new_producer_id: already || new_producer_id,
            },
            Phase::Sending | Phase::Retrying => Phase::Draining { new_producer_id },
        };
    }

    /// Fails the batch to the caller for good.
    fn give_up(&mut self, idx: usize, err: ClientError) {
        let Some(entry) = self.queue.remove(idx) else {
            return;
        };
        self.buffered_bytes -= entry.size;
        tracing::debug!(batch = entry.id.0, error = %err, "batch failed");
        if self.config.transactional {
            // Every failed batch breaks the transaction, assigned a sequence or not.
            self.broken_by.get_or_insert(err.clone());
        }
        self.out.push(Command::Complete {
            batch: entry.id,
            result: Err(err),
        });
        if self.config.transactional {
            self.start_draining(true);
        } else if self.config.delivery.idempotent() && entry.assigned.is_some() {
            // Its sequence is now a hole (nothing after it can be appended under this
            // producer id) or unresolved (it may be in the log): either way the
            // partition cannot continue this sequence.
            if !entry.possibly_written() {
                for later in self.queue.iter_mut().skip(idx) {
                    if later.assigned.is_some() {
                        later.cannot_be_written = true;
                    }
                }
            }
            self.start_draining(true);
        }
    }

    fn settle(&mut self, now: Instant) {
        loop {
            if let Phase::Draining { new_producer_id } = self.phase {
                if self.in_flight == 0 {
                    if new_producer_id && self.config.transactional {
                        self.fail_broken();
                    } else if new_producer_id && self.config.delivery.idempotent() {
                        self.switch_producer_id();
                    } else {
                        self.phase = Phase::Retrying;
                        self.retry_at = Some(now + self.config.retry_backoff);
                    }
                }
            }
            if !self.expire_head(now) {
                break;
            }
        }
        self.pump(now);
    }

    /// Fails the head if its delivery timeout passed while nothing is in flight for it.
    fn expire_head(&mut self, now: Instant) -> bool {
        let Some(head) = self.queue.front() else {
            return false;
        };
        if head.in_flight.is_some() || head.deadline > now {
            return false;
        }
        let err = ClientError::DeliveryTimeout {
            attempts: head.attempts,
            last_error: head.last_error.clone().map(Box::new),
            possibly_written: head.possibly_written(),
        };
        self.give_up(0, err);
        true
    }

    /// Nothing is in flight. Keep every batch that was definitely not written (to be
    /// re-encoded under the new epoch); fail those that may have been; ask for the next
    /// epoch of the producer id.
    fn switch_producer_id(&mut self) {
        // Once one batch is known unwritten, no later sequence of the old id can be in
        // the log either.
        let mut hole = false;
        let mut idx = 0;
        while idx < self.queue.len() {
            let entry = &mut self.queue[idx];
            if entry.assigned.is_none() {
                idx += 1;
                continue;
            }
            if hole || !entry.possibly_written() {
                hole = true;
                let records = match &entry.payload {
                    Payload::Records(_) => Ok(None),
                    Payload::Encoded(bytes) => decode_records(bytes).map(Some),
                };
                match records {
                    Ok(records) => {
                        if let Some(records) = records {
                            entry.payload = Payload::Records(records);
                        }
                        entry.assigned = None;
                        entry.maybe_written = false;
                        entry.cannot_be_written = false;
                        idx += 1;
                    }
                    Err(e) => self.fail_removed(idx, ClientError::Fatal(e)),
                }
            } else {
                let err = ClientError::OutcomeUnknown {
                    attempts: entry.attempts,
                    last_error: Box::new(entry.last_error.clone().unwrap_or_else(|| {
                        ClientError::Protocol("no answer for this batch".into())
                    })),
                };
                self.fail_removed(idx, err);
            }
        }
        tracing::info!(
            producer_id = self.producer.map(|p| p.producer_id),
            old_producer_epoch = self.producer.map(|p| p.producer_epoch),
            "partition bumps its producer epoch; sequences restart at 0"
        );
        let command = match self.producer.take() {
            Some(current) => Command::BumpProducerEpoch { current },
            None => Command::InitProducerId,
        };
        self.next_sequence = 0;
        self.retry_at = None;
        self.phase = Phase::AwaitingProducerId;
        self.out.push(command);
    }

    /// Transactional mode, nothing in flight: fail every queued batch with the cause
    /// and refuse every later one. A batch that may have been written stays in the
    /// transaction, which the caller aborts.
    fn fail_broken(&mut self) {
        let cause = self.broken_by.clone().unwrap_or_else(|| {
            ClientError::Fatal("the partition's transactional sequence broke".into())
        });
        tracing::info!(error = %cause, "transactional partition broken; the transaction must be aborted");
        while !self.queue.is_empty() {
            self.fail_removed(0, cause.clone());
        }
        self.broken_by = Some(cause);
        self.retry_at = None;
        self.phase = Phase::Broken;
    }

    fn fail_removed(&mut self, idx: usize, err: ClientError) {
        if let Some(entry) = self.queue.remove(idx) {
            self.buffered_bytes -= entry.size;
            self.out.push(Command::Complete {
                batch: entry.id,
                result: Err(err),
            });
        }
    }

    fn pump(&mut self, now: Instant) {
        loop {
            match self.phase {
                Phase::Sending => {
                    // The window is counted from the oldest unacknowledged batch, not in
                    // requests: answers may arrive out of order, and the broker
                    // recognises a duplicate only among a producer's last 5 batches, so
                    // at most `max_in_flight - 1` batches may be written after any batch
                    // whose answer is still pending.
                    let Some(oldest) = self.queue.front().map(|e| e.id.0) else {
                        return;
                    };
                    let window = self.config.max_in_flight as u64;
                    let mut idx = 0;
                    while self.in_flight < self.config.max_in_flight
                        && idx < self.queue.len()
                        && self.queue[idx].id.0 - oldest < window
                    {
                        if self.queue[idx].in_flight.is_none() {
                            self.send(idx);
                        }
                        idx += 1;
                    }
                    return;
                }
                Phase::Retrying => match self.queue.front() {
                    Some(head) if head.assigned.is_some() => {
                        let due = self.retry_at.is_none_or(|t| t <= now);
                        if head.in_flight.is_none() && due {
                            self.retry_at = None;
                            self.send(0);
                        }
                        return;
                    }
                    // Every batch sent before the failure is acknowledged or gone.
                    _ => {
                        self.phase = Phase::Sending;
                        self.retry_at = None;
                    }
                },
                Phase::Draining { .. } | Phase::AwaitingProducerId | Phase::Broken => return,
            }
        }
    }

    fn send(&mut self, idx: usize) {
        let idempotent = self.config.delivery.idempotent();
        let producer = self.producer;
        let entry = &mut self.queue[idx];
        let info = match entry.assigned {
            Some(info) => info,
            None => {
                let info = if idempotent {
                    let Some(p) = producer else {
                        return;
                    };
                    let info = ProducerInfo {
                        producer_id: p.producer_id,
                        producer_epoch: p.producer_epoch,
                        base_sequence: self.next_sequence,
                    };
                    self.next_sequence =
                        batch::sequence_add(self.next_sequence, entry.record_count);
                    info
                } else {
                    ProducerInfo::NONE
                };
                entry.assigned = Some(info);
                info
            }
        };
        let records = match &entry.payload {
            Payload::Encoded(bytes) => bytes.clone(),
            Payload::Records(records) => {
                let bytes = batch::encode(info, self.config.attributes(), records);
                entry.payload = Payload::Encoded(bytes.clone());
                bytes
            }
        };
        entry.attempts += 1;
        entry.in_flight = Some(entry.attempts);
        entry.sent_as_head = idx == 0;
        self.in_flight += 1;
        self.out.push(Command::Send {
            batch: entry.id,
            attempt: entry.attempts,
            producer: info,
            records,
        });
    }
}

fn decode_records(bytes: &[u8]) -> Result<Vec<Record>, String> {
    let stored = batch::records(bytes).map_err(|e| format!("cannot re-encode batch: {e}"))?;
    Ok(stored
        .into_iter()
        .map(|r| Record {
            key: r.key,
            value: r.value,
            headers: r.headers,
            timestamp_ms: r.timestamp_ms,
        })
        .collect())
}

#[cfg(test)]
mod tests;
