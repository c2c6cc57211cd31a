//! The transaction log's shared contract: its topic name and which of its partitions a
//! transactional id belongs to. Brokers (FindCoordinator) and coordinators must agree on
//! this function byte for byte, so it lives here and never changes.

/// The internal topic (`crate::internal`) coordinators persist transaction state to.
pub const TXN_LOG_TOPIC: &str = "__transaction_state";

/// The internal topic consumer groups and their committed offsets live in
/// (docs/groups.md). It has as many partitions as [`TXN_LOG_TOPIC`], and group `g` lives
/// in partition [`txn_log_partition`]`(g, n)`: the coordinator that owns a slice of the
/// transaction log owns the same slice of this topic.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The `__transaction_state` partition that owns `transactional_id`: FNV-1a (32-bit) of
/// its UTF-8 bytes modulo the partition count. `partitions` must be > 0.
pub fn txn_log_partition(transactional_id: &str, partitions: i32) -> i32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in transactional_id.as_bytes() {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    (hash % partitions.max(1) as u32) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fixed_forever() {
        // Changing these values moves every transactional id to another coordinator.
        assert_eq!(txn_log_partition("", 50), (0x811c_9dc5u32 % 50) as i32);
        assert_eq!(
            txn_log_partition("a", 1_000_000),
            (0xe40c_292cu32 % 1_000_000) as i32
        );
        assert_eq!(txn_log_partition("order-service", 1), 0);
    }

    #[test]
    fn ids_spread_over_partitions() {
        let mut seen = [0u32; 8];
        for i in 0..800 {
            seen[txn_log_partition(&format!("txn-{i}"), 8) as usize] += 1;
        }
        assert!(seen.iter().all(|n| *n > 50), "{seen:?}");
    }
}
