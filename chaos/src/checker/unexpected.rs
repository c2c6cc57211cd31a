//! Reads return only what was written: a record whose value no operation sent to that
//! topic/partition, or whose plain send definitely failed, is *unexpected*. (Values of
//! aborted transactions are legitimate for read_uncommitted readers; for read_committed
//! ones they are aborted reads.)

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::model::{Model, Outcome, TopicPartition};
use super::observer::Observer;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unexpected {
    pub value: String,
    #[serde(flatten)]
    pub tp: TopicPartition,
    pub offset: i64,
    pub readers: Vec<Observer>,
    pub reason: UnexpectedReason,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum UnexpectedReason {
    NeverSent,
    SentToAnotherPartition { sent_to: TopicPartition },
    SendFailed { writer: Observer },
}

pub(crate) fn check(model: &Model<'_>) -> Vec<Unexpected> {
    let mut found: BTreeMap<(&str, TopicPartition, i64), (UnexpectedReason, BTreeSet<Observer>)> =
        BTreeMap::new();
    for (read, record) in model.read_records() {
        let tp = TopicPartition::of_read(record);
        let reason = match model.writes.get(record.value.as_str()) {
            None => UnexpectedReason::NeverSent,
            Some(write) if write.tp != tp => UnexpectedReason::SentToAnotherPartition {
                sent_to: write.tp.clone(),
            },
            Some(write) if write.txn.is_none() && write.outcome == Outcome::Failed => {
                UnexpectedReason::SendFailed {
                    writer: Observer {
                        process: write.process.clone(),
                        index: write.index,
                        f: "send",
                    },
                }
            }
            Some(_) => continue,
        };
        found
            .entry((&record.value, tp, record.offset))
            .or_insert_with(|| (reason, BTreeSet::new()))
            .1
            .insert(Observer {
                process: read.process.to_owned(),
                index: read.index,
                f: read.f(),
            });
    }
    found
        .into_iter()
        .map(|((value, tp, offset), (reason, readers))| Unexpected {
            value: value.to_owned(),
            tp,
            offset,
            readers: readers.into_iter().collect(),
            reason,
        })
        .collect()
}
