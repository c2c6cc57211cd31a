//! Where the topic catalog lives in etcd, and the part of a topic key's value a reader
//! other than the broker needs. The broker writes these keys and owns the values' whole
//! format (`broker/src/cluster/catalog.rs`); the transaction coordinator reads them to
//! learn, with authority, whether a topic it must write markers to still exists. This
//! file is the one definition of the key layout both use.
//!
//! ```text
//! {prefix}/topics/{name}           {"spec": {"topic_id": "..", "partitions": n, ..}, "status": ..}
//! {prefix}/partitions/{name}/{p}   the partition's replicas, leader and epochs
//! ```

use serde::Deserialize;

/// `prefix` without the trailing slashes a flag may carry.
fn trimmed(prefix: &str) -> &str {
    prefix.trim_end_matches('/')
}

/// The key of topic `name`.
pub fn topic_key(prefix: &str, name: &str) -> String {
    format!("{}/topics/{name}", trimmed(prefix))
}

/// The prefix every topic key starts with.
pub fn topics_dir(prefix: &str) -> String {
    format!("{}/topics/", trimmed(prefix))
}

/// The key of partition `partition` of topic `name`.
pub fn partition_key(prefix: &str, name: &str, partition: i32) -> String {
    format!("{}/partitions/{name}/{partition}", trimmed(prefix))
}

/// The prefix every partition key starts with.
pub fn partitions_dir(prefix: &str) -> String {
    format!("{}/partitions/", trimmed(prefix))
}

/// The prefix of topic `name`'s partition keys and no other topic's (names hold no
/// '/').
pub fn topic_partitions_dir(prefix: &str, name: &str) -> String {
    format!("{}/partitions/{name}/", trimmed(prefix))
}

/// What a topic key says about the incarnation it holds. A key exists from the moment
/// a creation claims the name (status `creating`) until the deletion removes it, so a
/// reader that finds none knows the name has no incarnation at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicIncarnation {
    /// The incarnation's id (32 hex digits); empty for a topic written before ids
    /// existed whose id is not assigned yet.
    pub topic_id: String,
    /// Partitions `0..partitions` exist; partitions only grow.
    pub partitions: i32,
}

#[derive(Deserialize)]
struct TopicValue {
    spec: SpecHead,
}

#[derive(Deserialize)]
struct SpecHead {
    #[serde(default)]
    topic_id: String,
    partitions: i32,
}

/// Decodes a topic key's value; every field but the id and the partition count is
/// ignored.
pub fn decode_topic_incarnation(value: &[u8]) -> Result<TopicIncarnation, serde_json::Error> {
    let TopicValue { spec } = serde_json::from_slice(value)?;
    Ok(TopicIncarnation {
        topic_id: spec.topic_id,
        partitions: spec.partitions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_ignore_a_trailing_slash_of_the_prefix() {
        assert_eq!(topic_key("/idem/", "orders"), "/idem/topics/orders");
        assert_eq!(topic_key("/idem", "orders"), "/idem/topics/orders");
        assert_eq!(
            partition_key("/idem", "orders", 3),
            "/idem/partitions/orders/3"
        );
        assert!(topic_key("/idem", "orders").starts_with(&topics_dir("/idem/")));
        assert!(partition_key("/idem", "o", 0).starts_with(&partitions_dir("/idem")));
        assert!(partition_key("/idem", "o", 0).starts_with(&topic_partitions_dir("/idem", "o")));
    }

    #[test]
    fn a_topic_value_reads_its_id_and_count_and_ignores_the_rest() {
        let value = br#"{"spec":{"name":"orders","topic_id":"000102030405060708090a0b0c0d0e0f","partitions":3,"replication_factor":3,"config":{"cleanup.policy":"compact"}},"status":"ready"}"#;
        assert_eq!(
            decode_topic_incarnation(value).expect("decodes"),
            TopicIncarnation {
                topic_id: "000102030405060708090a0b0c0d0e0f".into(),
                partitions: 3
            }
        );
        let before_ids =
            br#"{"spec":{"name":"old","partitions":1,"replication_factor":1},"status":"creating"}"#;
        assert_eq!(
            decode_topic_incarnation(before_ids)
                .expect("decodes")
                .topic_id,
            ""
        );
        assert!(decode_topic_incarnation(b"not json").is_err());
    }
}
