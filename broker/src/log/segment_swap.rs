//! Replacing a run of consecutive segments by one cleaned segment, crash-safely, and the
//! decision of which files on disk form the log when it opens. Pure: a swap is a list of
//! [`FileOp`]s that the cleaner performs in order (fsyncing the directory where the
//! list says), and [`resolve`] maps any directory listing to the ops that finish or undo
//! an interrupted swap. Invariant: after `resolve`'s ops, the segment files are either
//! all the old ones of the group or the merged one alone, never a gap or an overlap.
//!
//! The commit point is the rename of `{first}.log.cleaned` (written and fsynced first)
//! to `{first:020}.{end:020}.swap`, whose name says which offsets it replaces: once it
//! exists, every `.log` with a base in `first..end` is a leftover, whatever else the
//! crash left behind; before it, the `.cleaned` file is the leftover.

use std::path::{Path, PathBuf};

use super::segment::{self, INDEX_SUFFIX, LOG_SUFFIX};

/// Suffix of a group of segments being cleaned into one.
const CLEANED_SUFFIX: &str = ".log.cleaned";
const SWAP_SUFFIX: &str = ".swap";

/// A file of a partition directory that a swap creates, renames or removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum SegmentFile {
    Log(i64),
    Index(i64),
    /// The cleaned (merged) segment being written for the group starting at its base.
    Cleaned(i64),
    /// The committed merged segment for offsets `first..end`, about to become `Log(first)`.
    Swap {
        first: i64,
        end: i64,
    },
}

/// One step of a swap or of its recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileOp {
    /// Atomically replaces `to` (if it exists) with `from`.
    Rename { from: SegmentFile, to: SegmentFile },
    /// Removes the file; a missing one is no error.
    Remove(SegmentFile),
    /// Makes the directory entries changed so far durable: no later op can reach the
    /// disk before the ones above it.
    SyncDir,
}

impl SegmentFile {
    pub(crate) fn path(self, dir: &Path) -> PathBuf {
        match self {
            SegmentFile::Log(base) => segment::log_path(dir, base),
            SegmentFile::Index(base) => segment::index_path(dir, base),
            SegmentFile::Cleaned(base) => dir.join(format!("{base:020}{CLEANED_SUFFIX}")),
            SegmentFile::Swap { first, end } => {
                dir.join(format!("{first:020}.{end:020}{SWAP_SUFFIX}"))
            }
        }
    }

    /// The segment file a directory entry name is, if it is one.
    pub(crate) fn parse(name: &str) -> Option<SegmentFile> {
        if let Some(base) = segment::parse_base_offset(name, LOG_SUFFIX) {
            return Some(SegmentFile::Log(base));
        }
        if let Some(base) = segment::parse_base_offset(name, INDEX_SUFFIX) {
            return Some(SegmentFile::Index(base));
        }
        if let Some(base) = segment::parse_base_offset(name, CLEANED_SUFFIX) {
            return Some(SegmentFile::Cleaned(base));
        }
        let stem = name.strip_suffix(SWAP_SUFFIX)?;
        let (first, end) = stem.split_once('.')?;
        let first = segment::parse_base_offset(&format!("{first}{LOG_SUFFIX}"), LOG_SUFFIX)?;
        let end = segment::parse_base_offset(&format!("{end}{LOG_SUFFIX}"), LOG_SUFFIX)?;
        (first < end).then_some(SegmentFile::Swap { first, end })
    }
}

/// The ops that put the merged segment `Cleaned(bases[0])` (written and fsynced,
/// covering `bases[0]..end`) in place of the segments at `bases`.
pub(crate) fn merge_plan(bases: &[i64], end: i64) -> Vec<FileOp> {
    let Some(&first) = bases.first() else {
        return Vec::new();
    };
    let swap = SegmentFile::Swap { first, end };
    let mut ops = vec![
        FileOp::Rename {
            from: SegmentFile::Cleaned(first),
            to: swap,
        },
        FileOp::SyncDir,
    ];
    // The first `.log` is replaced by the rename below; the old indexes point into old
    // files. The later logs go before the swap loses its name, so no state has the merged
    // `Log(first)` beside a later log it covers.
    ops.extend(bases.iter().map(|&b| FileOp::Remove(SegmentFile::Index(b))));
    ops.extend(
        bases[1..]
            .iter()
            .map(|&b| FileOp::Remove(SegmentFile::Log(b))),
    );
    ops.push(FileOp::SyncDir);
    ops.push(FileOp::Rename {
        from: swap,
        to: SegmentFile::Log(first),
    });
    ops.push(FileOp::SyncDir);
    ops
}

/// What opening a directory holding `files` must do before loading segments: the ops
/// that undo an uncommitted swap (drop the `.cleaned` file) or finish a committed one
/// (drop what the swap covers, rename it into place), and drop indexes without a log;
/// and the base offsets of the segments left, ascending.
pub(crate) fn resolve(files: &[SegmentFile]) -> (Vec<FileOp>, Vec<i64>) {
    let mut ops = Vec::new();
    let mut logs: Vec<i64> = Vec::new();
    let mut swaps: Vec<(i64, i64)> = Vec::new();
    for &file in files {
        match file {
            SegmentFile::Log(base) => logs.push(base),
            SegmentFile::Cleaned(_) => ops.push(FileOp::Remove(file)),
            SegmentFile::Swap { first, end } => swaps.push((first, end)),
            SegmentFile::Index(_) => {}
        }
    }
    swaps.sort_unstable();
    for &(first, end) in &swaps {
        let covered = |b: i64| (first..end).contains(&b);
        for &file in files {
            match file {
                SegmentFile::Log(b) if covered(b) && b != first => ops.push(FileOp::Remove(file)),
                SegmentFile::Index(b) if covered(b) => ops.push(FileOp::Remove(file)),
                _ => {}
            }
        }
        logs.retain(|&b| !covered(b));
        logs.push(first);
    }
    if !swaps.is_empty() {
        ops.push(FileOp::SyncDir);
        ops.extend(swaps.iter().map(|&(first, end)| FileOp::Rename {
            from: SegmentFile::Swap { first, end },
            to: SegmentFile::Log(first),
        }));
    }
    logs.sort_unstable();
    logs.dedup();
    for &file in files {
        if let SegmentFile::Index(b) = file {
            let swapped = swaps.iter().any(|&(first, end)| (first..end).contains(&b));
            if !swapped && logs.binary_search(&b).is_err() {
                ops.push(FileOp::Remove(file));
            }
        }
    }
    if !ops.is_empty() && ops.last() != Some(&FileOp::SyncDir) {
        ops.push(FileOp::SyncDir);
    }
    (ops, logs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// What a file holds in the model: an original segment `base..next`, or the merged
    /// one `first..end`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Content {
        Old(i64, i64),
        Merged(i64, i64),
        Index,
    }

    type Dir = BTreeMap<SegmentFile, Content>;

    fn apply(dir: &mut Dir, op: FileOp) {
        match op {
            FileOp::Rename { from, to } => {
                if let Some(content) = dir.remove(&from) {
                    dir.insert(to, content);
                }
            }
            FileOp::Remove(file) => {
                dir.remove(&file);
            }
            FileOp::SyncDir => {}
        }
    }

    /// Opens the model directory: resolves, applies, and returns the contents of the
    /// segments by base, in order.
    fn open(dir: &mut Dir) -> Vec<(i64, Content)> {
        let files: Vec<SegmentFile> = dir.keys().copied().collect();
        let (ops, bases) = resolve(&files);
        for op in ops {
            apply(dir, op);
        }
        let on_disk: Vec<i64> = dir
            .keys()
            .filter_map(|f| match f {
                SegmentFile::Log(b) => Some(*b),
                _ => None,
            })
            .collect();
        assert_eq!(
            on_disk, bases,
            "resolve names exactly the logs left: {dir:?}"
        );
        assert!(
            dir.keys()
                .all(|f| matches!(f, SegmentFile::Log(_) | SegmentFile::Index(_))),
            "no leftover: {dir:?}"
        );
        bases
            .iter()
            .map(|b| (*b, dir[&SegmentFile::Log(*b)]))
            .collect()
    }

    /// `bases` of consecutive segments (the last ends at `end`), with the group
    /// `from..to` (indices) merged.
    fn scenario() -> impl Strategy<Value = (Vec<i64>, i64, usize, usize)> {
        (2usize..8, 1i64..5).prop_flat_map(|(n, step)| {
            let bases: Vec<i64> = (0..n as i64).map(|i| 10 + i * step).collect();
            let end = 10 + n as i64 * step;
            (0..n).prop_flat_map(move |from| {
                let bases = bases.clone();
                (from + 1..=n).prop_map(move |to| (bases.clone(), end, from, to))
            })
        })
    }

    proptest! {
        /// A crash after any prefix of the swap's ops, and again after any prefix of the
        /// recovery's ops, opens as the old segments or with the group merged.
        #[test]
        fn a_crash_at_any_step_of_a_merge_opens_as_the_old_or_the_merged_log(
            (bases, end, from, to) in scenario(),
            crash_in_recovery in 0usize..20,
        ) {
            let next = |i: usize| bases.get(i + 1).copied().unwrap_or(end);
            let mut before = Dir::new();
            for (i, &b) in bases.iter().enumerate() {
                before.insert(SegmentFile::Log(b), Content::Old(b, next(i)));
                before.insert(SegmentFile::Index(b), Content::Index);
            }
            let (first, group_end) = (bases[from], next(to - 1));
            before.insert(SegmentFile::Cleaned(first), Content::Merged(first, group_end));
            let old: Vec<(i64, Content)> =
                bases.iter().enumerate().map(|(i, &b)| (b, Content::Old(b, next(i)))).collect();
            let mut merged: Vec<(i64, Content)> = old[..from].to_vec();
            merged.push((first, Content::Merged(first, group_end)));
            merged.extend_from_slice(&old[to..]);

            let plan = merge_plan(&bases[from..to], group_end);
            for crash_at in 0..=plan.len() {
                let mut dir = before.clone();
                for &op in &plan[..crash_at] {
                    apply(&mut dir, op);
                }
                // A second crash part-way through recovery.
                let files: Vec<SegmentFile> = dir.keys().copied().collect();
                let (recovery, _) = resolve(&files);
                for &op in recovery.iter().take(crash_in_recovery) {
                    apply(&mut dir, op);
                }
                let log = open(&mut dir);
                prop_assert!(
                    log == old || log == merged,
                    "crash after {crash_at} ops: {log:?}"
                );
                // Committed once the swap file's name is durable.
                if crash_at >= 2 {
                    prop_assert_eq!(&log, &merged);
                }
                if crash_at == plan.len() {
                    prop_assert_eq!(&log, &merged);
                }
            }
        }
    }

    #[test]
    fn swap_file_names_carry_the_covered_offsets() {
        let dir = Path::new("/p");
        let swap = SegmentFile::Swap { first: 5, end: 42 };
        let path = swap.path(dir);
        assert_eq!(
            path,
            Path::new("/p/00000000000000000005.00000000000000000042.swap")
        );
        let name = path.file_name().and_then(|n| n.to_str()).expect("name");
        assert_eq!(SegmentFile::parse(name), Some(swap));
        assert_eq!(
            SegmentFile::parse("00000000000000000005.log.cleaned"),
            Some(SegmentFile::Cleaned(5))
        );
        assert_eq!(SegmentFile::parse("5.42.swap"), None);
        assert_eq!(
            SegmentFile::parse("00000000000000000042.00000000000000000005.swap"),
            None
        );
    }

    #[test]
    fn an_index_without_its_log_goes_and_a_clean_directory_needs_nothing() {
        let files = [
            SegmentFile::Log(0),
            SegmentFile::Index(0),
            SegmentFile::Index(7),
            SegmentFile::Log(9),
        ];
        let (ops, bases) = resolve(&files);
        assert_eq!(bases, vec![0, 9]);
        assert_eq!(
            ops,
            vec![FileOp::Remove(SegmentFile::Index(7)), FileOp::SyncDir]
        );
        let (ops, _) = resolve(&[SegmentFile::Log(0), SegmentFile::Index(0)]);
        assert!(ops.is_empty());
    }
}
