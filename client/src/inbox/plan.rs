//! What one Inbox transaction does with a batch of records, decided without a database:
//! which records are already behind the stored position of their partition (processed
//! before, whatever their key; skipped even after their key was pruned), and which next
//! positions to store. Positions only move forward, so a consumer that re-reads old
//! records, or a stale owner of a partition, never winds a position back.

use std::collections::{BTreeMap, HashSet};

use crate::group::member::TopicPartition;

/// What became of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// New: the business writes ran and were committed with its key and position.
    Applied,
    /// Its idempotency key was processed before (an upstream duplicate, a re-read, or
    /// an earlier record of the same batch with the same key).
    Duplicate,
    /// Below the stored position of its partition: processed before.
    Behind,
}

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

/// Which records' keys the batch inserts (indexes into the batch, in order): every
/// candidate's key once, at its first record; a later record of the batch with the same
/// key is a duplicate of that one whatever the database holds.
pub fn keys_to_insert(standings: &[Standing], keys: &[String]) -> Vec<usize> {
    let mut seen: HashSet<&str> = HashSet::new();
    standings
        .iter()
        .zip(keys)
        .enumerate()
        .filter(|(_, (standing, key))| {
            **standing == Standing::Candidate && seen.insert(key.as_str())
        })
        .map(|(i, _)| i)
        .collect()
}

/// Each record's outcome, given the keys the database reported as newly inserted by
/// this batch (`inserted`, from [`keys_to_insert`]'s records): a candidate is applied
/// only at the first record carrying a newly inserted key, so no key is applied twice.
pub fn outcomes(
    standings: &[Standing],
    keys: &[String],
    inserted: &HashSet<String>,
) -> Vec<Outcome> {
    let mut applied: HashSet<&str> = HashSet::new();
    standings
        .iter()
        .zip(keys)
        .map(|(standing, key)| match standing {
            Standing::Behind => Outcome::Behind,
            Standing::Candidate if inserted.contains(key) && applied.insert(key.as_str()) => {
                Outcome::Applied
            }
            Standing::Candidate => Outcome::Duplicate,
        })
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

    #[test]
    fn given_one_key_twice_in_a_batch_then_only_its_first_record_is_applied() {
        let standings = [Standing::Candidate; 3];
        let keys = ["a".to_string(), "b".to_string(), "a".to_string()];
        assert_eq!(keys_to_insert(&standings, &keys), [0, 1]);
        let inserted: HashSet<String> = ["a".to_string()].into();
        assert_eq!(
            outcomes(&standings, &keys, &inserted),
            [Outcome::Applied, Outcome::Duplicate, Outcome::Duplicate]
        );
    }

    proptest! {
        /// Whatever the batch and whichever of its keys the database already held: each
        /// key is inserted once and applied at most once, at its first candidate record;
        /// a key the database held is never applied; behind records never are.
        #[test]
        fn each_new_key_is_applied_once_at_its_first_candidate(
            batch in proptest::collection::vec((any::<bool>(), 0u8..8), 0..40),
            held in proptest::collection::hash_set(0u8..8, 0..8),
        ) {
            let standings: Vec<Standing> = batch.iter()
                .map(|(behind, _)| if *behind { Standing::Behind } else { Standing::Candidate })
                .collect();
            let keys: Vec<String> = batch.iter().map(|(_, k)| format!("k{k}")).collect();
            let to_insert = keys_to_insert(&standings, &keys);
            let inserting: HashSet<&String> = to_insert.iter().map(|i| &keys[*i]).collect();
            prop_assert_eq!(inserting.len(), to_insert.len());
            // The database inserts what it did not hold.
            let inserted: HashSet<String> = to_insert.iter()
                .map(|i| keys[*i].clone())
                .filter(|k| !held.iter().any(|h| format!("k{h}") == *k))
                .collect();
            let got = outcomes(&standings, &keys, &inserted);
            let mut applied = HashSet::new();
            for (i, outcome) in got.iter().enumerate() {
                match outcome {
                    Outcome::Applied => {
                        prop_assert_eq!(standings[i], Standing::Candidate);
                        prop_assert!(inserted.contains(&keys[i]));
                        prop_assert!(applied.insert(keys[i].clone()));
                        prop_assert!(to_insert.contains(&i));
                    }
                    Outcome::Behind => prop_assert_eq!(standings[i], Standing::Behind),
                    Outcome::Duplicate => prop_assert_eq!(standings[i], Standing::Candidate),
                }
            }
            prop_assert_eq!(applied, inserted);
        }
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
