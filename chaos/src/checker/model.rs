//! What the history says happened, indexed for the checks: every value sent and how its
//! send or transaction ended, every transaction, and every successful read. Built in
//! one pass; an invocation without completion counts as outcome unknown.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::history::{Call, Isolation, Op, OpKind, ReadRecord, SendRecord};

/// A partition of a topic, as Kafka users name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub(crate) fn of_send(send: &SendRecord) -> Self {
        Self {
            topic: send.topic.clone(),
            partition: send.partition,
        }
    }

    pub(crate) fn of_read(record: &ReadRecord) -> Self {
        Self {
            topic: record.topic.clone(),
            partition: record.partition,
        }
    }
}

/// How the operation that wrote a value ended, as its client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A plain or idempotent send completed `ok`.
    Acked,
    /// `ok` transaction with `commit: true`.
    Committed,
    /// `ok` transaction with `commit: false`.
    Aborted,
    /// `fail`: the send or transaction definitely did not happen.
    Failed,
    /// `info`, or no completion.
    Unknown,
}

impl Outcome {
    /// The client was told the value is in the log for good.
    pub fn acknowledged(self) -> bool {
        matches!(self, Outcome::Acked | Outcome::Committed)
    }
}

/// One value some operation sent.
#[derive(Debug, Clone)]
pub(crate) struct Write {
    pub tp: TopicPartition,
    pub process: String,
    /// Index of the invocation.
    pub index: u64,
    /// Position in [`Model::txns`] if a transaction wrote it.
    pub txn: Option<usize>,
    pub outcome: Outcome,
    /// The offset the completion reported.
    pub offset: Option<i64>,
}

#[derive(Debug, Clone)]
pub(crate) struct TxnInfo {
    pub transactional_id: String,
    pub process: String,
    pub index: u64,
    pub outcome: Outcome,
    /// Its values, in send order.
    pub values: Vec<String>,
}

/// A successful poll or final read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadOp<'h> {
    pub process: &'h str,
    /// Index of the `ok` completion.
    pub index: u64,
    pub final_read: bool,
    pub isolation: Isolation,
    pub records: &'h [ReadRecord],
}

impl ReadOp<'_> {
    pub fn f(&self) -> &'static str {
        if self.final_read {
            "final_read"
        } else {
            "poll"
        }
    }
}

/// An `ok` send or transaction, in completion order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AckedOp<'h> {
    pub process: &'h str,
    pub index: u64,
    pub f: &'static str,
    pub sends: &'h [SendRecord],
}

#[derive(Debug, Default)]
pub(crate) struct Model<'h> {
    pub writes: BTreeMap<&'h str, Write>,
    pub txns: Vec<TxnInfo>,
    pub reads: Vec<ReadOp<'h>>,
    pub acked_ops: Vec<AckedOp<'h>>,
}

impl<'h> Model<'h> {
    pub fn build(history: &'h [Op]) -> Self {
        let mut model = Model::default();
        let mut pending: HashMap<&'h str, &'h Op> = HashMap::new();
        for op in history {
            if op.kind == OpKind::Invoke {
                pending.insert(&op.process, op);
                continue;
            }
            let invoke = pending.remove(op.process.as_str());
            model.complete(invoke.map(|i| i.index).unwrap_or(op.index), op);
        }
        let mut unfinished: Vec<&Op> = pending.into_values().collect();
        unfinished.sort_by_key(|op| op.index);
        for invoke in unfinished {
            model.record_writes(invoke.index, invoke, Outcome::Unknown);
        }
        model
    }

    fn complete(&mut self, invoke_index: u64, op: &'h Op) {
        let outcome = match (&op.call, op.kind) {
            (_, OpKind::Fail) => Outcome::Failed,
            (_, OpKind::Info | OpKind::Invoke) => Outcome::Unknown,
            (Call::Txn(txn), OpKind::Ok) if !txn.commit => Outcome::Aborted,
            (Call::Txn(_), OpKind::Ok) => Outcome::Committed,
            (_, OpKind::Ok) => Outcome::Acked,
        };
        match &op.call {
            Call::Send(_) | Call::Txn(_) => {
                if op.kind == OpKind::Ok {
                    self.acked_ops.push(AckedOp {
                        process: &op.process,
                        index: op.index,
                        f: op.call.f(),
                        sends: op.call.sends(),
                    });
                }
                self.record_writes(invoke_index, op, outcome);
            }
            Call::Poll(read) | Call::FinalRead(read) if op.kind == OpKind::Ok => {
                self.reads.push(ReadOp {
                    process: &op.process,
                    index: op.index,
                    final_read: matches!(op.call, Call::FinalRead(_)),
                    isolation: read.isolation,
                    records: &read.records,
                });
            }
            // The pipeline check reads these from the history itself.
            Call::Poll(_) | Call::FinalRead(_) | Call::Transform(_) | Call::FinalPipeline(_) => {}
        }
    }

    fn record_writes(&mut self, invoke_index: u64, op: &'h Op, outcome: Outcome) {
        let txn = match &op.call {
            Call::Txn(txn) => {
                self.txns.push(TxnInfo {
                    transactional_id: txn.transactional_id.clone(),
                    process: op.process.clone(),
                    index: invoke_index,
                    outcome,
                    values: txn.sends.iter().map(|s| s.value.clone()).collect(),
                });
                Some(self.txns.len() - 1)
            }
            _ => None,
        };
        for send in op.call.sends() {
            self.writes.insert(
                &send.value,
                Write {
                    tp: TopicPartition::of_send(send),
                    process: op.process.clone(),
                    index: invoke_index,
                    txn,
                    outcome,
                    offset: send.offset,
                },
            );
        }
    }

    /// Every record of every successful read, with the read it came from.
    pub fn read_records(&self) -> impl Iterator<Item = (&ReadOp<'h>, &'h ReadRecord)> + '_ {
        self.reads
            .iter()
            .flat_map(|read| read.records.iter().map(move |record| (read, record)))
    }

    /// The transactional id of the transaction that wrote `write`, if any.
    pub fn transactional_id(&self, write: &Write) -> Option<String> {
        write.txn.map(|t| self.txns[t].transactional_id.clone())
    }
}
