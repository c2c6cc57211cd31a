//! Where a new topic's partitions live: Kafka's rack-unaware assignment. Partition `p`
//! gets its first replica (the preferred leader) on broker `(start + p) % n`, and its
//! other replicas on the following brokers shifted by a per-round offset, so leaders
//! and replicas spread evenly and no broker holds two replicas of one partition.

/// Replica lists, one per partition, first replica = preferred leader. `brokers` are the
/// live broker ids; `start` rotates the layout so topics do not all lead on one broker.
/// Requires `1 <= replication_factor <= brokers.len()`.
pub fn assign_replicas(
    partitions: i32,
    replication_factor: i32,
    brokers: &[i32],
    start: usize,
) -> Vec<Vec<i32>> {
    let mut brokers = brokers.to_vec();
    brokers.sort_unstable();
    let n = brokers.len();
    if n == 0 || replication_factor < 1 || replication_factor as usize > n {
        return Vec::new();
    }
    let rf = replication_factor as usize;
    (0..partitions.max(0) as usize)
        .map(|p| {
            let first = (start + p) % n;
            // Shift the followers once per full round of leaders, as Kafka does.
            let shift = if n > 1 {
                1 + ((start + p / n) % (n - 1))
            } else {
                0
            };
            let mut replicas = vec![brokers[first]];
            for j in 0..rf - 1 {
                let offset = (shift + j) % (n - 1).max(1);
                replicas.push(brokers[(first + 1 + offset) % n]);
            }
            replicas
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    #[test]
    fn every_partition_gets_distinct_replicas_from_live_brokers() {
        for n in 1..=6 {
            let brokers: Vec<i32> = (1..=n).collect();
            for rf in 1..=n {
                for start in 0..n as usize {
                    let layout = assign_replicas(12, rf, &brokers, start);
                    assert_eq!(layout.len(), 12);
                    for replicas in &layout {
                        assert_eq!(replicas.len(), rf as usize);
                        let distinct: HashSet<_> = replicas.iter().collect();
                        assert_eq!(distinct.len(), rf as usize, "n={n} rf={rf}: {replicas:?}");
                        assert!(replicas.iter().all(|b| brokers.contains(b)));
                    }
                }
            }
        }
    }

    #[test]
    fn leaders_and_replicas_spread_evenly() {
        let brokers = [3, 1, 2];
        let layout = assign_replicas(6, 3, &brokers, 1);
        let mut leaders: HashMap<i32, usize> = HashMap::new();
        let mut replicas: HashMap<i32, usize> = HashMap::new();
        for r in &layout {
            *leaders.entry(r[0]).or_default() += 1;
            for b in r {
                *replicas.entry(*b).or_default() += 1;
            }
        }
        assert_eq!(
            leaders.values().copied().collect::<HashSet<_>>(),
            HashSet::from([2])
        );
        assert_eq!(
            replicas.values().copied().collect::<HashSet<_>>(),
            HashSet::from([6])
        );
    }

    #[test]
    fn impossible_requests_assign_nothing() {
        assert!(assign_replicas(3, 2, &[1], 0).is_empty());
        assert!(assign_replicas(3, 0, &[1, 2], 0).is_empty());
        assert!(assign_replicas(3, 1, &[], 0).is_empty());
    }
}
