//! Consume-transform-produce, exactly once: each input a consumer group committed past
//! has exactly one output, and nothing else has one. Judged from a `final_pipeline`
//! (the group's stable committed offsets and its whole read_committed output) against
//! the read_committed `final_read` of the input, plus every `ok` transform:
//!
//! - *pipeline_missing*: an input below the group's committed offset with no output;
//! - *pipeline_duplicate*: an input with two or more outputs;
//! - *pipeline_uncommitted*: an output of an input at or past the committed offset (the
//!   output became visible without its offsets);
//! - *pipeline_mismatch*: an output that names no record of the input's final read (an
//!   input that was aborted, never written, or holds another value there), or that is
//!   not an output value at all;
//! - *pipeline_order*: in one output partition, the outputs of one input partition not
//!   in input order;
//! - *pipeline_lost*: an output of an `ok` (committed) transform not at its
//!   acknowledged offset in the final output.
//!
//! Outputs are not unique values (an aborted transform and its retry send the same
//! ones), so none of this goes through the value-keyed model the other checks share.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::model::TopicPartition;
use super::observer::Observer;
use crate::history::{
    parse_output_value, Call, Isolation, Op, OpKind, PipelineRead, ReadRecord, SendRecord,
};

/// Where an output record lies.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct OutputAt {
    #[serde(flatten)]
    pub tp: TopicPartition,
    pub offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PipelineMissing {
    pub group: String,
    pub input: ReadRecord,
    pub committed: i64,
    pub final_pipeline: Observer,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PipelineDuplicate {
    pub group: String,
    pub input: ReadRecord,
    pub outputs: Vec<OutputAt>,
    pub final_pipeline: Observer,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PipelineUncommitted {
    pub group: String,
    pub input: ReadRecord,
    /// `None`: the group committed nothing for the input's partition.
    pub committed: Option<i64>,
    pub output: OutputAt,
    pub final_pipeline: Observer,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PipelineMismatch {
    pub group: String,
    pub output: OutputAt,
    pub value: String,
    /// The value the input's final read holds at the offset the output names.
    pub found: Option<String>,
    pub final_pipeline: Observer,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PipelineOrder {
    pub group: String,
    pub input: TopicPartition,
    /// The earlier output, and the input offset it stands for …
    pub earlier: OutputAt,
    pub earlier_input_offset: i64,
    /// … and a later one of a lower input offset.
    pub later: OutputAt,
    pub later_input_offset: i64,
    pub final_pipeline: Observer,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PipelineLost {
    pub group: String,
    pub value: String,
    pub output: OutputAt,
    pub transform: Observer,
    /// What the final output holds at that offset.
    pub found: Option<String>,
}

/// Every pipeline anomaly, by kind.
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub missing: Vec<PipelineMissing>,
    pub duplicate: Vec<PipelineDuplicate>,
    pub uncommitted: Vec<PipelineUncommitted>,
    pub mismatch: Vec<PipelineMismatch>,
    pub order: Vec<PipelineOrder>,
    pub lost: Vec<PipelineLost>,
}

type Place = (TopicPartition, i64);

pub(crate) fn check(history: &[Op]) -> Found {
    let mut found = Found::default();
    // The read_committed final read: every input as it finally is.
    let inputs: BTreeMap<Place, &ReadRecord> = history
        .iter()
        .filter(|op| op.kind == OpKind::Ok)
        .filter_map(|op| match &op.call {
            Call::FinalRead(read) if read.isolation == Isolation::ReadCommitted => {
                Some(&read.records)
            }
            _ => None,
        })
        .flatten()
        .map(|r| ((TopicPartition::of_read(r), r.offset), r))
        .collect();
    for op in history.iter().filter(|op| op.kind == OpKind::Ok) {
        if let Call::FinalPipeline(end) = &op.call {
            let observer = Observer {
                index: op.index,
                process: op.process.clone(),
                f: "final_pipeline",
            };
            check_end(end, &inputs, &observer, &mut found);
            check_acked_transforms(history, end, &mut found);
        }
    }
    found
}

fn check_end(
    end: &PipelineRead,
    inputs: &BTreeMap<Place, &ReadRecord>,
    observer: &Observer,
    found: &mut Found,
) {
    let committed: HashMap<TopicPartition, i64> = end
        .committed
        .iter()
        .map(|c| {
            let tp = TopicPartition {
                topic: c.topic.clone(),
                partition: c.partition,
            };
            (tp, c.offset)
        })
        .collect();
    // The outputs of each input, in the order the output holds them.
    let mut outputs_of: BTreeMap<Place, Vec<OutputAt>> = BTreeMap::new();
    let mut last_in_output: HashMap<(TopicPartition, TopicPartition), (OutputAt, i64)> =
        HashMap::new();
    let mut output: Vec<&ReadRecord> = end.output.iter().collect();
    output.sort_by_key(|r| (TopicPartition::of_read(r), r.offset));
    for record in output {
        let at = OutputAt {
            tp: TopicPartition::of_read(record),
            offset: record.offset,
        };
        let Some(input) = parse_output_value(&record.value) else {
            found.mismatch.push(PipelineMismatch {
                group: end.group.clone(),
                output: at,
                value: record.value.clone(),
                found: None,
                final_pipeline: observer.clone(),
            });
            continue;
        };
        let place = (TopicPartition::of_read(&input), input.offset);
        let read = inputs.get(&place);
        if read.map(|r| &r.value) != Some(&input.value) {
            found.mismatch.push(PipelineMismatch {
                group: end.group.clone(),
                output: at.clone(),
                value: record.value.clone(),
                found: read.map(|r| r.value.clone()),
                final_pipeline: observer.clone(),
            });
        }
        let committed_offset = committed.get(&place.0).copied();
        if committed_offset.is_none_or(|c| input.offset >= c) {
            found.uncommitted.push(PipelineUncommitted {
                group: end.group.clone(),
                input: input.clone(),
                committed: committed_offset,
                output: at.clone(),
                final_pipeline: observer.clone(),
            });
        }
        let stream = (at.tp.clone(), place.0.clone());
        if let Some((earlier, earlier_input)) = last_in_output.get(&stream) {
            if input.offset < *earlier_input {
                found.order.push(PipelineOrder {
                    group: end.group.clone(),
                    input: place.0.clone(),
                    earlier: earlier.clone(),
                    earlier_input_offset: *earlier_input,
                    later: at.clone(),
                    later_input_offset: input.offset,
                    final_pipeline: observer.clone(),
                });
            }
        }
        if last_in_output
            .get(&stream)
            .is_none_or(|(_, previous)| input.offset > *previous)
        {
            last_in_output.insert(stream, (at.clone(), input.offset));
        }
        outputs_of.entry(place).or_default().push(at);
    }
    for ((tp, offset), record) in inputs {
        let Some(&committed_offset) = committed.get(tp) else {
            continue;
        };
        let outputs = outputs_of.get(&(tp.clone(), *offset));
        match outputs.map_or(0, Vec::len) {
            0 if *offset < committed_offset => found.missing.push(PipelineMissing {
                group: end.group.clone(),
                input: (*record).clone(),
                committed: committed_offset,
                final_pipeline: observer.clone(),
            }),
            0 | 1 => {}
            _ => found.duplicate.push(PipelineDuplicate {
                group: end.group.clone(),
                input: (*record).clone(),
                outputs: outputs.cloned().unwrap_or_default(),
                final_pipeline: observer.clone(),
            }),
        }
    }
}

/// Every output of an `ok` transform of `end`'s group must be in the final output at
/// the offset its send was acknowledged at.
fn check_acked_transforms(history: &[Op], end: &PipelineRead, found: &mut Found) {
    let output: HashMap<(TopicPartition, i64), &str> = end
        .output
        .iter()
        .map(|r| ((TopicPartition::of_read(r), r.offset), r.value.as_str()))
        .collect();
    for op in history.iter().filter(|op| op.kind == OpKind::Ok) {
        let Call::Transform(transform) = &op.call else {
            continue;
        };
        if transform.group != end.group {
            continue;
        }
        for send in &transform.outputs {
            let Some(offset) = send.offset else {
                continue;
            };
            let tp = TopicPartition::of_send(send);
            let there = output.get(&(tp.clone(), offset)).copied();
            if there != Some(send.value.as_str()) {
                found.lost.push(lost(end, op, send, tp, offset, there));
            }
        }
    }
}

fn lost(
    end: &PipelineRead,
    op: &Op,
    send: &SendRecord,
    tp: TopicPartition,
    offset: i64,
    there: Option<&str>,
) -> PipelineLost {
    PipelineLost {
        group: end.group.clone(),
        value: send.value.clone(),
        output: OutputAt { tp, offset },
        transform: Observer {
            index: op.index,
            process: op.process.clone(),
            f: "transform",
        },
        found: there.map(str::to_owned),
    }
}
