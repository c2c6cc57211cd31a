//! Transaction index of one partition: which transactions are open, which completed
//! ones are not yet stable (their marker is not below the high watermark), and which
//! were aborted. It gives the last stable offset (LSO) read_committed consumers stop at
//! and the aborted ranges their fetches drop.
//!
//! Derived from the log alone, batch by batch ([`TxnIndex::apply`], the same calls on
//! leader and follower through one append path, and on a rebuild), so every replica
//! holds the same index for the same bytes. Pure: no I/O, no clock.
//!
//! Invariant: `last_stable_offset(hw) <= hw`, and no offset at or past the first offset
//! of an open or not yet stable transaction is below it.

mod aborted_txn;
pub mod segment_file;

use std::collections::HashMap;

use idem_proto::batch::BatchHeader;
use idem_proto::control::ControlMarker;
use idem_proto::v1::ControlType;

pub use aborted_txn::AbortedTxn;
pub use segment_file::SegmentTxns;

/// A transaction whose marker is written but may not be below the high watermark yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CompletedTxn {
    first_offset: i64,
    marker_offset: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnIndex {
    /// Open transactions: producer id -> first offset.
    open: HashMap<i64, i64>,
    /// Completed transactions whose marker may not be below the HW, in marker order.
    unstable: Vec<CompletedTxn>,
    /// Aborted transactions in marker order (so ascending `last_offset`).
    aborted: Vec<AbortedTxn>,
}

impl TxnIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// The index as of the end of the sealed segments whose files are `sealed` (in
    /// segment order). Only valid at an offset where no completed transaction is still
    /// unstable, i.e. the last segment's end is at or below the high watermark.
    pub fn resume(sealed: impl IntoIterator<Item = SegmentTxns>) -> Self {
        let mut index = TxnIndex::new();
        for segment in sealed {
            index.aborted.extend(segment.aborted);
            index.open = segment.open.into_iter().collect();
        }
        index
    }

    /// What the segment `[base_offset, next_offset)` contributes, called once every
    /// batch below `next_offset` and none after it is applied: the aborts whose marker
    /// lies in it and the transactions open at its end.
    pub fn seal(&self, base_offset: i64, next_offset: i64) -> SegmentTxns {
        let start = self
            .aborted
            .partition_point(|a| a.last_offset < base_offset);
        let aborted = self.aborted[start..]
            .iter()
            .take_while(|a| a.last_offset < next_offset)
            .copied()
            .collect();
        SegmentTxns {
            base_offset,
            next_offset,
            aborted,
            open: self.open_transactions(),
        }
    }

    /// Records one batch as stored in the log (`marker`: what a control batch says).
    /// BEGIN or transactional data opens the producer's transaction if none is open
    /// (data without BEGIN is refused on append, but the log is the truth); COMMIT/ABORT
    /// closes it, and ABORT records its range. Everything else is ignored.
    pub fn apply(&mut self, header: &BatchHeader, marker: Option<ControlMarker>) {
        if !header.has_producer_id() || !header.is_transactional() {
            return;
        }
        let producer_id = header.producer_id;
        let control_type = match (header.is_control(), marker) {
            (false, _) => None,
            (true, Some(marker)) => Some(marker.control_type),
            // A control batch read without its record: it cannot be told apart.
            (true, None) => return,
        };
        match control_type {
            None | Some(ControlType::Begin) => {
                self.open.entry(producer_id).or_insert(header.base_offset);
            }
            Some(end @ (ControlType::Commit | ControlType::Abort)) => {
                let Some(first_offset) = self.open.remove(&producer_id) else {
                    return; // nothing of this producer open here: nothing to end
                };
                let marker_offset = header.base_offset;
                self.unstable.push(CompletedTxn {
                    first_offset,
                    marker_offset,
                });
                if end == ControlType::Abort {
                    self.aborted.push(AbortedTxn {
                        producer_id,
                        first_offset,
                        last_offset: marker_offset,
                    });
                }
            }
        }
    }

    /// Forgets completed transactions whose marker is below `high_watermark`: they no
    /// longer hold the LSO. Only an optimisation; the LSO filters them anyway.
    pub fn prune_stable(&mut self, high_watermark: i64) {
        self.unstable.retain(|t| t.marker_offset >= high_watermark);
    }

    /// The LSO: the smallest of the open transactions' first offsets, the first offsets
    /// of completed transactions whose marker is not below `high_watermark`, and
    /// `high_watermark`.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        let open = self.open.values().copied();
        let unstable = self
            .unstable
            .iter()
            .filter(|t| t.marker_offset >= high_watermark)
            .map(|t| t.first_offset);
        open.chain(unstable)
            .fold(high_watermark, std::cmp::Ord::min)
    }

    /// Whether a transactional batch of `producer_id` at `offset` belongs to an aborted
    /// transaction.
    pub fn is_aborted(&self, producer_id: i64, offset: i64) -> bool {
        self.aborted_overlapping(offset, offset + 1)
            .iter()
            .any(|a| a.covers(producer_id, offset))
    }

    /// The aborted transactions that may hold batches starting in `[from, to)`: those
    /// whose range ends after `from` and starts before `to`. Copied out so a fetch can
    /// filter without holding the partition lock.
    pub fn aborted_overlapping(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        // `aborted` ascends by last_offset: skip every one that ended at or before `from`.
        let start = self.aborted.partition_point(|a| a.last_offset <= from);
        self.aborted[start..]
            .iter()
            .filter(|a| a.first_offset < to)
            .copied()
            .collect()
    }

    /// Open transactions as `(producer_id, first_offset)`, by first offset.
    pub fn open_transactions(&self) -> Vec<(i64, i64)> {
        let mut open: Vec<(i64, i64)> = self.open.iter().map(|(p, o)| (*p, *o)).collect();
        open.sort_unstable_by_key(|(producer_id, first)| (*first, *producer_id));
        open
    }

    pub fn aborted(&self) -> &[AbortedTxn] {
        &self.aborted
    }

    /// Forgets aborted transactions that ended before `log_start`: retention deleted
    /// their batches, so no fetch can meet them again.
    pub fn forget_before(&mut self, log_start: i64) {
        let gone = self.aborted.partition_point(|a| a.last_offset < log_start);
        self.aborted.drain(..gone);
    }
}

#[cfg(test)]
mod tests {
    use idem_proto::batch::{self, ProducerInfo, Record, ATTR_TRANSACTIONAL};
    use idem_proto::control;

    use super::*;

    /// Builds batches at consecutive offsets and applies them to an index.
    struct Log {
        index: TxnIndex,
        next: i64,
    }

    impl Log {
        fn new() -> Self {
            Log {
                index: TxnIndex::new(),
                next: 0,
            }
        }

        fn put(&mut self, mut buf: Vec<u8>) -> i64 {
            let offset = self.next;
            batch::assign(&mut buf, offset, 0);
            let header = batch::decode_header(&buf).expect("header");
            let marker = header
                .is_control()
                .then(|| control::decode_control(&buf).expect("marker"));
            self.index.apply(&header, marker);
            self.next = header.next_offset();
            offset
        }

        fn data(&mut self, producer_id: i64, count: usize, transactional: bool) -> i64 {
            let producer = ProducerInfo {
                producer_id,
                producer_epoch: 0,
                base_sequence: 0,
            };
            let attributes = if transactional { ATTR_TRANSACTIONAL } else { 0 };
            let records = vec![Record::default(); count];
            self.put(batch::encode(producer, attributes, &records).to_vec())
        }

        fn marker(&mut self, producer_id: i64, control_type: ControlType) -> i64 {
            let marker = ControlMarker {
                control_type,
                coordinator_epoch: 0,
            };
            self.put(control::encode_control(producer_id, 1, marker, 0).to_vec())
        }
    }

    #[test]
    fn given_no_transactions_then_the_lso_is_the_high_watermark() {
        let mut log = Log::new();
        log.data(-1, 3, false);
        log.data(5, 2, false);
        assert_eq!(log.index.last_stable_offset(5), 5);
        assert!(log.index.open_transactions().is_empty());
    }

    #[test]
    fn given_an_open_transaction_then_the_lso_stops_at_its_begin() {
        let mut log = Log::new();
        log.data(-1, 3, false);
        let begin = log.marker(1, ControlType::Begin);
        log.data(1, 2, true);
        assert_eq!(log.index.last_stable_offset(6), begin);
        assert_eq!(log.index.last_stable_offset(2), 2, "never above the HW");
        assert_eq!(log.index.open_transactions(), vec![(1, begin)]);
    }

    #[test]
    fn given_several_open_transactions_then_the_oldest_holds_the_lso() {
        let mut log = Log::new();
        let first = log.marker(1, ControlType::Begin);
        log.marker(2, ControlType::Begin);
        log.marker(1, ControlType::Commit);
        assert_eq!(
            log.index.last_stable_offset(2),
            first,
            "marker not below the HW"
        );
        assert_eq!(
            log.index.last_stable_offset(3),
            1,
            "now producer 2's BEGIN holds it"
        );
    }

    #[test]
    fn given_a_completed_transaction_then_it_holds_the_lso_until_its_marker_is_below_the_hw() {
        let mut log = Log::new();
        let begin = log.marker(1, ControlType::Begin);
        log.data(1, 3, true);
        let commit = log.marker(1, ControlType::Commit);
        assert_eq!(log.index.last_stable_offset(commit), begin);
        assert_eq!(log.index.last_stable_offset(commit + 1), commit + 1);
        log.index.prune_stable(commit);
        assert_eq!(
            log.index.last_stable_offset(commit),
            begin,
            "pruning keeps it"
        );
        log.index.prune_stable(commit + 1);
        assert_eq!(log.index.last_stable_offset(commit), commit);
    }

    #[test]
    fn given_an_abort_then_its_range_is_recorded_and_covers_only_its_producer() {
        let mut log = Log::new();
        log.data(2, 1, true); // producer 2: transactional data without BEGIN opens at 0
        let begin = log.marker(1, ControlType::Begin);
        let data = log.data(1, 2, true);
        let other = log.data(3, 1, false);
        let abort = log.marker(1, ControlType::Abort);
        let after = log.data(1, 1, false);
        assert_eq!(
            log.index.aborted(),
            &[AbortedTxn {
                producer_id: 1,
                first_offset: begin,
                last_offset: abort
            }]
        );
        assert!(log.index.is_aborted(1, data));
        assert!(log.index.is_aborted(1, begin));
        assert!(!log.index.is_aborted(3, other));
        assert!(
            !log.index.is_aborted(1, abort),
            "the marker itself is not data"
        );
        assert!(!log.index.is_aborted(1, after));
        assert_eq!(log.index.open_transactions(), vec![(2, 0)]);
    }

    #[test]
    fn given_a_commit_then_nothing_is_aborted() {
        let mut log = Log::new();
        log.marker(1, ControlType::Begin);
        let data = log.data(1, 2, true);
        log.marker(1, ControlType::Commit);
        assert!(log.index.aborted().is_empty());
        assert!(!log.index.is_aborted(1, data));
    }

    #[test]
    fn given_a_retried_begin_in_the_log_then_the_first_offset_is_kept() {
        let mut log = Log::new();
        let begin = log.marker(1, ControlType::Begin);
        log.marker(1, ControlType::Begin);
        assert_eq!(log.index.open_transactions(), vec![(1, begin)]);
    }

    #[test]
    fn given_a_marker_without_an_open_transaction_then_nothing_changes() {
        let mut log = Log::new();
        log.marker(1, ControlType::Abort);
        log.marker(1, ControlType::Commit);
        assert_eq!(log.index, TxnIndex::new());
    }

    #[test]
    fn given_a_control_batch_without_its_record_then_it_is_ignored() {
        let mut index = TxnIndex::new();
        let marker = ControlMarker {
            control_type: ControlType::Begin,
            coordinator_epoch: 0,
        };
        let buf = control::encode_control(1, 0, marker, 0);
        index.apply(&batch::decode_header(&buf).expect("header"), None);
        assert_eq!(index, TxnIndex::new());
    }

    #[test]
    fn given_many_aborts_then_overlap_queries_return_exactly_the_overlapping_ranges() {
        let mut log = Log::new();
        let mut ranges = Vec::new();
        for producer_id in 0..6 {
            let begin = log.marker(producer_id, ControlType::Begin);
            log.data(producer_id, 3, true);
            let abort = log.marker(producer_id, ControlType::Abort);
            ranges.push((begin, abort));
        }
        for from in 0..log.next {
            for to in from + 1..=log.next {
                let got: Vec<(i64, i64)> = log
                    .index
                    .aborted_overlapping(from, to)
                    .iter()
                    .map(|a| (a.first_offset, a.last_offset))
                    .collect();
                let want: Vec<(i64, i64)> = ranges
                    .iter()
                    .copied()
                    .filter(|(first, last)| *last > from && *first < to)
                    .collect();
                assert_eq!(got, want, "[{from}, {to})");
            }
        }
    }

    #[test]
    fn given_sealed_segments_then_resuming_from_them_equals_the_walked_index() {
        let mut log = Log::new();
        let mut sealed = Vec::new();
        let mut base = 0;
        let mut seal = |log: &Log, sealed: &mut Vec<SegmentTxns>| {
            sealed.push(log.index.seal(base, log.next));
            base = log.next;
        };
        log.marker(1, ControlType::Begin);
        log.data(1, 2, true);
        log.marker(2, ControlType::Begin);
        seal(&log, &mut sealed); // both open across the boundary
        log.marker(1, ControlType::Abort);
        log.data(3, 1, false);
        seal(&log, &mut sealed); // 1 aborted here, 2 still open
        log.data(2, 1, true);
        log.marker(2, ControlType::Abort);
        log.marker(4, ControlType::Begin);
        seal(&log, &mut sealed);
        assert_eq!(sealed[0].aborted, vec![]);
        assert_eq!(sealed[0].open, vec![(1, 0), (2, 3)]);
        assert_eq!(sealed[1].aborted.len(), 1);
        assert_eq!(sealed[2].open, vec![(4, log.next - 1)]);
        let mut walked = log.index.clone();
        walked.prune_stable(log.next);
        assert_eq!(TxnIndex::resume(sealed), walked);
    }

    #[test]
    fn given_identical_batches_then_two_indexes_are_equal() {
        let build = || {
            let mut log = Log::new();
            log.marker(1, ControlType::Begin);
            log.marker(2, ControlType::Begin);
            log.data(1, 2, true);
            log.marker(2, ControlType::Abort);
            log.index
        };
        assert_eq!(build(), build());
    }
}
