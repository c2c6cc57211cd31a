//! The pipeline check on hand-made histories: a clean consume-transform-produce run
//! through an aborted transform, and one history per pipeline anomaly kind.

use super::tests::{observer, only, tp, History, Rec};
use super::*;
use crate::history::{
    output_value, GroupOffset, Isolation, OpKind, PipelineRead, ReadRecord, SendRecord, Transform,
};

const GROUP: &str = "g";

fn record(&(topic, partition, offset, value): &Rec) -> ReadRecord {
    ReadRecord {
        topic: topic.into(),
        partition,
        offset,
        value: value.into(),
    }
}

/// The output of input `input` (a record of `in`), as read at `out`/0 `offset`.
fn out(input: Rec, offset: i64) -> ReadRecord {
    ReadRecord {
        topic: "out".into(),
        partition: 0,
        offset,
        value: output_value(&record(&input)),
    }
}

impl History {
    /// A transform of `inputs` (records of `in`/0) whose outputs go to `out`/0, acked
    /// at `output_offsets` on `ok`, committing `in`/0 at `next`.
    fn transform(
        &mut self,
        process: &str,
        kind: OpKind,
        inputs: &[Rec],
        output_offsets: &[i64],
        next: i64,
    ) -> &mut Self {
        let call = |acked: bool| {
            Call::Transform(Transform {
                group: GROUP.into(),
                transactional_id: format!("tid-{process}"),
                inputs: inputs.iter().map(record).collect(),
                outputs: inputs
                    .iter()
                    .zip(output_offsets)
                    .map(|(input, &offset)| SendRecord {
                        topic: "out".into(),
                        partition: 0,
                        value: output_value(&record(input)),
                        offset: acked.then_some(offset),
                    })
                    .collect(),
                offsets: vec![GroupOffset {
                    topic: "in".into(),
                    partition: 0,
                    offset: next,
                }],
            })
        };
        self.event(process, OpKind::Invoke, call(false)).event(
            process,
            kind,
            call(kind == OpKind::Ok),
        )
    }

    /// The group's committed offset of `in`/0 (none: `None`) and its output.
    fn final_pipeline(&mut self, committed: Option<i64>, output: &[ReadRecord]) -> &mut Self {
        let read = |output: Vec<ReadRecord>| {
            Call::FinalPipeline(PipelineRead {
                group: GROUP.into(),
                committed: committed
                    .map(|offset| GroupOffset {
                        topic: "in".into(),
                        partition: 0,
                        offset,
                    })
                    .into_iter()
                    .collect(),
                output,
            })
        };
        self.event("final-pipeline", OpKind::Invoke, read(Vec::new()))
            .event("final-pipeline", OpKind::Ok, read(output.to_vec()))
    }

    /// `in`/0 holds a0 b1 c2, read_committed.
    fn inputs(&mut self) -> &mut Self {
        self.send_to("p", OpKind::Ok, "in", 0, "a", 0)
            .send_to("p", OpKind::Ok, "in", 0, "b", 1)
            .send_to("p", OpKind::Ok, "in", 0, "c", 2)
            .final_read(Isolation::ReadCommitted, &[A, B, C])
    }
}

const A: Rec = ("in", 0, 0, "a");
const B: Rec = ("in", 0, 1, "b");
const C: Rec = ("in", 0, 2, "c");

#[test]
fn given_every_input_transformed_once_through_an_abort_when_checked_then_it_is_valid() {
    // out/0: A0 B1 [C2 aborted] [3 abort marker] C4
    let verdict = History::default()
        .inputs()
        .transform("m1", OpKind::Ok, &[A, B], &[0, 1], 2)
        .transform("m1", OpKind::Fail, &[C], &[2], 3)
        .transform("m2", OpKind::Ok, &[C], &[4], 3)
        .final_pipeline(Some(3), &[out(A, 0), out(B, 1), out(C, 4)])
        .check();
    assert!(verdict.valid, "{verdict:#?}");
}

#[test]
fn given_an_input_committed_past_without_output_when_checked_then_it_is_missing() {
    let verdict = History::default()
        .inputs()
        .transform("m1", OpKind::Ok, &[A, B], &[0, 1], 2)
        .final_pipeline(Some(3), &[out(A, 0), out(B, 1)])
        .check();
    only(&verdict, "pipeline_missing");
    let missing = &verdict.anomalies.pipeline_missing[0];
    assert_eq!(
        (
            missing.input.value.as_str(),
            missing.input.offset,
            missing.committed
        ),
        ("c", 2, 3)
    );
    assert_eq!(
        missing.final_pipeline,
        observer("final-pipeline", 11, "final_pipeline")
    );
}

#[test]
fn given_an_input_transformed_twice_when_checked_then_it_is_a_duplicate() {
    let verdict = History::default()
        .inputs()
        .transform("m1", OpKind::Ok, &[A], &[0], 1)
        .transform("m2", OpKind::Ok, &[A], &[1], 1)
        .transform("m2", OpKind::Ok, &[B], &[2], 2)
        .final_pipeline(Some(2), &[out(A, 0), out(A, 1), out(B, 2)])
        .check();
    only(&verdict, "pipeline_duplicate");
    let duplicate = &verdict.anomalies.pipeline_duplicate[0];
    assert_eq!(duplicate.input.value, "a");
    let offsets: Vec<i64> = duplicate.outputs.iter().map(|o| o.offset).collect();
    assert_eq!(offsets, [0, 1]);
}

#[test]
fn given_an_output_without_its_offsets_when_checked_then_it_is_uncommitted() {
    let verdict = History::default()
        .inputs()
        .transform("m1", OpKind::Ok, &[A, B], &[0, 1], 2)
        .transform("m1", OpKind::Info, &[C], &[2], 3)
        .final_pipeline(Some(2), &[out(A, 0), out(B, 1), out(C, 2)])
        .check();
    only(&verdict, "pipeline_uncommitted");
    let uncommitted = &verdict.anomalies.pipeline_uncommitted[0];
    assert_eq!(
        (
            uncommitted.input.offset,
            uncommitted.committed,
            uncommitted.output.offset
        ),
        (2, Some(2), 2)
    );
    assert_eq!(uncommitted.output.tp, tp("out", 0));
}

#[test]
fn given_outputs_of_no_committed_input_when_checked_then_they_are_mismatches() {
    // An output of an aborted input (another value at in/0 offset 1), and a record
    // that is no output at all.
    let aborted = ("in", 0, 1, "x");
    let garbage = ReadRecord {
        topic: "out".into(),
        partition: 0,
        offset: 2,
        value: "hello".into(),
    };
    let verdict = History::default()
        .inputs()
        .transform("m1", OpKind::Info, &[A, aborted], &[0, 1], 2)
        .final_pipeline(Some(2), &[out(A, 0), out(aborted, 1), garbage])
        .check();
    only(&verdict, "pipeline_mismatch");
    let mismatches = &verdict.anomalies.pipeline_mismatch;
    assert_eq!(mismatches.len(), 2, "{mismatches:#?}");
    assert_eq!(mismatches[0].found.as_deref(), Some("b"));
    assert_eq!(
        (mismatches[1].value.as_str(), mismatches[1].found.as_deref()),
        ("hello", None)
    );
}

#[test]
fn given_outputs_out_of_input_order_when_checked_then_it_is_an_order_anomaly() {
    let verdict = History::default()
        .inputs()
        .transform("m1", OpKind::Info, &[B, A], &[0, 1], 2)
        .final_pipeline(Some(2), &[out(B, 0), out(A, 1)])
        .check();
    only(&verdict, "pipeline_order");
    let order = &verdict.anomalies.pipeline_order[0];
    assert_eq!(
        (order.earlier_input_offset, order.later_input_offset),
        (1, 0)
    );
    assert_eq!((order.earlier.offset, order.later.offset), (0, 1));
}

#[test]
fn given_a_committed_transform_missing_from_the_output_when_checked_then_it_is_lost() {
    // The transform was acknowledged, yet neither its output nor its offsets remain.
    let verdict = History::default()
        .inputs()
        .transform("m1", OpKind::Ok, &[A], &[0], 1)
        .final_pipeline(None, &[])
        .check();
    only(&verdict, "pipeline_lost");
    let lost = &verdict.anomalies.pipeline_lost[0];
    assert_eq!((lost.output.offset, lost.found.as_deref()), (0, None));
    assert_eq!(lost.transform, observer("m1", 9, "transform"));
}
