//! Lost and unseen writes: an acknowledged value (an `ok` send, or a value of a
//! committed transaction) that no read of its partition returned. It is *lost* when
//! some read of that partition returned a higher offset than the one acknowledged (the
//! log moved past it without it), *unseen* when no read reached that far, or the
//! acknowledged offset is not known.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::model::{Model, Outcome, TopicPartition};
use super::observer::Observer;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lost {
    pub value: String,
    #[serde(flatten)]
    pub tp: TopicPartition,
    /// The offset the producer was given.
    pub offset: i64,
    pub outcome: Outcome,
    pub writer: Observer,
    pub transactional_id: Option<String>,
    /// The highest offset any read of the partition returned, and who read it.
    pub read_up_to: i64,
    pub read_by: Observer,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unseen {
    pub value: String,
    #[serde(flatten)]
    pub tp: TopicPartition,
    pub offset: Option<i64>,
    pub outcome: Outcome,
    pub writer: Observer,
    pub transactional_id: Option<String>,
    /// The highest offset any read of the partition returned, if any read did.
    pub read_up_to: Option<i64>,
}

pub(crate) fn check(model: &Model<'_>) -> (Vec<Lost>, Vec<Unseen>) {
    let mut present: BTreeSet<(&str, TopicPartition)> = BTreeSet::new();
    let mut highest: BTreeMap<TopicPartition, (i64, Observer)> = BTreeMap::new();
    for (read, record) in model.read_records() {
        let tp = TopicPartition::of_read(record);
        present.insert((&record.value, tp.clone()));
        let reader = || Observer {
            process: read.process.to_owned(),
            index: read.index,
            f: read.f(),
        };
        match highest.get(&tp) {
            Some((offset, _)) if *offset >= record.offset => {}
            _ => {
                highest.insert(tp, (record.offset, reader()));
            }
        }
    }

    let (mut lost, mut unseen) = (Vec::new(), Vec::new());
    for (&value, write) in &model.writes {
        if !write.outcome.acknowledged() || present.contains(&(value, write.tp.clone())) {
            continue;
        }
        let writer = Observer {
            process: write.process.clone(),
            index: write.index,
            f: if write.txn.is_some() { "txn" } else { "send" },
        };
        let transactional_id = model.transactional_id(write);
        let read = highest.get(&write.tp);
        match (write.offset, read) {
            (Some(offset), Some((read_up_to, read_by))) if *read_up_to > offset => {
                lost.push(Lost {
                    value: value.to_owned(),
                    tp: write.tp.clone(),
                    offset,
                    outcome: write.outcome,
                    writer,
                    transactional_id,
                    read_up_to: *read_up_to,
                    read_by: read_by.clone(),
                });
            }
            _ => unseen.push(Unseen {
                value: value.to_owned(),
                tp: write.tp.clone(),
                offset: write.offset,
                outcome: write.outcome,
                writer,
                transactional_id,
                read_up_to: read.map(|(offset, _)| *offset),
            }),
        }
    }
    (lost, unseen)
}
