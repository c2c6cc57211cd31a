//! Reads assigned partitions from a position the caller controls. `poll` fetches every
//! assigned partition in one request, verifies each batch's CRC, drops control batches
//! and the records of a batch that lie before the fetch position, and advances each
//! position past what it returns. Data that fails its CRC or does not parse is an error
//! and the position stays before it: nothing is ever silently skipped.

use std::str::FromStr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use idem_proto::batch::{self, Batches};
use idem_proto::v1::{FetchPartition, FetchRequest, FetchResponse, FetchTopic, IsolationLevel};
use idem_proto::ErrorCode;

use crate::admin::OffsetSpec;
use crate::connection::{with_timeout, Connection};
use crate::error::{self, ClientError};
use crate::metadata::error_code;

/// Which records a consumer may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Only committed data: the broker stops at the last stable offset and filters
    /// aborted transactions. The default: idem exists for exactly-once pipelines.
    #[default]
    ReadCommitted,
    /// Everything up to the high watermark, including open and aborted transactions.
    ReadUncommitted,
}

impl Isolation {
    pub fn to_proto(self) -> IsolationLevel {
        match self {
            Isolation::ReadCommitted => IsolationLevel::ReadCommitted,
            Isolation::ReadUncommitted => IsolationLevel::ReadUncommitted,
        }
    }
}

impl FromStr for Isolation {
    type Err = ClientError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "read-committed" => Ok(Isolation::ReadCommitted),
            "read-uncommitted" => Ok(Isolation::ReadUncommitted),
            other => Err(ClientError::InvalidConfig(format!(
                "unknown isolation {other:?}: expected read-committed or read-uncommitted"
            ))),
        }
    }
}

/// Consumer settings, each with a documented default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// Default [`Isolation::ReadCommitted`].
    pub isolation: Isolation,
    /// How long the broker may hold a fetch open waiting for data. Default 500 ms.
    pub max_wait: Duration,
    /// Upper bound on the bytes of one fetch answer. Default 50 MiB.
    pub max_bytes: i32,
    /// Upper bound per partition in one fetch answer (the broker still returns at least
    /// one whole batch). Default 1 MiB.
    pub partition_max_bytes: i32,
    /// Where a partition without an explicit seek starts. Default
    /// [`OffsetSpec::Latest`] (Kafka's `auto.offset.reset=latest`).
    pub start: OffsetSpec,
    /// Time one RPC may take beyond `max_wait`. Default 30 s.
    pub request_timeout: Duration,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            isolation: Isolation::ReadCommitted,
            max_wait: Duration::from_millis(500),
            max_bytes: 50 * 1024 * 1024,
            partition_max_bytes: 1024 * 1024,
            start: OffsetSpec::Latest,
            request_timeout: Duration::from_secs(30),
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
}

/// Reads records from assigned partitions.
#[derive(Debug)]
pub struct Consumer {
    conn: Connection,
    config: ConsumerConfig,
    assignments: Vec<Assignment>,
    /// An error met while returning records; reported by the next `poll`.
    pending_error: Option<ClientError>,
}

impl Consumer {
    pub async fn connect(bootstrap: &str, config: ConsumerConfig) -> Result<Consumer, ClientError> {
        if config.max_bytes <= 0 || config.partition_max_bytes <= 0 {
            return Err(ClientError::InvalidConfig(
                "max_bytes and partition_max_bytes must be positive".into(),
            ));
        }
        let conn = Connection::connect(bootstrap, config.request_timeout).await?;
        Ok(Consumer {
            conn,
            config,
            assignments: Vec::new(),
            pending_error: None,
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
            let position = self
                .find(&topic, partition)
                .map_or(Position::Reset(self.config.start), |a| a.position);
            next.push(Assignment {
                topic,
                partition,
                position,
            });
        }
        self.assignments = next;
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

    /// Waits up to `timeout` for records of the assigned partitions; returns as soon as
    /// there are some, or empty at the timeout.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ClientError> {
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        let deadline = Instant::now() + timeout;
        loop {
            if self.assignments.is_empty() {
                return Ok(Vec::new());
            }
            for idx in 0..self.assignments.len() {
                self.resolve(idx).await?;
            }
            let started = Instant::now();
            let max_wait = self
                .config
                .max_wait
                .min(deadline.saturating_duration_since(started));
            let response = self.fetch(max_wait).await?;
            let records = self.absorb(response)?;
            if !records.is_empty() {
                return Ok(records);
            }
            if let Some(e) = self.pending_error.take() {
                return Err(e);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            // A broker that answers an empty fetch at once must not make this spin.
            if now - started < max_wait {
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

    async fn fetch(&self, max_wait: Duration) -> Result<FetchResponse, ClientError> {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for a in &self.assignments {
            let Position::At(fetch_offset) = a.position else {
                continue;
            };
            let partition = FetchPartition {
                partition: a.partition,
                fetch_offset,
                partition_max_bytes: self.config.partition_max_bytes,
            };
            match topics.iter_mut().find(|t| t.name == a.topic) {
                Some(t) => t.partitions.push(partition),
                None => topics.push(FetchTopic {
                    name: a.topic.clone(),
                    partitions: vec![partition],
                }),
            }
        }
        let request = FetchRequest {
            max_wait_ms: max_wait.as_millis().min(i32::MAX as u128) as i32,
            min_bytes: 1,
            max_bytes: self.config.max_bytes,
            isolation_level: self.config.isolation.to_proto() as i32,
            topics,
        };
        let mut client = self.conn.client();
        with_timeout(
            self.config.request_timeout + max_wait,
            client.fetch(request),
        )
        .await
    }

    /// Applies a fetch answer: returns its records and advances positions past them.
    /// The first error is returned at once if nothing was read, else kept for the next
    /// poll, so records already read are never dropped.
    fn absorb(&mut self, response: FetchResponse) -> Result<Vec<ConsumerRecord>, ClientError> {
        let mut records = Vec::new();
        let mut first_error = None;
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
                        records.extend(decoded.records);
                        self.assignments[idx].position = Position::At(decoded.next_offset);
                        decoded.error.map_or(Ok(()), Err)
                    }
                    Some(ErrorCode::UnknownTopicOrPartition) => {
                        self.conn.invalidate(&topic.name);
                        Err(ClientError::UnknownTopic {
                            topic: topic.name.clone(),
                            partition: Some(p.partition),
                        })
                    }
                    // Leadership moves and the like: try again on the next fetch.
                    Some(code) if error::is_retriable(code) => {
                        tracing::debug!(topic = %topic.name, partition = p.partition, ?code, "fetch will retry");
                        Ok(())
                    }
                    Some(_) => Err(ClientError::broker(p.error_code, p.error_message)),
                };
                if let Err(e) = result {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if records.is_empty() => Err(e),
            Some(e) => {
                self.pending_error = Some(e);
                Ok(records)
            }
            None => Ok(records),
        }
    }
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
    fn empty_answer_keeps_the_position() {
        let d = decode_fetched("t", 0, 7, &[]);
        assert!(d.records.is_empty() && d.error.is_none());
        assert_eq!(d.next_offset, 7);
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
