//! Writes the seed corpora of the fuzz targets, `fuzz/corpus/<target>/<name>`, from
//! valid encodings made by idem's own encoders: a fuzzer that starts from well-formed
//! input reaches the checks behind the framing in seconds instead of hours. The seeds
//! are committed (each is well under a kilobyte), so a fuzz run needs no extra build;
//! run this again when an encoding changes:
//! `cargo run --manifest-path fuzz/Cargo.toml --example write_seeds`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use idem_broker::log::index::IndexEntry;
use idem_broker::producer_state::{BatchMetadata, ProducerStateTable};
use idem_broker::txn_index::{AbortedTxn, SegmentTxns};
use idem_coordinator::group::membership::{Group, Member};
use idem_coordinator::group::offsets::OffsetAndMetadata;
use idem_coordinator::group::reconcile::{MemberAssignment, MemberState};
use idem_coordinator::group::records::GroupRecord;
use idem_coordinator::log::record::LogRecord;
use idem_coordinator::txn::decide::{PendingEnd, ProducerIdentity, TopicPartition, TxnMetadata};
use idem_coordinator::txn::state::TxnState;
use idem_proto::batch::{self, ProducerInfo, Record, ATTR_TRANSACTIONAL};
use idem_proto::control::{self, ControlMarker};
use idem_proto::v1::ControlType;

/// One target's seeds: file name, bytes.
type Seeds = Vec<(&'static str, Vec<u8>)>;

fn main() -> std::io::Result<()> {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let targets: [(&str, Seeds); 7] = [
        ("record_batch", record_batches()),
        ("control_record", control_records()),
        ("txn_log_record", txn_log_records()),
        ("group_log_record", group_log_records()),
        ("producer_snapshot", producer_snapshots()),
        ("txn_index_file", txn_index_files()),
        ("offset_index_file", offset_index_files()),
    ];
    for (target, seeds) in targets {
        let dir: PathBuf = corpus.join(target);
        fs::create_dir_all(&dir)?;
        for (name, bytes) in seeds {
            fs::write(dir.join(name), bytes)?;
        }
        println!("{target}: seeds in {}", dir.display());
    }
    Ok(())
}

fn record(key: Option<&str>, value: Option<&str>, headers: &[(&str, &str)], ts: i64) -> Record {
    Record {
        key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        value: value.map(|v| Bytes::copy_from_slice(v.as_bytes())),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), Bytes::copy_from_slice(v.as_bytes())))
            .collect(),
        timestamp_ms: ts,
    }
}

const PRODUCER: ProducerInfo = ProducerInfo {
    producer_id: 4_000,
    producer_epoch: 2,
    base_sequence: 17,
};

fn record_batches() -> Seeds {
    let plain = batch::encode(
        ProducerInfo::NONE,
        0,
        &[record(Some("k"), Some("v"), &[], 1_700_000_000_000)],
    );
    let mut idempotent = batch::encode(
        PRODUCER,
        0,
        &[
            record(Some("a"), Some("1"), &[("trace", "x")], 100),
            record(None, Some("2"), &[], 105),
            record(Some("a"), None, &[("h1", ""), ("h2", "y")], 103),
        ],
    )
    .to_vec();
    batch::assign(&mut idempotent, 1_000, 3);
    let transactional = batch::encode(
        PRODUCER,
        ATTR_TRANSACTIONAL,
        &[record(Some("order"), Some("paid"), &[], 7)],
    );
    let compacted = batch::retain_records(&idempotent, |r| r.offset != 1_001)
        .ok()
        .flatten()
        .map(|b| b.to_vec())
        .unwrap_or_default();
    let mut fetch_response = idempotent.clone();
    fetch_response.extend_from_slice(&batch::filler(1_003, 9, 3, 200));
    fetch_response.extend_from_slice(&control_batch(ControlType::Commit));
    vec![
        ("plain", plain.to_vec()),
        ("idempotent", idempotent),
        ("transactional", transactional.to_vec()),
        ("compacted", compacted),
        ("filler", batch::filler(50, 4, 1, 99).to_vec()),
        ("marker", control_batch(ControlType::Abort)),
        ("fetch_response", fetch_response),
    ]
}

fn control_batch(control_type: ControlType) -> Vec<u8> {
    control::encode_control(
        PRODUCER.producer_id,
        PRODUCER.producer_epoch,
        ControlMarker {
            control_type,
            coordinator_epoch: 5,
        },
        1_700_000_000_000,
    )
    .to_vec()
}

fn control_records() -> Seeds {
    let mut horizon = control_batch(ControlType::Abort);
    // Only a control batch takes a horizon, and this is one.
    let _ = batch::set_delete_horizon(&mut horizon, 86_400_000);
    vec![
        ("abort", control_batch(ControlType::Abort)),
        ("commit", control_batch(ControlType::Commit)),
        ("begin", control_batch(ControlType::Begin)),
        ("abort_with_horizon", horizon),
    ]
}

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition {
        topic: topic.into(),
        partition,
    }
}

fn key_value((key, value): (Bytes, Option<Bytes>)) -> Vec<u8> {
    let key = (!key.is_empty()).then_some(&key[..]);
    idem_fuzz::join_key_value(key, value.as_deref()).unwrap_or_default()
}

fn txn_log_records() -> Seeds {
    let meta = |state| TxnMetadata {
        transactional_id: "orders-1".into(),
        producer_id: 1_234,
        producer_epoch: 7,
        timeout_ms: 60_000,
        state,
        partitions: [tp("orders", 2), tp("stock", 0)].into_iter().collect(),
        txn_start_ms: 1_700_000_000_000,
        last_update_ms: 1_700_000_000_500,
        ended_by_producer: true,
        kept_epoch: false,
        renewed_from: None,
        pending_end: None,
    };
    let renewed = TxnMetadata {
        renewed_from: Some(ProducerIdentity {
            producer_id: 1_200,
            producer_epoch: 3,
        }),
        pending_end: Some(PendingEnd {
            commit: true,
            partitions: [tp("orders", 1)].into_iter().collect(),
        }),
        ..meta(TxnState::Ongoing)
    };
    vec![
        (
            "ongoing",
            key_value(LogRecord::Txn(meta(TxnState::Ongoing)).encode()),
        ),
        (
            "prepare_commit",
            key_value(LogRecord::Txn(meta(TxnState::PrepareCommit)).encode()),
        ),
        (
            "renewed_pending_end",
            key_value(LogRecord::Txn(renewed).encode()),
        ),
        (
            "fence",
            key_value(
                LogRecord::Fence {
                    coordinator_epoch: 9,
                }
                .encode(),
            ),
        ),
        (
            "removed",
            key_value(
                LogRecord::Removed {
                    transactional_id: "orders-1".into(),
                }
                .encode(),
            ),
        ),
    ]
}

fn group_log_records() -> Seeds {
    let member = Member {
        instance_id: Some("host-1".into()),
        subscribed: ["orders".to_string()].into_iter().collect(),
        rebalance_timeout_ms: 30_000,
        assignment: MemberAssignment {
            member_epoch: 4,
            state: MemberState::UnrevokedPartitions,
            assigned: [tp("orders", 0)].into_iter().collect(),
            pending_revocation: [tp("orders", 1)].into_iter().collect(),
        },
        previous_epoch: 3,
        left_temporarily: false,
    };
    let group = Group {
        group_epoch: 5,
        target_epoch: 5,
        members: [("m-1".to_string(), member)].into_iter().collect(),
        target: [(
            "m-1".to_string(),
            [tp("orders", 0)].into_iter().collect::<BTreeSet<_>>(),
        )]
        .into_iter()
        .collect(),
        partition_counts: BTreeMap::from([("orders".to_string(), 2)]),
        server_assignors: [("m-1".to_string(), "range".to_string())]
            .into_iter()
            .collect(),
        ..Group::default()
    };
    let group_id = "billing".to_string();
    vec![
        (
            "fence",
            key_value(
                GroupRecord::Fence {
                    coordinator_epoch: 2,
                }
                .encode(),
            ),
        ),
        (
            "group",
            key_value(
                GroupRecord::Group {
                    group_id: group_id.clone(),
                    group,
                }
                .encode(),
            ),
        ),
        (
            "group_removed",
            key_value(
                GroupRecord::GroupRemoved {
                    group_id: group_id.clone(),
                }
                .encode(),
            ),
        ),
        (
            "offset",
            key_value(
                GroupRecord::Offset {
                    group_id: group_id.clone(),
                    tp: tp("orders", 1),
                    value: OffsetAndMetadata {
                        offset: 1_500,
                        leader_epoch: Some(4),
                        metadata: "m".into(),
                        commit_ms: 1_700_000_000_000,
                        record_offset: 42,
                    },
                }
                .encode(),
            ),
        ),
        (
            "offset_removed",
            key_value(
                GroupRecord::OffsetRemoved {
                    group_id,
                    tp: tp("orders", 1),
                }
                .encode(),
            ),
        ),
    ]
}

fn producer_snapshots() -> Seeds {
    let mut table = ProducerStateTable::new();
    for (producer_id, epoch, batches) in [(7, 0, 1), (9, 3, 5), (11, 1, 2)] {
        for n in 0..batches {
            let first_seq = n * 10;
            table.apply(
                producer_id,
                epoch,
                BatchMetadata {
                    first_seq,
                    last_seq: first_seq + 9,
                    first_offset: i64::from(first_seq) + 100,
                    last_offset: i64::from(first_seq) + 109,
                    timestamp_ms: 1_700_000_000_000,
                },
                1_700_000_000_000,
            );
        }
    }
    // A producer inside a transaction, opened by its BEGIN marker.
    let begin = control_batch(ControlType::Begin);
    if let Ok(header) = batch::decode_header(&begin) {
        let marker = control::decode_control(&begin).ok();
        table.apply_batch(&header, marker, 1_700_000_000_000);
    }
    vec![
        ("empty", ProducerStateTable::new().encode_snapshot()),
        ("producers", table.encode_snapshot()),
    ]
}

fn txn_index_files() -> Seeds {
    let segment = SegmentTxns {
        base_offset: 100,
        next_offset: 250,
        aborted: vec![
            AbortedTxn {
                producer_id: 7,
                first_offset: 90,
                last_offset: 120,
            },
            AbortedTxn {
                producer_id: 8,
                first_offset: 130,
                last_offset: 200,
            },
        ],
        open: vec![(9, 240), (3, 60)],
    };
    let empty = SegmentTxns {
        base_offset: 0,
        next_offset: 100,
        aborted: Vec::new(),
        open: Vec::new(),
    };
    vec![("segment", segment.encode()), ("empty", empty.encode())]
}

fn offset_index_files() -> Seeds {
    let entries = [(3u32, 4_096u32), (9, 8_200), (15, 12_290)];
    let file: Vec<u8> = entries
        .iter()
        .flat_map(|&(relative_offset, position)| {
            IndexEntry {
                relative_offset,
                position,
            }
            .encode()
        })
        .collect();
    vec![("entries", file), ("empty", Vec::new())]
}
