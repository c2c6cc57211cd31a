//! Cluster metadata as plain Rust values, and the client's cache of it: which brokers
//! exist, which topics, how many partitions each has and who leads them. The cache is
//! refreshed when a broker says a leader moved (or stops answering), and
//! [`MetadataCache::route`] decides, from the cache alone, where a partition's
//! leader-only requests (Produce, Fetch, ListOffsets) go.

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
    /// While the partition is being reassigned: replicas joining and leaving (both are
    /// in `replicas`). Empty otherwise.
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
}

/// One topic and its partitions, in partition order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    /// `None` when the broker reported no error (`UNKNOWN_TOPIC_OR_PARTITION` for a
    /// topic that does not exist).
    pub error: Option<ErrorCode>,
    pub partitions: Vec<PartitionMetadata>,
    /// This incarnation of the name (32 hex digits): a topic deleted and created again
    /// has another. Empty for an unknown topic (or one from before topic ids whose id
    /// is not assigned yet).
    pub topic_id: String,
}

/// A live transaction coordinator the client can dial for `TxnCoordinator`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorMetadata {
    pub coordinator_id: i32,
    /// `host:port`.
    pub address: String,
}

/// The answer to a metadata request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterMetadata {
    pub brokers: Vec<BrokerMetadata>,
    pub topics: Vec<TopicMetadata>,
    pub controller_id: i32,
    /// Live transaction coordinators (empty when the cluster runs none).
    pub coordinators: Vec<CoordinatorMetadata>,
    /// Every partition of `__transaction_state` with its owner as the broker read it
    /// from etcd (`None`: nobody owns it); empty until the topic exists.
    pub txn_log_owners: Vec<(i32, Option<TxnLogOwnerMetadata>)>,
}

/// The coordinator that owns a `__transaction_state` partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogOwnerMetadata {
    pub coordinator_id: i32,
    /// `host:port`.
    pub address: String,
    pub coordinator_epoch: i32,
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
                            adding_replicas: p.adding_replicas,
                            removing_replicas: p.removing_replicas,
                        })
                        .collect();
                    partitions.sort_by_key(|p| p.partition);
                    TopicMetadata {
                        name: t.name,
                        error: error_code(t.error_code),
                        partitions,
                        topic_id: t.topic_id,
                    }
                })
                .collect(),
            controller_id: m.controller_id,
            coordinators: m
                .coordinators
                .into_iter()
                .map(|c| CoordinatorMetadata {
                    coordinator_id: c.coordinator_id,
                    address: c.address,
                })
                .collect(),
            txn_log_owners: m
                .txn_log_owners
                .into_iter()
                .map(|o| {
                    let owner = (o.coordinator_id >= 0).then_some(TxnLogOwnerMetadata {
                        coordinator_id: o.coordinator_id,
                        address: o.address,
                        coordinator_epoch: o.coordinator_epoch,
                    });
                    (o.partition, owner)
                })
                .collect(),
        }
    }
}

/// Where a request for one partition's leader goes, decided from the cache alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The leader is the broker the bootstrap connection reaches: the metadata lists no
    /// brokers at all (fall back to the bootstrap), the leader advertises the bootstrap
    /// address itself, or a metadata answer that came through the bootstrap connection
    /// listed the leader as the cluster's only broker.
    Bootstrap,
    /// Dial the leader at its advertised `host:port`.
    Broker { broker_id: i32, address: String },
    /// The cache holds no leader for the partition (the topic or partition is not
    /// cached, the partition has no leader, or its leader is not among the live
    /// brokers): refresh the metadata, then ask again.
    Unknown,
}

/// What the client currently believes about the cluster.
#[derive(Debug, Default)]
pub struct MetadataCache {
    brokers: HashMap<i32, String>,
    topics: HashMap<String, TopicMetadata>,
    /// The broker the bootstrap connection is known to reach: learned when a metadata
    /// answer received through it lists exactly one broker (then that broker must be
    /// the one answering). Lets a client behind a proxy or load balancer in front of a
    /// single broker keep using the address it was given.
    bootstrap_broker: Option<i32>,
}

impl MetadataCache {
    /// Merges a metadata answer for some topics: the broker list is replaced (when the
    /// answer has one), listed topics are replaced, topics the broker does not know are
    /// dropped, other topics are kept. A partition whose cached leader epoch is newer
    /// than the answer's keeps its cached state (an answer from a lagging broker must
    /// not send the client back to a former leader).
    pub fn update(&mut self, metadata: &ClusterMetadata) {
        if !metadata.brokers.is_empty() {
            self.brokers = metadata
                .brokers
                .iter()
                .map(|b| (b.broker_id, b.address.clone()))
                .collect();
        }
        for t in &metadata.topics {
            match t.error {
                None => {
                    let mut fresh = t.clone();
                    if let Some(cached) = self.topics.get(&t.name) {
                        for p in &mut fresh.partitions {
                            if let Some(old) = cached
                                .partitions
                                .iter()
                                .find(|o| o.partition == p.partition)
                            {
                                if old.leader_epoch > p.leader_epoch {
                                    *p = old.clone();
                                }
                            }
                        }
                    }
                    self.topics.insert(t.name.clone(), fresh);
                }
                Some(_) => {
                    self.topics.remove(&t.name);
                }
            }
        }
    }

    /// Merges an answer that lists every topic (a request for no topic in particular):
    /// like [`MetadataCache::update`], and topics missing from it are forgotten.
    pub fn update_all(&mut self, metadata: &ClusterMetadata) {
        self.topics.retain(|name, _| metadata.topic(name).is_some());
        self.update(metadata);
    }

    /// Records what a metadata answer received through the bootstrap connection says
    /// about the broker behind it (see [`Route::Bootstrap`]).
    pub fn learn_bootstrap_broker(&mut self, metadata: &ClusterMetadata) {
        match metadata.brokers.as_slice() {
            [only] => self.bootstrap_broker = Some(only.broker_id),
            [] => {}
            _ => self.bootstrap_broker = None,
        }
    }

    /// The broker the bootstrap connection is known to reach.
    pub fn bootstrap_broker(&self) -> Option<i32> {
        self.bootstrap_broker
    }

    /// Number of partitions of a known topic.
    pub fn partition_count(&self, topic: &str) -> Option<i32> {
        self.topics.get(topic).map(|t| t.partitions.len() as i32)
    }

    fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionMetadata> {
        self.topics
            .get(topic)?
            .partitions
            .iter()
            .find(|p| p.partition == partition)
    }

    /// Whether the cache lists this partition of this topic.
    pub fn knows_partition(&self, topic: &str, partition: i32) -> bool {
        self.partition(topic, partition).is_some()
    }

    /// The leader epoch of a partition with a known leader.
    pub fn leader_epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        self.partition(topic, partition)
            .filter(|p| p.leader_id >= 0)
            .map(|p| p.leader_epoch)
    }

    /// The leader's id and address of a partition, if known.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<(i32, Option<&str>)> {
        let p = self.partition(topic, partition)?;
        Some((
            p.leader_id,
            self.brokers.get(&p.leader_id).map(String::as_str),
        ))
    }

    /// Where requests for the leader of `topic`/`partition` go; `bootstrap` is the
    /// address the client was configured with.
    pub fn route(&self, topic: &str, partition: i32, bootstrap: &str) -> Route {
        let Some(p) = self.partition(topic, partition) else {
            return Route::Unknown;
        };
        if p.leader_id < 0 || p.error == Some(ErrorCode::LeaderNotAvailable) {
            return Route::Unknown;
        }
        if self.brokers.is_empty() || self.bootstrap_broker == Some(p.leader_id) {
            return Route::Bootstrap;
        }
        match self.brokers.get(&p.leader_id) {
            Some(address) if address.trim() == bootstrap.trim() => Route::Bootstrap,
            Some(address) => Route::Broker {
                broker_id: p.leader_id,
                address: address.clone(),
            },
            None => Route::Unknown,
        }
    }

    /// Every live broker's address, by broker id.
    pub fn broker_addresses(&self) -> Vec<(i32, String)> {
        let mut brokers: Vec<(i32, String)> = self
            .brokers
            .iter()
            .map(|(id, address)| (*id, address.clone()))
            .collect();
        brokers.sort();
        brokers
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
                    topic_id: String::new(),
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
                    topic_id: String::new(),
                    error_code: ErrorCode::UnknownTopicOrPartition as i32,
                    name: "nope".into(),
                    partitions: Vec::new(),
                },
            ],
            controller_id: 1,
            coordinators: Vec::new(),
            txn_log_owners: Vec::new(),
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

    fn broker(broker_id: i32, address: &str) -> BrokerMetadata {
        BrokerMetadata {
            broker_id,
            address: address.into(),
        }
    }

    /// `orders` with partition p led by `leaders[p]` at `epoch`.
    fn cluster(brokers: Vec<BrokerMetadata>, leaders: &[i32], epoch: i32) -> ClusterMetadata {
        ClusterMetadata {
            brokers,
            topics: vec![TopicMetadata {
                name: "orders".into(),
                error: None,
                topic_id: String::new(),
                partitions: leaders
                    .iter()
                    .enumerate()
                    .map(|(p, leader)| PartitionMetadata {
                        partition: p as i32,
                        error: None,
                        leader_id: *leader,
                        leader_epoch: epoch,
                        replicas: vec![1, 2, 3],
                        isr: vec![1, 2, 3],
                        log_start_offset: 0,
                        high_watermark: 0,
                        log_end_offset: 0,
                        last_stable_offset: 0,
                        adding_replicas: Vec::new(),
                        removing_replicas: Vec::new(),
                    })
                    .collect(),
            }],
            controller_id: 1,
            coordinators: Vec::new(),
            txn_log_owners: Vec::new(),
        }
    }

    fn three_brokers() -> Vec<BrokerMetadata> {
        vec![
            broker(1, "10.0.0.1:9092"),
            broker(2, "10.0.0.2:9092"),
            broker(3, "10.0.0.3:9092"),
        ]
    }

    const BOOTSTRAP: &str = "lb.example:9092";

    #[test]
    fn given_a_cluster_then_each_partition_routes_to_its_leaders_advertised_address() {
        let mut cache = MetadataCache::default();
        cache.update(&cluster(three_brokers(), &[1, 2, 3], 0));
        for (p, id) in [(0, 1), (1, 2), (2, 3)] {
            assert_eq!(
                cache.route("orders", p, BOOTSTRAP),
                Route::Broker {
                    broker_id: id,
                    address: format!("10.0.0.{id}:9092")
                }
            );
        }
    }

    #[test]
    fn given_no_leader_or_a_leader_not_among_live_brokers_or_an_unknown_partition_then_unknown() {
        let mut cache = MetadataCache::default();
        assert_eq!(cache.route("orders", 0, BOOTSTRAP), Route::Unknown);
        let mut m = cluster(three_brokers(), &[-1, 4, 1], 0);
        m.topics[0].partitions[2].error = Some(ErrorCode::LeaderNotAvailable);
        cache.update(&m);
        assert_eq!(
            cache.route("orders", 0, BOOTSTRAP),
            Route::Unknown,
            "no leader"
        );
        assert_eq!(
            cache.route("orders", 1, BOOTSTRAP),
            Route::Unknown,
            "dead leader"
        );
        assert_eq!(
            cache.route("orders", 2, BOOTSTRAP),
            Route::Unknown,
            "not available"
        );
        assert_eq!(
            cache.route("orders", 3, BOOTSTRAP),
            Route::Unknown,
            "no such partition"
        );
        assert_eq!(
            cache.route("other", 0, BOOTSTRAP),
            Route::Unknown,
            "no such topic"
        );
    }

    #[test]
    fn given_an_empty_broker_list_then_the_bootstrap_is_used() {
        let mut cache = MetadataCache::default();
        cache.update(&cluster(Vec::new(), &[1], 0));
        assert_eq!(cache.route("orders", 0, BOOTSTRAP), Route::Bootstrap);
    }

    #[test]
    fn given_the_leader_advertises_the_bootstrap_address_then_the_bootstrap_channel_is_used() {
        let mut cache = MetadataCache::default();
        cache.update(&cluster(three_brokers(), &[2], 0));
        assert_eq!(cache.route("orders", 0, "10.0.0.2:9092"), Route::Bootstrap);
    }

    #[test]
    fn given_the_bootstrap_answered_as_the_only_broker_then_its_partitions_use_the_bootstrap() {
        // A proxy or load balancer in front of a one-broker cluster: the broker
        // advertises its own address, but the client must keep using the one it was given.
        let single = cluster(vec![broker(7, "127.0.0.1:4000")], &[7], 0);
        let mut cache = MetadataCache::default();
        cache.update(&single);
        assert!(matches!(
            cache.route("orders", 0, "127.0.0.1:5000"),
            Route::Broker { broker_id: 7, .. }
        ));
        cache.learn_bootstrap_broker(&single);
        assert_eq!(cache.bootstrap_broker(), Some(7));
        assert_eq!(cache.route("orders", 0, "127.0.0.1:5000"), Route::Bootstrap);
        // The cluster grew: the bootstrap's identity is unknown again, dial addresses.
        let grown = cluster(three_brokers(), &[1], 1);
        cache.update(&grown);
        cache.learn_bootstrap_broker(&grown);
        assert_eq!(cache.bootstrap_broker(), None);
        assert!(matches!(
            cache.route("orders", 0, "127.0.0.1:5000"),
            Route::Broker { broker_id: 1, .. }
        ));
    }

    #[test]
    fn given_an_answer_from_a_lagging_broker_then_a_newer_leader_epoch_is_kept() {
        let mut cache = MetadataCache::default();
        cache.update(&cluster(three_brokers(), &[1, 1], 4));
        let mut moved = cluster(three_brokers(), &[2, 1], 5);
        moved.topics[0].partitions.truncate(1);
        cache.update(&moved);
        assert_eq!(cache.leader("orders", 0).map(|l| l.0), Some(2));
        // A broker that has not seen the election yet answers epoch 4, leader 1.
        cache.update(&cluster(three_brokers(), &[1, 3], 4));
        assert_eq!(
            cache.leader("orders", 0).map(|l| l.0),
            Some(2),
            "epoch 5 stays"
        );
        assert_eq!(
            cache.leader("orders", 1).map(|l| l.0),
            Some(3),
            "same epoch: taken"
        );
    }

    #[test]
    fn given_a_broker_left_then_the_new_broker_list_replaces_the_old() {
        let mut cache = MetadataCache::default();
        cache.update(&cluster(three_brokers(), &[1], 0));
        let mut two = three_brokers();
        two.remove(0);
        cache.update(&cluster(two, &[1], 0));
        assert_eq!(cache.route("orders", 0, BOOTSTRAP), Route::Unknown);
        assert_eq!(
            cache.broker_addresses(),
            vec![(2, "10.0.0.2:9092".into()), (3, "10.0.0.3:9092".into())]
        );
        // An answer without a broker list keeps the known one.
        cache.update(&cluster(Vec::new(), &[2], 1));
        assert!(matches!(
            cache.route("orders", 0, BOOTSTRAP),
            Route::Broker { broker_id: 2, .. }
        ));
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
                topic_id: String::new(),
            }],
            ..Default::default()
        };
        cache.update(&gone);
        assert_eq!(cache.partition_count("orders"), None);
    }
}
