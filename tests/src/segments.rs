//! A partition's files on a broker's disk, for tests that tear or inspect them.

use std::path::{Path, PathBuf};

/// The active (last) segment file of the partition in `partition_dir`, if it has one.
pub fn active_segment(partition_dir: &Path) -> Option<PathBuf> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(partition_dir)
        .expect("read a partition dir")
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    segments.pop()
}

/// The log start a replica persisted in `{data_dir}/{topic}-{partition}` (0 when
/// retention or DeleteRecords never moved it).
pub fn stored_log_start(data_dir: &Path, topic: &str, partition: i32) -> i64 {
    let path = data_dir.join(format!("{topic}-{partition}/log-start-offset"));
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.lines().nth(1).and_then(|l| l.parse().ok()))
        .unwrap_or(0)
}
