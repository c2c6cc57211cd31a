use bytes::Bytes;
use idem_proto::batch::{ProducerInfo, Record, ATTR_TRANSACTIONAL};
use idem_proto::control::{encode_control, ControlMarker};
use proptest::prelude::*;

use super::*;
use crate::group::offsets::OffsetAndMetadata;
use crate::txn::decide::TopicPartition;

const WRITER: i64 = 7;

fn tp(partition: i32) -> TopicPartition {
    TopicPartition {
        topic: "in".into(),
        partition,
    }
}

fn offset_record(group: &str, partition: i32, offset: i64) -> GroupRecord {
    GroupRecord::Offset {
        group_id: group.into(),
        tp: tp(partition),
        value: OffsetAndMetadata {
            offset,
            leader_epoch: None,
            metadata: String::new(),
            commit_ms: 1,
            record_offset: 0,
        },
    }
}

/// A log being written: each batch gets the next offsets.
#[derive(Default)]
struct Log {
    bytes: Vec<u8>,
    next: i64,
}

impl Log {
    fn push(&mut self, mut batch: Vec<u8>) -> i64 {
        let base = self.next;
        idem_proto::batch::assign(&mut batch, base, 0);
        let header = idem_proto::batch::decode_header(&batch).expect("header");
        self.next = header.next_offset();
        self.bytes.extend_from_slice(&batch);
        base
    }

    fn owner(&mut self, records: &[GroupRecord], sequence: i32) -> i64 {
        self.push(data(WRITER, 1, sequence, 0, records))
    }

    fn txn(&mut self, producer_id: i64, sequence: i32, records: &[GroupRecord]) -> i64 {
        self.push(data(producer_id, 0, sequence, ATTR_TRANSACTIONAL, records))
    }

    fn marker(&mut self, producer_id: i64, control_type: ControlType) -> i64 {
        self.push(
            encode_control(
                producer_id,
                0,
                ControlMarker {
                    control_type,
                    coordinator_epoch: 1,
                },
                1,
            )
            .to_vec(),
        )
    }
}

fn data(
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    attributes: u16,
    records: &[GroupRecord],
) -> Vec<u8> {
    let records: Vec<Record> = records
        .iter()
        .map(|r| {
            let (key, value): (Bytes, Option<Bytes>) = r.encode();
            Record {
                key: Some(key),
                value,
                headers: Vec::new(),
                timestamp_ms: 1,
            }
        })
        .collect();
    idem_proto::batch::encode(
        ProducerInfo {
            producer_id,
            producer_epoch,
            base_sequence,
        },
        attributes,
        &records,
    )
    .to_vec()
}

fn committed(state: &SliceState, group: &str, partition: i32) -> Option<i64> {
    state
        .offsets
        .get(group)
        .and_then(|o| o.fetch(&tp(partition), false).ok().flatten())
        .map(|v| v.offset)
}

fn load(log: &Log) -> SliceState {
    let mut state = SliceState::default();
    replay(
        &mut state,
        0,
        &log.bytes,
        0,
        Replay::Everything {
            fence_offset: log.next,
        },
    )
    .expect("replay");
    state
}

#[test]
fn given_a_committed_transaction_then_its_offsets_are_the_groups_and_an_aborted_ones_vanish() {
    let mut log = Log::default();
    log.owner(&[offset_record("g", 0, 5)], 0);
    log.marker(100, ControlType::Begin);
    log.txn(
        100,
        0,
        &[offset_record("g", 0, 9), offset_record("g", 1, 3)],
    );
    log.marker(200, ControlType::Begin);
    log.txn(200, 0, &[offset_record("g", 2, 4)]);
    let open = load(&log);
    assert_eq!(committed(&open, "g", 0), Some(5));
    assert!(open.offsets["g"].fetch(&tp(0), true).is_err(), "pending");
    assert_eq!(open.next_sequence(100, 0), 2);
    assert_eq!(open.next_sequence(100, 1), 0, "another epoch starts at 0");

    log.marker(100, ControlType::Commit);
    log.marker(200, ControlType::Abort);
    let ended = load(&log);
    assert_eq!(committed(&ended, "g", 0), Some(9));
    assert_eq!(committed(&ended, "g", 1), Some(3));
    assert_eq!(committed(&ended, "g", 2), None);
    assert!(!ended.offsets["g"].has_pending());
    assert_eq!(
        ended.next_sequence(100, 0),
        0,
        "a marker empties the sequences"
    );
}

#[test]
fn given_a_plain_commit_after_the_transactions_offsets_then_the_later_record_wins() {
    let mut log = Log::default();
    log.marker(100, ControlType::Begin);
    log.txn(100, 0, &[offset_record("g", 0, 9)]);
    log.owner(&[offset_record("g", 0, 12)], 0);
    log.marker(100, ControlType::Commit);
    assert_eq!(committed(&load(&log), "g", 0), Some(12));
}

#[test]
fn given_the_tail_then_only_markers_apply() {
    let mut log = Log::default();
    log.marker(100, ControlType::Begin);
    log.txn(100, 0, &[offset_record("g", 0, 9)]);
    let fence = log.next;
    let mut state = load(&log);
    log.owner(&[offset_record("g", 1, 1)], 0);
    log.marker(100, ControlType::Commit);
    let done = replay(&mut state, 0, &log.bytes, fence, Replay::MarkersOnly).expect("tail");
    assert_eq!(done.next_offset, log.next);
    assert_eq!(done.markers, 1);
    assert_eq!(committed(&state, "g", 0), Some(9));
    assert_eq!(
        committed(&state, "g", 1),
        None,
        "the owner applies its own records"
    );
}

#[test]
fn given_the_fence_then_nothing_after_it_is_loaded() {
    let mut log = Log::default();
    log.owner(&[offset_record("g", 0, 1)], 0);
    let fence = log.next;
    log.owner(&[offset_record("g", 0, 2)], 1);
    let mut state = SliceState::default();
    replay(
        &mut state,
        0,
        &log.bytes,
        0,
        Replay::Everything {
            fence_offset: fence,
        },
    )
    .expect("replay");
    assert_eq!(committed(&state, "g", 0), Some(1));
}

#[test]
fn given_tombstones_then_the_group_and_its_offsets_are_gone() {
    let mut log = Log::default();
    log.owner(
        &[
            GroupRecord::Group {
                group_id: "g".into(),
                group: Group::default(),
            },
            offset_record("g", 0, 1),
        ],
        0,
    );
    assert!(load(&log).knows("g"));
    log.owner(
        &[
            GroupRecord::GroupRemoved {
                group_id: "g".into(),
            },
            GroupRecord::OffsetRemoved {
                group_id: "g".into(),
                tp: tp(0),
            },
        ],
        2,
    );
    assert!(!load(&log).knows("g"));
}

#[test]
fn given_an_undecodable_record_then_the_load_stops_at_its_offset() {
    let mut log = Log::default();
    log.owner(&[offset_record("g", 0, 1)], 0);
    let bad = log.push(
        idem_proto::batch::encode(
            ProducerInfo {
                producer_id: WRITER,
                producer_epoch: 1,
                base_sequence: 1,
            },
            0,
            &[Record {
                key: Some(Bytes::from_static(b"not json")),
                value: Some(Bytes::from_static(b"{}")),
                headers: Vec::new(),
                timestamp_ms: 1,
            }],
        )
        .to_vec(),
    );
    let mut state = SliceState::default();
    let error = replay(
        &mut state,
        3,
        &log.bytes,
        0,
        Replay::Everything {
            fence_offset: log.next,
        },
    )
    .expect_err("corrupt");
    assert!(
        matches!(error, CoordinatorError::CorruptLog { partition: 3, offset, .. } if offset == bad),
        "{error}"
    );
}

#[derive(Debug, Clone)]
enum Step {
    Commit {
        group: u8,
        partition: i32,
        offset: i64,
    },
    TxnCommit {
        producer: u8,
        group: u8,
        partition: i32,
        offset: i64,
        /// The transaction ends (this outcome) while the batch's acknowledgement is on
        /// its way: the tail reads the marker before the owner applies the batch.
        ended_before_ack: Option<bool>,
    },
    End {
        producer: u8,
        commit: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u8..2, 0i32..3, 0i64..100).prop_map(|(group, partition, offset)| Step::Commit {
            group,
            partition,
            offset
        }),
        (
            0u8..2,
            0u8..2,
            0i32..3,
            0i64..100,
            prop::option::weighted(0.3, any::<bool>())
        )
            .prop_map(|(producer, group, partition, offset, ended_before_ack)| {
                Step::TxnCommit {
                    producer,
                    group,
                    partition,
                    offset,
                    ended_before_ack,
                }
            }),
        (0u8..2, any::<bool>()).prop_map(|(producer, commit)| Step::End { producer, commit }),
    ]
}

proptest! {
    /// What the owner applied as it wrote equals what a new owner reads back, split
    /// anywhere between the load and the tail.
    #[test]
    fn replaying_the_log_rebuilds_the_owners_state(steps in prop::collection::vec(step(), 0..40), split in 0usize..40) {
        let mut log = Log::default();
        let mut owner = SliceState::default();
        let mut owner_sequence = 0;
        let mut open = [false, false];
        let mut fence = None;
        for (i, step) in steps.iter().enumerate() {
            if i == split {
                fence = Some(log.next);
            }
            match step {
                Step::Commit { group, partition, offset } => {
                    let record = offset_record(&format!("g{group}"), *partition, *offset);
                    let at = log.owner(std::slice::from_ref(&record), owner_sequence);
                    owner_sequence += 1;
                    let GroupRecord::Offset { group_id, tp, mut value } = record else { unreachable!() };
                    value.record_offset = at;
                    owner.apply(GroupRecord::Offset { group_id, tp, value });
                }
                Step::TxnCommit { producer, group, partition, offset, ended_before_ack } => {
                    let pid = 100 + i64::from(*producer);
                    if !open[usize::from(*producer)] {
                        log.marker(pid, ControlType::Begin);
                        open[usize::from(*producer)] = true;
                    }
                    let sequence = owner.next_sequence(pid, 0);
                    let record = offset_record(&format!("g{group}"), *partition, *offset);
                    owner.begin_txn_write(pid);
                    let at = log.txn(pid, sequence, std::slice::from_ref(&record));
                    if let Some(commit) = ended_before_ack {
                        let control = if *commit { ControlType::Commit } else { ControlType::Abort };
                        let marker_at = log.marker(pid, control);
                        open[usize::from(*producer)] = false;
                        owner.complete(pid, *commit, marker_at);
                    }
                    let GroupRecord::Offset { group_id, tp, mut value } = record else { unreachable!() };
                    value.record_offset = at;
                    owner.finish_txn_write(pid, 0, at, sequence, vec![GroupRecord::Offset { group_id, tp, value }]);
                }
                Step::End { producer, commit } => {
                    let pid = 100 + i64::from(*producer);
                    let control = if *commit { ControlType::Commit } else { ControlType::Abort };
                    let at = log.marker(pid, control);
                    open[usize::from(*producer)] = false;
                    owner.complete(pid, *commit, at);
                }
            }
        }
        let fence = fence.unwrap_or(log.next);
        // The new owner loads up to the fence...
        let mut reader = SliceState::default();
        replay(&mut reader, 0, &log.bytes, 0, Replay::Everything { fence_offset: fence }).expect("load");
        let mut before = SliceState::default();
        replay(&mut before, 0, &log.bytes, 0, Replay::Everything { fence_offset: log.next }).expect("all");
        prop_assert_eq!(&before, &owner, "a full replay is the owner's state");
        // ...and the tail's markers complete what was pending at the fence.
        replay(&mut reader, 0, &log.bytes, fence, Replay::MarkersOnly).expect("tail");
        for (group, offsets) in &reader.offsets {
            for (tp, value) in offsets.committed() {
                let ours = owner.offsets.get(group).and_then(|o| o.committed().get(tp));
                // Records after the fence are the reader's own (not replayed here), so
                // the reader may only lack or be behind them, never ahead or different.
                if let Some(ours) = ours {
                    prop_assert!(value.record_offset <= ours.record_offset);
                }
            }
        }
    }
}
