//! Which records a log cleaner keeps (Kafka's `compact` cleanup policy). Pure: the
//! cleaner walks the cleanable part of a log twice, first telling [`KeyMap`] every
//! record, then asking [`CleaningRules::keeps`] of each record while it rewrites the
//! batches (`idem_proto::batch::retain_records`).
//!
//! Rules:
//! - Only offsets below `clean_below` are cleaned: the caller passes the smaller of the
//!   active segment's base and the last stable offset, so nothing a consumer could still
//!   see change, and nothing of an undecided transaction, is touched.
//! - A keyed record stays only if it is its key's latest record below `clean_below`.
//! - Records of aborted transactions go, and never count as a key's latest: an aborted
//!   update must not hide the committed value before it.
//! - A tombstone (a record without a value) that is its key's latest stays until
//!   `delete.retention.ms` after its timestamp, so a consumer that read the key's older
//!   value has that long to see the deletion.
//! - Records without a key (written before the topic was compacted; a compacted topic
//!   refuses new ones) stay.
//! - Batch boundaries and offsets never change: which batches are removed (turned into
//!   fillers) is [`batch_removal`](super::batch_removal)'s decision, made once this one
//!   said what each batch keeps.

use std::collections::HashMap;

use idem_proto::batch::RecordView;

/// The latest offset of each key among the records a cleaning pass may touch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KeyMap {
    latest: HashMap<Vec<u8>, i64>,
}

impl KeyMap {
    /// Notes a record at `offset` (records come in offset order); records of aborted
    /// transactions and records without a key are not to be noted.
    pub fn note(&mut self, key: &[u8], offset: i64) {
        match self.latest.get_mut(key) {
            Some(latest) => *latest = (*latest).max(offset),
            None => {
                self.latest.insert(key.to_vec(), offset);
            }
        }
    }

    /// The latest offset noted for `key`.
    pub fn latest(&self, key: &[u8]) -> Option<i64> {
        self.latest.get(key).copied()
    }

    /// Keys noted: what the cleaner's memory grows with.
    pub fn len(&self) -> usize {
        self.latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }
}

/// What one cleaning pass decides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleaningRules {
    /// Records at or past this offset are left as they are.
    pub clean_below: i64,
    pub now_ms: i64,
    /// How long a key's tombstone outlives the records it deleted.
    pub delete_retention_ms: u64,
}

impl CleaningRules {
    /// Whether a record seen in the first pass goes into the key map.
    pub fn notes(&self, record: &RecordView<'_>, aborted: bool) -> bool {
        record.offset < self.clean_below && !aborted && record.key.is_some()
    }

    /// Whether `record` (of an aborted transaction if `aborted`) stays, given the key
    /// map the first pass built.
    pub fn keeps(&self, record: &RecordView<'_>, aborted: bool, keys: &KeyMap) -> bool {
        if record.offset >= self.clean_below {
            return true;
        }
        if aborted {
            return false;
        }
        let Some(key) = record.key else {
            return true;
        };
        if keys.latest(key) != Some(record.offset) {
            return false;
        }
        !(record.is_tombstone
            && i128::from(record.timestamp_ms) + i128::from(self.delete_retention_ms)
                <= i128::from(self.now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A record of the model log: key (None: unkeyed), value (None: tombstone),
    /// timestamp, aborted.
    #[derive(Debug, Clone)]
    struct Entry {
        key: Option<u8>,
        value: Option<u32>,
        timestamp_ms: i64,
        aborted: bool,
    }

    fn view<'a>(offset: i64, entry: &Entry, key: &'a [u8]) -> RecordView<'a> {
        RecordView {
            offset,
            timestamp_ms: entry.timestamp_ms,
            key: entry.key.map(|_| key),
            is_tombstone: entry.value.is_none(),
        }
    }

    /// Cleans `log` the way the cleaner does (two passes); returns the kept offsets.
    fn clean(log: &[Entry], rules: CleaningRules) -> Vec<i64> {
        let mut keys = KeyMap::default();
        for (offset, entry) in log.iter().enumerate() {
            let key = [entry.key.unwrap_or(0)];
            let record = view(offset as i64, entry, &key);
            if rules.notes(&record, entry.aborted) {
                keys.note(&key, offset as i64);
            }
        }
        log.iter()
            .enumerate()
            .filter(|(offset, entry)| {
                let key = [entry.key.unwrap_or(0)];
                rules.keeps(&view(*offset as i64, entry, &key), entry.aborted, &keys)
            })
            .map(|(offset, _)| offset as i64)
            .collect()
    }

    /// What a read_committed consumer reading the whole log ends with: the last
    /// committed value of each key (tombstones delete it), and the unkeyed values.
    fn latest_values(log: &[Entry], offsets: &[i64]) -> (BTreeMap<u8, u32>, Vec<u32>) {
        let mut values = BTreeMap::new();
        let mut unkeyed = Vec::new();
        for &offset in offsets {
            let entry = &log[offset as usize];
            if entry.aborted {
                continue;
            }
            match (entry.key, entry.value) {
                (Some(k), Some(v)) => {
                    values.insert(k, v);
                }
                (Some(k), None) => {
                    values.remove(&k);
                }
                (None, Some(v)) => unkeyed.push(v),
                (None, None) => {}
            }
        }
        (values, unkeyed)
    }

    fn entry() -> impl Strategy<Value = Entry> {
        (
            prop::option::weighted(0.95, 0u8..12),
            prop::option::weighted(0.85, any::<u32>()),
            0i64..1000,
            prop::bool::weighted(0.15),
        )
            .prop_map(|(key, value, timestamp_ms, aborted)| Entry {
                key,
                value,
                timestamp_ms,
                aborted,
            })
    }

    #[test]
    fn given_updates_then_only_each_keys_latest_stays_and_an_aborted_update_hides_nothing() {
        let e = |key, value, aborted| Entry {
            key: Some(key),
            value,
            timestamp_ms: 0,
            aborted,
        };
        let log = vec![
            e(1, Some(10), false),
            e(2, Some(20), false),
            e(1, Some(11), false),
            e(1, Some(99), true),
            e(2, None, false),
            e(3, Some(30), false),
        ];
        let rules = CleaningRules {
            clean_below: 5,
            now_ms: 100,
            delete_retention_ms: 1000,
        };
        // 1's committed latest is 11 (offset 2), the aborted 99 goes; 2's tombstone is
        // young and stays; 3 is past the bound.
        assert_eq!(clean(&log, rules), vec![2, 4, 5]);
        let old = CleaningRules {
            now_ms: 5000,
            ..rules
        };
        assert_eq!(
            clean(&log, old),
            vec![2, 5],
            "the tombstone outlived its delay"
        );
    }

    proptest! {
        /// Cleaning never changes what a read_committed consumer of the whole log ends
        /// with (with tombstones kept); below the bound each key stays at most once and
        /// no aborted record stays; at or past the bound nothing changes.
        #[test]
        fn cleaning_keeps_every_keys_latest_value_and_touches_nothing_past_the_bound(
            log in prop::collection::vec(entry(), 0..80),
            bound in 0usize..90,
        ) {
            let all: Vec<i64> = (0..log.len() as i64).collect();
            let rules = CleaningRules {
                clean_below: bound as i64,
                now_ms: 0,
                delete_retention_ms: u64::MAX,
            };
            let kept = clean(&log, rules);
            prop_assert_eq!(latest_values(&log, &kept), latest_values(&log, &all));
            let mut seen = std::collections::HashSet::new();
            for &offset in kept.iter().filter(|o| **o < bound as i64) {
                let entry = &log[offset as usize];
                prop_assert!(!entry.aborted);
                if let Some(k) = entry.key {
                    prop_assert!(seen.insert(k), "key {} kept twice", k);
                }
            }
            let past: Vec<i64> = all.iter().copied().filter(|o| *o >= bound as i64).collect();
            let kept_past: Vec<i64> = kept.iter().copied().filter(|o| *o >= bound as i64).collect();
            prop_assert_eq!(kept_past, past);
        }

        /// Once every tombstone is past its delay, deleted keys are gone for good and
        /// the values of the others are unchanged.
        #[test]
        fn expired_tombstones_go_and_the_other_keys_keep_their_value(
            log in prop::collection::vec(entry(), 0..80),
        ) {
            let all: Vec<i64> = (0..log.len() as i64).collect();
            let rules = CleaningRules {
                clean_below: log.len() as i64,
                now_ms: 10_000,
                delete_retention_ms: 1000,
            };
            let kept = clean(&log, rules);
            prop_assert!(kept.iter().all(|o| log[*o as usize].value.is_some() || log[*o as usize].key.is_none()));
            prop_assert_eq!(latest_values(&log, &kept), latest_values(&log, &all));
        }
    }
}
