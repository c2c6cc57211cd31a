//! The etcd side of a clustered broker: its catalog and membership, and the two things
//! every catalog duty (failover, ISR upkeep) asks of them.

use std::sync::Arc;

use crate::cluster::catalog::{EtcdCatalog, PartitionState};
use crate::cluster::membership::Membership;
use crate::cluster::partition_view::PartitionView;
use crate::error::BrokerError;

/// The etcd side of a clustered broker.
pub struct ClusterCatalog {
    pub broker_id: i32,
    pub catalog: EtcdCatalog,
    pub membership: Arc<Membership>,
    /// TLS for this broker's connections to other brokers (replica fetches): its own
    /// certificate as client certificate, its CA as trust anchor. `None`: plaintext.
    pub peer_tls: Option<idem_runtime::tls::PeerTls>,
}

impl ClusterCatalog {
    /// Publishes `state` for a partition last seen at `view`'s catalog revision;
    /// `Ok(false)` when another change got there first (nothing written).
    pub async fn publish(
        &self,
        topic: &str,
        view: &PartitionView,
        state: &PartitionState,
    ) -> Result<bool, BrokerError> {
        self.catalog
            .compare_and_set_partition(topic, view.index, view.catalog_revision, state)
            .await
            .map_err(|e| BrokerError::Cluster(e.to_string()))
    }

    /// Ids of the brokers registered now.
    pub async fn live_broker_ids(&self) -> Result<Vec<i32>, BrokerError> {
        let brokers = self
            .membership
            .live_brokers()
            .await
            .map_err(|e| BrokerError::Cluster(e.to_string()))?;
        Ok(brokers.into_iter().map(|b| b.broker_id).collect())
    }
}
