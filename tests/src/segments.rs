//! A partition's files on a stopped broker's disk, for tests that tear or inspect them.

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
