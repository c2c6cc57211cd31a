//! The checker on small hand-made histories: one per anomaly kind, a clean one that
//! uses every op kind, and transactions of unknown outcome seen all or nothing.

use super::*;
use crate::history::{validate, Isolation, OpKind, Read, ReadRecord, SendRecord, Txn};

use Isolation::{ReadCommitted as RC, ReadUncommitted as RU};

/// Builds a history event by event; each helper writes an invoke and its completion.
#[derive(Default)]
pub(super) struct History {
    pub ops: Vec<Op>,
}

pub(super) type Rec<'a> = (&'a str, i32, i64, &'a str);

fn send_record(topic: &str, partition: i32, value: &str, offset: Option<i64>) -> SendRecord {
    SendRecord {
        topic: topic.into(),
        partition,
        value: value.into(),
        offset,
    }
}

impl History {
    pub(super) fn event(&mut self, process: &str, kind: OpKind, call: Call) -> &mut Self {
        let index = self.ops.len() as u64;
        self.ops.push(Op {
            index,
            time_ns: index * 1_000,
            process: process.into(),
            kind,
            call,
        });
        self
    }

    /// A send to t/0 that completes `kind` (offset only on ok).
    pub(super) fn send(
        &mut self,
        process: &str,
        kind: OpKind,
        value: &str,
        offset: i64,
    ) -> &mut Self {
        self.send_to(process, kind, "t", 0, value, offset)
    }

    pub(super) fn send_to(
        &mut self,
        process: &str,
        kind: OpKind,
        topic: &str,
        partition: i32,
        value: &str,
        offset: i64,
    ) -> &mut Self {
        let invoked = send_record(topic, partition, value, None);
        let done = send_record(
            topic,
            partition,
            value,
            (kind == OpKind::Ok).then_some(offset),
        );
        self.event(process, OpKind::Invoke, Call::Send(invoked))
            .event(process, kind, Call::Send(done))
    }

    /// A transaction of `sends` = (topic, partition, offset, value).
    fn txn(&mut self, process: &str, kind: OpKind, commit: bool, sends: &[Rec]) -> &mut Self {
        let txn = |with_offsets: bool| {
            Call::Txn(Txn {
                transactional_id: format!("tid-{process}"),
                sends: sends
                    .iter()
                    .map(|&(topic, partition, offset, value)| {
                        send_record(topic, partition, value, with_offsets.then_some(offset))
                    })
                    .collect(),
                commit,
            })
        };
        self.event(process, OpKind::Invoke, txn(false)).event(
            process,
            kind,
            txn(kind == OpKind::Ok),
        )
    }

    fn read(
        &mut self,
        process: &str,
        isolation: Isolation,
        records: &[Rec],
        fin: bool,
    ) -> &mut Self {
        let read = |records: Vec<ReadRecord>| Read { isolation, records };
        let call = |read| {
            if fin {
                Call::FinalRead(read)
            } else {
                Call::Poll(read)
            }
        };
        let records = records
            .iter()
            .map(|&(topic, partition, offset, value)| ReadRecord {
                topic: topic.into(),
                partition,
                offset,
                value: value.into(),
            })
            .collect();
        self.event(process, OpKind::Invoke, call(read(Vec::new())))
            .event(process, OpKind::Ok, call(read(records)))
    }

    fn poll(&mut self, process: &str, isolation: Isolation, records: &[Rec]) -> &mut Self {
        self.read(process, isolation, records, false)
    }

    pub(super) fn final_read(&mut self, isolation: Isolation, records: &[Rec]) -> &mut Self {
        let process = format!("final-{}", isolation.as_str());
        self.read(&process, isolation, records, true)
    }

    pub(super) fn check(&self) -> Verdict {
        validate(&self.ops).expect("hand-made history is well formed");
        check(&self.ops)
    }
}

pub(super) fn only(verdict: &Verdict, kind: &str) {
    let counts = verdict.anomalies.counts();
    let others: Vec<_> = counts
        .iter()
        .filter(|(k, n)| **k != kind && **n > 0)
        .collect();
    assert!(
        others.is_empty(),
        "unexpected anomalies {others:?}: {verdict:#?}"
    );
    assert!(counts[kind] > 0, "no {kind}: {verdict:#?}");
    assert!(!verdict.valid);
}

pub(super) fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition {
        topic: topic.into(),
        partition,
    }
}

pub(super) fn observer(process: &str, index: u64, f: &'static str) -> Observer {
    Observer {
        process: process.into(),
        index,
        f,
    }
}

#[test]
fn given_a_clean_history_with_every_op_kind_when_checked_then_it_is_valid() {
    // t/0: a0 b1 c2 (txn-1) [3 commit marker] e4 (aborted txn-2) [5 abort marker] f6
    // t/1: d0 (txn-1) [1 commit marker]
    let verdict = History::default()
        .send("p1", OpKind::Ok, "a", 0)
        .send("p1", OpKind::Ok, "b", 1)
        .send("p1", OpKind::Fail, "z", 0)
        .send("p2", OpKind::Info, "y", 0)
        .txn(
            "tx1",
            OpKind::Ok,
            true,
            &[("t", 0, 2, "c"), ("t", 1, 0, "d")],
        )
        .txn("tx2", OpKind::Ok, false, &[("t", 0, 4, "e")])
        .txn("tx3", OpKind::Fail, true, &[("t", 1, 0, "x")])
        .send("p1", OpKind::Ok, "f", 6)
        .poll("c-rc", RC, &[("t", 0, 0, "a"), ("t", 0, 1, "b")])
        .poll(
            "c-rc",
            RC,
            &[("t", 0, 2, "c"), ("t", 1, 0, "d"), ("t", 0, 6, "f")],
        )
        .poll(
            "c-ru",
            RU,
            &[("t", 0, 1, "b"), ("t", 0, 2, "c"), ("t", 0, 4, "e")],
        )
        .poll("c-ru", RU, &[("t", 0, 6, "f")])
        .final_read(
            RC,
            &[
                ("t", 0, 0, "a"),
                ("t", 0, 1, "b"),
                ("t", 0, 2, "c"),
                ("t", 0, 6, "f"),
                ("t", 1, 0, "d"),
            ],
        )
        .final_read(
            RU,
            &[
                ("t", 0, 0, "a"),
                ("t", 0, 1, "b"),
                ("t", 0, 2, "c"),
                ("t", 0, 4, "e"),
                ("t", 0, 6, "f"),
                ("t", 1, 0, "d"),
            ],
        )
        .check();
    assert!(verdict.valid, "{verdict:#?}");
    assert!(verdict.anomalies.is_empty());
    let stats = &verdict.stats;
    assert_eq!(stats.ops["send"]["invoke"], 5);
    assert_eq!(stats.ops["send"]["ok"], 3);
    assert_eq!(stats.ops["send"]["fail"], 1);
    assert_eq!(stats.ops["send"]["info"], 1);
    assert_eq!(stats.ops["txn"]["invoke"], 3);
    assert_eq!(stats.ops["poll"]["ok"], 4);
    assert_eq!(stats.ops["final_read"]["ok"], 2);
    assert_eq!(stats.values_sent, 9);
    assert_eq!(stats.values_acked, 5); // a b f, c d
    assert_eq!(stats.values_not_written, 3); // z, e, x
    assert_eq!(stats.values_unknown, 1); // y
    assert_eq!(stats.values_read, 6);
}

#[test]
fn given_an_acked_value_missing_below_a_read_offset_when_checked_then_it_is_lost() {
    let verdict = History::default()
        .send("p1", OpKind::Ok, "a", 0)
        .send("p1", OpKind::Ok, "b", 1)
        .final_read(RC, &[("t", 0, 1, "b")])
        .check();
    only(&verdict, "lost");
    let lost = &verdict.anomalies.lost;
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].value, "a");
    assert_eq!(lost[0].tp, tp("t", 0));
    assert_eq!(lost[0].offset, 0);
    assert_eq!(lost[0].outcome, Outcome::Acked);
    assert_eq!(lost[0].writer, observer("p1", 0, "send"));
    assert_eq!(lost[0].read_up_to, 1);
    assert_eq!(
        lost[0].read_by,
        observer("final-read_committed", 5, "final_read")
    );
}

#[test]
fn given_an_acked_value_beyond_every_read_when_checked_then_it_is_unseen_and_unknown_values_are_not(
) {
    let verdict = History::default()
        .send("p1", OpKind::Ok, "a", 0)
        .send("p1", OpKind::Ok, "b", 1)
        .send("p2", OpKind::Info, "maybe", 0)
        .event(
            "p3",
            OpKind::Invoke,
            Call::Send(send_record("t", 0, "never-completed", None)),
        )
        .final_read(RC, &[("t", 0, 0, "a")])
        .check();
    only(&verdict, "unseen");
    let unseen = &verdict.anomalies.unseen;
    assert_eq!(unseen.len(), 1);
    assert_eq!(unseen[0].value, "b");
    assert_eq!(unseen[0].offset, Some(1));
    assert_eq!(unseen[0].read_up_to, Some(0));
    assert_eq!(verdict.stats.values_unknown, 2);
}

#[test]
fn given_a_value_read_at_two_offsets_when_checked_then_it_is_a_duplicate() {
    let verdict = History::default()
        .send("p1", OpKind::Ok, "a", 0)
        .send("p1", OpKind::Ok, "b", 1)
        .poll(
            "c1",
            RU,
            &[("t", 0, 0, "a"), ("t", 0, 1, "b"), ("t", 0, 2, "a")],
        )
        .final_read(RU, &[("t", 0, 0, "a"), ("t", 0, 1, "b"), ("t", 0, 2, "a")])
        .check();
    only(&verdict, "duplicate");
    let dup = &verdict.anomalies.duplicate;
    assert_eq!(dup.len(), 1);
    assert_eq!(dup[0].value, "a");
    let offsets: Vec<i64> = dup[0].found_at.iter().map(|p| p.offset).collect();
    assert_eq!(offsets, [0, 2]);
    assert_eq!(
        dup[0].found_at[1].seen_by,
        [
            observer("c1", 5, "poll"),
            observer("final-read_uncommitted", 7, "final_read")
        ]
    );
}

#[test]
fn given_a_value_read_at_another_offset_than_acknowledged_when_checked_then_it_is_a_duplicate() {
    let verdict = History::default()
        .send("p1", OpKind::Ok, "a", 0)
        .final_read(RU, &[("t", 0, 1, "a")])
        .check();
    only(&verdict, "duplicate");
    let found_at = &verdict.anomalies.duplicate[0].found_at;
    assert_eq!(
        (found_at[0].offset, &found_at[0].seen_by),
        (0, &vec![observer("p1", 1, "send")])
    );
    assert_eq!(found_at[1].offset, 1);
}

#[test]
fn given_two_values_read_at_one_offset_when_checked_then_offsets_are_inconsistent() {
    let verdict = History::default()
        .send("p1", OpKind::Ok, "a", 0)
        .send("p2", OpKind::Info, "b", 0)
        .poll("c1", RU, &[("t", 0, 0, "b")])
        .final_read(RU, &[("t", 0, 0, "a")])
        .check();
    only(&verdict, "inconsistent_offsets");
    let bad = &verdict.anomalies.inconsistent_offsets;
    assert_eq!(bad.len(), 1);
    assert_eq!((bad[0].tp.clone(), bad[0].offset), (tp("t", 0), 0));
    let values: Vec<&str> = bad[0].values.iter().map(|v| v.value.as_str()).collect();
    assert_eq!(values, ["a", "b"]);
    // "a" was seen by its acknowledgement and by the final read.
    assert_eq!(
        bad[0].values[0].seen_by,
        [
            observer("p1", 1, "send"),
            observer("final-read_uncommitted", 7, "final_read")
        ]
    );
}

#[test]
fn given_a_producer_acked_a_lower_offset_after_a_higher_one_when_checked_then_send_is_nonmonotonic()
{
    let verdict = History::default()
        .send("p1", OpKind::Ok, "a", 5)
        .send("p1", OpKind::Ok, "b", 3)
        .final_read(RU, &[("t", 0, 3, "b"), ("t", 0, 5, "a")])
        .check();
    only(&verdict, "nonmonotonic_send");
    let bad = &verdict.anomalies.nonmonotonic_send;
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].process, "p1");
    assert_eq!(
        (bad[0].previous.offset, bad[0].previous.value.as_str()),
        (5, "a")
    );
    assert_eq!(
        (
            bad[0].next.offset,
            bad[0].next.value.as_str(),
            bad[0].next.index
        ),
        (3, "b", 3)
    );
}

#[test]
fn given_a_consumer_returned_an_offset_again_when_checked_then_poll_is_nonmonotonic() {
    let verdict = History::default()
        .send("p1", OpKind::Ok, "a", 0)
        .send("p1", OpKind::Ok, "b", 1)
        .poll("c1", RC, &[("t", 0, 0, "a"), ("t", 0, 1, "b")])
        .poll("c1", RC, &[("t", 0, 1, "b")])
        .final_read(RC, &[("t", 0, 0, "a"), ("t", 0, 1, "b")])
        .check();
    only(&verdict, "nonmonotonic_poll");
    let bad = &verdict.anomalies.nonmonotonic_poll;
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].process, "c1");
    assert_eq!((bad[0].previous.offset, bad[0].previous.index), (1, 5));
    assert_eq!((bad[0].next.offset, bad[0].next.index), (1, 7));
}

#[test]
fn given_a_consumer_jumped_over_an_existing_record_when_checked_then_it_is_a_poll_skip() {
    let verdict = History::default()
        .send("p1", OpKind::Ok, "a", 0)
        .send("p1", OpKind::Ok, "b", 1)
        .send("p1", OpKind::Ok, "c", 2)
        .poll("c1", RC, &[("t", 0, 0, "a")])
        .poll("c1", RC, &[("t", 0, 2, "c")])
        .final_read(RC, &[("t", 0, 0, "a"), ("t", 0, 1, "b"), ("t", 0, 2, "c")])
        .check();
    only(&verdict, "poll_skip");
    let skip = &verdict.anomalies.poll_skip;
    assert_eq!(skip.len(), 1);
    assert_eq!(skip[0].process, "c1");
    assert_eq!(skip[0].isolation, RC);
    assert_eq!((skip[0].previous.offset, skip[0].next.offset), (0, 2));
    assert_eq!(
        skip[0].skipped,
        [SkippedRecord {
            offset: 1,
            value: "b".into()
        }]
    );
}

#[test]
fn given_the_final_read_jumped_over_a_record_a_poll_saw_when_checked_then_it_is_a_poll_skip() {
    // Every read saw "b" somewhere, so it is not lost; the final read still skipped it.
    let verdict = History::default()
        .send("p1", OpKind::Ok, "a", 0)
        .send("p1", OpKind::Ok, "b", 1)
        .send("p1", OpKind::Ok, "c", 2)
        .poll(
            "c1",
            RC,
            &[("t", 0, 0, "a"), ("t", 0, 1, "b"), ("t", 0, 2, "c")],
        )
        .final_read(RC, &[("t", 0, 0, "a"), ("t", 0, 2, "c")])
        .check();
    only(&verdict, "poll_skip");
    let skip = &verdict.anomalies.poll_skip;
    assert_eq!(skip[0].process, "final-read_committed");
    assert_eq!(skip[0].skipped[0].value, "b");
}

#[test]
fn given_read_committed_gaps_of_aborted_records_and_markers_when_checked_then_no_poll_skip() {
    // t/0: a0, e1 (aborted), [2 abort marker], b3
    let verdict = History::default()
        .send("p1", OpKind::Ok, "a", 0)
        .txn("tx", OpKind::Ok, false, &[("t", 0, 1, "e")])
        .send("p1", OpKind::Ok, "b", 3)
        .poll("c-rc", RC, &[("t", 0, 0, "a")])
        .poll("c-rc", RC, &[("t", 0, 3, "b")])
        .final_read(RC, &[("t", 0, 0, "a"), ("t", 0, 3, "b")])
        .final_read(RU, &[("t", 0, 0, "a"), ("t", 0, 1, "e"), ("t", 0, 3, "b")])
        .check();
    assert!(verdict.valid, "{verdict:#?}");
}

#[test]
fn given_read_committed_returns_an_aborted_or_failed_txn_value_when_checked_then_it_is_an_aborted_read(
) {
    let verdict = History::default()
        .txn("tx1", OpKind::Ok, false, &[("t", 0, 0, "e")])
        .txn("tx2", OpKind::Fail, true, &[("t", 0, 2, "f")])
        .poll("c1", RC, &[("t", 0, 0, "e")])
        .final_read(RC, &[("t", 0, 0, "e"), ("t", 0, 2, "f")])
        .check();
    only(&verdict, "aborted_read");
    let bad = &verdict.anomalies.aborted_read;
    assert_eq!(bad.len(), 3);
    assert_eq!(bad[0].value, "e");
    assert_eq!(bad[0].reader, observer("c1", 5, "poll"));
    assert_eq!(bad[0].transactional_id, "tid-tx1");
    assert_eq!(bad[0].writer, observer("tx1", 0, "txn"));
    assert_eq!(bad[0].outcome, Outcome::Aborted);
    assert_eq!(
        (bad[2].value.as_str(), bad[2].outcome),
        ("f", Outcome::Failed)
    );
}

#[test]
fn given_the_final_read_holds_part_of_a_committed_txn_when_checked_then_it_is_torn() {
    let verdict = History::default()
        .txn(
            "tx1",
            OpKind::Ok,
            true,
            &[("t", 0, 0, "x"), ("t", 1, 0, "y")],
        )
        .final_read(RC, &[("t", 0, 0, "x")])
        .check();
    let torn = &verdict.anomalies.torn_txn;
    assert_eq!(torn.len(), 1);
    assert_eq!(torn[0].transactional_id, "tid-tx1");
    assert_eq!(torn[0].outcome, Outcome::Committed);
    assert_eq!(
        torn[0].final_read,
        observer("final-read_committed", 3, "final_read")
    );
    assert_eq!(torn[0].visible[0].value, "x");
    assert_eq!(
        (torn[0].missing[0].value.as_str(), &torn[0].missing[0].tp),
        ("y", &tp("t", 1))
    );
    // y is also acknowledged and never read: nothing read t/1, so it is unseen.
    assert_eq!(verdict.anomalies.unseen.len(), 1);
    assert!(!verdict.valid);
}

#[test]
fn given_the_final_read_holds_part_of_an_unknown_txn_when_checked_then_it_is_torn() {
    let verdict = History::default()
        .txn(
            "tx1",
            OpKind::Info,
            true,
            &[("t", 0, 0, "x"), ("t", 1, 0, "y")],
        )
        .final_read(RC, &[("t", 1, 0, "y")])
        .check();
    only(&verdict, "torn_txn");
    assert_eq!(verdict.anomalies.torn_txn[0].outcome, Outcome::Unknown);
}

#[test]
fn given_unknown_txns_seen_all_or_nothing_when_checked_then_it_is_valid() {
    let verdict = History::default()
        .txn(
            "tx1",
            OpKind::Info,
            true,
            &[("t", 0, 0, "x1"), ("t", 1, 0, "y1")],
        )
        .txn(
            "tx2",
            OpKind::Info,
            true,
            &[("t", 0, 2, "x2"), ("t", 1, 2, "y2")],
        )
        .poll("c1", RC, &[("t", 0, 0, "x1"), ("t", 1, 0, "y1")])
        .final_read(RC, &[("t", 0, 0, "x1"), ("t", 1, 0, "y1")])
        .check();
    assert!(verdict.valid, "{verdict:#?}");
    assert_eq!(verdict.stats.values_unknown, 4);
}

#[test]
fn given_a_committed_txn_entirely_absent_when_checked_then_its_values_are_lost_not_torn() {
    let verdict = History::default()
        .txn(
            "tx1",
            OpKind::Ok,
            true,
            &[("t", 0, 0, "x"), ("t", 0, 1, "y")],
        )
        .send("p1", OpKind::Ok, "b", 3)
        .final_read(RC, &[("t", 0, 3, "b")])
        .check();
    only(&verdict, "lost");
    let lost: Vec<(&str, Option<&str>)> = verdict
        .anomalies
        .lost
        .iter()
        .map(|l| (l.value.as_str(), l.transactional_id.as_deref()))
        .collect();
    assert_eq!(lost, [("x", Some("tid-tx1")), ("y", Some("tid-tx1"))]);
}

#[test]
fn given_a_read_of_something_never_sent_there_when_checked_then_it_is_unexpected() {
    let verdict = History::default()
        .send("p1", OpKind::Ok, "a", 0)
        .send("p1", OpKind::Fail, "f", 0)
        .final_read(
            RU,
            &[("t", 0, 0, "a"), ("t", 0, 1, "ghost"), ("t", 0, 2, "f")],
        )
        .check();
    only(&verdict, "unexpected");
    let bad = &verdict.anomalies.unexpected;
    assert_eq!(bad.len(), 2);
    assert_eq!(
        (bad[0].value.as_str(), &bad[0].reason),
        (
            "f",
            &UnexpectedReason::SendFailed {
                writer: observer("p1", 2, "send")
            }
        )
    );
    assert_eq!(
        (bad[1].value.as_str(), &bad[1].reason),
        ("ghost", &UnexpectedReason::NeverSent)
    );
    assert_eq!(
        bad[1].readers,
        [observer("final-read_uncommitted", 5, "final_read")]
    );
}

#[test]
fn given_a_verdict_when_serialized_then_anomaly_kinds_are_named_as_documented() {
    let verdict = History::default().send("p1", OpKind::Ok, "a", 0).check();
    let json = serde_json::to_value(&verdict).expect("serialize");
    let mut kinds: Vec<&String> = json["anomalies"]
        .as_object()
        .expect("object")
        .keys()
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "aborted_read",
            "duplicate",
            "inconsistent_offsets",
            "lost",
            "nonmonotonic_poll",
            "nonmonotonic_send",
            "pipeline_duplicate",
            "pipeline_lost",
            "pipeline_mismatch",
            "pipeline_missing",
            "pipeline_order",
            "pipeline_uncommitted",
            "poll_skip",
            "torn_txn",
            "unexpected",
            "unseen"
        ]
    );
    assert_eq!(json["valid"], false);
    assert_eq!(json["anomalies"]["unseen"][0]["topic"], "t");
}
