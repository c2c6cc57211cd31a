//! Which whole batches a log cleaner removes (Kafka's LogCleaner, with KIP-534 delete
//! horizons on markers). Pure: the cleaner hands [`BatchRemoval::decide`] every batch of
//! the cleaned segments in offset order, after [`CleaningRules`](super::compaction) said
//! which of its records stay, and writes what it answers. A removed batch becomes a
//! filler (`idem_proto::batch::filler`), so offsets stay dense.
//!
//! Rules:
//! - The last batch of each producer the producer state still knows stays, whatever it
//!   holds: the producer's epoch, last sequence and last marker can be rebuilt from it.
//! - Any other data batch left without records is removed.
//! - A BEGIN marker is a batch of the transaction it opens: removed like an empty one.
//! - A COMMIT/ABORT marker stays while any batch of its transaction stays (the
//!   transaction of producer P ended by the marker at offset m: P's transactional
//!   batches after P's previous marker and before m). The first pass that finds the
//!   transaction gone sets the marker's delete horizon to now + `delete.retention.ms`;
//!   a pass at or after the horizon removes it. A reader that saw the transaction's data
//!   before it went has that long to see the marker; replaying the log never finds a
//!   transaction without its end (its batches go first), so none is left open.
//! - A control batch whose record cannot be read stays.

use std::collections::HashMap;

/// What a batch is, as far as removal goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchKind {
    /// A data batch (a filler included) and how many records it keeps this pass.
    Data {
        transactional: bool,
        records_left: i32,
    },
    /// A BEGIN marker: opens its producer's transaction.
    Begin,
    /// A COMMIT or ABORT marker, and the delete horizon a former pass set on it.
    End { delete_horizon: Option<i64> },
    /// A control batch whose marker does not read.
    UnreadableControl,
}

/// One batch as the removal rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchFacts {
    pub base_offset: i64,
    /// Negative: no producer.
    pub producer_id: i64,
    pub kind: BatchKind,
}

/// What becomes of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchFate {
    /// Written with the records the compaction rules keep.
    Keep,
    /// A marker whose transaction is gone: written with this delete horizon.
    SetHorizon(i64),
    /// Replaced by a filler over the same offsets.
    Filler,
}

/// The base offset of each producer's last batch among the cleaned segments, for the
/// producers whose last batch is there (see [`BatchRemoval`]'s first rule).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LastBatches {
    offsets: HashMap<i64, i64>,
}

impl LastBatches {
    /// Notes a batch of `producer_id` (batches come in offset order; the last wins).
    pub fn note(&mut self, producer_id: i64, base_offset: i64) {
        self.offsets.insert(producer_id, base_offset);
    }

    pub fn is_last(&self, producer_id: i64, base_offset: i64) -> bool {
        self.offsets.get(&producer_id) == Some(&base_offset)
    }

    /// Producers noted: part of what the cleaner's memory grows with.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }
}

/// One walk of the cleaned batches deciding each one's fate. Memory: one entry per
/// producer with a transaction open at the current point of the walk.
#[derive(Debug, Clone)]
pub struct BatchRemoval<'a> {
    now_ms: i64,
    delete_retention_ms: u64,
    last_batches: &'a LastBatches,
    /// Producers whose transaction is open at this point of the walk, and whether a
    /// batch of it stays.
    open: HashMap<i64, bool>,
}

impl<'a> BatchRemoval<'a> {
    pub fn new(now_ms: i64, delete_retention_ms: u64, last_batches: &'a LastBatches) -> Self {
        BatchRemoval {
            now_ms,
            delete_retention_ms,
            last_batches,
            open: HashMap::new(),
        }
    }

    /// The fate of the next batch of the walk.
    pub fn decide(&mut self, batch: &BatchFacts) -> BatchFate {
        let has_producer = batch.producer_id >= 0;
        let is_last = has_producer
            && self
                .last_batches
                .is_last(batch.producer_id, batch.base_offset);
        match batch.kind {
            BatchKind::Data {
                transactional,
                records_left,
            } => {
                let stays = records_left > 0 || is_last;
                if transactional && has_producer {
                    *self.open.entry(batch.producer_id).or_insert(false) |= stays;
                }
                if stays {
                    BatchFate::Keep
                } else {
                    BatchFate::Filler
                }
            }
            BatchKind::Begin => {
                *self.open.entry(batch.producer_id).or_insert(false) |= is_last;
                if is_last {
                    BatchFate::Keep
                } else {
                    BatchFate::Filler
                }
            }
            BatchKind::End { delete_horizon } => {
                let batches_stay = self.open.remove(&batch.producer_id).unwrap_or(false);
                if batches_stay || is_last {
                    return BatchFate::Keep;
                }
                match delete_horizon {
                    None => BatchFate::SetHorizon(self.horizon()),
                    Some(horizon) if self.now_ms >= horizon => BatchFate::Filler,
                    Some(_) => BatchFate::Keep,
                }
            }
            BatchKind::UnreadableControl => BatchFate::Keep,
        }
    }

    fn horizon(&self) -> i64 {
        let retention = i64::try_from(self.delete_retention_ms).unwrap_or(i64::MAX);
        self.now_ms.saturating_add(retention)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::compaction::{CleaningRules, KeyMap};
    use idem_proto::batch::RecordView;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// One record of the model log: key and value (`None`: tombstone).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Rec {
        offset: i64,
        key: u8,
        value: Option<u32>,
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Body {
        Data {
            transactional: bool,
            records: Vec<Rec>,
        },
        Begin,
        End {
            commit: bool,
            horizon: Option<i64>,
        },
        Filler,
    }

    /// A batch of the model log; `producer` < 0: none.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Batch {
        base: i64,
        last: i64,
        producer: i64,
        body: Body,
    }

    /// What the broker derived from the log as it was appended (and keeps in files the
    /// cleaner does not touch): the aborted ranges, and each producer's last data batch
    /// since its last marker (`None`: a marker came after it).
    #[derive(Debug, Clone, Default)]
    struct Derived {
        aborted: Vec<(i64, i64, i64)>,
        open: BTreeMap<i64, i64>,
        last_data: BTreeMap<i64, Option<i64>>,
    }

    /// Replays `log` the way the transaction index and producer state do.
    fn derive(log: &[Batch]) -> Derived {
        let mut d = Derived::default();
        for b in log {
            if b.producer < 0 {
                continue;
            }
            match &b.body {
                Body::Data { transactional, .. } => {
                    if *transactional {
                        d.open.entry(b.producer).or_insert(b.base);
                    }
                    d.last_data.insert(b.producer, Some(b.base));
                }
                Body::Begin => {
                    d.open.entry(b.producer).or_insert(b.base);
                }
                Body::End { commit, .. } => {
                    if let Some(first) = d.open.remove(&b.producer) {
                        if !commit {
                            d.aborted.push((b.producer, first, b.base));
                        }
                    }
                    d.last_data.insert(b.producer, None);
                }
                Body::Filler => {}
            }
        }
        d
    }

    fn is_aborted(aborted: &[(i64, i64, i64)], producer: i64, base: i64) -> bool {
        aborted
            .iter()
            .any(|&(p, first, end)| p == producer && first <= base && base < end)
    }

    fn view(r: &Rec) -> (RecordView<'static>, [u8; 1]) {
        (
            RecordView {
                offset: r.offset,
                timestamp_ms: 0,
                key: None,
                is_tombstone: r.value.is_none(),
            },
            [r.key],
        )
    }

    /// One cleaning pass over the batches wholly below `clean_below`, as the cleaner
    /// does it: key map, last batches of the producers the state knows (`expired` are
    /// forgotten), then the walk. Returns the fates, in order.
    fn clean(
        log: &mut [Batch],
        derived: &Derived,
        expired: &BTreeSet<i64>,
        rules: CleaningRules,
    ) -> Vec<BatchFate> {
        let cut = log
            .iter()
            .take_while(|b| b.last < rules.clean_below)
            .count();
        let aborted_batch = |b: &Batch, transactional: bool| {
            transactional && is_aborted(&derived.aborted, b.producer, b.base)
        };
        let mut keys = KeyMap::default();
        let mut last_batches = LastBatches::default();
        for b in &log[..cut] {
            if let Body::Data {
                transactional,
                records,
            } = &b.body
            {
                for r in records {
                    let (mut v, key) = view(r);
                    v.key = Some(&key);
                    if rules.notes(&v, aborted_batch(b, *transactional)) {
                        keys.note(&key, r.offset);
                    }
                }
            }
            if b.producer >= 0 && !expired.contains(&b.producer) {
                let last_data = derived.last_data.get(&b.producer).copied().flatten();
                if last_data.is_none_or(|o| o <= b.base) {
                    last_batches.note(b.producer, b.base);
                }
            }
        }
        let mut removal = BatchRemoval::new(rules.now_ms, rules.delete_retention_ms, &last_batches);
        let mut fates = Vec::new();
        for b in &mut log[..cut] {
            let aborted = matches!(
                b.body,
                Body::Data {
                    transactional: true,
                    ..
                }
            ) && is_aborted(&derived.aborted, b.producer, b.base);
            let kind = match &mut b.body {
                Body::Data {
                    transactional,
                    records,
                } => {
                    records.retain(|r| {
                        let (mut v, key) = view(r);
                        v.key = Some(&key);
                        rules.keeps(&v, aborted, &keys)
                    });
                    BatchKind::Data {
                        transactional: *transactional,
                        records_left: records.len() as i32,
                    }
                }
                Body::Begin => BatchKind::Begin,
                Body::End { horizon, .. } => BatchKind::End {
                    delete_horizon: *horizon,
                },
                Body::Filler => BatchKind::Data {
                    transactional: false,
                    records_left: 0,
                },
            };
            let fate = removal.decide(&BatchFacts {
                base_offset: b.base,
                producer_id: b.producer,
                kind,
            });
            match fate {
                BatchFate::Keep => {}
                BatchFate::SetHorizon(h) => {
                    if let Body::End { horizon, .. } = &mut b.body {
                        *horizon = Some(h);
                    }
                }
                BatchFate::Filler => {
                    b.body = Body::Filler;
                    b.producer = -1;
                }
            }
            fates.push(fate);
        }
        fates
    }

    /// The records a reader sees below `bound`: read_committed skips the transactional
    /// batches `aborted` covers; read_uncommitted (`aborted` = None) sees every one.
    fn visible(log: &[Batch], aborted: Option<&[(i64, i64, i64)]>, bound: i64) -> Vec<Rec> {
        let mut out = Vec::new();
        for b in log.iter().filter(|b| b.last < bound) {
            if let Body::Data {
                transactional,
                records,
            } = &b.body
            {
                if let Some(aborted) = aborted {
                    if *transactional && is_aborted(aborted, b.producer, b.base) {
                        continue;
                    }
                }
                out.extend(records.iter().copied());
            }
        }
        out
    }

    /// Each key's latest value (tombstones delete) over `records`.
    fn latest(records: &[Rec]) -> BTreeMap<u8, u32> {
        let mut values = BTreeMap::new();
        for r in records {
            match r.value {
                Some(v) => values.insert(r.key, v),
                None => values.remove(&r.key),
            };
        }
        values
    }

    /// One step of a producer: write a batch of records, or end its transaction.
    #[derive(Debug, Clone)]
    enum Step {
        Write {
            producer: i64,
            records: Vec<(u8, Option<u32>)>,
        },
        End {
            producer: i64,
            commit: bool,
        },
    }

    /// Producers 0-2 are transactional, 3 idempotent, -1 none.
    fn step() -> impl Strategy<Value = Step> {
        let record = (0u8..6, prop::option::weighted(0.9, 0u32..1000));
        prop_oneof![
            4 => (-1i64..4, prop::collection::vec(record, 1..4))
                .prop_map(|(producer, records)| Step::Write { producer, records }),
            2 => (0i64..3, prop::bool::weighted(0.6))
                .prop_map(|(producer, commit)| Step::End { producer, commit }),
        ]
    }

    /// The log the steps write (transactional producers open a transaction with their
    /// first write, sometimes with a BEGIN marker), and the offset where the transactions
    /// still open begin (the last stable offset).
    fn build(steps: &[Step], begin_markers: bool) -> (Vec<Batch>, i64) {
        let mut log = Vec::new();
        let mut next = 0i64;
        let mut open: BTreeMap<i64, i64> = BTreeMap::new();
        for s in steps {
            match s {
                Step::Write { producer, records } => {
                    let transactional = (0..3).contains(producer);
                    if transactional && !open.contains_key(producer) {
                        open.insert(*producer, next);
                        if begin_markers {
                            log.push(Batch {
                                base: next,
                                last: next,
                                producer: *producer,
                                body: Body::Begin,
                            });
                            next += 1;
                        }
                    }
                    let records: Vec<Rec> = records
                        .iter()
                        .enumerate()
                        .map(|(i, &(key, value))| Rec {
                            offset: next + i as i64,
                            key,
                            value,
                        })
                        .collect();
                    let last = next + records.len() as i64 - 1;
                    log.push(Batch {
                        base: next,
                        last,
                        producer: *producer,
                        body: Body::Data {
                            transactional,
                            records,
                        },
                    });
                    next = last + 1;
                }
                Step::End { producer, commit } => {
                    if open.remove(producer).is_some() {
                        log.push(Batch {
                            base: next,
                            last: next,
                            producer: *producer,
                            body: Body::End {
                                commit: *commit,
                                horizon: None,
                            },
                        });
                        next += 1;
                    }
                }
            }
        }
        let stable = open.values().copied().min().unwrap_or(next);
        (log, stable)
    }

    /// The batches of the transaction that the marker at index `end` ends.
    fn txn_of(original: &[Batch], end: usize) -> Vec<usize> {
        let producer = original[end].producer;
        let mut out = Vec::new();
        for i in (0..end).rev() {
            let b = &original[i];
            if b.producer != producer {
                continue;
            }
            match b.body {
                Body::End { .. } => break,
                Body::Begin
                | Body::Data {
                    transactional: true,
                    ..
                } => out.push(i),
                _ => {}
            }
        }
        out
    }

    #[test]
    fn given_an_emptied_transaction_then_its_marker_gets_a_horizon_and_goes_after_it() {
        // Producer 1: an aborted transaction (offsets 0-1, marker 2), then a committed one
        // (3, marker 4), then producer 2's batch so neither of 1's is the log's last... but
        // 1's committed marker is its last batch and stays.
        let steps = vec![
            Step::Write {
                producer: 1,
                records: vec![(1, Some(10)), (2, Some(20))],
            },
            Step::End {
                producer: 1,
                commit: false,
            },
            Step::Write {
                producer: 1,
                records: vec![(1, Some(11))],
            },
            Step::End {
                producer: 1,
                commit: true,
            },
        ];
        let (mut log, stable) = build(&steps, false);
        let derived = derive(&log);
        let rules = CleaningRules {
            clean_below: stable,
            now_ms: 1_000,
            delete_retention_ms: 500,
        };
        let fates = clean(&mut log, &derived, &BTreeSet::new(), rules);
        assert_eq!(
            fates,
            vec![
                BatchFate::Filler,
                BatchFate::SetHorizon(1_500),
                BatchFate::Keep,
                BatchFate::Keep
            ]
        );
        let early = clean(
            &mut log,
            &derived,
            &BTreeSet::new(),
            CleaningRules {
                now_ms: 1_499,
                ..rules
            },
        );
        assert_eq!(early[1], BatchFate::Keep, "not before its horizon");
        let due = clean(
            &mut log,
            &derived,
            &BTreeSet::new(),
            CleaningRules {
                now_ms: 1_500,
                ..rules
            },
        );
        assert_eq!(
            due,
            vec![
                BatchFate::Filler,
                BatchFate::Filler,
                BatchFate::Keep,
                BatchFate::Keep
            ]
        );
        // Read committed from the start still gets 1's committed value.
        let seen = visible(&log, Some(&derived.aborted), stable);
        assert_eq!(
            seen,
            vec![Rec {
                offset: 3,
                key: 1,
                value: Some(11)
            }]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Over random transactional histories (interleaved producers, commits, aborts,
        /// keys) and several passes at growing times: readers see what compaction leaves
        /// of the same values; the log replays to the same open transactions and aborted
        /// ranges that matter; a marker goes only after its transaction, and not before
        /// its horizon; no producer's last batch goes.
        #[test]
        fn removing_batches_keeps_what_readers_see_and_every_transaction_whole(
            steps in prop::collection::vec(step(), 0..60),
            begin_markers in any::<bool>(),
            expire_producer_2 in any::<bool>(),
            retention in 0u64..300,
            gaps in prop::collection::vec(0i64..400, 1..5),
        ) {
            let (original, stable) = build(&steps, begin_markers);
            let derived = derive(&original);
            let expired: BTreeSet<i64> = if expire_producer_2 { [2].into() } else { BTreeSet::new() };
            let committed_before = visible(&original, Some(&derived.aborted), stable);
            let mut log = original.clone();
            let mut now = 1_000i64;
            for gap in gaps {
                now += gap;
                let before = log.clone();
                let rules = CleaningRules { clean_below: stable, now_ms: now, delete_retention_ms: retention };
                clean(&mut log, &derived, &expired, rules);

                // Offsets and batch boundaries stay.
                prop_assert_eq!(log.iter().map(|b| (b.base, b.last)).collect::<Vec<_>>(),
                    original.iter().map(|b| (b.base, b.last)).collect::<Vec<_>>());
                // Nothing at or past the bound changes.
                for (a, b) in log.iter().zip(&original).filter(|(b, _)| b.last >= stable) {
                    prop_assert_eq!(a, b);
                }

                // read_committed, with the aborted ranges the broker kept and with those a
                // replay of the cleaned log rebuilds: the same records, a subset of what was
                // committed, with every key's latest value unchanged; nothing aborted.
                let kept_committed = visible(&log, Some(&derived.aborted), stable);
                let rebuilt = derive(&log);
                prop_assert_eq!(&visible(&log, Some(&rebuilt.aborted), stable), &kept_committed);
                prop_assert!(kept_committed.iter().all(|r| committed_before.contains(r)));
                prop_assert_eq!(latest(&kept_committed), latest(&committed_before));
                // read_uncommitted sees the same below the bound: aborted records are gone.
                prop_assert_eq!(&visible(&log, None, stable), &kept_committed);

                // Replaying the cleaned log leaves exactly the same transactions open (none
                // hangs for want of its marker), from the same producers.
                prop_assert_eq!(
                    rebuilt.open.keys().collect::<Vec<_>>(),
                    derived.open.keys().collect::<Vec<_>>()
                );

                for (i, (was, is)) in before.iter().zip(&log).enumerate() {
                    let became_filler = is.body == Body::Filler && was.body != Body::Filler;
                    if let (Body::End { horizon, .. }, true) = (&was.body, became_filler) {
                        // Never before its horizon, which a former pass set.
                        prop_assert!(matches!(horizon, Some(h) if *h <= now), "marker {} removed at {} with horizon {:?}", was.base, now, horizon);
                        // Never while a batch of its transaction stays.
                        for j in txn_of(&original, i) {
                            prop_assert_eq!(&before[j].body, &Body::Filler, "marker {} removed while batch {} stays", was.base, original[j].base);
                        }
                    }
                    if let (Body::End { horizon: None, .. }, Body::End { horizon: Some(h), .. }) = (&was.body, &is.body) {
                        prop_assert_eq!(*h, now.saturating_add(retention as i64));
                    }
                }
                // The last batch of every producer the state knows stays.
                for producer in 0..4i64 {
                    if expired.contains(&producer) {
                        continue;
                    }
                    if let Some(i) = original.iter().rposition(|b| b.producer == producer) {
                        prop_assert_ne!(&log[i].body, &Body::Filler, "producer {}'s last batch went", producer);
                        prop_assert_eq!(log[i].producer, producer);
                    }
                }
            }
        }

        /// A compacted history written by a few transactional producers over many
        /// transactions leaves, once horizons passed, at most a bounded number of
        /// non-filler batches: the live keys' records, and per producer its last
        /// transaction (BEGIN, data, marker).
        #[test]
        fn once_horizons_pass_what_stays_is_bounded_by_keys_and_producers(
            steps in prop::collection::vec(step(), 0..200),
            begin_markers in any::<bool>(),
        ) {
            let (mut log, stable) = build(&steps, begin_markers);
            let derived = derive(&log);
            let rules = CleaningRules { clean_below: stable, now_ms: 1_000, delete_retention_ms: 10 };
            clean(&mut log, &derived, &BTreeSet::new(), rules);
            clean(&mut log, &derived, &BTreeSet::new(), CleaningRules { now_ms: 2_000, ..rules });
            let staying = log.iter().filter(|b| b.last < stable && b.body != Body::Filler).count();
            let with_records = log.iter().filter(|b| b.last < stable && matches!(&b.body, Body::Data { records, .. } if !records.is_empty())).count();
            // 6 keys; 5 producers (-1..4); per producer its last batch plus the BEGIN and
            // marker of that batch's transaction.
            prop_assert!(with_records <= 6 + 1, "{} batches with records", with_records);
            prop_assert!(staying <= with_records + 3 * 5 + 6 * 2, "{} batches stay", staying);
        }
    }
}
