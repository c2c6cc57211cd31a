//! Cluster metadata as plain Rust values, and the client's cache of it: which brokers
//! exist, which topics, how many partitions each has and who leads them. The cache is
//! refreshed when the broker says a leader moved or a topic is unknown, so that once
//! topics are replicated the producer can follow their leaders.

use std::collections::HashMap;

use idem_proto::v1 as proto;
use idem_proto::ErrorCode;

/// A broker the client can dial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerMetadata {
    pub broker_id: i32,
    /// `host:port`.
    pub address: String,
}

/// One partition as the broker describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub partition: i32,
    /// `None` when the broker reported no error.
    pub error: Option<ErrorCode>,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub log_end_offset: i64,
    pub last_stable_offset: i64,
}

/// One topic and its partitions, in partition order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    /// `None` when the broker reported no error (`UNKNOWN_TOPIC_OR_PARTITION` for a
    /// topic that does not exist).
    pub error: Option<ErrorCode>,
    pub partitions: Vec<PartitionMetadata>,
}

/// The answer to a metadata request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterMetadata {
    pub brokers: Vec<BrokerMetadata>,
    pub topics: Vec<TopicMetadata>,
    pub controller_id: i32,
}

impl ClusterMetadata {
    pub fn topic(&self, name: &str) -> Option<&TopicMetadata> {
        self.topics.iter().find(|t| t.name == name)
    }
}

/// `None` for `NONE`; unrecognised numbers become `UNKNOWN_SERVER_ERROR`.
pub(crate) fn error_code(code: i32) -> Option<ErrorCode> {
    match ErrorCode::try_from(code) {
        Ok(ErrorCode::None) => None,
        Ok(code) => Some(code),
        Err(_) => Some(ErrorCode::UnknownServerError),
    }
}

impl From<proto::MetadataResponse> for ClusterMetadata {
    fn from(m: proto::MetadataResponse) -> Self {
        ClusterMetadata {
            brokers: m
                .brokers
                .into_iter()
                .map(|b| BrokerMetadata {
                    broker_id: b.broker_id,
                    address: b.address,
                })
                .collect(),
            topics: m
                .topics
                .into_iter()
                .map(|t| {
                    let mut partitions: Vec<PartitionMetadata> = t
                        .partitions
                        .into_iter()
                        .map(|p| PartitionMetadata {
                            partition: p.partition,
                            error: error_code(p.error_code),
                            leader_id: p.leader_id,
                            leader_epoch: p.leader_epoch,
                            replicas: p.replicas,
                            isr: p.isr,
                            log_start_offset: p.log_start_offset,
                            high_watermark: p.high_watermark,
                            log_end_offset: p.log_end_offset,
                            last_stable_offset: p.last_stable_offset,
                        })
                        .collect();
                    partitions.sort_by_key(|p| p.partition);
                    TopicMetadata {
                        name: t.name,
                        error: error_code(t.error_code),
                        partitions,
                    }
                })
                .collect(),
            controller_id: m.controller_id,
        }
    }
}

/// What the client currently believes about the cluster.
#[derive(Debug, Default)]
pub struct MetadataCache {
    brokers: HashMap<i32, String>,
    topics: HashMap<String, TopicMetadata>,
}

impl MetadataCache {
    /// Merges a metadata answer: known topics are replaced, topics the broker does not
    /// know are dropped.
    pub fn update(&mut self, metadata: &ClusterMetadata) {
        for b in &metadata.brokers {
            self.brokers.insert(b.broker_id, b.address.clone());
        }
        for t in &metadata.topics {
            match t.error {
                None => {
                    self.topics.insert(t.name.clone(), t.clone());
                }
                Some(_) => {
                    self.topics.remove(&t.name);
                }
            }
        }
    }

    /// Number of partitions of a known topic.
    pub fn partition_count(&self, topic: &str) -> Option<i32> {
        self.topics.get(topic).map(|t| t.partitions.len() as i32)
    }

    /// The leader's id and address of a partition, if known.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<(i32, Option<&str>)> {
        let p = self
            .topics
            .get(topic)?
            .partitions
            .iter()
            .find(|p| p.partition == partition)?;
        Some((
            p.leader_id,
            self.brokers.get(&p.leader_id).map(String::as_str),
        ))
    }

    pub fn invalidate(&mut self, topic: &str) {
        self.topics.remove(topic);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response() -> proto::MetadataResponse {
        proto::MetadataResponse {
            brokers: vec![proto::BrokerInfo {
                broker_id: 1,
                address: "127.0.0.1:9092".into(),
            }],
            topics: vec![
                proto::TopicMetadata {
                    error_code: 0,
                    name: "orders".into(),
                    partitions: (0..3)
                        .rev()
                        .map(|p| proto::PartitionMetadata {
                            partition: p,
                            leader_id: 1,
                            ..Default::default()
                        })
                        .collect(),
                },
                proto::TopicMetadata {
                    error_code: ErrorCode::UnknownTopicOrPartition as i32,
                    name: "nope".into(),
                    partitions: Vec::new(),
                },
            ],
            controller_id: 1,
        }
    }

    #[test]
    fn metadata_converts_codes_and_sorts_partitions() {
        let m = ClusterMetadata::from(response());
        let orders = m.topic("orders").expect("orders");
        assert_eq!(orders.error, None);
        let ids: Vec<i32> = orders.partitions.iter().map(|p| p.partition).collect();
        assert_eq!(ids, vec![0, 1, 2]);
        assert_eq!(
            m.topic("nope").and_then(|t| t.error),
            Some(ErrorCode::UnknownTopicOrPartition)
        );
        assert_eq!(error_code(12345), Some(ErrorCode::UnknownServerError));
    }

    #[test]
    fn cache_knows_partition_counts_and_leaders_and_forgets_unknown_topics() {
        let mut cache = MetadataCache::default();
        cache.update(&ClusterMetadata::from(response()));
        assert_eq!(cache.partition_count("orders"), Some(3));
        assert_eq!(cache.partition_count("nope"), None);
        assert_eq!(cache.leader("orders", 2), Some((1, Some("127.0.0.1:9092"))));
        assert_eq!(cache.leader("orders", 3), None);
        let gone = ClusterMetadata {
            topics: vec![TopicMetadata {
                name: "orders".into(),
                error: Some(ErrorCode::UnknownTopicOrPartition),
                partitions: Vec::new(),
            }],
            ..Default::default()
        };
        cache.update(&gone);
        assert_eq!(cache.partition_count("orders"), None);
    }
}
