//! Order within one client and partition. A producer's acknowledged offsets strictly
//! increase in completion order (*nonmonotonic_send* otherwise); a consumer's returned
//! offsets strictly increase (*nonmonotonic_poll*); and a consumer never moves past an
//! offset that some read at its isolation level found a record at (*poll_skip*). For
//! read_committed only read_committed reads count, since control batches and aborted
//! records leave gaps there; for read_uncommitted every read counts.

use std::collections::BTreeMap;

use serde::Serialize;

use super::model::{Model, ReadOp, TopicPartition};
use crate::history::Isolation;

/// A record at an offset, and the event that returned or acknowledged it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AtOffset {
    pub offset: i64,
    pub value: String,
    pub index: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NonmonotonicSend {
    pub process: String,
    #[serde(flatten)]
    pub tp: TopicPartition,
    pub previous: AtOffset,
    pub next: AtOffset,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NonmonotonicPoll {
    pub process: String,
    #[serde(flatten)]
    pub tp: TopicPartition,
    pub previous: AtOffset,
    pub next: AtOffset,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PollSkip {
    pub process: String,
    #[serde(flatten)]
    pub tp: TopicPartition,
    pub isolation: Isolation,
    /// The last record the consumer returned before the jump (same index as `next`
    /// when the jump is inside one poll).
    pub previous: AtOffset,
    pub next: AtOffset,
    /// Records other reads found between the two.
    pub skipped: Vec<SkippedRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedRecord {
    pub offset: i64,
    pub value: String,
}

pub(crate) fn nonmonotonic_sends(model: &Model<'_>) -> Vec<NonmonotonicSend> {
    let mut last: BTreeMap<(&str, TopicPartition), AtOffset> = BTreeMap::new();
    let mut found = Vec::new();
    for acked in &model.acked_ops {
        for send in acked.sends {
            let Some(offset) = send.offset else { continue };
            let tp = TopicPartition::of_send(send);
            let next = AtOffset {
                offset,
                value: send.value.clone(),
                index: acked.index,
            };
            if let Some(previous) = last.insert((acked.process, tp.clone()), next.clone()) {
                if offset <= previous.offset {
                    found.push(NonmonotonicSend {
                        process: acked.process.to_owned(),
                        tp,
                        previous,
                        next,
                    });
                }
            }
        }
    }
    found
}

/// Every record each consumer's polls (and each final read) returned, per partition, in
/// the order returned: a final read is a consumer too, and one that jumps over a record
/// other reads saw has skipped it. (The first record of a sequence is not compared with
/// the log start, which the history does not record.)
fn poll_sequences<'m>(
    model: &'m Model<'_>,
) -> impl Iterator<Item = (&'m ReadOp<'m>, TopicPartition, AtOffset)> + 'm {
    model.reads.iter().flat_map(|read| {
        read.records.iter().map(move |record| {
            let at = AtOffset {
                offset: record.offset,
                value: record.value.clone(),
                index: read.index,
            };
            (read, TopicPartition::of_read(record), at)
        })
    })
}

pub(crate) fn nonmonotonic_polls(model: &Model<'_>) -> Vec<NonmonotonicPoll> {
    let mut last: BTreeMap<(&str, TopicPartition), AtOffset> = BTreeMap::new();
    let mut found = Vec::new();
    for (read, tp, next) in poll_sequences(model) {
        if let Some(previous) = last.insert((read.process, tp.clone()), next.clone()) {
            if next.offset <= previous.offset {
                found.push(NonmonotonicPoll {
                    process: read.process.to_owned(),
                    tp,
                    previous,
                    next,
                });
            }
        }
    }
    found
}

pub(crate) fn poll_skips(model: &Model<'_>) -> Vec<PollSkip> {
    // Offsets known to hold a record, as a reader at each isolation level sees the log.
    let mut exists: BTreeMap<(Isolation, TopicPartition), BTreeMap<i64, &str>> = BTreeMap::new();
    for (read, record) in model.read_records() {
        let levels: &[Isolation] = match read.isolation {
            Isolation::ReadCommitted => &[Isolation::ReadCommitted, Isolation::ReadUncommitted],
            Isolation::ReadUncommitted => &[Isolation::ReadUncommitted],
        };
        for &level in levels {
            exists
                .entry((level, TopicPartition::of_read(record)))
                .or_default()
                .entry(record.offset)
                .or_insert(&record.value);
        }
    }

    let mut last: BTreeMap<(&str, TopicPartition), AtOffset> = BTreeMap::new();
    let mut found = Vec::new();
    for (read, tp, next) in poll_sequences(model) {
        let Some(previous) = last.insert((read.process, tp.clone()), next.clone()) else {
            continue;
        };
        if next.offset <= previous.offset + 1 {
            continue;
        }
        let skipped: Vec<SkippedRecord> = exists
            .get(&(read.isolation, tp.clone()))
            .into_iter()
            .flat_map(|offsets| offsets.range(previous.offset + 1..next.offset))
            .map(|(&offset, &value)| SkippedRecord {
                offset,
                value: value.to_owned(),
            })
            .collect();
        if !skipped.is_empty() {
            found.push(PollSkip {
                process: read.process.to_owned(),
                tp,
                isolation: read.isolation,
                previous,
                next,
                skipped,
            });
        }
    }
    found
}
