//! The topic catalog of a cluster: the topic keys the brokers write in etcd (layout in
//! `idem_runtime::topic_catalog`), read with etcd's default linearizable reads, so a
//! topic whose deletion was answered to a client is absent here, and one whose creation
//! was answered is present, whatever any broker's watch has caught up with.

use etcd_client::Client;
use idem_pidstore::BoxFuture;
use idem_runtime::etcd_call::{bounded, connect};
use idem_runtime::topic_catalog::{decode_topic_incarnation, topic_key};

use super::{TopicCatalog, TopicPresence};
use crate::error::CoordinatorError;

pub struct EtcdTopicCatalog {
    client: Client,
    prefix: String,
}

impl EtcdTopicCatalog {
    /// Connects lazily: etcd need not answer yet.
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<Self, CoordinatorError> {
        Ok(EtcdTopicCatalog {
            client: connect(endpoints).await?,
            prefix: prefix.to_string(),
        })
    }

    async fn read(&self, topic: &str) -> Result<TopicPresence, CoordinatorError> {
        let key = topic_key(&self.prefix, topic);
        let mut client = self.client.clone();
        let answer = bounded("read topic", client.get(key.as_str(), None)).await?;
        let Some(kv) = answer.kvs().first() else {
            return Ok(TopicPresence::Absent);
        };
        let incarnation =
            decode_topic_incarnation(kv.value()).map_err(|e| CoordinatorError::CorruptCatalog {
                key,
                reason: e.to_string(),
            })?;
        Ok(TopicPresence::Present {
            topic_id: incarnation.topic_id,
            partitions: incarnation.partitions,
        })
    }
}

impl TopicCatalog for EtcdTopicCatalog {
    fn presence<'a>(
        &'a self,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<TopicPresence, CoordinatorError>> {
        Box::pin(self.read(topic))
    }
}
