//! One value, one offset: a value found at two different offsets is a *duplicate*; two
//! different values found at the same topic/partition/offset are *inconsistent
//! offsets*. "Found" means returned by any read, or acknowledged to its producer at that
//! offset: a value acknowledged at 5 but read at 7 is a duplicate too (or a lying ack).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::model::{Model, TopicPartition};
use super::observer::Observer;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Duplicate {
    pub value: String,
    /// Every place it was found, with who saw it there.
    pub found_at: Vec<Placement>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    #[serde(flatten)]
    pub tp: TopicPartition,
    pub offset: i64,
    pub seen_by: Vec<Observer>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InconsistentOffset {
    #[serde(flatten)]
    pub tp: TopicPartition,
    pub offset: i64,
    pub values: Vec<ValueAtOffset>,
}

/// A value found at an offset, by reads or by the acknowledgement of its write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ValueAtOffset {
    pub value: String,
    pub seen_by: Vec<Observer>,
}

type Observers = BTreeSet<Observer>;

/// Every (value, topic/partition, offset) found in reads and acknowledgements, with
/// the operations that saw it.
fn found<'h>(model: &Model<'h>) -> BTreeMap<(TopicPartition, i64, &'h str), Observers> {
    let mut found: BTreeMap<(TopicPartition, i64, &'h str), Observers> = BTreeMap::new();
    for (read, record) in model.read_records() {
        found
            .entry((
                TopicPartition::of_read(record),
                record.offset,
                &record.value,
            ))
            .or_default()
            .insert(Observer {
                process: read.process.to_owned(),
                index: read.index,
                f: read.f(),
            });
    }
    for acked in &model.acked_ops {
        for send in acked.sends {
            let Some(offset) = send.offset else { continue };
            found
                .entry((TopicPartition::of_send(send), offset, &send.value))
                .or_default()
                .insert(Observer {
                    process: acked.process.to_owned(),
                    index: acked.index,
                    f: acked.f,
                });
        }
    }
    found
}

pub(crate) fn duplicates(model: &Model<'_>) -> Vec<Duplicate> {
    let mut places: BTreeMap<&str, Vec<Placement>> = BTreeMap::new();
    for ((tp, offset, value), seen_by) in found(model) {
        places.entry(value).or_default().push(Placement {
            tp,
            offset,
            seen_by: seen_by.into_iter().collect(),
        });
    }
    places
        .into_iter()
        .filter(|(_, found_at)| found_at.len() > 1)
        .map(|(value, found_at)| Duplicate {
            value: value.to_owned(),
            found_at,
        })
        .collect()
}

pub(crate) fn inconsistent(model: &Model<'_>) -> Vec<InconsistentOffset> {
    let mut at: BTreeMap<(TopicPartition, i64), Vec<ValueAtOffset>> = BTreeMap::new();
    for ((tp, offset, value), seen_by) in found(model) {
        at.entry((tp, offset)).or_default().push(ValueAtOffset {
            value: value.to_owned(),
            seen_by: seen_by.into_iter().collect(),
        });
    }
    at.into_iter()
        .filter(|(_, values)| values.len() > 1)
        .map(|((tp, offset), values)| InconsistentOffset { tp, offset, values })
        .collect()
}
