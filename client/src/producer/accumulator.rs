//! One partition's open batch. Records join the open batch until the next one would push
//! it past `batch_size` or `linger` has passed since its first record; then it is sealed
//! and handed to the partition's sender. Pure: time comes in as arguments.
//! Invariant: records leave in the order they arrived, and every sealed batch holds at
//! least one record.

use std::time::{Duration, Instant};

use idem_proto::batch::{Record, HEADER_LEN};

/// Per-record overhead of the batch format: length, timestamp delta, offset delta, key
/// and value lengths, header count.
const RECORD_OVERHEAD: usize = 4 + 8 + 4 + 4 + 4 + 4;

/// Encoded size of `record` inside a batch.
pub fn record_size(record: &Record) -> usize {
    RECORD_OVERHEAD
        + record.key.as_ref().map_or(0, |k| k.len())
        + record.value.as_ref().map_or(0, |v| v.len())
        + record
            .headers
            .iter()
            .map(|(k, v)| 8 + k.len() + v.len())
            .sum::<usize>()
}

/// A batch ready to send: the records, one ticket per record (who to tell about it), and
/// when its first record arrived (its delivery timeout counts from then).
#[derive(Debug)]
pub struct SealedBatch<T> {
    pub records: Vec<Record>,
    pub tickets: Vec<T>,
    pub created_at: Instant,
    /// Encoded size in bytes, header included.
    pub size: usize,
}

/// The open batch of one partition. `T` is what the caller keeps per record (the
/// producer keeps the sender that completes the record's future).
#[derive(Debug)]
pub struct Accumulator<T> {
    batch_size: usize,
    linger: Duration,
    records: Vec<Record>,
    tickets: Vec<T>,
    size: usize,
    created_at: Option<Instant>,
}

impl<T> Accumulator<T> {
    pub fn new(batch_size: usize, linger: Duration) -> Self {
        Accumulator {
            batch_size,
            linger,
            records: Vec::new(),
            tickets: Vec::new(),
            size: HEADER_LEN,
            created_at: None,
        }
    }

    /// Adds a record. Returns the batches this sealed: the open batch if the record did
    /// not fit, and the new batch if the record alone filled it.
    pub fn append(&mut self, record: Record, ticket: T, now: Instant) -> Vec<SealedBatch<T>> {
        let mut sealed = Vec::new();
        let added = record_size(&record);
        if !self.records.is_empty() && self.size + added > self.batch_size {
            sealed.extend(self.seal());
        }
        if self.records.is_empty() {
            self.created_at = Some(now);
        }
        self.records.push(record);
        self.tickets.push(ticket);
        self.size += added;
        if self.size >= self.batch_size {
            sealed.extend(self.seal());
        }
        sealed
    }

    /// When the open batch must be sealed by linger, if there is one.
    pub fn deadline(&self) -> Option<Instant> {
        self.created_at.map(|t| t + self.linger)
    }

    /// Seals the open batch if its linger has passed.
    pub fn seal_if_due(&mut self, now: Instant) -> Option<SealedBatch<T>> {
        match self.deadline() {
            Some(deadline) if deadline <= now => self.seal(),
            _ => None,
        }
    }

    /// Seals the open batch now (flush, close), if it holds any record.
    pub fn seal(&mut self) -> Option<SealedBatch<T>> {
        let created_at = self.created_at.take()?;
        let size = std::mem::replace(&mut self.size, HEADER_LEN);
        Some(SealedBatch {
            records: std::mem::take(&mut self.records),
            tickets: std::mem::take(&mut self.tickets),
            created_at,
            size,
        })
    }

    /// Bytes of the open batch (0 when empty).
    pub fn buffered_bytes(&self) -> usize {
        if self.records.is_empty() {
            0
        } else {
            self.size
        }
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn record(value_len: usize) -> Record {
        Record {
            key: None,
            value: Some(Bytes::from(vec![b'x'; value_len])),
            headers: Vec::new(),
            timestamp_ms: 0,
        }
    }

    fn batch_of(record_count: usize, value_len: usize) -> usize {
        HEADER_LEN + record_count * (RECORD_OVERHEAD + value_len)
    }

    #[test]
    fn record_size_matches_the_encoded_format() {
        let r = Record {
            key: Some(Bytes::from_static(b"key")),
            value: Some(Bytes::from_static(b"value")),
            headers: vec![("h".into(), Bytes::from_static(b"vv"))],
            timestamp_ms: 7,
        };
        let encoded = idem_proto::batch::encode(
            idem_proto::batch::ProducerInfo::NONE,
            0,
            std::slice::from_ref(&r),
        );
        assert_eq!(HEADER_LEN + record_size(&r), encoded.len());
    }

    #[test]
    fn a_batch_waits_for_linger_then_seals() {
        let t0 = Instant::now();
        let mut acc = Accumulator::new(1 << 20, Duration::from_millis(5));
        assert!(acc.deadline().is_none());
        assert!(acc.append(record(10), 1, t0).is_empty());
        assert!(acc
            .append(record(10), 2, t0 + Duration::from_millis(3))
            .is_empty());
        assert_eq!(acc.deadline(), Some(t0 + Duration::from_millis(5)));
        assert!(acc.seal_if_due(t0 + Duration::from_millis(4)).is_none());
        let sealed = acc
            .seal_if_due(t0 + Duration::from_millis(5))
            .expect("due after linger");
        assert_eq!(sealed.tickets, vec![1, 2]);
        assert_eq!(sealed.created_at, t0);
        assert_eq!(sealed.size, batch_of(2, 10));
        assert!(acc.is_empty() && acc.deadline().is_none());
        assert_eq!(acc.buffered_bytes(), 0);
    }

    #[test]
    fn a_record_that_does_not_fit_seals_the_open_batch() {
        let t0 = Instant::now();
        let limit = batch_of(3, 100);
        let mut acc = Accumulator::new(limit + 10, Duration::from_secs(60));
        for i in 0..3 {
            assert!(acc.append(record(100), i, t0).is_empty());
        }
        let t1 = t0 + Duration::from_millis(1);
        let sealed = acc.append(record(100), 3, t1);
        assert_eq!(sealed.len(), 1);
        assert_eq!(sealed[0].tickets, vec![0, 1, 2]);
        assert_eq!(sealed[0].created_at, t0);
        // The record that did not fit opened the next batch.
        assert_eq!(acc.deadline(), Some(t1 + Duration::from_secs(60)));
        assert_eq!(acc.buffered_bytes(), batch_of(1, 100));
    }

    #[test]
    fn a_batch_that_reaches_batch_size_exactly_seals_at_once() {
        let t0 = Instant::now();
        let mut acc = Accumulator::new(batch_of(2, 50), Duration::from_secs(60));
        assert!(acc.append(record(50), 'a', t0).is_empty());
        let sealed = acc.append(record(50), 'b', t0);
        assert_eq!(sealed.len(), 1);
        assert_eq!(sealed[0].tickets, vec!['a', 'b']);
        assert!(acc.is_empty());
    }

    #[test]
    fn an_oversized_record_travels_alone() {
        let t0 = Instant::now();
        let mut acc = Accumulator::new(200, Duration::from_secs(60));
        assert!(acc.append(record(10), 0, t0).is_empty());
        let sealed = acc.append(record(1_000), 1, t0);
        assert_eq!(sealed.len(), 2);
        assert_eq!(sealed[0].tickets, vec![0]);
        assert_eq!(sealed[1].tickets, vec![1]);
        assert!(acc.is_empty());
    }

    #[test]
    fn seal_empties_and_an_empty_accumulator_seals_nothing() {
        let t0 = Instant::now();
        let mut acc: Accumulator<u8> = Accumulator::new(1_000, Duration::ZERO);
        assert!(acc.seal().is_none());
        assert!(acc.seal_if_due(t0).is_none());
        assert!(acc.append(record(1), 9, t0).is_empty());
        // linger zero: due immediately.
        assert_eq!(acc.seal_if_due(t0).map(|b| b.tickets), Some(vec![9]));
    }
}
