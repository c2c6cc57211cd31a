//! Where the coordinator gets fresh producer ids (for new transactional ids, for ids
//! whose epoch is exhausted, and for a transaction log writer). Every source hands out
//! ids from the one store the brokers use too, so a transactional producer id is never
//! also an idempotent producer's.

use std::sync::Arc;

use idem_client::Connection;
use idem_pidstore::{BoxFuture, ProducerIdManager};

use crate::error::CoordinatorError;

pub trait ProducerIdSource: Send + Sync {
    fn next_producer_id(&self) -> BoxFuture<'_, Result<i64, CoordinatorError>>;
}

/// Blocks leased from a `PidBlockStore` (etcd in a cluster; the broker's embedded
/// store when `idem dev` runs the coordinator in-process).
impl ProducerIdSource for ProducerIdManager {
    fn next_producer_id(&self) -> BoxFuture<'_, Result<i64, CoordinatorError>> {
        Box::pin(async move {
            ProducerIdManager::next_producer_id(self)
                .await
                .map_err(|e| CoordinatorError::ProducerIds(e.to_string()))
        })
    }
}

/// A single-node broker's InitProducerId (no transactional id): a standalone solo
/// coordinator has no store of its own and must not invent ids the broker may reuse.
pub struct BrokerProducerIds(pub Connection);

impl ProducerIdSource for BrokerProducerIds {
    fn next_producer_id(&self) -> BoxFuture<'_, Result<i64, CoordinatorError>> {
        Box::pin(async move {
            let id = self.0.init_producer_id().await?;
            Ok(id.producer_id)
        })
    }
}

pub type SharedProducerIds = Arc<dyn ProducerIdSource>;
