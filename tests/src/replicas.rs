//! The consistency check of replication tests: once faults stop and the brokers are
//! stopped, every replica's log on disk is identical, batch for batch and byte for
//! byte, up to the high watermark.

use std::path::Path;

use idem_broker::log::{LogConfig, PartitionLog};

/// Every batch of a partition directory as `(base_offset, bytes)`.
pub fn batches_on_disk(partition_dir: &Path) -> Vec<(i64, Vec<u8>)> {
    let (log, _) =
        PartitionLog::open(partition_dir, LogConfig::default()).expect("open replica log");
    log.batches_from(0)
        .expect("read replica log")
        .into_iter()
        .map(|(header, bytes)| (header.base_offset, bytes))
        .collect()
}

/// Asserts that the replicas in `dirs` hold the same batches below `high_watermark`,
/// and returns them.
pub fn assert_replicas_identical(dirs: &[&Path], high_watermark: i64) -> Vec<(i64, Vec<u8>)> {
    let below = |batches: Vec<(i64, Vec<u8>)>| -> Vec<(i64, Vec<u8>)> {
        batches
            .into_iter()
            .filter(|(base, _)| *base < high_watermark)
            .collect()
    };
    let first = below(batches_on_disk(dirs[0]));
    for dir in &dirs[1..] {
        let other = below(batches_on_disk(dir));
        assert_eq!(
            other.len(),
            first.len(),
            "{} holds {} batches below {high_watermark}, {} holds {}",
            dir.display(),
            other.len(),
            dirs[0].display(),
            first.len()
        );
        for ((a_offset, a), (b_offset, b)) in first.iter().zip(&other) {
            assert_eq!(a_offset, b_offset);
            assert_eq!(a, b, "replicas disagree on the batch at offset {a_offset}");
        }
    }
    first
}

/// Stops every broker cleanly (SIGTERM), so their logs can be read from disk.
pub fn stop_all(brokers: &mut [crate::BrokerProcess]) {
    for broker in brokers.iter_mut() {
        broker.stop();
    }
}

/// With the brokers stopped: the replicas of `topic`-`partition` on every broker hold
/// identical batches below `high_watermark`; returns how many.
pub fn compare_replicas(
    brokers: &[crate::BrokerProcess],
    topic: &str,
    partition: i32,
    high_watermark: i64,
) -> usize {
    let dirs: Vec<std::path::PathBuf> = brokers
        .iter()
        .map(|b| b.data_dir().join(format!("{topic}-{partition}")))
        .collect();
    let dirs: Vec<&Path> = dirs.iter().map(std::path::PathBuf::as_path).collect();
    assert_replicas_identical(&dirs, high_watermark).len()
}
