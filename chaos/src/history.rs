//! The history of a chaos run: JSON lines, one operation event per line, in the order
//! the events happened. Every operation is an `invoke` followed, on the same `process`,
//! by one completion (`ok`, `fail` or `info`); a process has at most one operation in
//! flight, and every value a run sends is unique across the whole run. Invocations left
//! without a completion (the run ended first) count as `info`: outcome unknown.
//!
//! ```json
//! {"index":0,"time_ns":1200,"process":"producer-3","type":"invoke","f":"send","value":{"topic":"t","partition":0,"value":"v17","offset":null}}
//! {"index":1,"time_ns":9800,"process":"producer-3","type":"ok","f":"send","value":{"topic":"t","partition":0,"value":"v17","offset":42}}
//! ```
//!
//! - `index`: position in the history, strictly increasing; `time_ns`: monotonic
//!   nanoseconds since the run began; `process`: the client's name (a consumer that
//!   restarts takes a new name).
//! - `type`: `invoke` | `ok` | `fail` (definitely did not happen) | `info` (unknown).
//! - `f` = `send`, value [`SendRecord`]: one record of an idempotent or plain producer;
//!   `offset` is `null` on the invoke and set on `ok`.
//! - `f` = `txn`, value [`Txn`]: a transactional producer's transaction; `commit: false`
//!   means the client aborted on purpose. `ok` + commit = committed, `ok` + !commit =
//!   aborted, `fail` = definitely not committed, `info` = unknown.
//! - `f` = `poll`, value [`Read`]: a consumer's poll; `records` is empty on the invoke.
//! - `f` = `final_read`, value [`Read`]: after the faults healed, once per isolation
//!   level, every record of every partition from the log start to the end (the last
//!   stable offset for `read_committed`, the high watermark for `read_uncommitted`).
//! - `f` = `transform`, value [`Transform`]: one consume-transform-produce transaction
//!   of a consumer group member: the input records it consumed (read_committed), one
//!   output per input (value [`output_value`], so outputs are not unique across the run:
//!   an aborted transaction and its retry send the same ones), and the offsets it sent
//!   to the transaction. `ok` = committed, `fail` = definitely not, `info` = unknown.
//! - `f` = `final_pipeline`, value [`PipelineRead`]: after the faults healed and the
//!   members stopped, the group's committed offsets (stable: no transaction holds any)
//!   and every record of the output topic, read_committed.
//!
//! [`read_history`] parses and validates a file (errors name the line);
//! [`HistoryWriter`] writes one, assigning `index` and `time_ns`.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead, Write};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::json_lines::{parse_lines, Contents, JsonLinesError};

/// One line of the history: an invocation or a completion of an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub index: u64,
    pub time_ns: u64,
    pub process: String,
    #[serde(rename = "type")]
    pub kind: OpKind,
    /// `f` and `value`.
    #[serde(flatten)]
    pub call: Call,
}

/// Whether an event starts an operation or says how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    Invoke,
    /// It happened.
    Ok,
    /// It definitely did not happen.
    Fail,
    /// It may or may not have happened.
    Info,
}

/// What the process called (`f`) and with what (`value`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", content = "value", rename_all = "snake_case")]
pub enum Call {
    Send(SendRecord),
    Txn(Txn),
    Poll(Read),
    FinalRead(Read),
    Transform(Transform),
    FinalPipeline(PipelineRead),
}

/// One record a producer sends; `offset` is known once the send is acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendRecord {
    pub topic: String,
    pub partition: i32,
    pub value: String,
    #[serde(default)]
    pub offset: Option<i64>,
}

/// A transaction: its sends, in the order the producer made them, then commit or abort.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    pub transactional_id: String,
    pub sends: Vec<SendRecord>,
    /// `false`: the client aborts on purpose.
    pub commit: bool,
}

/// A poll or a final read: the records returned, in the order returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    pub isolation: Isolation,
    #[serde(default)]
    pub records: Vec<ReadRecord>,
}

/// One consume-transform-produce transaction: what it consumed, what it sent, and the
/// offsets it committed with them (the next offset to read, per input partition).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transform {
    pub group: String,
    pub transactional_id: String,
    pub inputs: Vec<ReadRecord>,
    /// One per input, in input order; `offset` set on `ok`.
    pub outputs: Vec<SendRecord>,
    pub offsets: Vec<GroupOffset>,
}

/// A consumer group's offset of one partition: the next offset the group reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// The end of a pipeline, read once everything healed: the group's committed offsets
/// (a partition the group never committed is absent) and its output, read_committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipelineRead {
    pub group: String,
    #[serde(default)]
    pub committed: Vec<GroupOffset>,
    #[serde(default)]
    pub output: Vec<ReadRecord>,
}

/// The output a transform writes for `input`: `{topic}/{partition}/{offset}:{value}`,
/// so a checker knows from an output record alone which input it stands for.
pub fn output_value(input: &ReadRecord) -> String {
    format!(
        "{}/{}/{}:{}",
        input.topic, input.partition, input.offset, input.value
    )
}

/// The input an [`output_value`] names: topic, partition, offset and value; `None` for
/// anything else.
pub fn parse_output_value(output: &str) -> Option<ReadRecord> {
    let (place, value) = output.split_once(':')?;
    let mut parts = place.rsplitn(3, '/');
    let offset = parts.next()?.parse().ok()?;
    let partition = parts.next()?.parse().ok()?;
    let topic = parts.next()?;
    Some(ReadRecord {
        topic: topic.to_string(),
        partition,
        offset,
        value: value.to_string(),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    ReadCommitted,
    ReadUncommitted,
}

/// A record as a consumer read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub value: String,
}

impl Call {
    /// The history's `f`.
    pub fn f(&self) -> &'static str {
        match self {
            Call::Send(_) => "send",
            Call::Txn(_) => "txn",
            Call::Poll(_) => "poll",
            Call::FinalRead(_) => "final_read",
            Call::Transform(_) => "transform",
            Call::FinalPipeline(_) => "final_pipeline",
        }
    }

    /// The records this call sends, if it is a send or a transaction. A transform's
    /// outputs are not among them: they are not unique values (see the module doc).
    pub fn sends(&self) -> &[SendRecord] {
        match self {
            Call::Send(record) => std::slice::from_ref(record),
            Call::Txn(txn) => &txn.sends,
            Call::Poll(_) | Call::FinalRead(_) | Call::Transform(_) | Call::FinalPipeline(_) => &[],
        }
    }
}

impl OpKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Invoke => "invoke",
            OpKind::Ok => "ok",
            OpKind::Fail => "fail",
            OpKind::Info => "info",
        }
    }
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read_committed",
            Isolation::ReadUncommitted => "read_uncommitted",
        }
    }
}

/// A history that cannot be checked.
pub type HistoryError = JsonLinesError;

/// What the lines of the history are, for its errors.
const CONTENTS: Contents = Contents {
    file: "history",
    each_line: "a history event",
};

/// Parses a JSON-lines history and [`validate`]s it. Blank lines are skipped; errors
/// name the 1-based line number.
pub fn read_history(input: impl BufRead) -> Result<Vec<Op>, HistoryError> {
    let (lines, ops): (Vec<usize>, Vec<Op>) = parse_lines(input, CONTENTS)?.into_iter().unzip();
    check_structure(&ops, |pos| lines[pos])?;
    Ok(ops)
}

/// Checks what the checker relies on: indexes strictly increase; each process
/// alternates invoke and completion of the same `f` and the same records; a
/// completion's sends keep the invoke's topic, partition and value; an `ok` send
/// carries its offset; no value is sent by two invocations. Errors name the op's
/// position in `ops` plus one (its line when the history has no blank lines).
pub fn validate(ops: &[Op]) -> Result<(), HistoryError> {
    check_structure(ops, |pos| pos + 1)
}

fn check_structure(ops: &[Op], line_of: impl Fn(usize) -> usize) -> Result<(), HistoryError> {
    let mut pending: HashMap<&str, &Op> = HashMap::new();
    let mut sent_by: HashMap<&str, u64> = HashMap::new();
    let mut previous_index: Option<u64> = None;
    for (pos, op) in ops.iter().enumerate() {
        let invalid = |reason: String| JsonLinesError::Invalid {
            line: line_of(pos),
            reason,
        };
        if let Some(previous) = previous_index {
            if op.index <= previous {
                return Err(invalid(format!(
                    "index {} does not follow index {previous}",
                    op.index
                )));
            }
        }
        previous_index = Some(op.index);
        if op.kind == OpKind::Invoke {
            if let Some(open) = pending.insert(&op.process, op) {
                return Err(invalid(format!(
                    "process {:?} invokes while its op at index {} is in flight",
                    op.process, open.index
                )));
            }
            for send in op.call.sends() {
                if let Some(first) = sent_by.insert(&send.value, op.index) {
                    return Err(invalid(format!(
                        "value {:?} was already sent by the op at index {first}; values must be unique",
                        send.value
                    )));
                }
            }
            continue;
        }
        let Some(invoke) = pending.remove(op.process.as_str()) else {
            return Err(invalid(format!(
                "{} completion of process {:?} without an invoke",
                op.kind.as_str(),
                op.process
            )));
        };
        if invoke.call.f() != op.call.f() {
            return Err(invalid(format!(
                "process {:?} invoked {} (index {}) but completes {}",
                op.process,
                invoke.call.f(),
                invoke.index,
                op.call.f()
            )));
        }
        let same_sends = invoke.call.sends().len() == op.call.sends().len()
            && invoke
                .call
                .sends()
                .iter()
                .zip(op.call.sends())
                .all(|(a, b)| {
                    a.topic == b.topic && a.partition == b.partition && a.value == b.value
                });
        if !same_sends {
            return Err(invalid(format!(
                "the completion's sends differ from those invoked at index {}",
                invoke.index
            )));
        }
        if let (OpKind::Ok, Call::Send(send)) = (op.kind, &op.call) {
            if send.offset.is_none() {
                return Err(invalid(format!(
                    "ok send of {:?} has no offset",
                    send.value
                )));
            }
        }
    }
    Ok(())
}

/// Writes a history, one line per event, assigning `index` (0, 1, …) and `time_ns`
/// (since the writer was created). Events must be written in the order they happen:
/// share one writer behind a mutex and call it at the moment of invoke and completion.
pub struct HistoryWriter<W: Write> {
    out: W,
    next_index: u64,
    start: Instant,
    /// The call each process has in flight, so a completion is checked against it.
    in_flight: BTreeMap<String, &'static str>,
}

impl<W: Write> HistoryWriter<W> {
    pub fn new(out: W) -> Self {
        Self::starting_at(out, Instant::now())
    }

    /// A writer whose `time_ns` counts from `start` (the beginning of the run).
    pub fn starting_at(out: W, start: Instant) -> Self {
        Self {
            out,
            next_index: 0,
            start,
            in_flight: BTreeMap::new(),
        }
    }

    /// Records that `process` starts `call`; returns the event's index.
    pub fn invoke(&mut self, process: &str, call: Call) -> io::Result<u64> {
        if let Some(f) = self.in_flight.get(process) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("process {process:?} already has a {f} in flight"),
            ));
        }
        self.in_flight.insert(process.to_owned(), call.f());
        self.write(process, OpKind::Invoke, call)
    }

    /// Records how the call `process` has in flight ended (`kind` is not `Invoke`).
    pub fn complete(&mut self, process: &str, kind: OpKind, call: Call) -> io::Result<u64> {
        let refuse = |reason: String| Err(io::Error::new(io::ErrorKind::InvalidInput, reason));
        if kind == OpKind::Invoke {
            return refuse("complete takes ok, fail or info, not invoke".to_owned());
        }
        match self.in_flight.get(process) {
            Some(&f) if f == call.f() => {}
            Some(f) => return refuse(format!("process {process:?} has a {f} in flight")),
            None => return refuse(format!("process {process:?} has nothing in flight")),
        }
        self.in_flight.remove(process);
        self.write(process, kind, call)
    }

    fn write(&mut self, process: &str, kind: OpKind, call: Call) -> io::Result<u64> {
        let op = Op {
            index: self.next_index,
            time_ns: u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX),
            process: process.to_owned(),
            kind,
            call,
        };
        let mut line = serde_json::to_vec(&op)?;
        line.push(b'\n');
        // One write per line, so a crash never leaves half an event before a whole one.
        self.out.write_all(&line)?;
        self.next_index += 1;
        Ok(op.index)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(value: &str, offset: Option<i64>) -> Call {
        Call::Send(SendRecord {
            topic: "t".into(),
            partition: 0,
            value: value.into(),
            offset,
        })
    }

    #[test]
    fn given_an_input_when_its_output_value_is_parsed_then_the_input_comes_back() {
        let input = ReadRecord {
            topic: "chaos-a".into(),
            partition: 2,
            offset: 417,
            value: "txn-1-9-0:with/colon".into(),
        };
        assert_eq!(parse_output_value(&output_value(&input)), Some(input));
        for not_an_output in ["", "v17", "a/1:x", "a/b/1:x", "a/1/x:y", "/1/2"] {
            assert_eq!(parse_output_value(not_an_output), None, "{not_an_output:?}");
        }
    }

    #[test]
    fn given_every_kind_of_event_when_written_and_read_back_then_it_is_unchanged() {
        let calls = vec![
            ("p", OpKind::Invoke, send("a", None)),
            ("p", OpKind::Ok, send("a", Some(3))),
            (
                "tx",
                OpKind::Invoke,
                Call::Txn(Txn {
                    transactional_id: "tid-1".into(),
                    sends: vec![SendRecord {
                        topic: "u".into(),
                        partition: 2,
                        value: "b".into(),
                        offset: None,
                    }],
                    commit: false,
                }),
            ),
            (
                "tx",
                OpKind::Info,
                Call::Txn(Txn {
                    transactional_id: "tid-1".into(),
                    sends: vec![SendRecord {
                        topic: "u".into(),
                        partition: 2,
                        value: "b".into(),
                        offset: Some(7),
                    }],
                    commit: false,
                }),
            ),
            (
                "c",
                OpKind::Invoke,
                Call::Poll(Read {
                    isolation: Isolation::ReadCommitted,
                    records: vec![],
                }),
            ),
            (
                "c",
                OpKind::Ok,
                Call::Poll(Read {
                    isolation: Isolation::ReadCommitted,
                    records: vec![ReadRecord {
                        topic: "t".into(),
                        partition: 0,
                        offset: 3,
                        value: "a".into(),
                    }],
                }),
            ),
            (
                "f",
                OpKind::Invoke,
                Call::FinalRead(Read {
                    isolation: Isolation::ReadUncommitted,
                    records: vec![],
                }),
            ),
            (
                "f",
                OpKind::Fail,
                Call::FinalRead(Read {
                    isolation: Isolation::ReadUncommitted,
                    records: vec![],
                }),
            ),
        ];
        let mut writer = HistoryWriter::new(Vec::new());
        for (process, kind, call) in calls.clone() {
            match kind {
                OpKind::Invoke => writer.invoke(process, call),
                _ => writer.complete(process, kind, call),
            }
            .expect("write");
        }
        let text = writer.into_inner();
        let ops = read_history(text.as_slice()).expect("read back");
        assert_eq!(ops.len(), calls.len());
        for (i, (op, (process, kind, call))) in ops.iter().zip(calls).enumerate() {
            assert_eq!(op.index, i as u64);
            assert_eq!(
                (op.process.as_str(), op.kind, &op.call),
                (process, kind, &call)
            );
        }
        assert!(ops.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    }

    #[test]
    fn given_the_documented_line_when_parsed_then_fields_land_where_documented() {
        let line = r#"{"index":17,"time_ns":123456789,"process":"producer-3","type":"ok","f":"send","value":{"topic":"t","partition":1,"value":"v","offset":9}}"#;
        let op: Op = serde_json::from_str(line).expect("parse");
        assert_eq!(op.index, 17);
        assert_eq!(op.time_ns, 123_456_789);
        assert_eq!(op.kind, OpKind::Ok);
        assert_eq!(
            op.call,
            Call::Send(SendRecord {
                topic: "t".into(),
                partition: 1,
                value: "v".into(),
                offset: Some(9)
            })
        );
        let again: serde_json::Value = serde_json::to_value(&op).expect("serialize");
        let original: serde_json::Value = serde_json::from_str(line).expect("json");
        assert_eq!(again, original);
    }

    #[test]
    fn given_a_malformed_line_when_read_then_the_error_names_its_line() {
        let text = concat!(
            r#"{"index":0,"time_ns":1,"process":"p","type":"invoke","f":"send","value":{"topic":"t","partition":0,"value":"a","offset":null}}"#,
            "\n\n",
            r#"{"index":1,"time_ns":2,"process":"p","type":"ok","f":"sned","value":{}}"#,
            "\n"
        );
        let err = read_history(text.as_bytes()).expect_err("malformed");
        assert_eq!(err.line(), Some(3));
        let message = err.to_string();
        assert!(message.starts_with("line 3, column "), "{message}");
        assert!(message.contains("unknown variant `sned`"), "{message}");
        assert!(!message.contains("line 1"), "{message}");
    }

    #[test]
    fn given_a_completion_without_invoke_when_read_then_it_is_refused_with_its_line() {
        let text = r#"{"index":0,"time_ns":1,"process":"p","type":"ok","f":"send","value":{"topic":"t","partition":0,"value":"a","offset":1}}"#;
        let err = read_history(text.as_bytes()).expect_err("no invoke");
        assert_eq!(err.line(), Some(1));
        assert!(err.to_string().contains("without an invoke"), "{err}");
    }

    #[test]
    fn given_a_value_sent_twice_when_validated_then_it_is_refused() {
        let op = |index, process: &str| Op {
            index,
            time_ns: index,
            process: process.into(),
            kind: OpKind::Invoke,
            call: send("same", None),
        };
        let err = validate(&[op(0, "p1"), op(1, "p2")]).expect_err("duplicate value");
        assert_eq!(err.line(), Some(2));
        assert!(err.to_string().contains("unique"), "{err}");
    }

    #[test]
    fn given_an_ok_send_without_offset_when_validated_then_it_is_refused() {
        let ops = [
            Op {
                index: 0,
                time_ns: 0,
                process: "p".into(),
                kind: OpKind::Invoke,
                call: send("a", None),
            },
            Op {
                index: 1,
                time_ns: 1,
                process: "p".into(),
                kind: OpKind::Ok,
                call: send("a", None),
            },
        ];
        let err = validate(&ops).expect_err("no offset");
        assert!(err.to_string().contains("no offset"), "{err}");
    }

    #[test]
    fn given_a_completion_of_another_call_when_written_then_the_writer_refuses() {
        let mut writer = HistoryWriter::new(Vec::new());
        writer.invoke("p", send("a", None)).expect("invoke");
        let poll = Call::Poll(Read {
            isolation: Isolation::ReadCommitted,
            records: vec![],
        });
        assert!(writer.complete("p", OpKind::Ok, poll).is_err());
        assert!(writer.invoke("p", send("b", None)).is_err());
        assert!(writer
            .complete("q", OpKind::Ok, send("a", Some(1)))
            .is_err());
        writer
            .complete("p", OpKind::Ok, send("a", Some(1)))
            .expect("complete");
    }
}
