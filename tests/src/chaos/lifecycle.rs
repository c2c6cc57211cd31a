//! What the log lifecycle did on each broker's disk during a chaos run, read from the
//! data directories once the run is over: segments rolled, producer-state snapshots on
//! disk, and records the cleaner removed from `__transaction_state`. The checker judges
//! the history alone; this only says whether rolls, snapshots and the cleaner ran under
//! the faults at all, so a run that silently stopped exercising them fails.

use std::fmt;
use std::path::Path;

use idem_proto::batch;
use idem_proto::txn::TXN_LOG_TOPIC;

/// One broker's log lifecycle as its data directory shows it after the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BrokerLifecycle {
    pub broker: i32,
    /// Segments sealed in the workload's topics: `.log` files past the first of each
    /// partition (the workload's topics keep everything, so none was deleted).
    pub workload_rolls: usize,
    /// Segments sealed in `__transaction_state`.
    pub txn_log_rolls: usize,
    /// Producer-state snapshot files on disk, all partitions.
    pub snapshots: usize,
    /// Segments of `__transaction_state` the cleaner rewrote: they hold a batch with
    /// fewer records than offsets, which no producer writes.
    pub cleaned_segments: usize,
    /// Records the cleaner removed from those segments.
    pub records_cleaned: u64,
}

impl fmt::Display for BrokerLifecycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "broker {}: {} segments rolled in the workload's topics, {} in {TXN_LOG_TOPIC}, \
             {} producer snapshots, {} segments cleaned ({} records removed)",
            self.broker,
            self.workload_rolls,
            self.txn_log_rolls,
            self.snapshots,
            self.cleaned_segments,
            self.records_cleaned
        )
    }
}

/// Reads broker `broker`'s data directory; `workload_topics` are the topics the
/// workload writes. Unreadable files count as nothing (a torn tail ends a segment's
/// scan).
pub fn scan(broker: i32, data_dir: &Path, workload_topics: &[&str]) -> BrokerLifecycle {
    let mut seen = BrokerLifecycle {
        broker,
        ..BrokerLifecycle::default()
    };
    for partition_dir in entries(data_dir) {
        let Some(topic) = topic_of(&partition_dir) else {
            continue;
        };
        let files = entries(&partition_dir);
        let segments: Vec<&Path> = files
            .iter()
            .map(|f| f.as_path())
            .filter(|f| f.extension().is_some_and(|e| e == "log"))
            .collect();
        seen.snapshots += files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "snapshot"))
            .count();
        let rolls = segments.len().saturating_sub(1);
        if topic == TXN_LOG_TOPIC {
            seen.txn_log_rolls += rolls;
            for segment in segments {
                let removed = records_removed(segment);
                if removed > 0 {
                    seen.cleaned_segments += 1;
                    seen.records_cleaned += removed;
                }
            }
        } else if workload_topics.contains(&topic.as_str()) {
            seen.workload_rolls += rolls;
        }
    }
    seen
}

/// `{topic}-{partition}` -> topic.
fn topic_of(partition_dir: &Path) -> Option<String> {
    let name = partition_dir.file_name()?.to_str()?;
    let (topic, partition) = name.rsplit_once('-')?;
    partition.parse::<i32>().ok()?;
    Some(topic.to_string())
}

/// Offsets minus records over the data batches of a segment file: what compaction took.
fn records_removed(segment: &Path) -> u64 {
    let Ok(bytes) = std::fs::read(segment) else {
        return 0;
    };
    let mut removed = 0u64;
    let mut position = 0usize;
    while position < bytes.len() {
        let Ok(header) = batch::decode_header(&bytes[position..]) else {
            break;
        };
        if !header.is_control() {
            let offsets = i64::from(header.last_offset_delta) + 1;
            removed += u64::try_from(offsets - i64::from(header.record_count)).unwrap_or(0);
        }
        position += header.size();
    }
    removed
}

fn entries(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_proto::batch::{ProducerInfo, Record};

    fn batch_of(base_offset: i64, records: usize) -> Vec<u8> {
        let records: Vec<Record> = (0..records)
            .map(|i| Record {
                key: Some(bytes::Bytes::from(format!("k{i}"))),
                value: Some(bytes::Bytes::from("v")),
                ..Record::default()
            })
            .collect();
        let mut bytes = batch::encode(
            ProducerInfo {
                producer_id: 1,
                producer_epoch: 0,
                base_sequence: 0,
            },
            0,
            &records,
        )
        .to_vec();
        bytes[..8].copy_from_slice(&base_offset.to_be_bytes());
        bytes
    }

    #[test]
    fn given_partition_dirs_then_rolls_snapshots_and_cleaned_records_are_counted() {
        let data = tempfile::tempdir().expect("tempdir");
        let workload = data.path().join("chaos-a-0");
        std::fs::create_dir(&workload).expect("mkdir");
        for name in [
            "00000000000000000000.log",
            "00000000000000000010.log",
            "00000000000000000020.log",
            "00000000000000000010.snapshot",
            "00000000000000000020.snapshot",
        ] {
            std::fs::write(workload.join(name), b"").expect("write");
        }
        let txn_log = data.path().join(format!("{TXN_LOG_TOPIC}-7"));
        std::fs::create_dir(&txn_log).expect("mkdir");
        // A batch of 3 offsets the cleaner left 1 record of, then a whole one.
        let cleaned = batch::retain_records(&batch_of(0, 3), |record| {
            record.key == Some(b"k0".as_slice())
        })
        .expect("a valid batch")
        .expect("two records dropped")
        .to_vec();
        let whole = batch_of(3, 2);
        std::fs::write(
            txn_log.join("00000000000000000000.log"),
            [cleaned, whole].concat(),
        )
        .expect("write");
        std::fs::write(txn_log.join("00000000000000000005.log"), batch_of(5, 1)).expect("write");
        std::fs::create_dir(data.path().join("other-0")).expect("mkdir");
        std::fs::write(data.path().join("other-0/00000000000000000009.log"), b"").expect("write");

        assert_eq!(
            scan(2, data.path(), &["chaos-a"]),
            BrokerLifecycle {
                broker: 2,
                workload_rolls: 2,
                txn_log_rolls: 1,
                snapshots: 2,
                cleaned_segments: 1,
                records_cleaned: 2,
            }
        );
    }
}
