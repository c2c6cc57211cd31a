//! Which processed keys a prune may delete. The rule: a key is kept at least as long as
//! the topic keeps the records it deduplicates (the topic's `retention.ms`); a key pruned
//! earlier would let a re-sent business event that is still in the log, or an upstream
//! duplicate produced later, be applied twice. Records deduplicated by their log place
//! are also covered by the stored positions, so the rule matters for business keys.

use std::time::Duration;

use super::error::InboxError;

/// How long a topic keeps its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicRetention {
    /// `retention.ms = -1`: forever; its keys may never be pruned.
    Forever,
    For(Duration),
}

impl TopicRetention {
    /// From the topic's `retention.ms` (negative: forever).
    pub fn from_retention_ms(ms: i64) -> TopicRetention {
        if ms < 0 {
            TopicRetention::Forever
        } else {
            TopicRetention::For(Duration::from_millis(ms as u64))
        }
    }
}

/// Keys processed before the returned time (ms since the epoch) may go; an error when
/// `keep` is shorter than the topic's retention.
pub fn prune_cutoff_ms(
    now_ms: i64,
    keep: Duration,
    topic: TopicRetention,
) -> Result<i64, InboxError> {
    match topic {
        TopicRetention::Forever => Err(InboxError::RetentionTooShort {
            keep,
            topic_retention: None,
        }),
        TopicRetention::For(retention) if keep < retention => Err(InboxError::RetentionTooShort {
            keep,
            topic_retention: Some(retention),
        }),
        TopicRetention::For(_) => {
            let keep_ms = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
            Ok(now_ms.saturating_sub(keep_ms))
        }
    }
}

/// What a prune by count deletes in one partition: keys of records below `offset` (the
/// `keep_newest` newest keys of the partition are at or above it) that were also
/// processed before `processed_before_ms` (older than the topic's retention).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountPrune {
    pub offset: i64,
    pub processed_before_ms: i64,
}

impl CountPrune {
    /// Whether the key of the record at `offset`, processed at `processed_at_ms`, goes
    /// (what the DELETE's WHERE says).
    pub fn removes(&self, offset: i64, processed_at_ms: i64) -> bool {
        offset < self.offset && processed_at_ms < self.processed_before_ms
    }
}

/// The prune by count of one partition, keeping its `keep_newest` newest keys (by
/// record offset): `kept_oldest_offset` is the offset of the oldest of those (the
/// `keep_newest`th newest key; `None` when the partition holds fewer than
/// `keep_newest` keys: nothing goes). A count never overrides the retention rule:
/// keys younger than the topic's retention stay however many there are. `Ok(None)`:
/// nothing to delete. A topic kept forever is refused, as by [`prune_cutoff_ms`].
pub fn count_prune(
    now_ms: i64,
    keep_newest: u64,
    kept_oldest_offset: Option<i64>,
    topic: TopicRetention,
) -> Result<Option<CountPrune>, InboxError> {
    let retention = match topic {
        TopicRetention::Forever => {
            return Err(InboxError::RetentionTooShort {
                keep: Duration::ZERO,
                topic_retention: None,
            })
        }
        TopicRetention::For(retention) => retention,
    };
    let processed_before_ms = prune_cutoff_ms(now_ms, retention, topic)?;
    Ok(match kept_oldest_offset {
        Some(offset) if keep_newest > 0 => Some(CountPrune {
            offset,
            processed_before_ms,
        }),
        // Keeping none: every key older than the retention goes.
        _ if keep_newest == 0 => Some(CountPrune {
            offset: i64::MAX,
            processed_before_ms,
        }),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn given_a_topic_kept_forever_then_nothing_is_pruned() {
        let got = prune_cutoff_ms(
            1_000,
            Duration::from_secs(1),
            TopicRetention::from_retention_ms(-1),
        );
        assert!(matches!(
            got,
            Err(InboxError::RetentionTooShort {
                topic_retention: None,
                ..
            })
        ));
    }

    #[test]
    fn given_keep_shorter_than_the_topic_then_prune_is_refused() {
        let got = prune_cutoff_ms(
            10_000_000,
            Duration::from_secs(60),
            TopicRetention::For(Duration::from_secs(3600)),
        );
        assert!(matches!(got, Err(InboxError::RetentionTooShort { .. })));
    }

    #[test]
    fn given_a_topic_kept_forever_then_no_count_prune() {
        let got = count_prune(1_000, 10, Some(5), TopicRetention::Forever);
        assert!(matches!(got, Err(InboxError::RetentionTooShort { .. })));
    }

    /// The partition's keys as (offset, processed at), and the offset of the
    /// `keep_newest`th newest, as the inbox's shell asks the database for it.
    fn kept_oldest(keys: &[(i64, i64)], keep_newest: u64) -> Option<i64> {
        let mut offsets: Vec<i64> = keys.iter().map(|(o, _)| *o).collect();
        offsets.sort_unstable_by(|a, b| b.cmp(a));
        if keep_newest == 0 || (offsets.len() as u64) < keep_newest {
            return None;
        }
        offsets.get(keep_newest as usize - 1).copied()
    }

    #[test]
    fn given_more_old_keys_than_the_count_then_the_oldest_go() {
        let keys: Vec<(i64, i64)> = (0..10).map(|o| (o, 0)).collect();
        let hour = Duration::from_secs(3600);
        let rule = count_prune(
            10 * 3_600_000,
            3,
            kept_oldest(&keys, 3),
            TopicRetention::For(hour),
        )
        .expect("allowed")
        .expect("something to prune");
        let kept: Vec<i64> = keys
            .iter()
            .filter(|(o, t)| !rule.removes(*o, *t))
            .map(|(o, _)| *o)
            .collect();
        assert_eq!(kept, [7, 8, 9]);
    }

    proptest! {
        /// Whatever a partition holds: the `keep_newest` newest keys stay, no key
        /// younger than the topic's retention goes, and every key that stays beyond the
        /// count is one of those young ones.
        #[test]
        fn a_count_prune_keeps_the_newest_and_every_young_key(
            ages in proptest::collection::vec(0i64..2_000, 0..60),
            keep_newest in 0u64..20,
            retention in 0u64..2_000,
        ) {
            let now = 10_000i64;
            // Distinct offsets, in order; processed at `now - age`.
            let keys: Vec<(i64, i64)> = ages.iter().enumerate().map(|(o, age)| (o as i64 * 3, now - age)).collect();
            let rule = count_prune(now, keep_newest, kept_oldest(&keys, keep_newest),
                TopicRetention::For(Duration::from_millis(retention))).expect("allowed");
            let mut newest: Vec<i64> = keys.iter().map(|(o, _)| *o).collect();
            newest.sort_unstable_by(|a, b| b.cmp(a));
            newest.truncate(keep_newest as usize);
            for (offset, at) in &keys {
                let removed = rule.is_some_and(|r| r.removes(*offset, *at));
                let young = now - at <= retention as i64;
                if newest.contains(offset) || young {
                    prop_assert!(!removed, "key {offset} (age {}) removed", now - at);
                } else {
                    prop_assert!(removed, "key {offset} (age {}) kept", now - at);
                }
            }
        }
    }

    proptest! {
        /// Every key the cut-off lets go is older than the topic's retention.
        #[test]
        fn pruned_keys_are_older_than_the_topic_retention(
            now in 0i64..1_000_000_000_000, keep in 0u64..10_000_000, topic in 0u64..10_000_000,
        ) {
            let got = prune_cutoff_ms(now, Duration::from_millis(keep), TopicRetention::For(Duration::from_millis(topic)));
            match got {
                Ok(cutoff) => {
                    prop_assert!(keep >= topic);
                    prop_assert!(now - cutoff >= topic as i64);
                }
                Err(_) => prop_assert!(keep < topic),
            }
        }
    }
}
