//! Deleting topics (DeleteTopics) and keeping a name's incarnations apart. A deleted
//! topic leaves nothing: on a single node it leaves `topics.json` first, then each
//! partition is retired (no append after) and its directory, producer state included,
//! deleted; in a cluster its keys leave etcd in one transaction and every replica does
//! the same at its next catalog sync. Whatever a crash or a broker that was down leaves
//! behind is found by name or by topic id: a directory of a topic that is not listed
//! goes at start (single node) or first sync (cluster), and a directory whose
//! `topic-id` is not the listed topic's belongs to an older incarnation and is deleted
//! before the partition opens, empty.

use std::path::Path;
use std::sync::Arc;

use crate::cluster::catalog::CatalogError;
use crate::error::BrokerError;
use crate::internal_topics;
use crate::partition::{Partition, PartitionSettings};
use crate::topic_id::{self, DirVerdict, TopicId};
use crate::topic_spec::TopicSpec;

use super::{
    parse_partition_dir, partition_dir, validate_topic_name, write_topics_file, ClusterCatalog,
    TopicRegistry, TopicsFile, ALTER_CONFIG_ATTEMPTS,
};

impl TopicRegistry {
    /// Opens partition `partition` of incarnation `topic_id` of `topic`: a directory an
    /// older incarnation left is deleted first, and the id is recorded once the directory
    /// exists (a directory without one holds no data: nothing is appended before).
    pub(super) fn open_incarnation(
        data_dir: &Path,
        topic: &str,
        topic_id: TopicId,
        partition: i32,
        settings: PartitionSettings,
        broker_id: i32,
    ) -> Result<Arc<Partition>, BrokerError> {
        let dir = partition_dir(data_dir, topic, partition);
        let verdict = topic_id::verdict(topic_id::read_dir_id(&dir)?, topic_id);
        if let DirVerdict::OlderIncarnation { found } = verdict {
            std::fs::remove_dir_all(&dir)?;
            tracing::info!(
                topic,
                partition,
                %topic_id,
                old_topic_id = %found,
                "deleted the partition of an older incarnation of the topic"
            );
        }
        let local = Arc::new(Partition::open(
            topic, partition, &dir, settings, broker_id,
        )?);
        if !topic_id.is_zero() && verdict != DirVerdict::Same {
            topic_id::record_dir_id(&dir, topic_id)?;
        }
        Ok(local)
    }

    /// Records `topic_id` in an open partition's directory; a failure is only logged (the
    /// directory is then adopted again at the next start, as one written before ids).
    pub(super) fn record_id(dir: &Path, topic_id: TopicId) {
        if let Err(error) = topic_id::record_dir_id(dir, topic_id) {
            tracing::warn!(dir = %dir.display(), %error, "cannot record the topic id");
        }
    }

    /// Single node, at start: deletes the partition directories of topics `topics.json`
    /// does not list (or partitions past a listed topic's count), left by a deletion or a
    /// creation that a crash interrupted.
    pub(super) fn delete_unlisted_dirs(data_dir: &Path, listed: &[TopicSpec]) {
        let entries = match std::fs::read_dir(data_dir) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the data dir for deleted topics");
                return;
            }
        };
        let unlisted: Vec<(String, i32)> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| parse_partition_dir(&e.file_name().to_string_lossy()))
            .filter(|(topic, p)| {
                validate_topic_name(topic).is_ok()
                    && !listed
                        .iter()
                        .any(|spec| spec.name == *topic && *p < spec.partitions)
            })
            .collect();
        for (topic, p) in unlisted {
            match std::fs::remove_dir_all(partition_dir(data_dir, &topic, p)) {
                Ok(()) => tracing::info!(
                    topic,
                    partition = p,
                    "deleted the directory of a partition of a topic that no longer exists"
                ),
                Err(e) => {
                    tracing::warn!(topic, partition = p, error = %e, "deleting the directory of a deleted topic failed")
                }
            }
        }
    }

    /// Deletes topic `name` everywhere (DeleteTopics) and returns the id of the
    /// incarnation deleted. Internal topics are refused (INVALID_TOPIC_EXCEPTION) and an
    /// unknown one is UNKNOWN_TOPIC_OR_PARTITION; either changes nothing.
    pub async fn delete_topic(&self, name: &str) -> Result<TopicId, BrokerError> {
        internal_topics::check_delete(name)?;
        match &self.cluster {
            Some(cluster) => self.delete_in_cluster(cluster, name).await,
            None => self.delete_locally(name).await,
        }
    }

    async fn delete_locally(&self, name: &str) -> Result<TopicId, BrokerError> {
        let _guard = self.create_lock.lock().await;
        let topic_id = self
            .read()
            .get(name)
            .map(|t| t.spec.topic_id)
            .ok_or_else(|| BrokerError::UnknownTopic(name.to_string()))?;
        // The file first: once it no longer lists the topic, a crash from here on
        // leaves directories that the next start deletes.
        let remaining: Vec<TopicSpec> = self
            .read()
            .values()
            .filter(|t| t.spec.name != name)
            .map(|t| t.spec.clone())
            .collect();
        write_topics_file(&self.data_dir, &TopicsFile { topics: remaining })?;
        let removed = self.write().remove(name);
        for partition in removed
            .iter()
            .flat_map(|t| t.partitions.iter().filter_map(|v| v.local.clone()))
        {
            self.delete_replica(&partition);
        }
        tracing::info!(topic = name, %topic_id, "deleted topic");
        Ok(topic_id)
    }

    /// Removes the topic's keys from etcd on the topic key's `mod_revision` (a lost race,
    /// e.g. with a config change, re-reads and tries again, up to
    /// [`ALTER_CONFIG_ATTEMPTS`] times, then answers the retriable `Cluster`); every
    /// replica deletes its copy at its next sync, this broker at once.
    async fn delete_in_cluster(
        &self,
        cluster: &ClusterCatalog,
        name: &str,
    ) -> Result<TopicId, BrokerError> {
        let cluster_error = |e: CatalogError| BrokerError::Cluster(e.to_string());
        for _ in 0..ALTER_CONFIG_ATTEMPTS {
            let (spec, mod_revision) = cluster
                .catalog
                .read_topic(name)
                .await
                .map_err(cluster_error)?
                .ok_or_else(|| BrokerError::UnknownTopic(name.to_string()))?;
            if !cluster
                .catalog
                .delete_topic(name, mod_revision)
                .await
                .map_err(cluster_error)?
            {
                continue;
            }
            tracing::info!(topic = name, topic_id = %spec.topic_id, "deleted topic from the cluster");
            // The deletion stands whatever happens next: a failed sync is the watch's
            // to catch up on, not the caller's to retry.
            if let Err(error) = self.sync().await {
                tracing::warn!(topic = name, %error, "deleted the topic, but the catalog sync after it failed");
            }
            return Ok(spec.topic_id);
        }
        Err(BrokerError::Cluster(format!(
            "topic {name:?} kept changing while it was being deleted; retry"
        )))
    }

    /// Catalog sync: when the catalog's topic `name` is another incarnation than the one
    /// open here (deleted and created again between two syncs), the open partitions are
    /// retired before the new ones open (and delete the old directories).
    pub(super) fn retire_older_incarnation(&self, name: &str, topic_id: TopicId) {
        let older: Vec<Arc<Partition>> = match self.read().get(name) {
            Some(t) if !t.spec.topic_id.is_zero() && t.spec.topic_id != topic_id => t
                .partitions
                .iter()
                .filter_map(|v| v.local.clone())
                .collect(),
            _ => return,
        };
        tracing::info!(
            topic = name,
            %topic_id,
            "the topic was deleted and created again: retiring the partitions of the old one"
        );
        for partition in older {
            partition.retire();
        }
    }

    /// Catalog sync: gives an id to every topic recorded before ids existed, by
    /// compare-and-swap of its key (any broker may; one wins and the rest see its id at
    /// their next sync). Failures are only logged: the next sync tries again.
    pub(super) async fn assign_missing_ids(&self, cluster: &ClusterCatalog) {
        let unnamed: Vec<String> = self
            .read()
            .values()
            .filter(|t| t.spec.topic_id.is_zero())
            .map(|t| t.spec.name.clone())
            .collect();
        for name in unnamed {
            let assigned = match cluster.catalog.read_topic(&name).await {
                Ok(Some((spec, mod_revision))) if spec.topic_id.is_zero() => {
                    let spec = TopicSpec {
                        topic_id: TopicId::random(),
                        ..spec
                    };
                    cluster
                        .catalog
                        .compare_and_set_topic(mod_revision, &spec)
                        .await
                        .map(|swapped| swapped.then_some(spec.topic_id))
                }
                Ok(_) => Ok(None),
                Err(e) => Err(e),
            };
            match assigned {
                Ok(Some(topic_id)) => {
                    tracing::info!(topic = name, %topic_id, "gave a topic id to a topic recorded without one")
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(topic = name, %error, "cannot give the topic an id; the next sync retries")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topic_config::TopicConfig;
    use crate::topic_id::TOPIC_ID_FILE;
    use idem_proto::ErrorCode;

    fn single_node(dir: &Path) -> TopicRegistry {
        TopicRegistry::open(dir, 0, super::super::tests::settings(), 100).expect("registry")
    }

    fn batch(producer_id: i64) -> Vec<u8> {
        use idem_proto::batch::{self, ProducerInfo, Record};
        let producer = ProducerInfo {
            producer_id,
            producer_epoch: 0,
            base_sequence: 0,
        };
        let record = Record {
            value: Some(bytes::Bytes::from_static(b"x")),
            ..Record::default()
        };
        batch::encode(producer, 0, &[record]).to_vec()
    }

    async fn append(registry: &TopicRegistry, topic: &str) {
        registry
            .partition(topic, 0)
            .expect("led")
            .append(&batch(7), 1, std::time::Duration::from_secs(5))
            .await
            .expect("append");
    }

    fn listed_ids(dir: &Path) -> Vec<(String, TopicId)> {
        super::super::read_topics_file(dir)
            .expect("topics.json")
            .topics
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .collect()
    }

    #[tokio::test]
    async fn given_a_single_node_when_a_topic_is_deleted_and_created_again_then_the_new_one_is_empty_with_another_id(
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = single_node(dir.path());
        registry
            .create("orders", 2, 1, false, TopicConfig::default())
            .await
            .expect("create");
        registry
            .create("keep", 1, 1, false, TopicConfig::default())
            .await
            .expect("create");
        append(&registry, "orders").await;
        let first = registry.partition("orders", 0).expect("led");
        let old_id = registry.delete_topic("orders").await.expect("delete");
        assert!(!old_id.is_zero());
        assert!(!dir.path().join("orders-0").exists());
        assert!(!dir.path().join("orders-1").exists());
        assert_eq!(
            registry.partition("orders", 0).err().map(|e| e.code()),
            Some(ErrorCode::UnknownTopicOrPartition)
        );
        assert!(
            first
                .append(&batch(8), 1, std::time::Duration::from_secs(5))
                .await
                .is_err(),
            "a retired partition appends nothing"
        );
        assert_eq!(listed_ids(dir.path()).len(), 1, "only keep is listed");

        registry
            .create("orders", 1, 1, false, TopicConfig::default())
            .await
            .expect("create again");
        let again = registry.partition("orders", 0).expect("led");
        assert_eq!(
            again.offsets().log_end_offset,
            0,
            "the new incarnation is empty"
        );
        let (_, new_id) = listed_ids(dir.path())
            .into_iter()
            .find(|(n, _)| n == "orders")
            .expect("listed");
        assert_ne!(new_id, old_id);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("orders-0").join(TOPIC_ID_FILE))
                .expect("id file")
                .trim(),
            new_id.to_string()
        );
    }

    #[tokio::test]
    async fn given_internal_or_unknown_topics_then_deletion_is_refused_and_nothing_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = single_node(dir.path());
        let internal = idem_proto::txn::TXN_LOG_TOPIC;
        registry
            .create(internal, 1, 1, false, TopicConfig::default())
            .await
            .expect("create");
        let before = std::fs::read(dir.path().join(super::super::TOPICS_FILE)).expect("file");
        let e = registry.delete_topic(internal).await.expect_err("internal");
        assert_eq!(e.code(), ErrorCode::InvalidTopicException);
        assert!(e.to_string().contains("internal"), "{e}");
        let e = registry.delete_topic("missing").await.expect_err("unknown");
        assert_eq!(e.code(), ErrorCode::UnknownTopicOrPartition);
        assert!(e.to_string().contains("missing"), "{e}");
        assert_eq!(
            std::fs::read(dir.path().join(super::super::TOPICS_FILE)).expect("file"),
            before
        );
        assert!(registry.partition(internal, 0).is_ok());
    }

    #[tokio::test]
    async fn given_left_over_dirs_and_a_spec_without_id_when_a_single_node_starts_then_it_keeps_only_the_listed_incarnation(
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let registry = single_node(dir.path());
            registry
                .create("orders", 1, 1, false, TopicConfig::default())
                .await
                .expect("create");
            append(&registry, "orders").await;
            registry
                .create("gone", 1, 1, false, TopicConfig::default())
                .await
                .expect("create");
        }
        // A deletion the crash cut after topics.json, and a spec from before ids.
        let file = r#"{"topics":[{"name":"orders","partitions":1,"replication_factor":1}]}"#;
        std::fs::write(dir.path().join(super::super::TOPICS_FILE), file).expect("write");
        let registry = single_node(dir.path());
        assert!(!dir.path().join("gone-0").exists(), "unlisted dir deleted");
        let ids = listed_ids(dir.path());
        assert_eq!(ids.len(), 1);
        assert!(!ids[0].1.is_zero(), "an id was given and written: {ids:?}");
        // The old directory recorded another id: an older incarnation, deleted.
        assert_eq!(
            registry
                .partition("orders", 0)
                .expect("led")
                .offsets()
                .log_end_offset,
            0
        );
        drop(registry);
        // Taken as is when it records no id (written before ids existed).
        let registry = single_node(dir.path());
        append(&registry, "orders").await;
        drop(registry);
        std::fs::remove_file(dir.path().join("orders-0").join(TOPIC_ID_FILE)).expect("rm");
        let registry = single_node(dir.path());
        assert_eq!(
            registry
                .partition("orders", 0)
                .expect("led")
                .offsets()
                .log_end_offset,
            1,
            "a directory without an id is adopted"
        );
        assert_eq!(listed_ids(dir.path()), ids, "the id given once is kept");
    }
}
