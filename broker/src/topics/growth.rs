//! CreatePartitions: a topic grows to a new partition count and never shrinks (records
//! are placed by `hash(key) % count`; fewer partitions would strand records and move
//! keys). Internal topics keep theirs: a transactional id's slice of
//! `__transaction_state` is its hash modulo that count. On a single node the new
//! partitions are opened, then `topics.json` records the count; in a cluster the new
//! partitions' states and the count change in etcd together (see
//! `cluster::catalog::growth`), and every replica opens its new partitions at its next
//! catalog sync.

use std::sync::Arc;

use idem_proto::internal::is_internal_topic;

use super::{partition_dir, sole_replica, TopicRegistry};
use crate::cluster::catalog::CatalogError;
use crate::error::BrokerError;
use crate::partition::Partition;
use crate::topic_spec::TopicSpec;

/// Compare-and-swap attempts of one growth before it is answered as retriable: only
/// another change of the same topic (a config change, another growth) races it.
const GROW_ATTEMPTS: usize = 5;

/// Internal topics never grow, whether or not they exist yet (pure).
pub fn check_growable(topic: &str) -> Result<(), BrokerError> {
    if is_internal_topic(topic) {
        return Err(BrokerError::InternalTopic {
            topic: topic.to_string(),
            reason:
                "it is internal: its partition count places transactional ids and never changes"
                    .into(),
        });
    }
    Ok(())
}

/// Whether a topic of `current` partitions may grow to `requested` (pure).
pub fn check_growth(
    topic: &str,
    current: i32,
    requested: i32,
    max_partitions: i32,
) -> Result<(), BrokerError> {
    check_growable(topic)?;
    if requested <= current {
        return Err(BrokerError::PartitionsNotGrown {
            topic: topic.to_string(),
            requested,
            current,
        });
    }
    if requested > max_partitions {
        return Err(BrokerError::InvalidPartitions {
            count: requested,
            max: max_partitions,
        });
    }
    Ok(())
}

impl TopicRegistry {
    /// Grows `topic` to `count` partitions (CreatePartitions); with `validate_only`
    /// only checks that it could. A refusal changes nothing.
    pub async fn create_partitions(
        &self,
        topic: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        check_growable(topic)?;
        let unknown = || BrokerError::UnknownTopic(topic.to_string());
        let Some(cluster) = &self.cluster else {
            let _guard = self.create_lock.lock().await;
            let spec = self
                .read()
                .get(topic)
                .map(|t| t.spec.clone())
                .ok_or_else(unknown)?;
            check_growth(topic, spec.partitions, count, self.max_partitions)?;
            if validate_only {
                return Ok(());
            }
            return self.grow_locally(spec, count);
        };
        let cluster_error = |e: CatalogError| match e {
            CatalogError::NotEnoughBrokers { factor, live } => {
                BrokerError::InvalidReplicationFactor {
                    factor,
                    brokers: live as i32,
                }
            }
            e => BrokerError::Cluster(e.to_string()),
        };
        for _ in 0..GROW_ATTEMPTS {
            let (spec, mod_revision) = cluster
                .catalog
                .read_topic(topic)
                .await
                .map_err(cluster_error)?
                .ok_or_else(unknown)?;
            check_growth(topic, spec.partitions, count, self.max_partitions)?;
            let live = cluster.live_broker_ids().await?;
            let current = spec.partitions;
            let grown = TopicSpec {
                partitions: count,
                ..spec
            };
            if validate_only {
                // Lays the partitions out without writing: too few live brokers refuses.
                crate::cluster::catalog::growth::added_partition_states(&grown, current, &live)
                    .map_err(cluster_error)?;
                return Ok(());
            }
            if cluster
                .catalog
                .add_partitions(mod_revision, current, &grown, &live)
                .await
                .map_err(cluster_error)?
            {
                tracing::info!(
                    topic,
                    from = current,
                    to = count,
                    "grew topic in the cluster"
                );
                // Stored; a failed read only delays the new partitions here until the
                // catalog watch catches up.
                if let Err(e) = self.sync().await {
                    tracing::debug!(error = %e, "reading the catalog after growing a topic failed; the watch catches up");
                }
                return Ok(());
            }
            tracing::debug!(topic, "topic changed while it grew; trying again");
        }
        Err(BrokerError::Cluster(format!(
            "topic {topic:?} changed under {GROW_ATTEMPTS} attempts to grow it; retry"
        )))
    }

    /// Single node, create lock held: opens partitions `spec.partitions..count`, records
    /// the count in `topics.json`, then serves them.
    fn grow_locally(&self, spec: TopicSpec, count: i32) -> Result<(), BrokerError> {
        let settings = spec.config.resolve(&self.settings.topic_defaults);
        let mut opened = Vec::with_capacity((count - spec.partitions) as usize);
        for p in spec.partitions..count {
            let dir = partition_dir(&self.data_dir, &spec.name, p);
            let local = Arc::new(Partition::open(
                &spec.name,
                p,
                &dir,
                self.settings.clone(),
                self.broker_id,
            )?);
            local.set_topic_settings(settings.clone());
            opened.push(sole_replica(self.broker_id, p, local));
        }
        let grown = TopicSpec {
            partitions: count,
            ..spec
        };
        self.write_specs_replacing(&grown)?;
        tracing::info!(topic = %grown.name, partitions = count, "grew topic");
        if let Some(topic) = self.write().get_mut(&grown.name) {
            topic.partitions.extend(opened);
            topic.spec = grown;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topic_config::TopicConfig;
    use idem_proto::ErrorCode;

    fn single_node(dir: &std::path::Path) -> TopicRegistry {
        TopicRegistry::open(dir, 0, super::super::tests::settings(), 8).expect("registry")
    }

    #[tokio::test]
    async fn given_a_single_node_when_a_topic_grows_then_new_partitions_are_led_and_a_restart_keeps_them(
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = single_node(dir.path());
        registry
            .create("orders", 2, 1, false, TopicConfig::default())
            .await
            .expect("create");
        registry
            .create_partitions("orders", 3, true)
            .await
            .expect("valid");
        assert_eq!(registry.partition_count("orders"), Some(2), "validate only");
        registry
            .create_partitions("orders", 4, false)
            .await
            .expect("grown");
        assert_eq!(registry.partition_count("orders"), Some(4));
        registry.partition("orders", 3).expect("led at once");
        let file = std::fs::read(dir.path().join(super::super::TOPICS_FILE)).expect("topics.json");
        for (count, code) in [
            (4, ErrorCode::InvalidPartitions),
            (1, ErrorCode::InvalidPartitions),
            (9, ErrorCode::InvalidPartitions),
        ] {
            let e = registry
                .create_partitions("orders", count, false)
                .await
                .expect_err("refused");
            assert_eq!(e.code(), code, "{count}: {e}");
        }
        let e = registry
            .create_partitions("missing", 4, false)
            .await
            .expect_err("unknown");
        assert_eq!(e.code(), ErrorCode::UnknownTopicOrPartition);
        assert_eq!(
            std::fs::read(dir.path().join(super::super::TOPICS_FILE)).expect("topics.json"),
            file,
            "refusals write nothing"
        );
        drop(registry);
        let reopened = single_node(dir.path());
        assert_eq!(reopened.partition_count("orders"), Some(4));
        reopened.partition("orders", 3).expect("reopened");
    }

    #[test]
    fn given_a_larger_count_within_the_limit_then_the_topic_may_grow() {
        assert!(check_growth("orders", 2, 4, 100).is_ok());
        assert!(check_growth("orders", 2, 100, 100).is_ok());
    }

    #[test]
    fn given_the_same_or_a_smaller_count_then_it_is_refused_naming_the_current_one() {
        for requested in [2, 1, 0, -3] {
            let e = check_growth("orders", 2, requested, 100).expect_err("not growth");
            assert_eq!(e.code(), ErrorCode::InvalidPartitions, "{requested}");
            assert!(e.to_string().contains("has 2 partitions"), "{e}");
        }
    }

    #[test]
    fn given_a_count_above_the_limit_or_an_internal_topic_then_it_is_refused() {
        let e = check_growth("orders", 2, 101, 100).expect_err("above the limit");
        assert_eq!(e.code(), ErrorCode::InvalidPartitions);
        assert!(e.to_string().contains("100"), "{e}");
        let e = check_growth(idem_proto::txn::TXN_LOG_TOPIC, 2, 4, 100).expect_err("internal");
        assert_eq!(e.code(), ErrorCode::InvalidTopicException);
    }
}
