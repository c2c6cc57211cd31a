//! One partition as this broker sees it after a catalog sync (its place in the cluster
//! and, where this broker is a replica, its local log), and a topic's partitions with
//! the failover rule the topic chose.

use std::sync::Arc;

use crate::cluster::catalog::PartitionState;
use crate::partition::Partition;

/// One partition as this broker sees it: where it lives in the cluster, and the local
/// log when this broker is one of its replicas.
#[derive(Clone)]
pub struct PartitionView {
    pub index: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// `mod_revision` of the partition's catalog key (0 on a single node).
    pub catalog_revision: i64,
    pub partition_epoch: i32,
    /// While a reassignment runs: replicas joining and leaving (both in `replicas`).
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
    pub local: Option<Arc<Partition>>,
}

impl PartitionView {
    /// The catalog state this view was read from.
    pub fn catalog_state(&self) -> PartitionState {
        PartitionState {
            replicas: self.replicas.clone(),
            leader: self.leader,
            leader_epoch: self.leader_epoch,
            isr: self.isr.clone(),
            partition_epoch: self.partition_epoch,
            adding_replicas: self.adding_replicas.clone(),
            removing_replicas: self.removing_replicas.clone(),
        }
    }
}

/// A topic's partitions as of the last catalog sync.
#[derive(Clone)]
pub struct TopicView {
    pub name: String,
    /// Whether a replica outside the ISR may take over when the whole ISR is gone.
    pub unclean_leader_election: bool,
    pub partitions: Vec<PartitionView>,
}
