//! A run over time: a history and its nemesis log turned into per-bucket series. Each
//! completion of a `send`, `txn`, `poll` or `transform` counts in the bucket of its
//! `time_ns`, by outcome; its latency (invoke to completion, whatever the outcome: the
//! wait the client saw) feeds that bucket's p50/p99 for `send`, `txn` and `transform`.
//! Invocations never completed, `final_read`s and `final_pipeline`s are left out. Pure: no I/O; every series has one entry per bucket.

use std::collections::{BTreeMap, HashMap};

use crate::history::{Call, Op, OpKind};
use crate::nemesis_log::FaultInterval;

const MS: u64 = 1_000_000;
const SECOND: u64 = 1_000 * MS;

/// Bucket widths [`bucket_width`] chooses from, narrowest first.
const WIDTHS_NS: [u64; 15] = [
    100 * MS,
    200 * MS,
    500 * MS,
    SECOND,
    2 * SECOND,
    5 * SECOND,
    10 * SECOND,
    15 * SECOND,
    30 * SECOND,
    60 * SECOND,
    120 * SECOND,
    300 * SECOND,
    600 * SECOND,
    1_800 * SECOND,
    3_600 * SECOND,
];

/// A run is drawn with between this many buckets (when it lasts long enough) …
pub const MIN_BUCKETS: u64 = 60;
/// … and this many.
pub const MAX_BUCKETS: u64 = 600;

/// The operations drawn: the history's `f`, less `final_read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    Send,
    Txn,
    Poll,
    Transform,
}

impl Operation {
    pub const ALL: [Operation; 4] = [
        Operation::Send,
        Operation::Txn,
        Operation::Poll,
        Operation::Transform,
    ];
    /// Those whose latency is drawn.
    pub const TIMED: [Operation; 3] = [Operation::Send, Operation::Txn, Operation::Transform];

    /// The history's `f`.
    pub fn f(self) -> &'static str {
        match self {
            Operation::Send => "send",
            Operation::Txn => "txn",
            Operation::Poll => "poll",
            Operation::Transform => "transform",
        }
    }

    fn of(call: &Call) -> Option<Operation> {
        match call {
            Call::Send(_) => Some(Operation::Send),
            Call::Txn(_) => Some(Operation::Txn),
            Call::Poll(_) => Some(Operation::Poll),
            Call::Transform(_) => Some(Operation::Transform),
            Call::FinalRead(_) | Call::FinalPipeline(_) => None,
        }
    }
}

/// Completions in one bucket, by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Completions {
    pub ok: u32,
    /// Definitely did not happen.
    pub fail: u32,
    /// Outcome unknown.
    pub info: u32,
}

impl Completions {
    /// Those that did not surely happen: `fail` plus `info`.
    pub fn not_ok(&self) -> u32 {
        self.fail + self.info
    }
}

/// Latency of the operations completed in one bucket (nearest-rank percentiles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// How many completions the percentiles are of.
    pub count: u32,
}

/// The series of a run, bucket `i` covering `[i * bucket_ns, (i + 1) * bucket_ns)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    pub bucket_ns: u64,
    pub buckets: usize,
    /// For every [`Operation`], one entry per bucket.
    pub completions: BTreeMap<Operation, Vec<Completions>>,
    /// For every [`Operation::TIMED`], one entry per bucket; `None`: nothing completed.
    pub latency: BTreeMap<Operation, Vec<Option<Latency>>>,
    /// The nemesis log, as given.
    pub faults: Vec<FaultInterval>,
}

impl Timeline {
    /// The timeline with buckets of [`bucket_width`] for the run's span.
    pub fn build(ops: &[Op], faults: &[FaultInterval]) -> Timeline {
        Timeline::with_bucket(ops, faults, bucket_width(span_ns(ops, faults)))
    }

    /// The timeline with buckets of `bucket_ns` (at least 1 ns). There are enough to hold
    /// the last event and the end of the last fault.
    pub fn with_bucket(ops: &[Op], faults: &[FaultInterval], bucket_ns: u64) -> Timeline {
        let bucket_ns = bucket_ns.max(1);
        let buckets = usize::try_from(span_ns(ops, faults) / bucket_ns + 1).unwrap_or(usize::MAX);
        let bucket_of = |time_ns: u64| usize::try_from(time_ns / bucket_ns).unwrap_or(usize::MAX);

        let mut completions: BTreeMap<Operation, Vec<Completions>> = Operation::ALL
            .into_iter()
            .map(|op| (op, vec![Completions::default(); buckets]))
            .collect();
        let mut waits: BTreeMap<Operation, Vec<Vec<u64>>> = Operation::TIMED
            .into_iter()
            .map(|op| (op, vec![Vec::new(); buckets]))
            .collect();
        let mut invoked_at: HashMap<&str, u64> = HashMap::new();
        for op in ops {
            let Some(operation) = Operation::of(&op.call) else {
                continue;
            };
            if op.kind == OpKind::Invoke {
                invoked_at.insert(&op.process, op.time_ns);
                continue;
            }
            let bucket = bucket_of(op.time_ns);
            if let Some(counts) = completions
                .get_mut(&operation)
                .and_then(|series| series.get_mut(bucket))
            {
                match op.kind {
                    OpKind::Ok => counts.ok += 1,
                    OpKind::Fail => counts.fail += 1,
                    OpKind::Info | OpKind::Invoke => counts.info += 1,
                }
            }
            // A completion without its invoke (an unvalidated history) has no latency.
            if let Some(start) = invoked_at.remove(op.process.as_str()) {
                if let Some(bucket) = waits
                    .get_mut(&operation)
                    .and_then(|series| series.get_mut(bucket))
                {
                    bucket.push(op.time_ns.saturating_sub(start));
                }
            }
        }
        let latency = waits
            .into_iter()
            .map(|(op, series)| (op, series.into_iter().map(percentiles).collect()))
            .collect();
        Timeline {
            bucket_ns,
            buckets,
            completions,
            latency,
            faults: faults.to_vec(),
        }
    }

    /// Where bucket `i` starts, in seconds since the run began.
    pub fn bucket_start_s(&self, bucket: usize) -> f64 {
        bucket as f64 * self.bucket_ns as f64 / SECOND as f64
    }

    /// The time the buckets cover, in seconds.
    pub fn span_s(&self) -> f64 {
        self.bucket_start_s(self.buckets)
    }

    /// `count` completions in one bucket, as a rate per second.
    pub fn per_second(&self, count: u32) -> f64 {
        f64::from(count) * SECOND as f64 / self.bucket_ns as f64
    }
}

/// The time the run covers: its last event or the end of its last fault.
pub fn span_ns(ops: &[Op], faults: &[FaultInterval]) -> u64 {
    let last_event = ops.iter().map(|op| op.time_ns).max().unwrap_or(0);
    let last_fault = faults.iter().map(|f| f.end_ns).max().unwrap_or(0);
    last_event.max(last_fault)
}

/// The bucket width for a run of `span_ns`: one second when that gives between
/// [`MIN_BUCKETS`] and [`MAX_BUCKETS`]; else the width nearest one second in the
/// ladder 100 ms … 1 h that does (the narrowest or widest when none does).
pub fn bucket_width(span_ns: u64) -> u64 {
    let buckets = |width: u64| span_ns.div_ceil(width);
    if buckets(SECOND) > MAX_BUCKETS {
        WIDTHS_NS
            .into_iter()
            .find(|&width| width > SECOND && buckets(width) <= MAX_BUCKETS)
            .unwrap_or(WIDTHS_NS[WIDTHS_NS.len() - 1])
    } else if buckets(SECOND) < MIN_BUCKETS {
        WIDTHS_NS
            .into_iter()
            .rev()
            .find(|&width| width < SECOND && buckets(width) >= MIN_BUCKETS)
            .unwrap_or(WIDTHS_NS[0])
    } else {
        SECOND
    }
}

/// p50 and p99 by nearest rank: the smallest value with at least p% of values at or below.
fn percentiles(mut waits: Vec<u64>) -> Option<Latency> {
    if waits.is_empty() {
        return None;
    }
    waits.sort_unstable();
    let rank = |p: usize| waits[(p * waits.len()).div_ceil(100) - 1];
    Some(Latency {
        p50_ns: rank(50),
        p99_ns: rank(99),
        count: u32::try_from(waits.len()).unwrap_or(u32::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Isolation, Read, SendRecord, Txn};

    fn send(value: &str) -> Call {
        Call::Send(SendRecord {
            topic: "t".into(),
            partition: 0,
            value: value.into(),
            offset: None,
        })
    }

    fn txn(value: &str) -> Call {
        Call::Txn(Txn {
            transactional_id: "tid".into(),
            sends: vec![SendRecord {
                topic: "t".into(),
                partition: 1,
                value: value.into(),
                offset: None,
            }],
            commit: true,
        })
    }

    fn poll() -> Call {
        Call::Poll(Read {
            isolation: Isolation::ReadCommitted,
            records: vec![],
        })
    }

    /// A history from `(time_ms, process, type, call)`, indexes in order.
    fn history(events: Vec<(u64, &str, OpKind, Call)>) -> Vec<Op> {
        events
            .into_iter()
            .enumerate()
            .map(|(index, (time_ms, process, kind, call))| Op {
                index: index as u64,
                time_ns: time_ms * MS,
                process: process.into(),
                kind,
                call,
            })
            .collect()
    }

    fn fault(start_ms: u64, end_ms: u64) -> FaultInterval {
        FaultInterval {
            family: "kill".into(),
            fault: "KillBroker(1)".into(),
            start_ns: start_ms * MS,
            end_ns: end_ms * MS,
        }
    }

    fn counts(ok: u32, fail: u32, info: u32) -> Completions {
        Completions { ok, fail, info }
    }

    fn latency(p50_ms: u64, p99_ms: u64, count: u32) -> Option<Latency> {
        Some(Latency {
            p50_ns: p50_ms * MS,
            p99_ns: p99_ms * MS,
            count,
        })
    }

    #[test]
    fn given_completions_of_every_kind_when_bucketed_by_second_then_each_lands_by_its_completion_time(
    ) {
        use OpKind::{Fail, Info, Invoke, Ok};
        let ops = history(vec![
            (0, "c", Invoke, poll()),
            (100, "p", Invoke, send("a")),
            (200, "tx", Invoke, txn("x")),
            (300, "p", Ok, send("a")),
            (500, "p", Invoke, send("b")),
            (900, "c", Ok, poll()),
            (950, "c", Invoke, poll()),
            (1_200, "p", Fail, send("b")),
            (1_250, "c", Fail, poll()),
            (2_500, "tx", Info, txn("x")),
            (2_600, "p", Invoke, send("c")),
            (2_700, "p", Info, send("c")),
        ]);
        let timeline = Timeline::with_bucket(&ops, &[], SECOND);
        assert_eq!(timeline.buckets, 3);
        assert_eq!(
            timeline.completions[&Operation::Send],
            vec![counts(1, 0, 0), counts(0, 1, 0), counts(0, 0, 1)]
        );
        assert_eq!(
            timeline.completions[&Operation::Txn],
            vec![counts(0, 0, 0), counts(0, 0, 0), counts(0, 0, 1)]
        );
        assert_eq!(
            timeline.completions[&Operation::Poll],
            vec![counts(1, 0, 0), counts(0, 1, 0), counts(0, 0, 0)]
        );
        assert_eq!(
            timeline.latency[&Operation::Send],
            vec![
                latency(200, 200, 1),
                latency(700, 700, 1),
                latency(100, 100, 1)
            ]
        );
        assert_eq!(
            timeline.latency[&Operation::Txn],
            vec![None, None, latency(2_300, 2_300, 1)]
        );
        assert!(!timeline.latency.contains_key(&Operation::Poll));
    }

    #[test]
    fn given_a_hundred_sends_in_one_bucket_when_bucketed_then_p50_and_p99_are_by_nearest_rank() {
        // Process k waits k ms (1..=100), all completing in the first second.
        let names: Vec<String> = (1..=100).map(|k| format!("p{k}")).collect();
        let mut events = Vec::new();
        for name in &names {
            events.push((0, name.as_str(), OpKind::Invoke, send(name)));
        }
        for (k, name) in (1..=100u64).zip(&names) {
            events.push((k, name.as_str(), OpKind::Ok, send(name)));
        }
        events.sort_by_key(|event| event.0);
        let timeline = Timeline::with_bucket(&history(events), &[], SECOND);
        assert_eq!(
            timeline.latency[&Operation::Send],
            vec![latency(50, 99, 100)]
        );
        assert_eq!(
            timeline.completions[&Operation::Send],
            vec![counts(100, 0, 0)]
        );
    }

    #[test]
    fn given_two_waits_when_percentiles_taken_then_p50_is_the_lower_and_p99_the_higher() {
        assert_eq!(
            percentiles(vec![30, 10]),
            Some(Latency {
                p50_ns: 10,
                p99_ns: 30,
                count: 2
            })
        );
        assert_eq!(percentiles(vec![]), None);
    }

    #[test]
    fn given_an_invocation_never_completed_and_a_final_read_when_bucketed_then_neither_counts() {
        let final_read = || {
            Call::FinalRead(Read {
                isolation: Isolation::ReadUncommitted,
                records: vec![],
            })
        };
        let ops = history(vec![
            (100, "p", OpKind::Invoke, send("a")),
            (200, "f", OpKind::Invoke, final_read()),
            (1_500, "f", OpKind::Ok, final_read()),
        ]);
        let timeline = Timeline::with_bucket(&ops, &[], SECOND);
        assert_eq!(timeline.buckets, 2);
        for series in timeline.completions.values() {
            assert_eq!(series, &vec![Completions::default(); 2]);
        }
        for series in timeline.latency.values() {
            assert_eq!(series, &vec![None; 2]);
        }
    }

    #[test]
    fn given_a_fault_ending_after_the_last_event_when_bucketed_then_the_buckets_cover_it() {
        let ops = history(vec![
            (100, "p", OpKind::Invoke, send("a")),
            (1_900, "p", OpKind::Ok, send("a")),
        ]);
        let faults = [fault(1_000, 5_500)];
        let timeline = Timeline::with_bucket(&ops, &faults, SECOND);
        assert_eq!(timeline.buckets, 6);
        assert_eq!(timeline.faults, faults.to_vec());
        assert_eq!(timeline.span_s(), 6.0);
        assert_eq!(timeline.completions[&Operation::Send][1], counts(1, 0, 0));
    }

    #[test]
    fn given_half_second_buckets_when_rated_then_counts_double_per_second() {
        let ops = history(vec![
            (0, "p", OpKind::Invoke, send("a")),
            (10, "p", OpKind::Ok, send("a")),
            (20, "p", OpKind::Invoke, send("b")),
            (30, "p", OpKind::Ok, send("b")),
        ]);
        let timeline = Timeline::with_bucket(&ops, &[], 500 * MS);
        assert_eq!(
            timeline.completions[&Operation::Send],
            vec![counts(2, 0, 0)]
        );
        assert_eq!(timeline.per_second(2), 4.0);
        assert_eq!(timeline.bucket_start_s(3), 1.5);
    }

    #[test]
    fn given_runs_of_various_lengths_when_the_bucket_is_chosen_then_it_gives_60_to_600_buckets() {
        assert_eq!(bucket_width(60 * SECOND), SECOND);
        assert_eq!(bucket_width(600 * SECOND), SECOND);
        assert_eq!(bucket_width(30 * 60 * SECOND), 5 * SECOND);
        assert_eq!(bucket_width(2 * 3_600 * SECOND), 15 * SECOND);
        assert_eq!(bucket_width(20 * SECOND), 200 * MS);
        assert_eq!(bucket_width(59 * SECOND), 500 * MS);
        assert_eq!(bucket_width(SECOND), 100 * MS);
        assert_eq!(bucket_width(0), 100 * MS);
        assert_eq!(bucket_width(u64::MAX), 3_600 * SECOND);
    }

    #[test]
    fn given_an_empty_history_when_built_then_there_is_one_empty_bucket() {
        let timeline = Timeline::build(&[], &[]);
        assert_eq!(timeline.buckets, 1);
        assert_eq!(
            timeline.completions[&Operation::Poll],
            vec![Completions::default()]
        );
    }
}
