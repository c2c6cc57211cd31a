//! The producer: `send` hands a record to its partition's task and returns at once with
//! a [`DeliveryFuture`], so callers pipeline; the future resolves with the record's
//! offset once the broker acknowledged it (after retries, in the retrying modes) or
//! with the error that ended it. Each partition has its own task, batches, sequence
//! numbers and producer id; see [`inflight`] for the ordering rules.

pub mod accumulator;
pub mod config;
pub mod inflight;
mod record_metadata;
pub(crate) mod sender;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use idem_proto::batch::{Record, HEADER_LEN};
use tokio::sync::{mpsc, oneshot};

use self::accumulator::record_size;
use self::config::ProducerConfig;
pub use self::record_metadata::RecordMetadata;
use self::sender::{PartitionMsg, PartitionSender};
use crate::clock::now_ms;
use crate::connection::{Connection, MAX_MESSAGE_BYTES};
use crate::error::ClientError;
use crate::partitioner::TopicPartitioners;
use crate::types::ProducerIdAndEpoch;

/// Records a partition task may have queued in its channel before `send` waits (the
/// task itself stops taking records at `buffer_memory`).
const CHANNEL_CAPACITY: usize = 1024;

/// The record header that carries a producer-supplied idempotency key (set it with
/// [`ProducerRecord::idempotency_key`]): the database Inbox (feature `inbox`)
/// deduplicates by it, so the same business event sent again by an upstream that lost
/// its producer state (a new producer id, a new offset) is still applied once.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idem-idempotency-key";

/// A record with everything a caller may set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    pub topic: String,
    /// `None`: chosen by the partitioner from the key.
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Bytes)>,
    /// `None`: the time of `send`.
    pub timestamp_ms: Option<i64>,
}

impl ProducerRecord {
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.into(),
            partition: None,
            key: None,
            value: Some(value.into()),
            headers: Vec::new(),
            timestamp_ms: None,
        }
    }
    /// A record without a value for `key`: in a compacted topic, the key's deletion.
    pub fn tombstone(topic: impl Into<String>, key: impl Into<Bytes>) -> Self {
        ProducerRecord {
            value: None,
            ..ProducerRecord::new(topic, Bytes::new()).key(key)
        }
    }
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push((key.into(), value.into()));
        self
    }
    /// The business event's own id, sent as the [`IDEMPOTENCY_KEY_HEADER`] header: a
    /// consumer's Inbox applies each id once, whoever produced it and however often.
    pub fn idempotency_key(self, key: impl Into<Bytes>) -> Self {
        self.header(IDEMPOTENCY_KEY_HEADER, key)
    }
}

/// Resolves once the record is acknowledged or has failed for good.
#[derive(Debug)]
#[must_use = "a record's outcome is only known by awaiting its DeliveryFuture"]
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata, ClientError>>,
}

impl DeliveryFuture {
    pub(crate) fn new(rx: oneshot::Receiver<Result<RecordMetadata, ClientError>>) -> Self {
        DeliveryFuture { rx }
    }
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(|r| match r {
            Ok(result) => result,
            // The partition task ended without an answer: it can only have been
            // aborted (runtime shut down).
            Err(_) => Err(ClientError::Closed),
        })
    }
}

/// A producer; cheap to clone, all clones share the partitions' tasks.
#[derive(Debug, Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Arc<ProducerConfig>,
    conn: Connection,
    /// The id every partition starts with (exactly-once only).
    producer: Option<ProducerIdAndEpoch>,
    partitions: Mutex<HashMap<String, HashMap<i32, mpsc::Sender<PartitionMsg>>>>,
    partitioners: TopicPartitioners,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    closed: AtomicBool,
}

impl Producer {
    /// Validates `config`, connects, and in exactly-once mode obtains a producer id.
    pub async fn connect(config: ProducerConfig) -> Result<Producer, ClientError> {
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
        let producer = if config.delivery.idempotent() {
            let p = conn.init_producer_id().await?;
            tracing::info!(
                producer_id = p.producer_id,
                producer_epoch = p.producer_epoch,
                "idempotent producer ready"
            );
            Some(p)
        } else {
            None
        };
        Ok(Producer {
            inner: Arc::new(Inner {
                config: Arc::new(config),
                conn,
                producer,
                partitions: Mutex::new(HashMap::new()),
                partitioners,
                tasks: Mutex::new(Vec::new()),
                closed: AtomicBool::new(false),
            }),
        })
    }

    pub fn config(&self) -> &ProducerConfig {
        &self.inner.config
    }

    /// The producer id partitions start with (exactly-once mode).
    pub fn producer_id(&self) -> Option<ProducerIdAndEpoch> {
        self.inner.producer
    }

    /// Sends `value` under `key` to the partition the key maps to (sticky round-robin
    /// for `None`). Waits only for metadata and buffer space, not for the broker.
    pub async fn send(
        &self,
        topic: &str,
        key: Option<Bytes>,
        value: Bytes,
    ) -> Result<DeliveryFuture, ClientError> {
        self.send_record(ProducerRecord {
            key,
            ..ProducerRecord::new(topic, value)
        })
        .await
    }

    /// Sends to an explicit partition.
    pub async fn send_to(
        &self,
        topic: &str,
        partition: i32,
        key: Option<Bytes>,
        value: Bytes,
    ) -> Result<DeliveryFuture, ClientError> {
        self.send_record(ProducerRecord {
            key,
            partition: Some(partition),
            ..ProducerRecord::new(topic, value)
        })
        .await
    }

    /// Sends a record with headers, timestamp or partition set.
    pub async fn send_record(&self, record: ProducerRecord) -> Result<DeliveryFuture, ClientError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(ClientError::Closed);
        }
        let (topic, partition, record, size) = prepare(record)?;
        let count = self.inner.conn.partition_count(&topic).await?;
        let partition = self.inner.partitioners.partition_for(
            &topic,
            partition,
            record.key.as_deref(),
            size,
            count,
        )?;
        let sender = self.partition_sender(&topic, partition)?;
        let (ticket, rx) = oneshot::channel();
        sender
            .send(PartitionMsg::Record { record, ticket })
            .await
            .map_err(|_| ClientError::Closed)?;
        Ok(DeliveryFuture { rx })
    }

    /// Sends every buffered record now and waits until each record handed over before
    /// this call is acknowledged or failed.
    pub async fn flush(&self) {
        let senders: Vec<mpsc::Sender<PartitionMsg>> = match self.inner.partitions.lock() {
            Ok(partitions) => partitions
                .values()
                .flat_map(|p| p.values().cloned())
                .collect(),
            Err(_) => return,
        };
        let mut waits = Vec::with_capacity(senders.len());
        for sender in senders {
            let (tx, rx) = oneshot::channel();
            if sender.send(PartitionMsg::Flush(tx)).await.is_ok() {
                waits.push(rx);
            }
        }
        for wait in waits {
            let _ = wait.await;
        }
    }

    /// Refuses new records, completes every record already handed over (retries
    /// included), and stops the partition tasks.
    pub async fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.flush().await;
        if let Ok(mut partitions) = self.inner.partitions.lock() {
            partitions.clear();
        }
        let tasks: Vec<_> = match self.inner.tasks.lock() {
            Ok(mut tasks) => tasks.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        for task in tasks {
            let _ = task.await;
        }
    }

    /// The channel of a partition's task, starting the task on first use.
    fn partition_sender(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<mpsc::Sender<PartitionMsg>, ClientError> {
        let mut partitions = self
            .inner
            .partitions
            .lock()
            .map_err(|_| ClientError::Fatal("producer state poisoned".into()))?;
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(ClientError::Closed);
        }
        if let Some(sender) = partitions.get(topic).and_then(|p| p.get(&partition)) {
            return Ok(sender.clone());
        }
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let task = PartitionSender::spawn(
            Arc::from(topic),
            partition,
            self.inner.conn.clone(),
            self.inner.config.clone(),
            self.inner.producer,
            None,
            rx,
        );
        if let Ok(mut tasks) = self.inner.tasks.lock() {
            tasks.retain(|t| !t.is_finished());
            tasks.push(task);
        }
        partitions
            .entry(topic.to_string())
            .or_default()
            .insert(partition, tx.clone());
        Ok(tx)
    }
}

/// Splits a caller's record into its destination and the record as batched, stamped
/// with the time of `send` when it has no timestamp; refuses one no batch can carry.
pub(crate) fn prepare(
    record: ProducerRecord,
) -> Result<(String, Option<i32>, Record, usize), ClientError> {
    let ProducerRecord {
        topic,
        partition,
        key,
        value,
        #[cfg_attr(not(feature = "otel"), allow(unused_mut))]
        mut headers,
        timestamp_ms,
    } = record;
    // Before the size check: the trace context is part of the record's bytes.
    #[cfg(feature = "otel")]
    crate::trace_context::inject_current(&mut headers);
    let record = Record {
        key,
        value,
        headers,
        timestamp_ms: timestamp_ms.unwrap_or_else(now_ms),
    };
    let size = record_size(&record);
    let max = MAX_MESSAGE_BYTES - HEADER_LEN - 4096;
    if size > max {
        return Err(ClientError::RecordTooLarge { size, max });
    }
    Ok((topic, partition, record, size))
}
