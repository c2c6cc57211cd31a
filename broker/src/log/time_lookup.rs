//! Offsets by timestamp (Kafka's ListOffsets with a timestamp, a consumer's
//! `offsetsForTimes`): the first record, in offset order, whose timestamp is at or
//! after a target; and the record with the largest timestamp. No time index: each
//! segment's largest timestamp (read from its batch headers once, then kept; time
//! retention reads it anyway) picks where to start, batch headers pick the batch, and
//! that batch's records the offset. Producers set timestamps, so they need not grow
//! with offsets: "first" is by offset, as Kafka's time index answers it. Records below
//! the log start are not answered.

use std::ops::ControlFlow;

use idem_proto::batch;

use super::{LogError, PartitionLog};

/// A record found by its timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampedOffset {
    pub offset: i64,
    pub timestamp_ms: i64,
}

impl PartitionLog {
    /// The first record at or after the log start whose timestamp is `>= target`;
    /// `None` when every record is older.
    pub fn offset_for_timestamp(
        &mut self,
        target: i64,
    ) -> Result<Option<TimestampedOffset>, LogError> {
        let start = self.log_start;
        let mut from = None;
        for segment in &mut self.segments {
            if segment.next_offset() > start && segment.max_timestamp()? >= target {
                from = Some(segment.base_offset().max(start));
                break;
            }
        }
        let Some(from) = from else {
            return Ok(None);
        };
        let mut found = Ok(None);
        self.walk(from, false, |header, _| {
            if header.max_timestamp < target || header.last_offset() < start {
                return ControlFlow::Continue(());
            }
            // The batch holds a record this new, though maybe only below the start.
            found = self.first_record_at_or_after(header.base_offset, start, target);
            match found {
                Ok(None) => ControlFlow::Continue(()),
                _ => ControlFlow::Break(()),
            }
        })?;
        found
    }

    /// The record with the largest timestamp at or after the log start (the first of
    /// them, by offset); `None` for an empty log.
    pub fn offset_of_max_timestamp(&mut self) -> Result<Option<TimestampedOffset>, LogError> {
        let start = self.log_start;
        let mut newest = None;
        for segment in &mut self.segments {
            if segment.next_offset() > start && !segment.is_empty() {
                let max = segment.max_timestamp()?;
                newest = Some(newest.map_or(max, |n: i64| n.max(max)));
            }
        }
        // The largest timestamp may belong to a record below the start, in the first
        // segment: then the newest record above it is found by walking that segment.
        match newest {
            None => Ok(None),
            Some(max) => match self.offset_for_timestamp(max)? {
                Some(found) => Ok(Some(found)),
                None => self.newest_above_start(),
            },
        }
    }

    /// The first record with the largest timestamp among the records at or after the
    /// start, by reading every batch from the start: only for a log whose largest
    /// timestamp lies below its start.
    fn newest_above_start(&self) -> Result<Option<TimestampedOffset>, LogError> {
        let start = self.log_start;
        let mut newest: Option<TimestampedOffset> = None;
        for (_, bytes) in self.batches_from(start)? {
            let records = batch::records(&bytes).map_err(|e| LogError::Corrupt {
                offset: start,
                reason: e.to_string(),
            })?;
            for record in records.into_iter().filter(|r| r.offset >= start) {
                if newest.is_none_or(|n| record.timestamp_ms > n.timestamp_ms) {
                    newest = Some(TimestampedOffset {
                        offset: record.offset,
                        timestamp_ms: record.timestamp_ms,
                    });
                }
            }
        }
        Ok(newest)
    }

    /// In the batch at `base_offset`: the first record at or after `start` whose
    /// timestamp is `>= target`.
    fn first_record_at_or_after(
        &self,
        base_offset: i64,
        start: i64,
        target: i64,
    ) -> Result<Option<TimestampedOffset>, LogError> {
        // The batch that holds the start, when it straddles it, is read from there.
        let bytes = self.read(base_offset.max(start), 1, i64::MAX)?;
        let records = batch::records(&bytes).map_err(|e| LogError::Corrupt {
            offset: base_offset,
            reason: e.to_string(),
        })?;
        Ok(records
            .into_iter()
            .find(|r| r.offset >= start && r.timestamp_ms >= target)
            .map(|r| TimestampedOffset {
                offset: r.offset,
                timestamp_ms: r.timestamp_ms,
            }))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use idem_proto::batch::{ProducerInfo, Record};
    use proptest::prelude::*;

    use super::*;
    use crate::log::{FlushPolicy, LogConfig};

    /// Segments of about three batches, so a lookup crosses segments.
    fn small_segments() -> LogConfig {
        LogConfig {
            segment_bytes: 300,
            index_interval_bytes: 64,
            flush: FlushPolicy::Never,
        }
    }

    /// Appends one batch per entry of `batches`, each record with the given timestamp.
    fn log_of(dir: &std::path::Path, batches: &[Vec<i64>]) -> PartitionLog {
        let (mut log, _) = PartitionLog::open(dir, small_segments()).expect("open");
        for timestamps in batches {
            let records: Vec<Record> = timestamps
                .iter()
                .map(|ts| Record {
                    key: None,
                    value: Some(Bytes::from_static(b"value")),
                    headers: Vec::new(),
                    timestamp_ms: *ts,
                })
                .collect();
            let bytes = batch::encode(ProducerInfo::NONE, 0, &records);
            log.append(&bytes, 0).expect("append");
        }
        log
    }

    fn at(offset: i64, timestamp_ms: i64) -> Option<TimestampedOffset> {
        Some(TimestampedOffset {
            offset,
            timestamp_ms,
        })
    }

    #[test]
    fn given_timestamps_out_of_order_then_the_first_record_by_offset_at_or_after_the_target_is_found(
    ) {
        let dir = tempfile::tempdir().expect("dir");
        // Offsets 0..=8 in four batches over several segments.
        let mut log = log_of(
            dir.path(),
            &[
                vec![100, 120],
                vec![110, 300, 130],
                vec![200],
                vec![250, 90, 400],
            ],
        );
        assert!(!log.sealed_segments().is_empty(), "one segment only");
        assert_eq!(log.offset_for_timestamp(0).expect("lookup"), at(0, 100));
        assert_eq!(log.offset_for_timestamp(115).expect("lookup"), at(1, 120));
        // 130 is at offset 4, but 300 at offset 3 comes first.
        assert_eq!(log.offset_for_timestamp(125).expect("lookup"), at(3, 300));
        assert_eq!(log.offset_for_timestamp(301).expect("lookup"), at(8, 400));
        assert_eq!(log.offset_for_timestamp(401).expect("lookup"), None);
        assert_eq!(log.offset_of_max_timestamp().expect("max"), at(8, 400));
    }

    #[test]
    fn given_a_log_start_inside_a_batch_then_records_below_it_are_not_answered() {
        let dir = tempfile::tempdir().expect("dir");
        let mut log = log_of(dir.path(), &[vec![500, 100, 200], vec![150]]);
        log.advance_start(1).expect("start moves");
        assert_eq!(log.offset_for_timestamp(0).expect("lookup"), at(1, 100));
        assert_eq!(log.offset_for_timestamp(160).expect("lookup"), at(2, 200));
        // 500 lies below the start: the newest record left is 200.
        assert_eq!(log.offset_for_timestamp(300).expect("lookup"), None);
        assert_eq!(log.offset_of_max_timestamp().expect("max"), at(2, 200));
    }

    #[test]
    fn given_an_empty_log_then_nothing_is_found() {
        let dir = tempfile::tempdir().expect("dir");
        let mut log = log_of(dir.path(), &[]);
        assert_eq!(log.offset_for_timestamp(0).expect("lookup"), None);
        assert_eq!(log.offset_of_max_timestamp().expect("max"), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Against the definition over every record: the first at or after the start
        /// (by offset) whose timestamp reaches the target, and the first of the newest.
        #[test]
        fn lookups_match_a_scan_of_every_record(
            batches in prop::collection::vec(prop::collection::vec(0i64..1_000, 1..5), 0..12),
            start_share in 0.0f64..1.0,
            targets in prop::collection::vec(-10i64..1_100, 1..6),
        ) {
            let dir = tempfile::tempdir().expect("dir");
            let mut log = log_of(dir.path(), &batches);
            let all: Vec<(i64, i64)> = batches
                .iter()
                .flatten()
                .enumerate()
                .map(|(offset, ts)| (offset as i64, *ts))
                .collect();
            let start = (all.len() as f64 * start_share) as i64;
            log.advance_start(start).expect("start moves");
            let live: Vec<(i64, i64)> = all.into_iter().filter(|(o, _)| *o >= start).collect();
            for target in targets {
                let expected = live
                    .iter()
                    .find(|(_, ts)| *ts >= target)
                    .map(|(o, ts)| TimestampedOffset { offset: *o, timestamp_ms: *ts });
                prop_assert_eq!(log.offset_for_timestamp(target).expect("lookup"), expected);
            }
            let newest = live.iter().map(|(_, ts)| *ts).max();
            let expected = newest.and_then(|max| {
                live.iter()
                    .find(|(_, ts)| *ts == max)
                    .map(|(o, ts)| TimestampedOffset { offset: *o, timestamp_ms: *ts })
            });
            prop_assert_eq!(log.offset_of_max_timestamp().expect("max"), expected);
        }
    }
}
