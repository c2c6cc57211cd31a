//! The checker: a pure function from a history to a [`Verdict`]. It knows only what
//! clients logged (no broker internals) and reports every anomaly with concrete
//! examples: values, topic/partition/offsets and the processes involved. A history is
//! valid when no anomaly list has an entry.
//!
//! Consume-transform-produce is judged apart ([`pipeline`]): its outputs are not unique
//! values, so they stay out of the model the other checks share.

mod lost;
mod model;
mod observer;
mod offsets;
mod order;
mod pipeline;
mod txn;
mod unexpected;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::history::{Call, Op};

pub use lost::{Lost, Unseen};
pub use model::{Outcome, TopicPartition};
pub use observer::Observer;
pub use offsets::{Duplicate, InconsistentOffset, Placement, ValueAtOffset};
pub use order::{AtOffset, NonmonotonicPoll, NonmonotonicSend, PollSkip, SkippedRecord};
pub use pipeline::{
    OutputAt, PipelineDuplicate, PipelineLost, PipelineMismatch, PipelineMissing, PipelineOrder,
    PipelineUncommitted,
};
pub use txn::{AbortedRead, TornTxn, TxnValue};
pub use unexpected::{Unexpected, UnexpectedReason};

use model::Model;

/// What the checker concluded about a history.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// `true` when every anomaly list is empty.
    pub valid: bool,
    pub anomalies: Anomalies,
    pub stats: Stats,
}

/// Every anomaly found, by kind, each with concrete examples.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Anomalies {
    /// Acknowledged, never read, though a read of its partition went past its offset.
    pub lost: Vec<Lost>,
    /// Acknowledged, never read, and no read reached its offset.
    pub unseen: Vec<Unseen>,
    /// One value found (read, or acknowledged) at two or more offsets.
    pub duplicate: Vec<Duplicate>,
    /// Two or more values found (read, or acknowledged) at one offset.
    pub inconsistent_offsets: Vec<InconsistentOffset>,
    /// A producer's acknowledged offsets in one partition did not strictly increase.
    pub nonmonotonic_send: Vec<NonmonotonicSend>,
    /// A consumer returned an offset not above one it had returned.
    pub nonmonotonic_poll: Vec<NonmonotonicPoll>,
    /// A consumer moved past an offset that holds a record it should have returned.
    pub poll_skip: Vec<PollSkip>,
    /// A read_committed read returned a value of an aborted or failed transaction.
    pub aborted_read: Vec<AbortedRead>,
    /// The read_committed final read holds part of a transaction, not all or nothing.
    pub torn_txn: Vec<TornTxn>,
    /// A read returned a value never sent to that partition, or whose send failed.
    pub unexpected: Vec<Unexpected>,
    /// An input a consumer group committed past has no output.
    pub pipeline_missing: Vec<PipelineMissing>,
    /// An input has two or more outputs.
    pub pipeline_duplicate: Vec<PipelineDuplicate>,
    /// An output is visible though its input's offset was not committed.
    pub pipeline_uncommitted: Vec<PipelineUncommitted>,
    /// An output names no record of the input's final read, or is no output value.
    pub pipeline_mismatch: Vec<PipelineMismatch>,
    /// The outputs of one input partition are out of input order.
    pub pipeline_order: Vec<PipelineOrder>,
    /// An output of a committed transform is not at its acknowledged offset.
    pub pipeline_lost: Vec<PipelineLost>,
}

impl Anomalies {
    /// How many examples of each kind, by the kind's name in the verdict.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        BTreeMap::from([
            ("lost", self.lost.len()),
            ("unseen", self.unseen.len()),
            ("duplicate", self.duplicate.len()),
            ("inconsistent_offsets", self.inconsistent_offsets.len()),
            ("nonmonotonic_send", self.nonmonotonic_send.len()),
            ("nonmonotonic_poll", self.nonmonotonic_poll.len()),
            ("poll_skip", self.poll_skip.len()),
            ("aborted_read", self.aborted_read.len()),
            ("torn_txn", self.torn_txn.len()),
            ("unexpected", self.unexpected.len()),
            ("pipeline_missing", self.pipeline_missing.len()),
            ("pipeline_duplicate", self.pipeline_duplicate.len()),
            ("pipeline_uncommitted", self.pipeline_uncommitted.len()),
            ("pipeline_mismatch", self.pipeline_mismatch.len()),
            ("pipeline_order", self.pipeline_order.len()),
            ("pipeline_lost", self.pipeline_lost.len()),
        ])
    }

    pub fn is_empty(&self) -> bool {
        self.counts().values().all(|&n| n == 0)
    }
}

/// What the history holds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Events by `f`, then by `type`.
    pub ops: BTreeMap<String, BTreeMap<String, usize>>,
    /// Values invoked by a send or a transaction.
    pub values_sent: usize,
    /// Values of `ok` sends and of committed transactions.
    pub values_acked: usize,
    /// Values of failed sends and of aborted or failed transactions.
    pub values_not_written: usize,
    /// Values whose send or transaction ended `info` or never completed: a read may
    /// or may not hold them, and neither is an anomaly.
    pub values_unknown: usize,
    /// Distinct values returned by at least one successful read.
    pub values_read: usize,
}

/// Checks a history (see the module doc). Pure: no I/O, deterministic output.
pub fn check(history: &[Op]) -> Verdict {
    let model = Model::build(history);
    let (lost, unseen) = lost::check(&model);
    let pipeline = pipeline::check(history);
    let anomalies = Anomalies {
        lost,
        unseen,
        duplicate: offsets::duplicates(&model),
        inconsistent_offsets: offsets::inconsistent(&model),
        nonmonotonic_send: order::nonmonotonic_sends(&model),
        nonmonotonic_poll: order::nonmonotonic_polls(&model),
        poll_skip: order::poll_skips(&model),
        aborted_read: txn::aborted_reads(&model),
        torn_txn: txn::torn(&model),
        unexpected: unexpected::check(&model),
        pipeline_missing: pipeline.missing,
        pipeline_duplicate: pipeline.duplicate,
        pipeline_uncommitted: pipeline.uncommitted,
        pipeline_mismatch: pipeline.mismatch,
        pipeline_order: pipeline.order,
        pipeline_lost: pipeline.lost,
    };
    Verdict {
        valid: anomalies.is_empty(),
        stats: stats(history, &model),
        anomalies,
    }
}

fn stats(history: &[Op], model: &Model<'_>) -> Stats {
    let mut stats = Stats::default();
    for op in history {
        *stats
            .ops
            .entry(op.call.f().to_owned())
            .or_default()
            .entry(op.kind.as_str().to_owned())
            .or_default() += 1;
    }
    stats.values_sent = history
        .iter()
        .filter(|op| matches!(op.call, Call::Send(_) | Call::Txn(_)))
        .filter(|op| op.kind == crate::history::OpKind::Invoke)
        .map(|op| op.call.sends().len())
        .sum();
    for write in model.writes.values() {
        match write.outcome {
            Outcome::Acked | Outcome::Committed => stats.values_acked += 1,
            Outcome::Aborted | Outcome::Failed => stats.values_not_written += 1,
            Outcome::Unknown => stats.values_unknown += 1,
        }
    }
    stats.values_read = model
        .read_records()
        .map(|(_, record)| record.value.as_str())
        .collect::<BTreeSet<_>>()
        .len();
    stats
}

#[cfg(test)]
mod pipeline_tests;
#[cfg(test)]
pub(crate) mod tests;
