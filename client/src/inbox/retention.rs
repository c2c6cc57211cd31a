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
