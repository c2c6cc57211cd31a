//! What one Inbox transaction does with a batch of records, decided without a database:
//! which records are already behind the stored position of their partition (processed
//! before, whatever their key; skipped even after their key was pruned), and which next
//! positions to store. Positions only move forward, so a consumer that re-reads old
//! records, or a stale owner of a partition, never winds a position back.

use std::collections::BTreeMap;

use crate::group::member::TopicPartition;

/// Where a record stands against the position stored for its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// At or past the stored position: its key decides (new → apply, known → skip).
    Candidate,
    /// Below the stored position: this inbox processed it already.
    Behind,
}

/// For each record (given as `(topic, partition, offset)`), its standing, reading
/// `stored` (next offset per partition) as it is before the batch.
pub fn standings<'a>(
    records: impl IntoIterator<Item = (&'a str, i32, i64)>,
    stored: &BTreeMap<TopicPartition, i64>,
) -> Vec<Standing> {
    records
        .into_iter()
        .map(
            |(topic, partition, offset)| match stored.get(&(topic.to_string(), partition)) {
                Some(&next) if offset < next => Standing::Behind,
                _ => Standing::Candidate,
            },
        )
        .collect()
}

/// The next positions to store after the batch: one past the highest offset seen per
/// partition, only where that is past what is stored.
pub fn positions_to_store<'a>(
    records: impl IntoIterator<Item = (&'a str, i32, i64)>,
    stored: &BTreeMap<TopicPartition, i64>,
) -> BTreeMap<TopicPartition, i64> {
    let mut next: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    for (topic, partition, offset) in records {
        let entry = next
            .entry((topic.to_string(), partition))
            .or_insert(offset + 1);
        *entry = (*entry).max(offset + 1);
    }
    next.retain(|tp, offset| stored.get(tp).is_none_or(|s| *offset > *s));
    next
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn stored(entries: &[(&str, i32, i64)]) -> BTreeMap<TopicPartition, i64> {
        entries
            .iter()
            .map(|(t, p, o)| ((t.to_string(), *p), *o))
            .collect()
    }

    #[test]
    fn given_a_stored_position_then_records_below_it_are_behind() {
        let s = stored(&[("t", 0, 10)]);
        let got = standings([("t", 0, 9), ("t", 0, 10), ("t", 1, 0)], &s);
        assert_eq!(
            got,
            [Standing::Behind, Standing::Candidate, Standing::Candidate]
        );
    }

    #[test]
    fn given_a_batch_then_each_partition_moves_one_past_its_highest_offset() {
        let s = stored(&[("t", 1, 100)]);
        let got = positions_to_store([("t", 0, 4), ("t", 0, 7), ("t", 1, 50), ("u", 0, 0)], &s);
        assert_eq!(got, stored(&[("t", 0, 8), ("u", 0, 1)]));
    }

    proptest! {
        /// Whatever the batch, a stored position never moves back, and after the batch
        /// every record of it is behind the resulting position (a replay skips it).
        #[test]
        fn positions_only_move_forward_and_cover_the_batch(
            batch in proptest::collection::vec((0i32..3, 0i64..50), 0..30),
            before in proptest::collection::btree_map(0i32..3, 0i64..60, 0..3),
        ) {
            let s: BTreeMap<TopicPartition, i64> =
                before.iter().map(|(p, o)| (("t".to_string(), *p), *o)).collect();
            let records: Vec<(&str, i32, i64)> = batch.iter().map(|(p, o)| ("t", *p, *o)).collect();
            let moved = positions_to_store(records.iter().copied(), &s);
            for (tp, next) in &moved {
                prop_assert!(s.get(tp).is_none_or(|old| next > old));
            }
            let mut after = s.clone();
            after.extend(moved);
            for standing in standings(records.iter().copied(), &after) {
                prop_assert_eq!(standing, Standing::Behind);
            }
        }
    }
}
