//! Which producer-state snapshots of a partition are kept when its snapshots are pruned.
//! A follower's truncation never goes below the high watermark and rebuilds the table
//! from the newest snapshot at or below its cut, so besides the newest two (the second a
//! fallback for a corrupt newest) the newest one at or below the high watermark stays:
//! without it a truncation replays from an older point, and once retention deleted an
//! idle producer's batches, that producer is forgotten (KAFKA-7190). Pure: the caller
//! lists the files and deletes the rest.

use std::collections::BTreeSet;

/// Snapshots kept by recency: the newest and one fallback in case it is corrupt.
pub const NEWEST_KEPT: usize = 2;

/// Where the partition's log stands when its snapshots are pruned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotBounds {
    /// The first offset still on disk (the first segment's base): a snapshot below it
    /// would need the deleted batches in between to be replayed.
    pub log_start: i64,
    /// No truncation goes below it (except an unclean election, which loses data).
    pub high_watermark: i64,
    /// A snapshot above it describes batches that are gone.
    pub log_end: i64,
}

/// The snapshot offsets among `offsets` to keep: of those in `log_start..=log_end`, the
/// newest [`NEWEST_KEPT`] and the newest at or below the high watermark (at most
/// `NEWEST_KEPT + 1` in all).
pub fn snapshots_to_keep(offsets: &[i64], bounds: SnapshotBounds) -> BTreeSet<i64> {
    let mut usable: Vec<i64> = offsets
        .iter()
        .copied()
        .filter(|o| (bounds.log_start..=bounds.log_end).contains(o))
        .collect();
    usable.sort_unstable_by(|a, b| b.cmp(a));
    usable.dedup();
    let mut keep: BTreeSet<i64> = usable.iter().copied().take(NEWEST_KEPT).collect();
    if let Some(&at_or_below_hw) = usable.iter().find(|&&o| o <= bounds.high_watermark) {
        keep.insert(at_or_below_hw);
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bounds(log_start: i64, high_watermark: i64, log_end: i64) -> SnapshotBounds {
        SnapshotBounds {
            log_start,
            high_watermark,
            log_end,
        }
    }

    fn kept(offsets: &[i64], b: SnapshotBounds) -> Vec<i64> {
        snapshots_to_keep(offsets, b).into_iter().collect()
    }

    #[test]
    fn given_a_high_watermark_below_the_newest_two_then_the_newest_at_or_below_it_stays() {
        assert_eq!(
            kept(&[10, 20, 30, 40, 50], bounds(0, 25, 50)),
            vec![20, 40, 50]
        );
    }

    #[test]
    fn given_the_newest_two_at_or_below_the_high_watermark_then_only_they_stay() {
        assert_eq!(kept(&[10, 20, 30, 40], bounds(0, 40, 40)), vec![30, 40]);
        assert_eq!(kept(&[10, 20, 30, 40], bounds(0, 35, 40)), vec![30, 40]);
    }

    #[test]
    fn given_snapshots_outside_the_log_then_none_of_them_stays() {
        assert_eq!(kept(&[5, 10, 20, 60], bounds(10, 15, 50)), vec![10, 20]);
        assert_eq!(kept(&[5], bounds(10, 15, 50)), Vec::<i64>::new());
    }

    #[test]
    fn given_no_snapshot_at_or_below_the_high_watermark_then_the_newest_two_stay() {
        assert_eq!(kept(&[30, 40, 50], bounds(0, 25, 50)), vec![40, 50]);
    }

    proptest! {
        #[test]
        fn kept_snapshots_are_usable_few_and_cover_the_newest_and_the_high_watermark(
            offsets in prop::collection::vec(0i64..200, 0..12),
            log_start in 0i64..100,
            hw_past_start in 0i64..100,
            end_past_hw in 0i64..100,
        ) {
            let high_watermark = log_start + hw_past_start;
            let log_end = high_watermark + end_past_hw;
            let b = bounds(log_start, high_watermark, log_end);
            let keep = snapshots_to_keep(&offsets, b);
            let usable: Vec<i64> = offsets
                .iter()
                .copied()
                .filter(|o| (log_start..=log_end).contains(o))
                .collect();

            prop_assert!(keep.len() <= NEWEST_KEPT + 1, "{keep:?}");
            for o in &keep {
                prop_assert!(offsets.contains(o), "{o} was never written");
                prop_assert!((log_start..=log_end).contains(o), "{o} is not replayable");
            }
            if let Some(newest) = usable.iter().max() {
                prop_assert!(keep.contains(newest), "newest {newest} dropped: {keep:?}");
            }
            let second = usable.iter().filter(|&&o| Some(&o) != usable.iter().max()).max();
            if let Some(second) = second {
                prop_assert!(keep.contains(second), "fallback {second} dropped: {keep:?}");
            }
            if let Some(below) = usable.iter().filter(|&&o| o <= high_watermark).max() {
                prop_assert!(
                    keep.contains(below),
                    "newest at or below the high watermark {below} dropped: {keep:?}"
                );
            }
        }
    }
}
