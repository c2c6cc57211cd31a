//! Reads assigned partitions from a position the caller controls. `poll` fetches every
//! assigned partition from its leader (one request per leader, sent concurrently),
//! verifies each batch's CRC, drops control batches (the broker sends none to consumers;
//! dropped anyway) and the records of a batch that lie before the fetch position, and
//! advances each position past what it returns, or to the answer's `next_fetch_offset`
//! when that is further (the broker examined and filtered batches past them: aborted
//! data, markers) — and only then. Data that fails its CRC or does not parse is an
//! error and the position stays before it: nothing is ever silently skipped.
//!
//! A leader that does not answer, or a broker that says it does not lead a partition,
//! makes the consumer refresh its metadata and fetch again (a fetch is safe to repeat;
//! positions did not move), without failing `poll`, unless no fetch has been answered
//! for a whole `request_timeout`.

use crate::tls::TlsConfig;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use idem_proto::batch::{self, Batches};
use idem_proto::v1::{FetchPartition, FetchRequest, FetchResponse, FetchTopic};
use idem_proto::ErrorCode;

use crate::connection::{is_leadership_error, with_timeout, Connection, Node, MAX_MESSAGE_BYTES};
use crate::error::{self, ClientError};
use crate::metadata::error_code;
pub use crate::types::Isolation;
use crate::types::OffsetSpec;

/// Consumer settings, each with a documented default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Default [`Isolation::ReadCommitted`].
    pub isolation: Isolation,
    /// How long the broker may hold a fetch open waiting for data. Default 500 ms.
    pub max_wait: Duration,
    /// Upper bound on the record bytes of one fetch answer, summed over its partitions
    /// (the broker also caps it at its `--max-fetch-bytes`, and returns the first batch
    /// whole even when larger). Default 8 MiB, the broker's default limit; at most
    /// [`MAX_FETCH_BYTES`], so every answer fits what the SDK decodes.
    pub max_bytes: i32,
    /// Upper bound per partition in one fetch answer (the broker still returns at least
    /// one whole batch). Default 1 MiB.
    pub partition_max_bytes: i32,
    /// Where a partition without an explicit seek starts. Default
    /// [`OffsetSpec::Latest`] (Kafka's `auto.offset.reset=latest`).
    pub start: OffsetSpec,
    /// Time one RPC may take beyond `max_wait`. Default 30 s.
    pub request_timeout: Duration,
    /// Where a position the broker no longer (or does not yet) serve moves: below the
    /// log start after retention deleted it, or past the end. `Some(spec)` seeks there
    /// and goes on (Kafka's `auto.offset.reset=earliest|latest`); `None`, the default,
    /// fails the poll with OFFSET_OUT_OF_RANGE and keeps the position, so skipping
    /// records is never silent (Kafka's `none`).
    pub auto_offset_reset: Option<OffsetSpec>,
    /// What every call presents (a bearer token; none = `User:ANONYMOUS`).
    pub credentials: crate::credentials::Credentials,
    /// TLS for every connection (brokers and coordinators); `None`, the default, dials
    /// in plaintext.
    pub tls: Option<TlsConfig>,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            isolation: Isolation::ReadCommitted,
            max_wait: Duration::from_millis(500),
            max_bytes: 8 * 1024 * 1024,
            partition_max_bytes: 1024 * 1024,
            start: OffsetSpec::Latest,
            request_timeout: Duration::from_secs(30),
            auto_offset_reset: None,
            credentials: Default::default(),
            tls: None,
        }
    }
}

/// One record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Bytes)>,
    pub timestamp_ms: i64,
}

#[cfg(feature = "otel")]
impl ConsumerRecord {
    /// The trace context the record was sent with (its `traceparent` header), to make
    /// the span that processes it a child of the span that sent it:
    /// `span.set_parent(cx)` (`tracing_opentelemetry::OpenTelemetrySpanExt`).
    pub fn trace_context(&self) -> Option<opentelemetry::Context> {
        crate::trace_context::extract(&self.headers)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    At(i64),
    /// Looked up before the next fetch.
    Reset(OffsetSpec),
}

#[derive(Debug, Clone)]
struct Assignment {
    topic: String,
    partition: i32,
    position: Position,
    /// The fetch round that last returned records of this partition (0: none yet).
    /// A broker fills its answer in request order up to its byte limit, so each round
    /// asks for the least recently served partitions first and none starves behind
    /// others with a backlog (KIP-74; Kafka's consumer moves a partition that returned
    /// data to the end of its list).
    last_served: u64,
}

/// Reads records from assigned partitions.
#[derive(Debug)]
pub struct Consumer {
    conn: Connection,
    config: ConsumerConfig,
    assignments: Vec<Assignment>,
    /// An error met while returning records; reported by the next `poll`.
    pending_error: Option<ClientError>,
    /// Since when no fetch has been answered (every leader tried was unreachable).
    unanswered_since: Option<Instant>,
    /// Fetch rounds answered so far; stamps `Assignment::last_served`.
    rounds: u64,
}

/// The largest `max_bytes` a consumer may ask for: half the SDK's decode limit.
pub const MAX_FETCH_BYTES: usize = MAX_MESSAGE_BYTES / 2;

/// What one round of fetches (one request per leader) brought.
#[derive(Debug, Default)]
struct Round {
    records: Vec<ConsumerRecord>,
    /// An error to report (records read in the same round are returned first).
    error: Option<ClientError>,
    /// Some fetch was answered.
    answered: bool,
    /// The last failure worth a metadata refresh and another try: a leader that did not
    /// answer, a partition without a known leader, a broker that no longer leads.
    transient: Option<ClientError>,
}

impl Consumer {
    pub async fn connect(bootstrap: &str, config: ConsumerConfig) -> Result<Consumer, ClientError> {
        if config.max_bytes <= 0 || config.partition_max_bytes <= 0 {
            return Err(ClientError::InvalidConfig(
                "max_bytes and partition_max_bytes must be positive".into(),
            ));
        }
        if config.max_bytes as usize > MAX_FETCH_BYTES {
            return Err(ClientError::InvalidConfig(format!(
                "max_bytes {} is above {MAX_FETCH_BYTES}, half of what the SDK decodes \
                 (the rest leaves room for the first batch a broker returns whole)",
                config.max_bytes
            )));
        }
        let conn = Connection::connect_with(
            bootstrap,
            config.request_timeout,
            config.credentials.clone(),
            config.tls.clone(),
        )
        .await?;
        Ok(Consumer {
            conn,
            config,
            assignments: Vec::new(),
            pending_error: None,
            unanswered_since: None,
            rounds: 0,
        })
    }

    /// Reads exactly these partitions from now on. A partition that stays assigned keeps
    /// its position; a new one starts at `config.start` unless sought.
    pub fn assign(&mut self, partitions: Vec<(String, i32)>) {
        let mut next = Vec::with_capacity(partitions.len());
        for (topic, partition) in partitions {
            if next
                .iter()
                .any(|a: &Assignment| a.topic == topic && a.partition == partition)
            {
                continue;
            }
            let (position, last_served) = self
                .find(&topic, partition)
                .map_or((Position::Reset(self.config.start), 0), |a| {
                    (a.position, a.last_served)
                });
            next.push(Assignment {
                topic,
                partition,
                position,
                last_served,
            });
        }
        self.assignments = next;
    }

    /// The connection to the cluster (a group consumer finds its coordinator over it).
    pub(crate) fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The assigned partitions.
    pub fn assignment(&self) -> Vec<(String, i32)> {
        self.assignments
            .iter()
            .map(|a| (a.topic.clone(), a.partition))
            .collect()
    }

    /// The next fetch of this partition starts at `offset`.
    pub fn seek(&mut self, topic: &str, partition: i32, offset: i64) -> Result<(), ClientError> {
        self.set_position(topic, partition, Position::At(offset))
    }

    /// The next fetch of this partition starts where `ConsumerConfig::start` says.
    pub fn reset(&mut self, topic: &str, partition: i32) -> Result<(), ClientError> {
        self.set_position(topic, partition, Position::Reset(self.config.start))
    }

    /// The next fetch of this partition starts at its log start offset.
    pub fn seek_to_beginning(&mut self, topic: &str, partition: i32) -> Result<(), ClientError> {
        self.set_position(topic, partition, Position::Reset(OffsetSpec::Earliest))
    }

    /// The next fetch of this partition starts at its end (high watermark, or last stable
    /// offset when reading committed).
    pub fn seek_to_end(&mut self, topic: &str, partition: i32) -> Result<(), ClientError> {
        self.set_position(topic, partition, Position::Reset(OffsetSpec::Latest))
    }

    /// The offset the next fetch of this partition starts at.
    pub async fn position(&mut self, topic: &str, partition: i32) -> Result<i64, ClientError> {
        let idx = self.index(topic, partition)?;
        self.resolve(idx).await
    }

    /// The positions known without asking a broker: every assigned partition that was
    /// read, sought or looked up (one still to be looked up at `ConsumerConfig::start`
    /// is left out). What a consumer has returned, and so what it may commit.
    pub fn known_positions(&self) -> Vec<((String, i32), i64)> {
        self.assignments
            .iter()
            .filter_map(|a| match a.position {
                Position::At(offset) => Some(((a.topic.clone(), a.partition), offset)),
                Position::Reset(_) => None,
            })
            .collect()
    }

    /// Waits up to `timeout` for records of the assigned partitions; returns as soon as
    /// there are some, or empty at the timeout. Leaders that moved or do not answer are
    /// looked up again and fetched from again within the same call; only when no fetch
    /// has been answered for `request_timeout` does `poll` fail with the last such error.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ClientError> {
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        let deadline = Instant::now() + timeout;
        if self.assignments.is_empty() {
            // Nothing to read: wait out the timeout as a read with nothing new would, so
            // a caller polling in a loop (a group member between assignments) does not
            // spin.
            tokio::time::sleep_until(deadline.into()).await;
            return Ok(Vec::new());
        }
        loop {
            let mut transient = None;
            for idx in 0..self.assignments.len() {
                match self.resolve(idx).await {
                    Ok(_) => {}
                    Err(e) if is_transient(&e) => transient = Some(e),
                    Err(e) => return Err(e),
                }
            }
            let started = Instant::now();
            let max_wait = self
                .config
                .max_wait
                .min(deadline.saturating_duration_since(started));
            let mut round = self.fetch_round(max_wait).await;
            if round.transient.is_none() {
                round.transient = transient;
            }
            if round.answered {
                self.unanswered_since = None;
            } else if let Some(e) = &round.transient {
                let since = *self.unanswered_since.get_or_insert(started);
                if since.elapsed() >= self.config.request_timeout && round.records.is_empty() {
                    self.unanswered_since = None;
                    return Err(e.clone());
                }
            }
            if let Some(e) = round.error {
                if round.records.is_empty() {
                    return Err(e);
                }
                self.pending_error = Some(e);
            }
            if !round.records.is_empty() {
                return Ok(round.records);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            if round.transient.is_some() {
                // Wait for the metadata refresh that was asked for (refreshes are
                // rate-limited, which also paces these retries).
                let _ = tokio::time::timeout(deadline - now, self.conn.wait_for_refresh()).await;
                let now = Instant::now();
                if now < deadline {
                    tokio::time::sleep(RETRY_PAUSE.min(deadline - now)).await;
                }
            } else if now - started < max_wait {
                // A broker that answers an empty fetch at once must not make this spin.
                tokio::time::sleep(Duration::from_millis(5).min(deadline - now)).await;
            }
        }
    }

    fn find(&self, topic: &str, partition: i32) -> Option<&Assignment> {
        self.assignments
            .iter()
            .find(|a| a.topic == topic && a.partition == partition)
    }

    fn index(&self, topic: &str, partition: i32) -> Result<usize, ClientError> {
        self.assignments
            .iter()
            .position(|a| a.topic == topic && a.partition == partition)
            .ok_or_else(|| ClientError::NotAssigned {
                topic: topic.to_string(),
                partition,
            })
    }

    fn set_position(
        &mut self,
        topic: &str,
        partition: i32,
        position: Position,
    ) -> Result<(), ClientError> {
        let idx = self.index(topic, partition)?;
        self.assignments[idx].position = position;
        Ok(())
    }

    async fn resolve(&mut self, idx: usize) -> Result<i64, ClientError> {
        let a = &self.assignments[idx];
        match a.position {
            Position::At(offset) => Ok(offset),
            Position::Reset(spec) => {
                let offset = self
                    .conn
                    .list_offset(&a.topic, a.partition, spec, self.config.isolation)
                    .await?;
                self.assignments[idx].position = Position::At(offset);
                Ok(offset)
            }
        }
    }

    /// One fetch per leader of the partitions with a known position, concurrently.
    async fn fetch_round(&mut self, max_wait: Duration) -> Round {
        let mut round = Round::default();
        let conn = self.conn.clone();
        let plan = plan_fetches(&self.assignments, |topic, partition| {
            conn.leader_node(topic, partition)
        });
        if let Some((topic, partition)) = plan.unroutable.first() {
            // Routing refreshes the metadata once: a partition no broker lists any more
            // (its topic was deleted) is reported, not waited for.
            round.transient = Some(match self.conn.leader(topic, *partition).await {
                Err(e @ ClientError::UnknownTopic { .. }) => {
                    round.error = Some(e);
                    return round;
                }
                Err(e) => e,
                Ok(_) => ClientError::Broker {
                    code: ErrorCode::LeaderNotAvailable,
                    message: format!("no live leader known for {topic}/{partition}"),
                    retriable: true,
                },
            });
        }
        let timeout = self.config.request_timeout + max_wait;
        let mut requests = Vec::with_capacity(plan.fetches.len());
        for (node, indexes) in plan.fetches {
            let request = self.fetch_request(&indexes, max_wait);
            match self.conn.client_for(&node) {
                Ok(mut client) => requests.push(async move {
                    let answer = with_timeout(timeout, client.fetch(request)).await;
                    (node, answer)
                }),
                Err(e) => {
                    round.error.get_or_insert(e);
                }
            }
        }
        for (node, answer) in futures::future::join_all(requests).await {
            match answer {
                Ok(response) => {
                    round.answered = true;
                    self.absorb(response, &mut round);
                }
                Err(ClientError::Transport(status))
                    if error::is_retriable_status(status.code()) =>
                {
                    tracing::debug!(?node, %status, "fetch unanswered; refreshing metadata");
                    self.conn.request_refresh();
                    round.transient = Some(ClientError::Transport(status));
                }
                Err(e) => {
                    round.error.get_or_insert(e);
                }
            }
        }
        round
    }

    fn fetch_request(&self, indexes: &[usize], max_wait: Duration) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for &idx in indexes {
            let a = &self.assignments[idx];
            let Position::At(fetch_offset) = a.position else {
                continue;
            };
            let partition = FetchPartition {
                partition: a.partition,
                fetch_offset,
                partition_max_bytes: self.config.partition_max_bytes,
                // The epoch of the leader the metadata named: a broker with an older or
                // newer view refuses (FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER, both
                // followed by a refresh) instead of serving a log that may diverge.
                current_leader_epoch: self.conn.leader_epoch(&a.topic, a.partition),
            };
            match topics.iter_mut().find(|t| t.name == a.topic) {
                Some(t) => t.partitions.push(partition),
                None => topics.push(FetchTopic {
                    name: a.topic.clone(),
                    partitions: vec![partition],
                }),
            }
        }
        FetchRequest {
            max_wait_ms: max_wait.as_millis().min(i32::MAX as u128) as i32,
            min_bytes: 1,
            max_bytes: self.config.max_bytes,
            isolation_level: self.config.isolation.to_proto() as i32,
            topics,
            replica_id: None,
            include_control_batches: false,
        }
    }

    /// Applies a fetch answer: collects its records and advances positions past them;
    /// errors go to `round` (the first one to report, leadership ones as transient).
    fn absorb(&mut self, response: FetchResponse, round: &mut Round) {
        self.rounds += 1;
        for topic in response.topics {
            for p in topic.partitions {
                let Ok(idx) = self.index(&topic.name, p.partition) else {
                    continue;
                };
                let Position::At(fetch_offset) = self.assignments[idx].position else {
                    continue;
                };
                let result = match error_code(p.error_code) {
                    None => {
                        let decoded =
                            decode_fetched(&topic.name, p.partition, fetch_offset, &p.records);
                        let next = next_position(&decoded, p.next_fetch_offset);
                        if !p.records.is_empty() {
                            self.assignments[idx].last_served = self.rounds;
                        }
                        round.records.extend(decoded.records);
                        self.assignments[idx].position = Position::At(next);
                        decoded.error.map_or(Ok(()), Err)
                    }
                    // A leader that moved, or one that does not know a partition the
                    // metadata lists (just created): look the leader up again.
                    Some(code)
                        if is_leadership_error(code)
                            || (code == ErrorCode::UnknownTopicOrPartition
                                && self.conn.knows_partition(&topic.name, p.partition)) =>
                    {
                        tracing::debug!(topic = %topic.name, partition = p.partition, ?code, "fetch will retry after a metadata refresh");
                        self.conn.request_refresh();
                        round.transient = Some(ClientError::broker(p.error_code, p.error_message));
                        Ok(())
                    }
                    Some(ErrorCode::UnknownTopicOrPartition) => {
                        self.conn.invalidate(&topic.name);
                        Err(ClientError::UnknownTopic {
                            topic: topic.name.clone(),
                            partition: Some(p.partition),
                        })
                    }
                    Some(ErrorCode::OffsetOutOfRange) => match self.config.auto_offset_reset {
                        Some(spec) => {
                            tracing::info!(topic = %topic.name, partition = p.partition, fetch_offset, log_start = p.log_start_offset, ?spec, "position out of range; resetting");
                            self.assignments[idx].position = Position::Reset(spec);
                            Ok(())
                        }
                        None => Err(ClientError::broker(p.error_code, p.error_message)),
                    },
                    // Replicas catching up and the like: try again on the next fetch.
                    Some(code) if error::is_retriable(code) => {
                        tracing::debug!(topic = %topic.name, partition = p.partition, ?code, "fetch will retry");
                        Ok(())
                    }
                    Some(_) => Err(ClientError::broker(p.error_code, p.error_message)),
                };
                if let Err(e) = result {
                    round.error.get_or_insert(e);
                }
            }
        }
    }
}

/// Pause between fetch rounds that met a leadership problem or an unanswered fetch.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// Errors after which the consumer refreshes its metadata and tries again.
fn is_transient(e: &ClientError) -> bool {
    match e {
        ClientError::Transport(status) => error::is_retriable_status(status.code()),
        ClientError::Broker { code, .. } => is_leadership_error(*code),
        _ => false,
    }
}

/// Which leader each assigned partition is fetched from.
#[derive(Debug, Default, PartialEq, Eq)]
struct FetchPlan {
    /// One fetch per leader, with the indexes of its partitions in assignment order
    /// least recently served first; leaders in order of their first partition.
    fetches: Vec<(Node, Vec<usize>)>,
    /// Partitions with a position but no known leader.
    unroutable: Vec<(String, i32)>,
}

/// Groups the partitions that have a position by leader, least recently served first
/// (ties in assignment order); `leader` looks a partition's leader up in the metadata
/// cache.
fn plan_fetches(
    assignments: &[Assignment],
    leader: impl Fn(&str, i32) -> Option<Node>,
) -> FetchPlan {
    let mut plan = FetchPlan::default();
    let mut slot: HashMap<Node, usize> = HashMap::new();
    let mut order: Vec<usize> = (0..assignments.len()).collect();
    order.sort_by_key(|&idx| assignments[idx].last_served);
    for (idx, a) in order.into_iter().map(|idx| (idx, &assignments[idx])) {
        if !matches!(a.position, Position::At(_)) {
            continue;
        }
        match leader(&a.topic, a.partition) {
            Some(node) => match slot.get(&node) {
                Some(&i) => plan.fetches[i].1.push(idx),
                None => {
                    slot.insert(node.clone(), plan.fetches.len());
                    plan.fetches.push((node, vec![idx]));
                }
            },
            None => plan.unroutable.push((a.topic.clone(), a.partition)),
        }
    }
    plan
}

/// What one partition's fetched bytes hold.
#[derive(Debug)]
struct Decoded {
    records: Vec<ConsumerRecord>,
    /// Where the next fetch starts: after the last whole, valid batch.
    next_offset: i64,
    /// A batch that failed its CRC or did not parse; the position stays before it.
    error: Option<ClientError>,
}

/// Where the partition's next fetch starts: past the returned batches, or at the
/// broker's `next_fetch_offset` when it examined (and filtered out) more — but never
/// past a batch that failed to decode, which must be reported, not skipped.
fn next_position(decoded: &Decoded, next_fetch_offset: i64) -> i64 {
    if decoded.error.is_some() {
        decoded.next_offset
    } else {
        decoded.next_offset.max(next_fetch_offset)
    }
}

fn decode_fetched(topic: &str, partition: i32, fetch_offset: i64, bytes: &[u8]) -> Decoded {
    let mut out = Decoded {
        records: Vec::new(),
        next_offset: fetch_offset,
        error: None,
    };
    let corrupt = |offset, source| ClientError::Corrupt {
        topic: topic.to_string(),
        partition,
        offset,
        source,
    };
    for item in Batches::new(bytes) {
        let (header, batch_bytes) = match item {
            Ok(b) => b,
            Err(e) => {
                out.error = Some(corrupt(out.next_offset, e));
                break;
            }
        };
        if header.next_offset() <= out.next_offset {
            continue; // wholly before the position
        }
        if !header.is_control() {
            match batch::records(batch_bytes) {
                Ok(stored) => {
                    out.records
                        .extend(
                            stored
                                .into_iter()
                                .filter(|r| r.offset >= fetch_offset)
                                .map(|r| ConsumerRecord {
                                    topic: topic.to_string(),
                                    partition,
                                    offset: r.offset,
                                    key: r.key,
                                    value: r.value,
                                    headers: r.headers,
                                    timestamp_ms: r.timestamp_ms,
                                }),
                        )
                }
                Err(e) => {
                    out.error = Some(corrupt(header.base_offset, e));
                    break;
                }
            }
        }
        out.next_offset = header.next_offset();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::ClusterMetadata;
    use idem_proto::batch::{ProducerInfo, Record, ATTR_CONTROL};

    fn batch_at(base_offset: i64, attributes: u16, values: &[&str]) -> Vec<u8> {
        let records: Vec<Record> = values
            .iter()
            .map(|v| Record {
                key: Some(Bytes::from_static(b"k")),
                value: Some(Bytes::copy_from_slice(v.as_bytes())),
                headers: vec![("h".into(), Bytes::from_static(b"1"))],
                timestamp_ms: 42,
            })
            .collect();
        let mut bytes = batch::encode(ProducerInfo::NONE, attributes, &records).to_vec();
        batch::assign(&mut bytes, base_offset, 0);
        bytes
    }

    fn values(d: &Decoded) -> Vec<(i64, String)> {
        d.records
            .iter()
            .map(|r| {
                let v = r.value.as_deref().unwrap_or_default();
                (r.offset, String::from_utf8_lossy(v).into_owned())
            })
            .collect()
    }

    #[test]
    fn records_before_the_fetch_offset_are_dropped_and_position_moves_past_the_batch() {
        let mut bytes = batch_at(10, 0, &["a", "b", "c"]);
        bytes.extend(batch_at(13, 0, &["d"]));
        let d = decode_fetched("t", 0, 11, &bytes);
        assert_eq!(
            values(&d),
            vec![(11, "b".into()), (12, "c".into()), (13, "d".into())]
        );
        assert_eq!(d.next_offset, 14);
        assert!(d.error.is_none());
        let r = &d.records[0];
        assert_eq!(
            (r.topic.as_str(), r.partition, r.timestamp_ms),
            ("t", 0, 42)
        );
        assert_eq!(r.headers, vec![("h".to_string(), Bytes::from_static(b"1"))]);
    }

    #[test]
    fn control_batches_are_skipped_but_advance_the_position() {
        let mut bytes = batch_at(0, 0, &["a"]);
        bytes.extend(batch_at(1, ATTR_CONTROL, &["marker"]));
        bytes.extend(batch_at(2, 0, &["b"]));
        let d = decode_fetched("t", 0, 0, &bytes);
        assert_eq!(values(&d), vec![(0, "a".into()), (2, "b".into())]);
        assert_eq!(d.next_offset, 3);
        let only_marker = decode_fetched("t", 0, 1, &batch_at(1, ATTR_CONTROL, &["m"]));
        assert!(only_marker.records.is_empty());
        assert_eq!(only_marker.next_offset, 2);
    }

    #[test]
    fn a_filler_left_by_the_log_cleaner_moves_the_position_past_all_its_offsets() {
        // A compacted log: a record, a filler standing for 250 removed offsets (batches
        // and markers), a record; and a fetch from inside the filler.
        let mut bytes = batch_at(10, 0, &["a"]);
        bytes.extend_from_slice(&batch::filler(11, 249, 3, 42));
        bytes.extend(batch_at(261, 0, &["b"]));
        let d = decode_fetched("t", 0, 10, &bytes);
        assert_eq!(values(&d), vec![(10, "a".into()), (261, "b".into())]);
        assert_eq!(d.next_offset, 262);
        assert!(d.error.is_none());
        let inside = decode_fetched("t", 0, 100, &batch::filler(11, 249, 3, 42));
        assert!(inside.records.is_empty() && inside.error.is_none());
        assert_eq!(inside.next_offset, 261);
        assert_eq!(next_position(&inside, 100), 261);
    }

    #[test]
    fn a_crc_failure_is_an_error_and_the_position_stays_before_it() {
        let good = batch_at(0, 0, &["a"]);
        let mut bad = batch_at(1, 0, &["b"]);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let mut bytes = good;
        bytes.extend(bad);
        let d = decode_fetched("t", 3, 0, &bytes);
        assert_eq!(values(&d), vec![(0, "a".into())]);
        assert_eq!(d.next_offset, 1);
        match d.error {
            Some(ClientError::Corrupt {
                partition: 3,
                offset: 1,
                source: batch::BatchError::CrcMismatch { .. },
                ..
            }) => {}
            other => panic!("expected a CRC error, got {other:?}"),
        }
    }

    #[test]
    fn a_truncated_batch_is_an_error_not_a_silent_stop() {
        let bytes = batch_at(5, 0, &["a"]);
        let d = decode_fetched("t", 0, 5, &bytes[..bytes.len() - 3]);
        assert!(d.records.is_empty());
        assert_eq!(d.next_offset, 5);
        assert!(matches!(d.error, Some(ClientError::Corrupt { .. })));
    }

    #[test]
    fn next_fetch_offset_moves_the_position_past_filtered_batches_even_with_no_records() {
        let empty = decode_fetched("t", 0, 7, &[]);
        // Aborted batches and markers examined up to 12, nothing returned.
        assert_eq!(next_position(&empty, 12), 12);
        // Unset (0) or behind what was returned: the returned batches decide.
        let d = decode_fetched("t", 0, 7, &batch_at(7, 0, &["a", "b"]));
        assert_eq!(next_position(&d, 0), 9);
        assert_eq!(next_position(&d, 8), 9);
        assert_eq!(next_position(&d, 20), 20);
    }

    #[test]
    fn next_fetch_offset_never_skips_a_corrupt_batch() {
        let mut bad = batch_at(7, 0, &["a"]);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let d = decode_fetched("t", 0, 7, &bad);
        assert!(d.error.is_some());
        assert_eq!(next_position(&d, 30), 7);
    }

    #[test]
    fn empty_answer_keeps_the_position() {
        let d = decode_fetched("t", 0, 7, &[]);
        assert!(d.records.is_empty() && d.error.is_none());
        assert_eq!(d.next_offset, 7);
    }

    fn assigned(topic: &str, partition: i32, position: Position) -> Assignment {
        Assignment {
            topic: topic.into(),
            partition,
            position,
            last_served: 0,
        }
    }

    /// Fetches `backlogs` (bytes per partition, all on one leader) the way a consumer
    /// plans and a broker fills (in request order, `budget` bytes per answer, the first
    /// partition with data always served) until every backlog is read; returns the
    /// longest any partition with data waited, in answers.
    fn longest_wait(backlogs: &[u64], budget: u64) -> usize {
        let mut left = backlogs.to_vec();
        let mut assignments: Vec<Assignment> = (0..left.len())
            .map(|p| assigned("t", p as i32, Position::At(0)))
            .collect();
        let mut waited = vec![0usize; left.len()];
        let mut worst = 0;
        for round in 1.. {
            if left.iter().all(|b| *b == 0) {
                break;
            }
            let plan = plan_fetches(&assignments, |_, _| Some(Node::Bootstrap));
            let mut remaining = budget;
            for &idx in &plan.fetches[0].1 {
                let taken = left[idx].min(remaining.max(u64::from(remaining == budget)));
                left[idx] -= taken;
                remaining = remaining.saturating_sub(taken);
                if taken > 0 {
                    assignments[idx].last_served = round;
                    waited[idx] = 0;
                } else if left[idx] > 0 {
                    waited[idx] += 1;
                    worst = worst.max(waited[idx]);
                }
            }
        }
        worst
    }

    #[test]
    fn given_a_backlog_behind_partitions_that_are_caught_up_then_it_is_not_served_twice_in_a_row() {
        // Partitions 0..8 caught up, 8 with a long backlog, 9 with a short one: asking
        // from a start that moves one partition per answer would serve 8 again and again
        // while 9 waits.
        let mut backlogs = vec![0; 10];
        backlogs[8] = 100;
        backlogs[9] = 10;
        let waited = longest_wait(&backlogs, 10);
        assert!(waited <= 1, "partition 9 waited {waited} answers");
    }

    proptest::proptest! {
        #[test]
        fn no_partition_with_data_waits_longer_than_one_answer_per_other_partition_with_data(
            backlogs in proptest::collection::vec(0u64..400, 1..40),
            budget in 1u64..100,
        ) {
            let with_data = backlogs.iter().filter(|b| **b > 0).count();
            let waited = longest_wait(&backlogs, budget);
            proptest::prop_assert!(
                waited < with_data.max(1),
                "waited {} answers with {} partitions holding data", waited, with_data
            );
        }
    }

    #[test]
    fn given_partitions_on_several_leaders_then_one_fetch_per_leader_and_unknown_leaders_are_listed(
    ) {
        let mut cache = crate::metadata::MetadataCache::default();
        cache.update(&ClusterMetadata::from(idem_proto::v1::MetadataResponse {
            brokers: vec![
                idem_proto::v1::BrokerInfo {
                    broker_id: 1,
                    address: "b1:1".into(),
                },
                idem_proto::v1::BrokerInfo {
                    broker_id: 2,
                    address: "b2:2".into(),
                },
            ],
            topics: vec![idem_proto::v1::TopicMetadata {
                topic_id: String::new(),
                error_code: 0,
                name: "t".into(),
                partitions: [1, 2, 1, -1, 9]
                    .iter()
                    .enumerate()
                    .map(|(p, leader)| idem_proto::v1::PartitionMetadata {
                        partition: p as i32,
                        leader_id: *leader,
                        ..Default::default()
                    })
                    .collect(),
            }],
            controller_id: 1,
            coordinators: Vec::new(),
            txn_log_owners: Vec::new(),
        }));
        let assignments = vec![
            assigned("t", 0, Position::At(5)),
            assigned("t", 1, Position::At(0)),
            assigned("t", 2, Position::At(7)),
            assigned("t", 3, Position::At(0)),
            assigned("t", 4, Position::At(0)),
            // Not resolved yet: not fetched.
            assigned("t", 5, Position::Reset(OffsetSpec::Latest)),
            assigned("gone", 0, Position::At(0)),
        ];
        let leader = |topic: &str, partition| match cache.route(topic, partition, "bootstrap:1") {
            crate::metadata::Route::Bootstrap => Some(Node::Bootstrap),
            crate::metadata::Route::Broker { address, .. } => Some(Node::Broker(address)),
            crate::metadata::Route::Unknown => None,
        };
        let plan = plan_fetches(&assignments, leader);
        assert_eq!(
            plan.fetches,
            vec![
                (Node::Broker("b1:1".into()), vec![0, 2]),
                (Node::Broker("b2:2".into()), vec![1]),
            ]
        );
        assert_eq!(
            plan.unroutable,
            vec![("t".into(), 3), ("t".into(), 4), ("gone".into(), 0)]
        );
        // Partitions served more recently are asked for after the others.
        let mut assignments = assignments;
        assignments[0].last_served = 2;
        assignments[1].last_served = 1;
        let reordered = plan_fetches(&assignments, leader);
        assert_eq!(
            reordered.fetches,
            vec![
                (Node::Broker("b1:1".into()), vec![2, 0]),
                (Node::Broker("b2:2".into()), vec![1]),
            ]
        );
    }

    #[test]
    fn leadership_and_unanswered_errors_are_transient_others_are_not() {
        assert!(is_transient(&ClientError::Transport(
            tonic::Status::unavailable("refused")
        )));
        assert!(is_transient(&ClientError::broker(
            ErrorCode::NotLeaderOrFollower as i32,
            ""
        )));
        assert!(!is_transient(&ClientError::broker(
            ErrorCode::OffsetOutOfRange as i32,
            ""
        )));
        assert!(!is_transient(&ClientError::UnknownTopic {
            topic: "t".into(),
            partition: Some(0)
        }));
    }

    #[test]
    fn isolation_parses_cli_spellings() {
        assert_eq!(
            "read-committed".parse::<Isolation>().ok(),
            Some(Isolation::ReadCommitted)
        );
        assert_eq!(
            "READ_UNCOMMITTED".parse::<Isolation>().ok(),
            Some(Isolation::ReadUncommitted)
        );
        assert!("dirty".parse::<Isolation>().is_err());
    }
}
