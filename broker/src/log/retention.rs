//! Which sealed segments retention deletes (Kafka's `delete` cleanup policy) and when
//! the active segment rolls by age. Pure: the partition gathers the segments' sizes and
//! timestamps, asks here, and moves its log start to the answer.
//!
//! Rules, as in Kafka: only a prefix of whole sealed segments goes, oldest first; a
//! segment goes when its newest record is older than `retention.ms`, or while the log
//! without it is still at least `retention.bytes`; and never one holding an offset at or
//! past `upper_bound` (the caller passes the smaller of the high watermark and the last
//! stable offset, so nothing a consumer has not been able to read, and nothing of an
//! open transaction, is deleted).

/// What retention needs to know of one sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentStats {
    pub base_offset: i64,
    pub next_offset: i64,
    pub size_bytes: u64,
    /// The largest record timestamp in it (`i64::MIN` if it holds none).
    pub max_timestamp: i64,
}

/// A topic's retention limits; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionLimits {
    pub retention_ms: Option<u64>,
    pub retention_bytes: Option<u64>,
}

/// Which limit made the last deleted segment go (for the log line and the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breach {
    Time,
    Size,
}

/// The new log start: the end of the longest deletable prefix of `sealed` (ascending),
/// or `None` when not even the first segment may go. `active_bytes` counts toward
/// `retention.bytes` but the active segment itself is never deleted.
pub fn retention_start(
    sealed: &[SegmentStats],
    active_bytes: u64,
    limits: RetentionLimits,
    now_ms: i64,
    upper_bound: i64,
) -> Option<(i64, Breach)> {
    let mut remaining = sealed
        .iter()
        .map(|s| s.size_bytes)
        .sum::<u64>()
        .saturating_add(active_bytes);
    let mut start = None;
    for segment in sealed {
        if segment.next_offset > upper_bound {
            break;
        }
        let expired = limits.retention_ms.is_some_and(|ms| {
            segment.max_timestamp != i64::MIN
                && i128::from(now_ms) - i128::from(segment.max_timestamp) > i128::from(ms)
        });
        let oversized = limits
            .retention_bytes
            .is_some_and(|limit| remaining - segment.size_bytes >= limit);
        if !expired && !oversized {
            break;
        }
        remaining -= segment.size_bytes;
        let breach = if expired { Breach::Time } else { Breach::Size };
        start = Some((segment.next_offset, breach));
    }
    start
}

/// Whether the active segment, whose first batch carries `first_batch_timestamp` (None:
/// empty), is `segment_ms` old and must roll, so that time retention reaches a
/// partition that no longer grows.
pub fn active_segment_due(
    first_batch_timestamp: Option<i64>,
    now_ms: i64,
    segment_ms: u64,
) -> bool {
    first_batch_timestamp
        .is_some_and(|first| i128::from(now_ms) - i128::from(first) >= i128::from(segment_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: i64 = 1_000_000;

    /// Segments of `sizes` bytes, 10 offsets each, the i-th with newest record at
    /// `stamps[i]`.
    fn segments(sizes: &[u64], stamps: &[i64]) -> Vec<SegmentStats> {
        sizes
            .iter()
            .zip(stamps)
            .enumerate()
            .map(|(i, (&size_bytes, &max_timestamp))| SegmentStats {
                base_offset: i as i64 * 10,
                next_offset: (i as i64 + 1) * 10,
                size_bytes,
                max_timestamp,
            })
            .collect()
    }

    fn limits(ms: Option<u64>, bytes: Option<u64>) -> RetentionLimits {
        RetentionLimits {
            retention_ms: ms,
            retention_bytes: bytes,
        }
    }

    #[test]
    fn given_expired_segments_then_the_prefix_of_them_goes_and_a_fresh_one_stops_it() {
        let sealed = segments(&[100; 4], &[NOW - 5000, NOW - 4000, NOW - 10, NOW - 9000]);
        let start = retention_start(&sealed, 0, limits(Some(1000), None), NOW, i64::MAX);
        assert_eq!(
            start,
            Some((20, Breach::Time)),
            "the fresh third segment stops it"
        );
    }

    #[test]
    fn given_a_size_limit_then_oldest_segments_go_until_the_log_fits() {
        let sealed = segments(&[100; 5], &[NOW; 5]);
        // 500 sealed + 50 active. As in Kafka a segment goes only if the log keeps at
        // least the limit without it: 250 lets three go (250 left), 260 only two.
        let start = retention_start(&sealed, 50, limits(None, Some(250)), NOW, i64::MAX);
        assert_eq!(start, Some((30, Breach::Size)));
        let start = retention_start(&sealed, 50, limits(None, Some(260)), NOW, i64::MAX);
        assert_eq!(start, Some((20, Breach::Size)));
        assert_eq!(
            retention_start(&sealed, 50, limits(None, Some(550)), NOW, i64::MAX),
            None,
            "a log exactly at the limit keeps everything"
        );
    }

    #[test]
    fn given_an_upper_bound_inside_a_segment_then_nothing_at_or_past_it_goes() {
        let sealed = segments(&[100; 4], &[0; 4]);
        let start = retention_start(&sealed, 0, limits(Some(1), Some(0)), NOW, 25);
        assert_eq!(start.map(|s| s.0), Some(20), "the segment holding 25 stays");
        assert_eq!(
            retention_start(&sealed, 0, limits(Some(1), None), NOW, 9),
            None
        );
    }

    #[test]
    fn given_no_limits_or_no_timestamps_then_nothing_goes() {
        let sealed = segments(&[100; 3], &[0; 3]);
        assert_eq!(
            retention_start(&sealed, 0, limits(None, None), NOW, i64::MAX),
            None
        );
        let unstamped = segments(&[100; 3], &[i64::MIN; 3]);
        assert_eq!(
            retention_start(&unstamped, 0, limits(Some(1), None), NOW, i64::MAX),
            None
        );
    }

    #[test]
    fn the_active_segment_rolls_once_its_first_batch_is_old_enough() {
        assert!(!active_segment_due(None, NOW, 1));
        assert!(!active_segment_due(Some(NOW - 999), NOW, 1000));
        assert!(active_segment_due(Some(NOW - 1000), NOW, 1000));
        assert!(!active_segment_due(Some(i64::MIN), i64::MIN, u64::MAX));
    }

    proptest! {
        /// The new start is the end of one of the segments, below the bound; every
        /// deleted segment broke a limit; the first kept one below the bound did not.
        #[test]
        fn the_start_ends_a_deletable_prefix_and_stops_at_the_first_keeper(
            sizes in prop::collection::vec(1u64..1000, 0..12),
            ages in prop::collection::vec(0i64..20_000, 12),
            active in 0u64..2000,
            ms in prop::option::of(0u64..20_000),
            bytes in prop::option::of(0u64..10_000),
            bound in 0i64..150,
        ) {
            let stamps: Vec<i64> = ages.iter().map(|a| NOW - a).collect();
            let sealed = segments(&sizes, &stamps);
            let limits = limits(ms, bytes);
            let start = retention_start(&sealed, active, limits, NOW, bound);
            let deleted = match start {
                Some((offset, _)) => {
                    prop_assert!(offset <= bound);
                    let n = sealed.iter().position(|s| s.next_offset == offset);
                    prop_assert!(n.is_some(), "start {} ends no segment", offset);
                    n.map_or(0, |n| n + 1)
                }
                None => 0,
            };
            let total: u64 = sizes.iter().sum::<u64>() + active;
            let mut remaining = total;
            for s in &sealed[..deleted] {
                let expired = ms.is_some_and(|ms| NOW - s.max_timestamp > ms as i64);
                let oversized = bytes.is_some_and(|b| remaining - s.size_bytes >= b);
                prop_assert!(expired || oversized);
                remaining -= s.size_bytes;
            }
            if let Some(keeper) = sealed.get(deleted).filter(|s| s.next_offset <= bound) {
                let expired = ms.is_some_and(|ms| NOW - keeper.max_timestamp > ms as i64);
                let oversized = bytes.is_some_and(|b| remaining - keeper.size_bytes >= b);
                prop_assert!(!expired && !oversized);
            }
        }

        /// Time only moves retention forward.
        #[test]
        fn later_never_keeps_more(
            ages in prop::collection::vec(0i64..20_000, 1..10),
            ms in 0u64..20_000,
            later in 0i64..20_000,
        ) {
            let stamps: Vec<i64> = ages.iter().map(|a| NOW - a).collect();
            let sealed = segments(&vec![100; stamps.len()], &stamps);
            let limits = limits(Some(ms), None);
            let now = retention_start(&sealed, 0, limits, NOW, i64::MAX).map_or(0, |s| s.0);
            let then = retention_start(&sealed, 0, limits, NOW + later, i64::MAX).map_or(0, |s| s.0);
            prop_assert!(then >= now);
        }
    }
}
