//! The task that owns one partition's produce path: it batches the partition's records
//! ([`Accumulator`]), feeds sealed batches, answers and time to the ordering core
//! ([`PartitionInflight`]), and performs the commands that come back: send one batch
//! per produce request, complete record futures, fetch a producer id or bump its epoch.
//! It decides nothing about ordering itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use futures::future::{BoxFuture, OptionFuture};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use idem_proto::batch::Record;
use idem_proto::v1::{PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData};
use idem_proto::ErrorCode;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use super::accumulator::{Accumulator, SealedBatch};
use super::config::ProducerConfig;
use super::inflight::{BatchId, Command, InflightConfig, Outcome, PartitionInflight};
use super::record_metadata::RecordMetadata;
use crate::connection::Connection;
use crate::error::{self, ClientError};
use crate::transactional::registrar::Registered;
use crate::types::ProducerIdAndEpoch;

/// Where a record's result goes.
pub(crate) type Ticket = oneshot::Sender<Result<RecordMetadata, ClientError>>;

pub(crate) enum PartitionMsg {
    Record {
        record: Record,
        ticket: Ticket,
    },
    /// Answer once every record handed over before this message is completed.
    Flush(oneshot::Sender<()>),
}

/// What ties a partition task to a transaction (transactional producer only): its
/// batches carry the transactional attribute, and the first batch failure is reported to
/// the transaction, which can then not commit.
#[derive(Debug, Clone)]
pub(crate) struct TxnBinding {
    pub failures: Arc<Mutex<Option<ClientError>>>,
}

/// How far in the future "no timer" is.
const NO_TIMER: Duration = Duration::from_secs(3600);

pub(crate) struct PartitionSender {
    topic: Arc<str>,
    partition: i32,
    conn: Connection,
    config: Arc<ProducerConfig>,
    txn: Option<TxnBinding>,
    rx: mpsc::Receiver<PartitionMsg>,
    accumulator: Accumulator<Ticket>,
    inflight: PartitionInflight,
    tickets: HashMap<BatchId, Vec<Ticket>>,
    requests: FuturesUnordered<BoxFuture<'static, (BatchId, u32, Outcome)>>,
    producer_id_request: Option<BoxFuture<'static, ProducerIdAndEpoch>>,
    /// Transactional: the coordinator's answer to this partition's registration; until
    /// it arrives nothing is sent (the identity comes with it).
    registration: Option<Registered>,
    flush_waiters: Vec<(Option<BatchId>, oneshot::Sender<()>)>,
    last_pushed: Option<BatchId>,
    receiving: bool,
}

enum Event {
    Message(Option<PartitionMsg>),
    Answer(BatchId, u32, Outcome),
    ProducerId(ProducerIdAndEpoch),
    Registered(Result<ProducerIdAndEpoch, ClientError>),
    Timer,
}

impl PartitionSender {
    /// Starts the task of `topic`/`partition`; it ends once `rx` is closed and every
    /// record handed to it is completed. A transactional partition starts with no
    /// identity and `registration` pending: the identity comes with its answer.
    pub(crate) fn spawn(
        topic: Arc<str>,
        partition: i32,
        conn: Connection,
        config: Arc<ProducerConfig>,
        producer: Option<ProducerIdAndEpoch>,
        txn: Option<(TxnBinding, Registered)>,
        rx: mpsc::Receiver<PartitionMsg>,
    ) -> tokio::task::JoinHandle<()> {
        let (txn, registration) = match txn {
            Some((binding, registered)) => (Some(binding), Some(registered)),
            None => (None, None),
        };
        let span = tracing::debug_span!("partition_sender", topic = %topic, partition);
        let inflight_config = InflightConfig {
            transactional: txn.is_some(),
            ..InflightConfig::from(config.as_ref())
        };
        let sender = PartitionSender {
            accumulator: Accumulator::new(config.batch_size, config.linger),
            inflight: PartitionInflight::new(inflight_config, producer),
            topic,
            partition,
            conn,
            config,
            txn,
            rx,
            tickets: HashMap::new(),
            requests: FuturesUnordered::new(),
            producer_id_request: None,
            registration,
            flush_waiters: Vec::new(),
            last_pushed: None,
            receiving: true,
        };
        tokio::spawn(sender.run().instrument(span))
    }

    async fn run(mut self) {
        let sleep = tokio::time::sleep(NO_TIMER);
        tokio::pin!(sleep);
        loop {
            let now = Instant::now();
            if let Some(sealed) = self.accumulator.seal_if_due(now) {
                self.push(sealed, now);
            }
            let commands = self.inflight.tick(now);
            self.execute(commands);
            self.answer_flushes();
            if !self.receiving && self.accumulator.is_empty() && self.inflight.is_idle() {
                break;
            }
            let wake = match (self.accumulator.deadline(), self.inflight.next_wakeup()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let wake_at = wake.unwrap_or(now + NO_TIMER);
            sleep
                .as_mut()
                .reset(tokio::time::Instant::from_std(wake_at));
            let accepting = self.receiving
                && self.accumulator.buffered_bytes() + self.inflight.buffered_bytes()
                    < self.config.buffer_memory;
            let awaiting_id = self.producer_id_request.is_some();
            let awaiting_registration = self.registration.is_some();
            let event = tokio::select! {
                msg = self.rx.recv(), if accepting => Event::Message(msg),
                Some((batch, attempt, outcome)) = self.requests.next(), if !self.requests.is_empty() => {
                    Event::Answer(batch, attempt, outcome)
                }
                Some(producer) = OptionFuture::from(self.producer_id_request.as_mut()), if awaiting_id => {
                    Event::ProducerId(producer)
                }
                Some(answer) = OptionFuture::from(self.registration.as_mut()), if awaiting_registration => {
                    Event::Registered(answer.unwrap_or(Err(ClientError::Closed)))
                }
                // Always armed (an hour when nothing is due), so the select never runs
                // out of branches.
                () = &mut sleep => Event::Timer,
            };
            match event {
                Event::Message(Some(msg)) => {
                    self.on_message(msg);
                    // Take what is already queued before sealing by linger, so bursts
                    // form batches even with a zero linger.
                    while self.accumulator.buffered_bytes() + self.inflight.buffered_bytes()
                        < self.config.buffer_memory
                    {
                        match self.rx.try_recv() {
                            Ok(msg) => self.on_message(msg),
                            Err(_) => break,
                        }
                    }
                }
                Event::Message(None) => {
                    self.receiving = false;
                    if let Some(sealed) = self.accumulator.seal() {
                        self.push(sealed, Instant::now());
                    }
                }
                Event::Answer(batch, attempt, outcome) => {
                    let commands =
                        self.inflight
                            .on_outcome(batch, attempt, outcome, Instant::now());
                    self.execute(commands);
                }
                Event::ProducerId(producer) => {
                    self.producer_id_request = None;
                    let commands = self.inflight.on_producer_id(producer, Instant::now());
                    self.execute(commands);
                }
                Event::Registered(answer) => {
                    self.registration = None;
                    let commands = match answer {
                        Ok(producer) => self.inflight.on_producer_id(producer, Instant::now()),
                        Err(e) => {
                            self.record_txn_failure(&e);
                            self.inflight.abandon(e)
                        }
                    };
                    self.execute(commands);
                }
                Event::Timer => {}
            }
        }
        tracing::debug!("partition sender done");
    }

    fn on_message(&mut self, msg: PartitionMsg) {
        let now = Instant::now();
        match msg {
            PartitionMsg::Record { record, ticket } => {
                for sealed in self.accumulator.append(record, ticket, now) {
                    self.push(sealed, now);
                }
            }
            PartitionMsg::Flush(done) => {
                if let Some(sealed) = self.accumulator.seal() {
                    self.push(sealed, now);
                }
                self.flush_waiters.push((self.last_pushed, done));
            }
        }
    }

    fn push(&mut self, sealed: SealedBatch<Ticket>, now: Instant) {
        let (batch, commands) =
            self.inflight
                .push(sealed.records, sealed.size, sealed.created_at, now);
        self.tickets.insert(batch, sealed.tickets);
        self.last_pushed = Some(batch);
        self.execute(commands);
    }

    fn answer_flushes(&mut self) {
        if self.flush_waiters.is_empty() {
            return;
        }
        let oldest = self.inflight.oldest_pending();
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.flush_waiters)
            .into_iter()
            .partition(|(upto, _)| match (upto, oldest) {
                (Some(upto), Some(oldest)) => oldest > *upto,
                _ => true,
            });
        self.flush_waiters = waiting;
        for (_, tx) in done {
            let _ = tx.send(());
        }
    }

    fn execute(&mut self, commands: Vec<Command>) {
        for command in commands {
            match command {
                Command::Send {
                    batch,
                    attempt,
                    producer,
                    records,
                } => {
                    tracing::trace!(
                        batch = batch.0,
                        attempt,
                        producer_id = producer.producer_id,
                        producer_epoch = producer.producer_epoch,
                        base_sequence = producer.base_sequence,
                        bytes = records.len(),
                        "send batch"
                    );
                    self.send(batch, attempt, records);
                }
                Command::Complete { batch, result } => self.complete(batch, result),
                // A transactional partition's identity comes with its registration.
                Command::InitProducerId if self.registration.is_some() => {}
                Command::InitProducerId => self.request_producer_id(None),
                Command::BumpProducerEpoch { current } => self.request_producer_id(Some(current)),
                Command::RefreshMetadata => self.refresh_metadata(),
            }
        }
    }

    fn send(&mut self, batch: BatchId, attempt: u32, records: bytes::Bytes) {
        let request = ProduceRequest {
            acks: self.config.acks(),
            timeout_ms: self
                .config
                .request_timeout
                .as_millis()
                .min(i32::MAX as u128) as i32,
            topics: vec![TopicProduceData {
                name: self.topic.to_string(),
                partitions: vec![PartitionProduceData {
                    partition: self.partition,
                    records,
                }],
            }],
            coordinator_epoch: None,
        };
        let conn = self.conn.clone();
        let timeout = self.config.request_timeout;
        let topic = self.topic.clone();
        let partition = self.partition;
        self.requests.push(Box::pin(async move {
            let outcome = produce_to_leader(&conn, &topic, partition, request, timeout).await;
            (batch, attempt, outcome)
        }));
    }

    /// The transaction this partition belongs to can no longer commit.
    fn record_txn_failure(&self, e: &ClientError) {
        if let Some(txn) = &self.txn {
            if let Ok(mut first) = txn.failures.lock() {
                first.get_or_insert_with(|| e.clone());
            }
        }
    }

    fn complete(&mut self, batch: BatchId, result: Result<i64, ClientError>) {
        let Some(tickets) = self.tickets.remove(&batch) else {
            return;
        };
        match result {
            Ok(base_offset) => {
                for (i, ticket) in tickets.into_iter().enumerate() {
                    let offset = if base_offset >= 0 {
                        base_offset + i as i64
                    } else {
                        -1
                    };
                    let _ = ticket.send(Ok(RecordMetadata {
                        topic: self.topic.clone(),
                        partition: self.partition,
                        offset,
                    }));
                }
            }
            Err(e) => {
                tracing::warn!(batch = batch.0, records = tickets.len(), error = %e, "batch failed");
                self.record_txn_failure(&e);
                for ticket in tickets {
                    let _ = ticket.send(Err(e.clone()));
                }
            }
        }
    }

    /// Asks for a fresh producer id, or for the next epoch of `bump`, until one arrives.
    fn request_producer_id(&mut self, bump: Option<ProducerIdAndEpoch>) {
        if self.producer_id_request.is_some() {
            return;
        }
        let conn = self.conn.clone();
        let backoff = self.config.retry_backoff.max(Duration::from_millis(10));
        self.producer_id_request = Some(Box::pin(async move {
            let ask = || async {
                match bump {
                    Some(current) => conn.bump_producer_epoch(current).await,
                    None => conn.init_producer_id().await,
                }
            };
            let pauses = ExponentialBuilder::new()
                .with_min_delay(backoff)
                .with_max_delay(Duration::from_secs(1).max(backoff))
                .without_max_times();
            loop {
                let asked = ask
                    .retry(pauses)
                    .notify(|e, _| {
                        tracing::warn!(error = %e, "cannot get a producer identity; retrying");
                    })
                    .await;
                // An error only if the pauses ran out, which they do not: ask on.
                if let Ok(producer) = asked {
                    return producer;
                }
            }
        }));
    }

    fn refresh_metadata(&mut self) {
        self.conn.request_refresh();
    }
}

/// One produce attempt, sent to the partition's current leader (looked up in the
/// metadata cache for every attempt, after any refresh under way).
async fn produce_to_leader(
    conn: &Connection,
    topic: &str,
    partition: i32,
    request: ProduceRequest,
    timeout: Duration,
) -> Outcome {
    // Finding the leader sends nothing, so a failure here is a definite "not written".
    let client = tokio::time::timeout(timeout, conn.leader(topic, partition)).await;
    let mut client = match client {
        Ok(Ok((_, client))) => client,
        Ok(Err(e)) => return unroutable(topic, partition, e),
        Err(_) => {
            return unroutable(
                topic,
                partition,
                ClientError::Transport(tonic::Status::deadline_exceeded(
                    "no metadata answer in time",
                )),
            )
        }
    };
    let outcome = match tokio::time::timeout(timeout, client.produce(request)).await {
        Err(_) => Outcome::Lost(ClientError::Transport(tonic::Status::deadline_exceeded(
            format!("no produce answer within {timeout:?}"),
        ))),
        Ok(Err(status)) if error::is_retriable_status(status.code()) => {
            Outcome::Lost(ClientError::Transport(status))
        }
        Ok(Err(status)) => Outcome::Failed {
            error: ClientError::Transport(status),
            possibly_written: false,
        },
        Ok(Ok(response)) => produce_outcome(topic, partition, response.into_inner()),
    };
    match outcome {
        // The leader does not know a partition the metadata lists: a topic created a
        // moment ago whose state has not reached it yet, or a broker that stopped leading.
        // Ask again; if the metadata still lists the partition, it is a leadership
        // question (retriable; nothing was appended), not a missing topic.
        Outcome::Rejected {
            code: ErrorCode::UnknownTopicOrPartition,
            message,
        } => {
            conn.refresh_metadata().await;
            if conn.knows_partition(topic, partition) {
                Outcome::Rejected {
                    code: ErrorCode::LeaderNotAvailable,
                    message: format!(
                        "the leader does not know {topic}/{partition} yet ({message})"
                    ),
                }
            } else {
                Outcome::Rejected {
                    code: ErrorCode::UnknownTopicOrPartition,
                    message,
                }
            }
        }
        other => other,
    }
}

/// The attempt could not be sent: no live leader is known (retriable, the state machine
/// refreshes the metadata) or the partition does not exist.
fn unroutable(topic: &str, partition: i32, error: ClientError) -> Outcome {
    tracing::debug!(topic, partition, %error, "no leader to send to");
    match error {
        ClientError::UnknownTopic { .. } => Outcome::Rejected {
            code: ErrorCode::UnknownTopicOrPartition,
            message: error.to_string(),
        },
        ClientError::Broker { code, message, .. }
            if crate::connection::is_leadership_error(code) =>
        {
            Outcome::Rejected { code, message }
        }
        other => Outcome::Rejected {
            code: ErrorCode::LeaderNotAvailable,
            message: format!("cannot find the leader of {topic}/{partition}: {other}"),
        },
    }
}

/// Reads this partition's result out of a produce answer.
fn produce_outcome(topic: &str, partition: i32, response: ProduceResponse) -> Outcome {
    let Some(p) = response
        .topics
        .into_iter()
        .filter(|t| t.name == topic)
        .flat_map(|t| t.partitions)
        .find(|p| p.partition == partition)
    else {
        return Outcome::Lost(ClientError::Protocol(format!(
            "produce answer lacks {topic}/{partition}"
        )));
    };
    match ErrorCode::try_from(p.error_code) {
        Ok(ErrorCode::None | ErrorCode::DuplicateSequenceNumber) => Outcome::Appended {
            base_offset: p.base_offset,
        },
        Ok(code) => Outcome::Rejected {
            code,
            message: p.error_message,
        },
        Err(_) => Outcome::Failed {
            error: ClientError::broker(p.error_code, p.error_message),
            possibly_written: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_proto::v1::{PartitionProduceResponse, TopicProduceResponse};

    fn answer(partition: i32, code: ErrorCode, base_offset: i64) -> ProduceResponse {
        ProduceResponse {
            topics: vec![TopicProduceResponse {
                name: "t".into(),
                partitions: vec![PartitionProduceResponse {
                    partition,
                    error_code: code as i32,
                    base_offset,
                    ..Default::default()
                }],
            }],
            throttle_time_ms: 0,
        }
    }

    #[test]
    fn success_and_duplicate_answers_carry_the_base_offset() {
        assert!(matches!(
            produce_outcome("t", 0, answer(0, ErrorCode::None, 5)),
            Outcome::Appended { base_offset: 5 }
        ));
        assert!(matches!(
            produce_outcome("t", 0, answer(0, ErrorCode::DuplicateSequenceNumber, 3)),
            Outcome::Appended { base_offset: 3 }
        ));
    }

    #[test]
    fn error_answers_are_rejections_and_a_missing_partition_is_lost() {
        assert!(matches!(
            produce_outcome("t", 0, answer(0, ErrorCode::NotLeaderOrFollower, -1)),
            Outcome::Rejected {
                code: ErrorCode::NotLeaderOrFollower,
                ..
            }
        ));
        assert!(matches!(
            produce_outcome("t", 1, answer(0, ErrorCode::None, 0)),
            Outcome::Lost(ClientError::Protocol(_))
        ));
    }
}
