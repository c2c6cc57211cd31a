//! Producer state snapshot files of one partition: `{offset:020}.snapshot` holds the table
//! as it stands once every batch below `offset` (the log end offset then) is applied.
//! A file is written to a temporary name, fsynced and renamed, so a snapshot file is either
//! absent or complete; a corrupt one (torn disk, bit rot) is skipped on load and the log
//! replayed from an older one. Which files stay after a write is `kept_snapshots`'s
//! decision.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::encoding::SnapshotError;
use super::kept_snapshots::{snapshots_to_keep, SnapshotBounds};
use super::ProducerStateTable;

const SUFFIX: &str = ".snapshot";
const TMP_SUFFIX: &str = ".snapshot.tmp";

/// The file name of the snapshot at `offset`.
pub fn snapshot_file_name(offset: i64) -> String {
    format!("{offset:020}{SUFFIX}")
}

/// Durably writes `table` as the snapshot at `offset` (>= 0), then prunes the snapshots
/// to those [`snapshots_to_keep`] keeps for `bounds` and deletes any leftover temporary
/// files.
pub fn write_snapshot(
    dir: &Path,
    offset: i64,
    table: &ProducerStateTable,
    bounds: SnapshotBounds,
) -> io::Result<()> {
    if offset < 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("snapshot offset {offset} is negative"),
        ));
    }
    let name = snapshot_file_name(offset);
    idem_runtime::atomic_file::replace(&dir.join(&name), &table.encode_snapshot())?;
    tracing::debug!(dir = %dir.display(), offset, producers = table.len(), "wrote producer state snapshot");

    delete_unkept(dir, bounds)?;
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(TMP_SUFFIX))
        {
            remove_if_present(&path)?;
        }
    }
    sync_dir(dir)
}

/// The newest snapshot with offset `<= at_most` that decodes, with its offset. Corrupt
/// snapshots are skipped with a warning; a missing directory means no snapshot.
pub fn latest_snapshot(
    dir: &Path,
    at_most: i64,
) -> Result<Option<(i64, ProducerStateTable)>, SnapshotError> {
    let mut snapshots = match list_snapshots(dir) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    snapshots.retain(|(offset, _)| *offset <= at_most);
    snapshots.sort_unstable_by_key(|(offset, _)| std::cmp::Reverse(*offset));
    for (offset, path) in snapshots {
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        match ProducerStateTable::decode_snapshot(&bytes) {
            Ok(table) => return Ok(Some((offset, table))),
            Err(error) => {
                tracing::warn!(path = %path.display(), offset, %error, "skipping corrupt producer state snapshot");
            }
        }
    }
    Ok(None)
}

/// Deletes every snapshot with offset `> offset`: after the log is truncated to `offset`,
/// they describe batches that are gone. A missing directory is fine.
pub fn delete_snapshots_above(dir: &Path, offset: i64) -> io::Result<()> {
    let snapshots = match list_snapshots(dir) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut deleted = false;
    for (_, path) in snapshots.into_iter().filter(|(o, _)| *o > offset) {
        remove_if_present(&path)?;
        deleted = true;
    }
    if deleted {
        sync_dir(dir)?;
    }
    Ok(())
}

/// The offsets of the snapshots in `dir`, ascending (none for a missing directory).
pub fn snapshot_offsets(dir: &Path) -> io::Result<Vec<i64>> {
    let mut offsets: Vec<i64> = match list_snapshots(dir) {
        Ok(s) => s.into_iter().map(|(o, _)| o).collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    offsets.sort_unstable();
    Ok(offsets)
}

/// Deletes the snapshots [`snapshots_to_keep`] does not keep for `bounds` (after the log
/// start moved, say). A missing directory is fine.
pub fn prune_snapshots(dir: &Path, bounds: SnapshotBounds) -> io::Result<()> {
    match delete_unkept(dir, bounds) {
        Ok(true) => sync_dir(dir),
        Ok(false) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes the snapshots not kept for `bounds`; whether any went.
fn delete_unkept(dir: &Path, bounds: SnapshotBounds) -> io::Result<bool> {
    let snapshots = list_snapshots(dir)?;
    let offsets: Vec<i64> = snapshots.iter().map(|(o, _)| *o).collect();
    let keep = snapshots_to_keep(&offsets, bounds);
    let mut deleted = false;
    for (_, path) in snapshots.into_iter().filter(|(o, _)| !keep.contains(o)) {
        remove_if_present(&path)?;
        deleted = true;
    }
    Ok(deleted)
}

/// `(offset, path)` of every well-named snapshot file in `dir`, unordered.
fn list_snapshots(dir: &Path) -> io::Result<Vec<(i64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let offset = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(parse_snapshot_name);
        if let Some(offset) = offset {
            out.push((offset, path));
        }
    }
    Ok(out)
}

fn parse_snapshot_name(name: &str) -> Option<i64> {
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Makes renames and deletions in `dir` durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer_state::entry::BatchMetadata;

    fn table_with(producer_id: i64, last_offset: i64) -> ProducerStateTable {
        let mut table = ProducerStateTable::new();
        table.apply(
            producer_id,
            0,
            BatchMetadata {
                first_seq: 0,
                last_seq: 0,
                first_offset: last_offset,
                last_offset,
                timestamp_ms: 1,
            },
            10,
        );
        table
    }

    /// Writes as a partition whose high watermark is at its log end, `offset`.
    fn write(dir: &Path, offset: i64, table: &ProducerStateTable) -> io::Result<()> {
        let bounds = SnapshotBounds {
            log_start: 0,
            high_watermark: offset,
            log_end: offset,
        };
        write_snapshot(dir, offset, table, bounds)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn given_a_written_snapshot_when_loaded_then_the_table_is_equal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let table = table_with(7, 41);
        write(dir.path(), 42, &table).expect("write");
        assert_eq!(names(dir.path()), vec!["00000000000000000042.snapshot"]);
        let (offset, loaded) = latest_snapshot(dir.path(), i64::MAX)
            .expect("load")
            .expect("some");
        assert_eq!(offset, 42);
        assert_eq!(loaded, table);
    }

    #[test]
    fn given_three_writes_then_only_the_newest_two_remain() {
        let dir = tempfile::tempdir().expect("tempdir");
        for offset in [10, 20, 30] {
            write(dir.path(), offset, &table_with(1, offset - 1)).expect("write");
        }
        assert_eq!(
            names(dir.path()),
            vec![
                "00000000000000000020.snapshot",
                "00000000000000000030.snapshot"
            ]
        );
    }

    #[test]
    fn given_a_high_watermark_behind_the_writes_then_the_newest_snapshot_at_or_below_it_remains() {
        let dir = tempfile::tempdir().expect("tempdir");
        for offset in [10, 20, 30, 40] {
            let bounds = SnapshotBounds {
                log_start: 0,
                high_watermark: 15,
                log_end: offset,
            };
            write_snapshot(dir.path(), offset, &table_with(1, offset - 1), bounds).expect("write");
        }
        assert_eq!(
            names(dir.path()),
            vec![
                "00000000000000000010.snapshot",
                "00000000000000000030.snapshot",
                "00000000000000000040.snapshot"
            ]
        );
        // The log start moved past it: it can no longer be replayed from.
        let bounds = SnapshotBounds {
            log_start: 20,
            high_watermark: 35,
            log_end: 40,
        };
        prune_snapshots(dir.path(), bounds).expect("prune");
        assert_eq!(
            names(dir.path()),
            vec![
                "00000000000000000030.snapshot",
                "00000000000000000040.snapshot"
            ]
        );
    }

    #[test]
    fn given_snapshots_when_loading_at_most_an_offset_then_newer_ones_are_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), 10, &table_with(1, 9)).expect("write");
        write(dir.path(), 20, &table_with(2, 19)).expect("write");
        let (offset, table) = latest_snapshot(dir.path(), 19)
            .expect("load")
            .expect("some");
        assert_eq!(offset, 10);
        assert_eq!(table, table_with(1, 9));
        let (offset, _) = latest_snapshot(dir.path(), 20)
            .expect("load")
            .expect("some");
        assert_eq!(offset, 20);
        assert!(latest_snapshot(dir.path(), 9).expect("load").is_none());
    }

    #[test]
    fn given_the_newest_snapshot_is_corrupt_when_loading_then_the_older_one_is_used() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), 10, &table_with(1, 9)).expect("write");
        write(dir.path(), 20, &table_with(2, 19)).expect("write");
        let newest = dir.path().join(snapshot_file_name(20));
        let mut bytes = fs::read(&newest).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        fs::write(&newest, bytes).expect("write corrupt");
        let (offset, table) = latest_snapshot(dir.path(), i64::MAX)
            .expect("load")
            .expect("some");
        assert_eq!(offset, 10);
        assert_eq!(table, table_with(1, 9));
    }

    #[test]
    fn given_only_truncated_snapshots_when_loading_then_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), 10, &table_with(1, 9)).expect("write");
        let path = dir.path().join(snapshot_file_name(10));
        let bytes = fs::read(&path).expect("read");
        fs::write(&path, &bytes[..bytes.len() - 3]).expect("truncate");
        assert!(latest_snapshot(dir.path(), i64::MAX)
            .expect("load")
            .is_none());
    }

    #[test]
    fn given_a_missing_directory_then_no_snapshot_and_nothing_to_delete() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope");
        assert!(latest_snapshot(&missing, i64::MAX).expect("load").is_none());
        delete_snapshots_above(&missing, 0).expect("delete");
    }

    #[test]
    fn given_snapshots_when_deleting_above_an_offset_then_that_offset_is_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), 10, &table_with(1, 9)).expect("write");
        write(dir.path(), 20, &table_with(1, 19)).expect("write");
        delete_snapshots_above(dir.path(), 10).expect("delete");
        assert_eq!(names(dir.path()), vec!["00000000000000000010.snapshot"]);
        delete_snapshots_above(dir.path(), 9).expect("delete");
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn given_stray_files_then_they_are_not_taken_for_snapshots_and_tmp_files_are_cleaned() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("notes.txt"), b"x").expect("write");
        fs::write(dir.path().join("12.snapshot"), b"x").expect("write");
        fs::write(
            dir.path().join("00000000000000000099.snapshot.tmp"),
            b"torn",
        )
        .expect("write");
        write(dir.path(), 5, &table_with(1, 4)).expect("write");
        assert_eq!(
            names(dir.path()),
            vec!["00000000000000000005.snapshot", "12.snapshot", "notes.txt"]
        );
        let (offset, _) = latest_snapshot(dir.path(), i64::MAX)
            .expect("load")
            .expect("some");
        assert_eq!(offset, 5);
    }

    #[test]
    fn given_a_negative_offset_then_write_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = write(dir.path(), -1, &ProducerStateTable::new()).expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(names(dir.path()).is_empty());
    }
}
