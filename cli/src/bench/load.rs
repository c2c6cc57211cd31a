//! One bench producer: sends stamped records as fast as it may (or at a fixed rate)
//! until its time or its count runs out, measuring each record from `send` to its
//! acknowledgement. A collector task awaits the acknowledgements while the sender goes
//! on, so the pipeline stays full and each latency is taken when its ack arrives.
//!
//! What counts as acknowledged: a record whose delivery succeeded; in the
//! transactional mode, only the records of transactions that committed.

use crate::access::Access;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::stream::{FuturesUnordered, StreamExt};
use idem_client::{
    ClientError, DeliveryFuture, PendingCommit, Producer, ProducerRecord, TransactionalConfig,
    TransactionalProducer, TxnErrorClass, TxnState,
};
use tokio::sync::mpsc;

use super::args::LoadArgs;
use super::latency::Latencies;
use super::modes::Mode;
use super::payload::{self, Stamp};
use super::seqset::SeqSet;

/// Kafka's `buffer.memory` is 32 MiB for the whole producer; the SDK's limit is per
/// partition, so it is split to keep the queue (and with it the latency measured at
/// saturation) comparable.
const PRODUCER_BUFFER_BYTES: usize = 32 * 1024 * 1024;

/// What one producer sends.
#[derive(Debug, Clone)]
pub struct Plan {
    pub topic: String,
    pub record_size: usize,
    pub until: Until,
    /// Records per second for this producer; `None`: as fast as acknowledgements allow.
    pub rate: Option<f64>,
    /// Commit interval of the transactional mode.
    pub txn_every: Duration,
    /// Between transactions, `commit_and_begin` (else `commit`, then `begin`).
    pub txn_pipelined: bool,
    /// The run's shared start: send times in stamps count from it, and pacing too.
    pub start: Instant,
}

#[derive(Debug, Clone, Copy)]
pub enum Until {
    Deadline(Instant),
    Records(u64),
}

impl Plan {
    fn more(&self, seq: u64) -> bool {
        match self.until {
            Until::Deadline(deadline) => Instant::now() < deadline,
            Until::Records(n) => seq < n,
        }
    }

    /// When to send record `seq`: `None` once the run is over or `before` (a
    /// transaction's commit time) has passed; with a rate, after waiting for the
    /// record's turn. The clock is read once per record: the transactional loop read it
    /// four times, and `clock_gettime` was 2.0% of the machine's samples against 1.1%
    /// now (a cost of the bench, not of idem, and one the other modes paid less).
    async fn next_send(&self, seq: u64, before: Option<Instant>) -> Option<Instant> {
        let now = Instant::now();
        let over = match self.until {
            Until::Deadline(deadline) => now >= deadline,
            Until::Records(n) => seq >= n,
        };
        if over || before.is_some_and(|at| now >= at) {
            return None;
        }
        if let Some(rate) = self.rate {
            let due = self.start + Duration::from_secs_f64(seq as f64 / rate);
            if due > now {
                tokio::time::sleep_until(due.into()).await;
                return Some(Instant::now());
            }
        }
        Some(now)
    }

    fn value(&self, producer: u32, sequence: u64, at: Instant) -> bytes::Bytes {
        let sent_nanos = u64::try_from((at - self.start).as_nanos()).unwrap_or(u64::MAX);
        payload::encode(
            Stamp {
                producer,
                sequence,
                sent_nanos,
            },
            self.record_size,
        )
    }
}

/// What one producer did.
#[derive(Debug)]
pub struct Sent {
    pub producer: u32,
    /// Records handed to `send` (sequences `0..sent`).
    pub sent: u64,
    pub acked: SeqSet,
    /// Per partition, the offset just past the last record acknowledged there: the
    /// read-back must reach it (with acks=1 the high watermark may still be below it
    /// when the producer closes).
    pub acked_ends: HashMap<i32, i64>,
    /// Records whose delivery failed.
    pub failed: u64,
    pub aborted_txns: u64,
    pub first_failure: Option<String>,
    pub latencies: Latencies,
}

/// A connected producer of one mode, ready to run.
pub enum Driver {
    Plain(Producer),
    Transactional(TransactionalProducer),
}

impl Driver {
    /// Connects (and gets a producer id, or initialises transactions) before the clock
    /// starts, so the run measures sending only.
    pub async fn connect(
        mode: Mode,
        bootstrap: &str,
        access: &Access,
        load: &LoadArgs,
        transactional_id: &str,
    ) -> anyhow::Result<Driver> {
        match mode.producer_config(bootstrap) {
            Some(mut config) => {
                config.tls = access.tls.clone();
                config.credentials = access.credentials.clone();
                config.linger = load.linger().unwrap_or(config.linger);
                config.batch_size = load.batch_size.unwrap_or(config.batch_size);
                let per_partition = PRODUCER_BUFFER_BYTES / load.partitions.max(1) as usize;
                config.buffer_memory = per_partition.max(config.batch_size);
                let producer = Producer::connect(config)
                    .await
                    .with_context(|| format!("connecting a {mode} producer to {bootstrap}"))?;
                Ok(Driver::Plain(producer))
            }
            None => {
                let mut config = TransactionalConfig::new(bootstrap, transactional_id);
                config.tls = access.tls.clone();
                config.credentials = access.credentials.clone();
                config.linger = load.linger().unwrap_or(config.linger);
                config.batch_size = load.batch_size.unwrap_or(config.batch_size);
                let producer = TransactionalProducer::connect(config)
                    .await
                    .with_context(|| {
                        format!("connecting a transactional producer to {bootstrap}")
                    })?;
                producer.init_transactions().await.with_context(|| {
                    format!("initialising transactions of {transactional_id:?} (is a transaction coordinator running?)")
                })?;
                Ok(Driver::Transactional(producer))
            }
        }
    }

    /// Sends per `plan` as producer `index`; bumps `progress` per acknowledged record.
    pub async fn run(
        self,
        index: u32,
        plan: Plan,
        progress: Arc<AtomicU64>,
    ) -> anyhow::Result<Sent> {
        let (tx, rx) = mpsc::unbounded_channel();
        let collector = tokio::spawn(collect(rx, progress));
        let (sent, outcome) = match &self {
            Driver::Plain(producer) => {
                let mut seq = 0;
                let result = send_plain(producer, index, &plan, &tx, &mut seq).await;
                (seq, result.map(|()| Committed::AllAcked))
            }
            Driver::Transactional(producer) => {
                let mut seq = 0;
                let result = send_in_transactions(producer, index, &plan, &tx, &mut seq).await;
                (
                    seq,
                    result.map(|(ranges, aborted)| Committed::Ranges(ranges, aborted)),
                )
            }
        };
        drop(tx);
        match &self {
            Driver::Plain(producer) => producer.close().await,
            Driver::Transactional(producer) => producer.close().await,
        }
        let collected = collector
            .await
            .context("the acknowledgement collector failed")?;
        let (acked, aborted_txns) = match outcome? {
            Committed::AllAcked => (collected.acked, 0),
            Committed::Ranges(ranges, aborted) => {
                let mut acked = SeqSet::default();
                for range in ranges {
                    acked.insert_range(range);
                }
                (acked, aborted)
            }
        };
        Ok(Sent {
            producer: index,
            sent,
            acked,
            acked_ends: collected.acked_ends,
            failed: collected.failed,
            aborted_txns,
            first_failure: collected.first_failure,
            latencies: collected.latencies,
        })
    }
}

enum Committed {
    /// Every successful delivery counts.
    AllAcked,
    /// Only these sequences count (committed transactions), and how many aborted.
    Ranges(Vec<Range<u64>>, u64),
}

struct InFlight {
    seq: u64,
    sent_at: Instant,
    delivery: DeliveryFuture,
}

async fn send_plain(
    producer: &Producer,
    index: u32,
    plan: &Plan,
    tx: &mpsc::UnboundedSender<InFlight>,
    seq: &mut u64,
) -> anyhow::Result<()> {
    while let Some(sent_at) = plan.next_send(*seq, None).await {
        let value = plan.value(index, *seq, sent_at);
        let delivery = producer
            .send(&plan.topic, None, value)
            .await
            .with_context(|| format!("sending to {}", plan.topic))?;
        let _ = tx.send(InFlight {
            seq: *seq,
            sent_at,
            delivery,
        });
        *seq += 1;
    }
    Ok(())
}

/// Transactions of `plan.txn_every` each; returns the committed sequence ranges and the
/// number of aborted transactions.
async fn send_in_transactions(
    producer: &TransactionalProducer,
    index: u32,
    plan: &Plan,
    tx: &mpsc::UnboundedSender<InFlight>,
    seq: &mut u64,
) -> anyhow::Result<(Vec<Range<u64>>, u64)> {
    let mut ended = Ended::default();
    // A transaction committing in the background, and its records.
    let mut pending: Option<(Range<u64>, PendingCommit)> = None;
    let mut open = false;
    while plan.more(*seq) {
        if !open {
            producer.begin().context("beginning a transaction")?;
        }
        let first = *seq;
        let commit_at = Instant::now() + plan.txn_every;
        let mut failed = None;
        while let Some(sent_at) = plan.next_send(*seq, Some(commit_at)).await {
            let value = plan.value(index, *seq, sent_at);
            match producer
                .send(ProducerRecord::new(plan.topic.as_str(), value))
                .await
            {
                Ok(delivery) => {
                    let _ = tx.send(InFlight {
                        seq: *seq,
                        sent_at,
                        delivery,
                    });
                    *seq += 1;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let pipelined = plan.txn_pipelined && failed.is_none() && plan.more(*seq);
        let result = match failed {
            Some(e) => Err(e),
            None if pipelined => match producer.commit_and_begin().await {
                Ok(commit) => {
                    // Waited for the one before it, so that one is decided.
                    if let Some((range, previous)) = pending.replace((first..*seq, commit)) {
                        ended.book(previous.committed().await, range)?;
                    }
                    open = true;
                    continue;
                }
                Err(e) => Err(e),
            },
            None => producer.commit().await,
        };
        open = false;
        if let Some((range, previous)) = pending.take() {
            ended.book(previous.committed().await, range)?;
        }
        if ended.book(result, first..*seq)? {
            producer
                .abort()
                .await
                .context("aborting a failed transaction")?;
        }
    }
    if let Some((range, previous)) = pending.take() {
        // The run ended right after a pipelined commit: end the transaction it began.
        ended.book(previous.committed().await, range)?;
        let last = if producer.state() == TxnState::AbortableError {
            producer.abort().await
        } else {
            producer.commit().await
        };
        last.context("ending the last transaction")?;
    }
    Ok((ended.committed, ended.aborted))
}

/// How the transactions of one bench producer ended.
#[derive(Default)]
struct Ended {
    /// The sequence ranges of the committed ones.
    committed: Vec<Range<u64>>,
    aborted: u64,
}

impl Ended {
    /// Books how the transaction of `records` ended. `Ok(true)`: it failed and the
    /// producer must abort it (a transaction committed in the background was aborted
    /// already, and the one after it fails its commit); a fatal error ends the run.
    fn book(
        &mut self,
        outcome: Result<(), ClientError>,
        records: Range<u64>,
    ) -> anyhow::Result<bool> {
        match outcome {
            Ok(()) => {
                self.committed.push(records);
                Ok(false)
            }
            Err(e) if e.txn_class() == TxnErrorClass::Abortable => {
                tracing::warn!(error = %e, "a bench transaction could not commit");
                self.aborted += 1;
                Ok(true)
            }
            Err(e) => Err(e).context("committing a transaction"),
        }
    }
}

#[derive(Default)]
struct Collected {
    acked: SeqSet,
    acked_ends: HashMap<i32, i64>,
    failed: u64,
    first_failure: Option<String>,
    latencies: Latencies,
}

/// Awaits every delivery handed over, in whatever order they complete.
async fn collect(mut rx: mpsc::UnboundedReceiver<InFlight>, progress: Arc<AtomicU64>) -> Collected {
    let mut collected = Collected::default();
    let mut pending = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            next = rx.recv(), if open => match next {
                Some(InFlight { seq, sent_at, delivery }) => pending.push(async move {
                    let result: Result<_, ClientError> = delivery.await;
                    (seq, sent_at.elapsed(), result)
                }),
                None => open = false,
            },
            Some((seq, latency, result)) = pending.next(), if !pending.is_empty() => match result {
                Ok(metadata) => {
                    if metadata.offset >= 0 {
                        let end = collected.acked_ends.entry(metadata.partition).or_default();
                        *end = (*end).max(metadata.offset + 1);
                    }
                    collected.latencies.record(latency);
                    collected.acked.insert(seq);
                    progress.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    collected.failed += 1;
                    collected.first_failure.get_or_insert_with(|| e.to_string());
                }
            },
            else => break,
        }
    }
    collected
}
