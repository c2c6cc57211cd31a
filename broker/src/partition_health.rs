//! The partition signals operators alert on, counted from one broker's view (pure): of
//! the partitions it leads, how many have a follower out of the ISR (under-replicated),
//! how many have fewer in-sync replicas than `min.insync.replicas` (acks=all produce is
//! refused), and how many partitions of the catalog have no leader at all (offline:
//! every broker sees the same catalog, so every broker reports the same count; alert
//! on its maximum); and, as a follower, how many partitions it replicates without
//! being in their ISR (none: it has caught up, what a broker's readiness waits for).
//! The broker publishes them as gauges and the `idem.CaughtUp` health status
//! (`server.rs`, metrics in docs/operations.md).

/// One partition as the catalog states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionFacts {
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub min_insync_replicas: i32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionHealth {
    /// Partitions this broker leads.
    pub led: u64,
    /// Led partitions with fewer in-sync replicas than replicas.
    pub under_replicated: u64,
    /// Led partitions with fewer in-sync replicas than `min.insync.replicas`.
    pub under_min_isr: u64,
    /// Partitions without a leader (-1).
    pub offline: u64,
    /// Partitions this broker is a replica of without being in their ISR: while any,
    /// it has not caught up (a restarted broker, a lagging follower).
    pub out_of_isr: u64,
}

/// The counts of `partitions`, as broker `me` sees them.
pub fn partition_health<'a>(
    me: i32,
    partitions: impl IntoIterator<Item = &'a PartitionFacts>,
) -> PartitionHealth {
    let mut health = PartitionHealth::default();
    for p in partitions {
        if p.replicas.contains(&me) && !p.isr.contains(&me) {
            health.out_of_isr += 1;
        }
        if p.leader < 0 {
            health.offline += 1;
            continue;
        }
        if p.leader != me {
            continue;
        }
        health.led += 1;
        if p.isr.len() < p.replicas.len() {
            health.under_replicated += 1;
        }
        if (p.isr.len() as i64) < i64::from(p.min_insync_replicas) {
            health.under_min_isr += 1;
        }
    }
    health
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A partition on brokers 1..=replicas whose ISR is its first `isr` replicas.
    fn facts(leader: i32, replicas: usize, isr: usize, min: i32) -> PartitionFacts {
        let replicas: Vec<i32> = (1..=replicas as i32).collect();
        PartitionFacts {
            leader,
            isr: replicas[..isr.min(replicas.len())].to_vec(),
            replicas,
            min_insync_replicas: min,
        }
    }

    #[test]
    fn given_a_mix_then_each_partition_counts_where_it_belongs() {
        let partitions = [
            facts(1, 3, 3, 2),  // led, healthy
            facts(1, 3, 2, 2),  // led, a follower out
            facts(1, 3, 1, 2),  // led, below min ISR
            facts(2, 3, 1, 2),  // another broker's: not ours to report
            facts(-1, 3, 0, 2), // offline
        ];
        assert_eq!(
            partition_health(1, &partitions),
            PartitionHealth {
                led: 3,
                under_replicated: 2,
                under_min_isr: 1,
                offline: 1,
                out_of_isr: 1, // the offline one: nothing to catch up from
            }
        );
        // Broker 3 is out of the ISR of every partition but the first.
        assert_eq!(partition_health(3, &partitions).out_of_isr, 4);
    }

    proptest! {
        /// Every count is bounded by what it is a subset of, and offline is the same
        /// whichever broker counts.
        #[test]
        fn counts_are_consistent(
            ps in prop::collection::vec((-1i32..4, 1usize..5, 0usize..5, 1i32..4), 0..40),
            me in 0i32..4,
            other in 0i32..4,
        ) {
            let ps: Vec<PartitionFacts> = ps
                .into_iter()
                .map(|(l, r, i, m)| facts(l, r, i.min(r), m))
                .collect();
            let h = partition_health(me, &ps);
            prop_assert!(h.under_replicated <= h.led);
            prop_assert!(h.under_min_isr <= h.led);
            prop_assert!(h.led + h.offline <= ps.len() as u64);
            prop_assert!(h.out_of_isr <= ps.len() as u64);
            prop_assert_eq!(h.offline, partition_health(other, &ps).offline);
        }
    }
}
