//! Chooses a partition for a record. A keyed record always lands on
//! `to_positive(murmur2(key)) % partitions`, exactly as Kafka's default partitioner, so
//! the same key maps to the same partition from any Kafka-compatible client. Records
//! without a key stick to one partition until about one batch worth of bytes went
//! there, then move to the next, so null-key traffic still forms full batches.

use crate::error::ClientError;

/// Kafka's seed for murmur2 (`Utils.murmur2`).
const SEED: u32 = 0x9747_b28c;
const M: u32 = 0x5bd1_e995;
const R: u32 = 24;

/// Kafka's 32-bit murmur2 of `data` (`org.apache.kafka.common.utils.Utils.murmur2`).
pub fn murmur2(data: &[u8]) -> i32 {
    let length = data.len();
    // Java hashes the length as an int; keys never approach 2^31 bytes.
    let mut h: u32 = SEED ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit (not `abs`, which overflows).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition of a keyed record among `partitions` (which must be positive).
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    to_positive(murmur2(key)) % partitions.max(1)
}

/// A producer's partitioners, one per topic, each starting its sticky round-robin at a
/// per-producer random point (shared by [`crate::Producer`] and
/// [`crate::TransactionalProducer`]).
#[derive(Debug)]
pub(crate) struct TopicPartitioners {
    batch_size: usize,
    seed: std::collections::hash_map::RandomState,
    by_topic: std::sync::Mutex<std::collections::HashMap<String, Partitioner>>,
}

impl TopicPartitioners {
    pub(crate) fn new(batch_size: usize) -> Self {
        TopicPartitioners {
            batch_size,
            seed: std::collections::hash_map::RandomState::new(),
            by_topic: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The partition a record of `topic` (of `count`) goes to: the one it `named`, if
    /// the topic has it, else the one chosen for its `key` and `size`.
    pub(crate) fn partition_for(
        &self,
        topic: &str,
        named: Option<i32>,
        key: Option<&[u8]>,
        size: usize,
        count: i32,
    ) -> Result<i32, ClientError> {
        match named {
            Some(p) if (0..count).contains(&p) => Ok(p),
            Some(p) => Err(ClientError::UnknownTopic {
                topic: topic.to_string(),
                partition: Some(p),
            }),
            None => Ok(self.choose(topic, key, size, count)),
        }
    }

    /// The partition of `topic` (of `count`) for a record with `key` of `size` bytes.
    pub(crate) fn choose(&self, topic: &str, key: Option<&[u8]>, size: usize, count: i32) -> i32 {
        use std::hash::BuildHasher;
        let Ok(mut by_topic) = self.by_topic.lock() else {
            return partition_for_key(key.unwrap_or_default(), count);
        };
        let partitioner = by_topic.entry(topic.to_string()).or_insert_with(|| {
            let start = self.seed.hash_one(topic) as u32;
            Partitioner::new(self.batch_size, start)
        });
        partitioner.partition(key, size, count)
    }
}

/// Per-topic partition choice: stable for keys, sticky round-robin for null keys.
#[derive(Debug, Clone)]
pub struct Partitioner {
    /// Bytes of null-key records after which the sticky partition moves on.
    switch_after_bytes: usize,
    sticky: Option<i32>,
    sticky_bytes: usize,
    /// Where the first sticky partition starts, so short-lived producers spread out.
    start: u32,
}

impl Partitioner {
    /// `switch_after_bytes` is usually the producer's batch size; `start` picks the first
    /// partition for null keys (any value; it is reduced modulo the partition count).
    pub fn new(switch_after_bytes: usize, start: u32) -> Self {
        Partitioner {
            switch_after_bytes: switch_after_bytes.max(1),
            sticky: None,
            sticky_bytes: 0,
            start,
        }
    }

    /// The partition of a record of about `record_bytes` bytes.
    pub fn partition(&mut self, key: Option<&[u8]>, record_bytes: usize, partitions: i32) -> i32 {
        let partitions = partitions.max(1);
        if let Some(key) = key {
            return partition_for_key(key, partitions);
        }
        let current = match self.sticky {
            Some(p) if p < partitions && self.sticky_bytes < self.switch_after_bytes => p,
            Some(p) => {
                self.sticky_bytes = 0;
                (p + 1) % partitions
            }
            None => (self.start % partitions as u32) as i32,
        };
        self.sticky = Some(current);
        self.sticky_bytes += record_bytes;
        current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's `UtilsTest.testMurmur2` vectors.
    #[test]
    fn murmur2_matches_kafka_test_vectors() {
        let cases: [(&str, i32); 6] = [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            ("a-little-bit-longer-string", -1_486_304_829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            ("abc", 479_470_107),
        ];
        for (input, expected) in cases {
            assert_eq!(murmur2(input.as_bytes()), expected, "murmur2({input:?})");
        }
    }

    #[test]
    fn to_positive_clears_only_the_sign_bit() {
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(-1), i32::MAX);
        assert_eq!(to_positive(5), 5);
    }

    #[test]
    fn keyed_records_always_land_on_the_same_partition() {
        let expected = to_positive(-790_332_482) % 7;
        let mut p = Partitioner::new(100, 3);
        for _ in 0..10 {
            assert_eq!(p.partition(Some(b"foobar"), 50, 7), expected);
        }
        assert_eq!(partition_for_key(b"foobar", 7), expected);
    }

    #[test]
    fn null_keys_stick_to_a_partition_for_a_batch_then_rotate() {
        let mut p = Partitioner::new(100, 5);
        // start 5 % 3 = 2
        assert_eq!(p.partition(None, 60, 3), 2);
        assert_eq!(p.partition(None, 60, 3), 2);
        // 120 bytes went to partition 2: move on.
        assert_eq!(p.partition(None, 60, 3), 0);
        assert_eq!(p.partition(None, 60, 3), 0);
        assert_eq!(p.partition(None, 60, 3), 1);
    }

    #[test]
    fn sticky_partition_follows_a_shrunken_partition_count() {
        let mut p = Partitioner::new(1_000, 3);
        assert_eq!(p.partition(None, 1, 4), 3);
        assert!(p.partition(None, 1, 2) < 2);
    }
}
