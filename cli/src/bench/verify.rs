//! Reads a bench topic back with a read_committed consumer, from the beginning to the
//! high watermark taken once every producer closed (or past the last acknowledged
//! offset, if that is further), and compares what it finds with
//! what was acknowledged: lost records (acknowledged, never read), duplicates, records
//! out of their producer's order within a partition, and records read that were never
//! acknowledged (for a transactional run: data of a transaction that did not commit).
//! The read is timed (from the first poll to the last), which gives the consumer's
//! read-back throughput.

use crate::access::Access;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use idem_client::{Consumer, ConsumerConfig, Isolation, OffsetSpec};

use super::args::Amount;
use super::load::Sent;
use super::modes::Mode;
use super::payload;
use super::progress::Progress;
use super::seqset::SeqSet;

/// Reading stops early when no partition moved for this long (what was read so far is
/// judged: missing records then show as lost).
const STALL: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Verification {
    pub read: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Read, but never acknowledged: legitimate for at-most-once (a failed send may be
    /// written), never for a transactional run (uncommitted data would be visible).
    pub unacked_read: u64,
    /// Values that no producer of this run sent.
    pub foreign: u64,
    /// Reading stopped because the partitions stopped moving, not at their end.
    pub stalled: bool,
}

impl Verification {
    /// Whether `mode` kept its promise in this run.
    pub fn passed(&self, mode: Mode, acked: u64) -> bool {
        let complete = self.lost == 0 && self.foreign == 0 && self.read >= acked;
        let exact =
            !mode.promises_exactly_once() || (self.duplicates == 0 && self.out_of_order == 0);
        let committed_only = mode != Mode::Transactional || self.unacked_read == 0;
        complete && exact && committed_only
    }
}

/// What a reader needs to know of the run: its topic and what each producer did.
pub struct ReadBack<'a> {
    pub bootstrap: &'a str,
    pub access: &'a Access,
    pub topic: &'a str,
    pub partitions: i32,
    pub sent: &'a [Sent],
    pub label: String,
    pub progress_visible: bool,
}

/// What the read found, and how long it took.
#[derive(Debug, Clone, Copy)]
pub struct ReadOutcome {
    pub verification: Verification,
    /// Bytes of the values read.
    pub value_bytes: u64,
    /// From the first poll until every partition was read to its end (or stalled).
    pub elapsed: Duration,
}

pub async fn verify(run: ReadBack<'_>) -> anyhow::Result<ReadOutcome> {
    let admin = run.access.admin(run.bootstrap).await?;
    let mut ends = Vec::with_capacity(run.partitions as usize);
    for p in 0..run.partitions {
        let end = admin
            .list_offsets(run.topic, p, OffsetSpec::Latest, Isolation::ReadUncommitted)
            .await
            .with_context(|| format!("looking up the end of {}/{p}", run.topic))?;
        ends.push((p, read_back_end(end, run.sent, p)));
    }
    let config = ConsumerConfig {
        isolation: Isolation::ReadCommitted,
        max_wait: Duration::from_millis(200),
        max_bytes: 8 * 1024 * 1024,
        partition_max_bytes: 4 * 1024 * 1024,
        start: OffsetSpec::Earliest,
        tls: run.access.tls.clone(),
        credentials: run.access.credentials.clone(),
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::connect(run.bootstrap, config)
        .await
        .with_context(|| format!("connecting a consumer to {}", run.bootstrap))?;
    consumer.assign(
        (0..run.partitions)
            .map(|p| (run.topic.to_string(), p))
            .collect(),
    );
    for p in 0..run.partitions {
        consumer.seek_to_beginning(run.topic, p)?;
    }
    let acked: u64 = run.sent.iter().map(|s| s.acked.len()).sum();
    let progress = Progress::start(&run.label, Amount::Records(acked), run.progress_visible);
    let read_count = progress.counter();
    let mut check = Checker::new(run.sent);
    let mut value_bytes = 0u64;
    let started = Instant::now();
    let mut moved_at = started;
    let stalled = loop {
        let records = consumer
            .poll(Duration::from_millis(500))
            .await
            .with_context(|| format!("reading {} back", run.topic))?;
        if !records.is_empty() {
            moved_at = Instant::now();
        }
        read_count.fetch_add(records.len() as u64, Ordering::Relaxed);
        for record in &records {
            let value = record.value.as_deref().unwrap_or_default();
            value_bytes += value.len() as u64;
            check.record(record.partition, value);
        }
        let mut done = true;
        for (p, end) in &ends {
            done &= consumer.position(run.topic, *p).await? >= *end;
        }
        if done {
            break false;
        }
        if moved_at.elapsed() >= STALL {
            break true;
        }
    };
    let elapsed = started.elapsed();
    progress.finish().await;
    Ok(ReadOutcome {
        verification: check.finish(stalled),
        value_bytes,
        elapsed,
    })
}

/// Where reading `partition` back may stop: at the high watermark taken after the
/// producers closed, or past the last acknowledged record if that is further (with
/// acks=1 the followers may still be catching up, so the high watermark lags).
fn read_back_end(high_watermark: i64, sent: &[Sent], partition: i32) -> i64 {
    sent.iter()
        .filter_map(|s| s.acked_ends.get(&partition).copied())
        .fold(high_watermark, i64::max)
}

/// Judges records one by one as they are read.
pub struct Checker<'a> {
    sent: &'a [Sent],
    seen: Vec<SeqSet>,
    /// Highest sequence read per (producer, partition).
    last: HashMap<(u32, i32), u64>,
    result: Verification,
}

impl<'a> Checker<'a> {
    pub fn new(sent: &'a [Sent]) -> Self {
        Checker {
            sent,
            seen: vec![SeqSet::default(); sent.len()],
            last: HashMap::new(),
            result: Verification::default(),
        }
    }

    pub fn record(&mut self, partition: i32, value: &[u8]) {
        self.record_stamp(partition, payload::decode(value));
    }

    /// A record read from `partition` whose value carried `stamp` (`None`: no stamp).
    pub fn record_stamp(&mut self, partition: i32, stamp: Option<payload::Stamp>) {
        self.result.read += 1;
        let Some(stamp) = stamp else {
            self.result.foreign += 1;
            return;
        };
        let producer = stamp.producer as usize;
        let known = self
            .sent
            .get(producer)
            .is_some_and(|s| stamp.sequence < s.sent);
        if !known {
            self.result.foreign += 1;
            return;
        }
        if !self.seen[producer].insert(stamp.sequence) {
            self.result.duplicates += 1;
            return;
        }
        match self.last.get_mut(&(stamp.producer, partition)) {
            Some(last) if *last > stamp.sequence => self.result.out_of_order += 1,
            Some(last) => *last = stamp.sequence,
            None => {
                self.last
                    .insert((stamp.producer, partition), stamp.sequence);
            }
        }
    }

    pub fn finish(mut self, stalled: bool) -> Verification {
        for (sent, seen) in self.sent.iter().zip(&self.seen) {
            self.result.lost += sent.acked.count_missing_from(seen);
            self.result.unacked_read += seen.count_missing_from(&sent.acked);
        }
        self.result.stalled = stalled;
        self.result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::latency::Latencies;
    use crate::bench::payload::Stamp;

    fn sent(producer: u32, sent: u64, acked: std::ops::Range<u64>) -> Sent {
        let mut set = SeqSet::default();
        set.insert_range(acked);
        Sent {
            producer,
            sent,
            acked: set,
            acked_ends: HashMap::new(),
            failed: 0,
            aborted_txns: 0,
            first_failure: None,
            latencies: Latencies::new(),
        }
    }

    fn value(producer: u32, sequence: u64) -> bytes::Bytes {
        payload::encode(
            Stamp {
                producer,
                sequence,
                sent_nanos: 0,
            },
            32,
        )
    }

    #[test]
    fn a_faithful_read_passes_every_mode() {
        let run = [sent(0, 4, 0..4), sent(1, 2, 0..2)];
        let mut check = Checker::new(&run);
        for (p, seq, partition) in [
            (0, 0, 0),
            (1, 0, 1),
            (0, 1, 0),
            (0, 2, 1),
            (1, 1, 1),
            (0, 3, 0),
        ] {
            check.record(partition, &value(p, seq));
        }
        let result = check.finish(false);
        assert_eq!(result.read, 6);
        for mode in Mode::ALL {
            assert!(result.passed(mode, 6), "{mode}: {result:?}");
        }
    }

    #[test]
    fn loss_duplicates_reordering_and_uncommitted_reads_are_each_caught() {
        let run = [sent(0, 5, 0..4)];
        let mut check = Checker::new(&run);
        for seq in [0, 2, 1, 2, 4] {
            check.record(0, &value(0, seq));
        }
        check.record(0, b"short");
        check.record(0, &value(7, 0));
        let result = check.finish(false);
        assert_eq!(
            (result.lost, result.duplicates, result.out_of_order),
            (1, 1, 1)
        );
        assert_eq!((result.unacked_read, result.foreign), (1, 2));
        assert!(!result.passed(Mode::AtLeastOnce, 4));
        assert!(!result.passed(Mode::ExactlyOnce, 4));
    }

    #[test]
    fn at_least_once_may_duplicate_but_exactly_once_may_not() {
        let run = [sent(0, 2, 0..2)];
        let mut check = Checker::new(&run);
        for seq in [0, 1, 1] {
            check.record(0, &value(0, seq));
        }
        let result = check.finish(false);
        assert!(result.passed(Mode::AtLeastOnce, 2));
        assert!(result.passed(Mode::AtMostOnce, 2));
        assert!(!result.passed(Mode::ExactlyOnce, 2));
        assert!(!result.passed(Mode::Transactional, 2));
    }

    #[test]
    fn given_acks_beyond_the_high_watermark_then_the_read_back_goes_past_the_last_one() {
        let mut first = sent(0, 10, 0..10);
        first.acked_ends = [(0, 7), (1, 3)].into();
        let mut second = sent(1, 10, 0..10);
        second.acked_ends = [(0, 9)].into();
        let producers = [first, second];
        assert_eq!(read_back_end(5, &producers, 0), 9);
        assert_eq!(
            read_back_end(5, &producers, 1),
            5,
            "the watermark is further"
        );
        assert_eq!(read_back_end(0, &producers, 2), 0, "nothing acked there");
    }
}
