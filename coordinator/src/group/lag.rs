//! Consumer lag, the gauge operators alert on (`idem_consumer_group_lag`,
//! docs/operations.md): per group and topic, how many records the group's committed
//! offsets are behind the partitions' high watermarks. Pure: the coordinator's duty
//! (`server.rs`) reads the committed offsets of the groups it owns and asks the
//! leaders for the high watermarks, then hands both here.
//!
//! A (group, topic) is reported only when the high watermark of every partition it
//! committed is known this round: a sum over some partitions would look like a lag
//! that fell, the one reading an alert must not get wrong. The gauge of a pair not
//! reported goes stale and the exporter drops it (`metrics_endpoint.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::txn::decide::TopicPartition;

/// One committed offset of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub group_id: String,
    pub tp: TopicPartition,
    pub offset: i64,
}

/// Every partition some group committed, once each: what to ask the leaders for.
pub fn partitions(committed: &[Committed]) -> BTreeSet<TopicPartition> {
    committed.iter().map(|c| c.tp.clone()).collect()
}

/// The lag of each (group, topic) whose every committed partition has a known high
/// watermark in `ends`: the sum over its partitions of how far the committed offset is
/// below the high watermark (never negative: a commit past the watermark, as after a
/// truncation, is no lag).
pub fn by_group_and_topic(
    committed: &[Committed],
    ends: &HashMap<TopicPartition, i64>,
) -> BTreeMap<(String, String), i64> {
    let mut lags: BTreeMap<(String, String), Option<i64>> = BTreeMap::new();
    for c in committed {
        let key = (c.group_id.clone(), c.tp.topic.clone());
        let behind = ends.get(&c.tp).map(|end| (end - c.offset).max(0));
        let entry = lags.entry(key).or_insert(Some(0));
        *entry = match (*entry, behind) {
            (Some(sum), Some(behind)) => Some(sum.saturating_add(behind)),
            _ => None,
        };
    }
    lags.into_iter()
        .filter_map(|(key, lag)| lag.map(|lag| (key, lag)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    fn committed(group: &str, topic: &str, partition: i32, offset: i64) -> Committed {
        Committed {
            group_id: group.into(),
            tp: tp(topic, partition),
            offset,
        }
    }

    #[test]
    fn given_two_groups_on_one_topic_then_each_gets_its_own_sum() {
        let offsets = [
            committed("a", "orders", 0, 4),
            committed("a", "orders", 1, 10),
            committed("b", "orders", 0, 0),
            committed("a", "audit", 0, 7),
        ];
        let ends = HashMap::from([
            (tp("orders", 0), 10),
            (tp("orders", 1), 12),
            (tp("audit", 0), 7),
        ]);
        let lags = by_group_and_topic(&offsets, &ends);
        assert_eq!(
            lags,
            BTreeMap::from([
                (("a".into(), "audit".into()), 0),
                (("a".into(), "orders".into()), 8),
                (("b".into(), "orders".into()), 10),
            ])
        );
        assert_eq!(partitions(&offsets).len(), 3);
    }

    #[test]
    fn given_a_partition_without_a_known_end_then_its_group_and_topic_are_not_reported() {
        let offsets = [
            committed("a", "orders", 0, 4),
            committed("a", "orders", 1, 10),
            committed("a", "audit", 0, 1),
        ];
        let ends = HashMap::from([(tp("orders", 0), 10), (tp("audit", 0), 3)]);
        let lags = by_group_and_topic(&offsets, &ends);
        assert_eq!(lags, BTreeMap::from([(("a".into(), "audit".into()), 2)]));
    }

    #[test]
    fn given_a_commit_past_the_high_watermark_then_it_is_no_lag() {
        let offsets = [committed("a", "orders", 0, 15)];
        let ends = HashMap::from([(tp("orders", 0), 10)]);
        assert_eq!(
            by_group_and_topic(&offsets, &ends),
            BTreeMap::from([(("a".into(), "orders".into()), 0)])
        );
    }

    proptest! {
        /// With every end known, the lags add up to the records behind over all
        /// partitions, and every (group, topic) committed is reported.
        #[test]
        fn with_every_end_known_the_lags_sum_the_records_behind(
            rows in prop::collection::vec((0..3u8, 0..3u8, 0..4i32, 0..1000i64, 0..1000i64), 0..40)
        ) {
            // One committed offset per (group, partition), as the coordinator holds them.
            let mut unique: BTreeMap<(u8, u8, i32), (i64, i64)> = BTreeMap::new();
            for (g, t, p, offset, end) in rows {
                unique.insert((g, t, p), (offset, end));
            }
            let mut ends = HashMap::new();
            let mut offsets = Vec::new();
            let mut expected_total = 0i64;
            for ((g, t, p), (offset, end)) in &unique {
                let tp = tp(&format!("t{t}"), *p);
                // One end per partition, whichever group names it.
                let end = *ends.entry(tp.clone()).or_insert(*end);
                expected_total += (end - offset).max(0);
                offsets.push(Committed { group_id: format!("g{g}"), tp, offset: *offset });
            }
            let lags = by_group_and_topic(&offsets, &ends);
            prop_assert_eq!(lags.values().sum::<i64>(), expected_total);
            let pairs: BTreeSet<(String, String)> =
                offsets.iter().map(|c| (c.group_id.clone(), c.tp.topic.clone())).collect();
            prop_assert_eq!(lags.keys().cloned().collect::<BTreeSet<_>>(), pairs);
            prop_assert!(lags.values().all(|lag| *lag >= 0));
        }
    }
}
