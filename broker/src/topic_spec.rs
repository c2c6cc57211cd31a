//! A topic as recorded (in `topics.json` on a single node, in the etcd catalog in a
//! cluster) and the `min.insync.replicas` it implies.

use serde::{Deserialize, Serialize};

use crate::topic_config::{self, ConfigEntry, TopicConfig, TopicDefaults};
use crate::topic_id::TopicId;

/// A topic as recorded on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSpec {
    pub name: String,
    /// This incarnation of the name (see `topic_id.rs`). A spec written before ids
    /// existed reads as `ZERO` and is given one once: on a single node when
    /// `topics.json` is opened (and rewritten at once), in a cluster by the first
    /// broker whose catalog sync swaps it into the topic's key.
    #[serde(default, skip_serializing_if = "TopicId::is_zero")]
    pub topic_id: TopicId,
    pub partitions: i32,
    pub replication_factor: i32,
    /// acks=all needs this many in-sync replicas (0 in files written before it existed:
    /// read as the default).
    #[serde(default)]
    pub min_insync_replicas: i32,
    /// Whether a replica outside the ISR may take over when the whole ISR is gone.
    #[serde(default)]
    pub unclean_leader_election: bool,
    /// The settings this topic overrides (docs: `idem topic describe`).
    #[serde(default, skip_serializing_if = "TopicConfig::is_empty")]
    pub config: TopicConfig,
}

impl TopicSpec {
    /// 2 when there are at least 3 replicas (one may fail without losing acks=all), else 1.
    pub fn default_min_insync_replicas(replication_factor: i32) -> i32 {
        if replication_factor >= 3 {
            2
        } else {
            1
        }
    }

    pub fn min_insync_replicas(&self) -> i32 {
        if let Some(min) = self
            .config
            .get(topic_config::MIN_INSYNC_REPLICAS)
            .and_then(|v| v.parse().ok())
        {
            min
        } else {
            self.min_insync_replicas_without_config()
        }
    }

    /// What `min.insync.replicas` is when the config does not set it: the value recorded
    /// at creation, else the replication factor's default.
    fn min_insync_replicas_without_config(&self) -> i32 {
        if self.min_insync_replicas > 0 {
            self.min_insync_replicas
        } else {
            Self::default_min_insync_replicas(self.replication_factor)
        }
    }

    /// Every setting of this topic with the value in effect (see
    /// [`TopicConfig::describe`]).
    pub fn described_config(&self, defaults: &TopicDefaults) -> Vec<ConfigEntry> {
        self.config
            .describe(defaults, self.min_insync_replicas_without_config())
    }
}
