//! The topics this broker knows, the partitions it hosts, and the rules a new topic must
//! pass. On a single node the topic list is `topics.json` in the data dir (written
//! atomically) and this broker leads every partition. In a cluster the list and every
//! partition's replicas, leader and epoch come from the etcd catalog; this broker opens
//! the partitions it is a replica of and serves produce and fetch only where it leads.
//! Each hosted partition lives in `<data_dir>/<topic>-<partition>/`; once the catalog
//! no longer names this broker among a partition's replicas (a reassignment moved it
//! away), the partition is closed for good and its directory deleted (Kafka's
//! StopReplica with delete), at once or, after a restart, at the first catalog sync.
//! Deleting a topic and telling its incarnations apart (a `topic-id` file in every
//! partition directory) is in `topics/deletion.rs`.
//! The duties a sync sets off live with the cluster: failover in `cluster/election.rs`,
//! ISR upkeep in `cluster/isr_upkeep.rs`, following leaders in `replication/`.

mod growth;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::cluster::catalog::{CatalogError, CatalogSnapshot, EtcdCatalog, PartitionState};
pub use crate::cluster::cluster_catalog::ClusterCatalog;
pub use crate::cluster::partition_view::PartitionView;
use crate::cluster::partition_view::TopicView;
use crate::cluster::{election, isr_upkeep};
use crate::coordinators::CoordinatorView;
use crate::error::BrokerError;
use crate::partition::{Partition, PartitionSettings};
use crate::partition_health::PartitionFacts;
use crate::replication::fetchers::Fetchers;
use crate::replication::following;
use crate::replication::replica_set::Role;
use crate::topic_config::{ConfigEntry, ConfigOp, TopicConfig};
use crate::topic_id::TopicId;
use crate::topic_spec::TopicSpec;

mod deletion;

const TOPICS_FILE: &str = "topics.json";
const MAX_TOPIC_NAME_LEN: usize = 249;
/// Compare-and-swap attempts of one config change before it is answered as retriable:
/// only another config change of the same topic races it, so a few suffice.
const ALTER_CONFIG_ATTEMPTS: usize = 5;

#[derive(Debug, Default, Serialize, Deserialize)]
struct TopicsFile {
    topics: Vec<TopicSpec>,
}

/// Checks a topic name the way Kafka does: 1 to 249 characters of `[a-zA-Z0-9._-]`,
/// not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), BrokerError> {
    let invalid = |reason| BrokerError::InvalidTopic {
        name: name.to_string(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("the name is empty"));
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return Err(invalid("the name is longer than 249 characters"));
    }
    if name == "." || name == ".." {
        return Err(invalid("'.' and '..' are not topic names"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(invalid(
            "only ASCII letters, digits, '.', '_' and '-' are allowed",
        ));
    }
    Ok(())
}

/// The replica count a CreateTopics asks for: 0 and -1 mean the default (1); any other
/// value below 1 is refused rather than read as the default.
pub fn resolve_replication_factor(requested: i32) -> Result<i32, BrokerError> {
    match requested {
        0 | -1 => Ok(1),
        n if n >= 1 => Ok(n),
        n => Err(BrokerError::NegativeReplicationFactor(n)),
    }
}

struct Topic {
    spec: TopicSpec,
    partitions: Vec<PartitionView>,
}

/// Topics and their partitions.
pub struct TopicRegistry {
    data_dir: PathBuf,
    broker_id: i32,
    settings: PartitionSettings,
    max_partitions: i32,
    topics: RwLock<BTreeMap<String, Topic>>,
    cluster: Option<ClusterCatalog>,
    // Serialises creations (single node) and catalog syncs (cluster).
    create_lock: tokio::sync::Mutex<()>,
    /// One fetcher per leader this broker follows partitions of.
    fetchers: std::sync::Mutex<Fetchers>,
    /// The membership generation the last catalog sync saw: after the broker lost its
    /// lease and registered again, it leads nothing until it has re-read the catalog.
    synced_generation: std::sync::atomic::AtomicU64,
    /// The coordinator keys of the last catalog sync (cluster only).
    coordinators: RwLock<CoordinatorView>,
    /// Wakes the ISR duty when a follower outside an ISR has caught up: it rejoins at
    /// once instead of at the next periodic check (a quarter of the lag limit).
    isr_wake: tokio::sync::Notify,
}

impl TopicRegistry {
    /// Opens every topic recorded in `data_dir`, recovering each partition's log and
    /// producer state. This broker (`broker_id`) leads them all.
    pub fn open(
        data_dir: &Path,
        broker_id: i32,
        settings: PartitionSettings,
        max_partitions: i32,
    ) -> Result<Self, BrokerError> {
        std::fs::create_dir_all(data_dir)?;
        let mut file = read_topics_file(data_dir)?;
        // Specs written before topic ids existed get one now, kept from then on.
        let unnamed = file.topics.iter().filter(|t| t.topic_id.is_zero()).count();
        if unnamed > 0 {
            for spec in file.topics.iter_mut().filter(|t| t.topic_id.is_zero()) {
                spec.topic_id = TopicId::random();
            }
            write_topics_file(data_dir, &file)?;
            tracing::info!(
                topics = unnamed,
                "gave topic ids to topics recorded without one"
            );
        }
        Self::delete_unlisted_dirs(data_dir, &file.topics);
        let mut topics = BTreeMap::new();
        for spec in file.topics {
            let mut partitions = Vec::with_capacity(spec.partitions as usize);
            for p in 0..spec.partitions {
                let local = Self::open_incarnation(
                    data_dir,
                    &spec.name,
                    spec.topic_id,
                    p,
                    settings.clone(),
                    broker_id,
                )?;
                local.set_topic_settings(spec.config.resolve(&settings.topic_defaults));
                partitions.push(sole_replica(broker_id, p, local));
            }
            topics.insert(spec.name.clone(), Topic { spec, partitions });
        }
        Ok(TopicRegistry {
            data_dir: data_dir.to_path_buf(),
            broker_id,
            settings,
            max_partitions,
            topics: RwLock::new(topics),
            cluster: None,
            create_lock: tokio::sync::Mutex::new(()),
            fetchers: std::sync::Mutex::new(Fetchers::default()),
            synced_generation: std::sync::atomic::AtomicU64::new(u64::MAX),
            coordinators: RwLock::new(CoordinatorView::default()),
            isr_wake: tokio::sync::Notify::new(),
        })
    }

    /// A registry whose topics come from the etcd catalog; call [`TopicRegistry::sync`]
    /// to load them and again whenever the catalog changes.
    pub fn clustered(
        data_dir: &Path,
        settings: PartitionSettings,
        max_partitions: i32,
        cluster: ClusterCatalog,
    ) -> Result<Self, BrokerError> {
        std::fs::create_dir_all(data_dir)?;
        Ok(TopicRegistry {
            data_dir: data_dir.to_path_buf(),
            broker_id: cluster.broker_id,
            settings,
            max_partitions,
            topics: RwLock::new(BTreeMap::new()),
            cluster: Some(cluster),
            create_lock: tokio::sync::Mutex::new(()),
            fetchers: std::sync::Mutex::new(Fetchers::default()),
            synced_generation: std::sync::atomic::AtomicU64::new(u64::MAX),
            coordinators: RwLock::new(CoordinatorView::default()),
            isr_wake: tokio::sync::Notify::new(),
        })
    }

    /// The etcd catalog, in a cluster.
    pub fn catalog(&self) -> Option<&EtcdCatalog> {
        self.cluster.as_ref().map(|c| &c.catalog)
    }

    /// The etcd side of this broker, in a cluster.
    pub fn cluster(&self) -> Option<&ClusterCatalog> {
        self.cluster.as_ref()
    }

    /// Creates a topic with the settings `config` overrides. Nothing is written unless
    /// every check passes.
    pub async fn create(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        unclean_leader_election: bool,
        config: TopicConfig,
    ) -> Result<(), BrokerError> {
        validate_topic_name(name)?;
        if partitions < 1 || partitions > self.max_partitions {
            return Err(BrokerError::InvalidPartitions {
                count: partitions,
                max: self.max_partitions,
            });
        }
        let replication_factor = resolve_replication_factor(replication_factor)?;
        config.check_for_topic(replication_factor, self.settings.max_batch_bytes)?;
        let spec = TopicSpec {
            name: name.to_string(),
            topic_id: TopicId::random(),
            partitions,
            replication_factor,
            min_insync_replicas: TopicSpec::default_min_insync_replicas(replication_factor),
            unclean_leader_election,
            config,
        };
        match &self.cluster {
            Some(cluster) => self.create_in_cluster(cluster, spec).await,
            None => self.create_locally(spec).await,
        }
    }

    async fn create_in_cluster(
        &self,
        cluster: &ClusterCatalog,
        spec: TopicSpec,
    ) -> Result<(), BrokerError> {
        let live = cluster.live_broker_ids().await?;
        match cluster.catalog.create_topic(&spec, &live).await {
            Ok(()) => {}
            Err(CatalogError::TopicAlreadyExists(name)) => {
                return Err(BrokerError::TopicAlreadyExists(name))
            }
            Err(CatalogError::NotEnoughBrokers { factor, live }) => {
                return Err(BrokerError::InvalidReplicationFactor {
                    factor,
                    brokers: live as i32,
                })
            }
            Err(e) => return Err(BrokerError::Cluster(e.to_string())),
        }
        tracing::info!(topic = %spec.name, partitions = spec.partitions, "created topic in the cluster");
        // See it at once rather than when the catalog watch catches up.
        self.sync().await
    }

    async fn create_locally(&self, spec: TopicSpec) -> Result<(), BrokerError> {
        if spec.replication_factor != 1 {
            return Err(BrokerError::InvalidReplicationFactor {
                factor: spec.replication_factor,
                brokers: 1,
            });
        }
        let _guard = self.create_lock.lock().await;
        if self.read().contains_key(&spec.name) {
            return Err(BrokerError::TopicAlreadyExists(spec.name));
        }
        let mut opened = Vec::with_capacity(spec.partitions as usize);
        for p in 0..spec.partitions {
            let local = Self::open_incarnation(
                &self.data_dir,
                &spec.name,
                spec.topic_id,
                p,
                self.settings.clone(),
                self.broker_id,
            )?;
            local.set_topic_settings(spec.config.resolve(&self.settings.topic_defaults));
            opened.push(sole_replica(self.broker_id, p, local));
        }
        let mut specs: Vec<TopicSpec> = self.read().values().map(|t| t.spec.clone()).collect();
        specs.push(spec.clone());
        write_topics_file(&self.data_dir, &TopicsFile { topics: specs })?;
        tracing::info!(topic = %spec.name, partitions = spec.partitions, "created topic");
        self.write().insert(
            spec.name.clone(),
            Topic {
                spec,
                partitions: opened,
            },
        );
        Ok(())
    }

    /// Applies `ops` to topic `topic`'s config (IncrementalAlterConfigs): the result is
    /// checked whole, and stored only when it passes and `validate_only` is false. On a
    /// single node `topics.json` is rewritten and the partitions take the new settings
    /// at once; in a cluster the topic's key in etcd is swapped on its `mod_revision`
    /// (a lost race re-reads the topic and applies the ops again, up to
    /// [`ALTER_CONFIG_ATTEMPTS`] times, then answers the retriable `Cluster`), and every
    /// broker's partitions take it at their next catalog sync (this broker's at once).
    pub async fn alter_config(
        &self,
        topic: &str,
        ops: &[ConfigOp],
        validate_only: bool,
    ) -> Result<(), BrokerError> {
        let unknown = || BrokerError::UnknownTopic(topic.to_string());
        let Some(cluster) = &self.cluster else {
            let _guard = self.create_lock.lock().await;
            let spec = self
                .read()
                .get(topic)
                .map(|t| t.spec.clone())
                .ok_or_else(unknown)?;
            let config = self.checked_alteration(&spec, ops)?;
            if validate_only || config == spec.config {
                return Ok(());
            }
            return self.store_config_locally(TopicSpec { config, ..spec });
        };
        for _ in 0..ALTER_CONFIG_ATTEMPTS {
            let cluster_error = |e: CatalogError| BrokerError::Cluster(e.to_string());
            let (spec, mod_revision) = cluster
                .catalog
                .read_topic(topic)
                .await
                .map_err(cluster_error)?
                .ok_or_else(unknown)?;
            let config = self.checked_alteration(&spec, ops)?;
            if validate_only || config == spec.config {
                return Ok(());
            }
            let altered = TopicSpec { config, ..spec };
            if cluster
                .catalog
                .compare_and_set_topic(mod_revision, &altered)
                .await
                .map_err(cluster_error)?
            {
                tracing::info!(topic, config = ?altered.config, "altered topic config in the cluster");
                // The change is stored; a failed read only delays it here until the
                // catalog watch catches up.
                if let Err(e) = self.sync().await {
                    tracing::debug!(error = %e, "reading the catalog after a config change failed; the watch catches up");
                }
                return Ok(());
            }
            tracing::debug!(
                topic,
                "topic changed while its config was altered; trying again"
            );
        }
        Err(BrokerError::Cluster(format!(
            "topic {topic:?} changed under {ALTER_CONFIG_ATTEMPTS} attempts to alter its config; retry"
        )))
    }

    /// `spec`'s config with `ops` applied, if the whole of it is valid for the topic.
    fn checked_alteration(
        &self,
        spec: &TopicSpec,
        ops: &[ConfigOp],
    ) -> Result<TopicConfig, BrokerError> {
        let config = spec.config.altered(ops)?;
        if idem_proto::internal::is_internal_topic(&spec.name) {
            spec.config.check_keeps_cleanup_policy(&config)?;
        }
        config.check_for_topic(spec.replication_factor, self.settings.max_batch_bytes)?;
        Ok(config)
    }

    /// Single node, create lock held: rewrites `topics.json` with `spec` in place of the
    /// topic of its name.
    fn write_specs_replacing(&self, spec: &TopicSpec) -> Result<(), BrokerError> {
        let specs: Vec<TopicSpec> = self
            .read()
            .values()
            .map(|t| {
                if t.spec.name == spec.name {
                    spec.clone()
                } else {
                    t.spec.clone()
                }
            })
            .collect();
        write_topics_file(&self.data_dir, &TopicsFile { topics: specs })?;
        Ok(())
    }

    /// Single node, create lock held: records `spec` in `topics.json`, then gives its
    /// partitions the new settings.
    fn store_config_locally(&self, spec: TopicSpec) -> Result<(), BrokerError> {
        self.write_specs_replacing(&spec)?;
        tracing::info!(topic = %spec.name, config = ?spec.config, "altered topic config");
        let settings = spec.config.resolve(&self.settings.topic_defaults);
        let hosted: Vec<Arc<Partition>> = match self.write().get_mut(&spec.name) {
            Some(topic) => {
                let hosted = topic
                    .partitions
                    .iter()
                    .filter_map(|v| v.local.clone())
                    .collect();
                topic.spec = spec;
                hosted
            }
            None => Vec::new(),
        };
        for partition in hosted {
            partition.set_topic_settings(settings.clone());
        }
        Ok(())
    }

    /// Every setting of topic `name` with the value in effect and whether the topic sets
    /// it, as of the last catalog sync; `None` for an unknown topic.
    pub fn describe_config(&self, name: &str) -> Option<Vec<ConfigEntry>> {
        self.read()
            .get(name)
            .map(|t| t.spec.described_config(&self.settings.topic_defaults))
    }

    /// Reloads the catalog from etcd and opens the partitions this broker is a replica
    /// of. Returns the revision read, for the watch that follows.
    pub async fn sync(&self) -> Result<(), BrokerError> {
        self.sync_at().await.map(|_| ())
    }

    pub async fn sync_at(&self) -> Result<i64, BrokerError> {
        let Some(cluster) = &self.cluster else {
            return Ok(0);
        };
        let _guard = self.create_lock.lock().await;
        let generation = cluster.membership.generation();
        let snapshot = cluster
            .catalog
            .snapshot()
            .await
            .map_err(|e| BrokerError::Cluster(e.to_string()))?;
        let revision = snapshot.revision;
        let mut snapshot = snapshot;
        let coordinators = std::mem::take(&mut snapshot.coordinators);
        // Opening the partitions a change brings (directories, files, fsyncs: 120 new
        // ones for a wide topic) blocks; off the runtime's workers, so the lease
        // keepalives and fetches they run are not held up behind it.
        let topics = off_the_workers(|| self.apply_snapshot(snapshot))?;
        let dropped = dropped_replicas(&self.read(), &topics);
        *self.write() = topics;
        // The create lock is held: these views stay those of this sync until it ends.
        let views = self.views();
        isr_upkeep::leave_isrs(cluster, &views).await?;
        *self
            .coordinators
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = coordinators;
        // Hands every followed partition to its leader's fetcher.
        self.fetchers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .reconcile(
                self.broker_id,
                following::followed(self.broker_id, &views),
                &cluster.membership,
                cluster.peer_tls.as_ref(),
            );
        // Only now that neither the registry nor a fetcher hands them out.
        for partition in dropped {
            self.delete_replica(&partition);
        }
        // Directories left by a move while this broker was down: only the first sync can
        // find any, since a running broker deletes what it stops replicating at once.
        if self
            .synced_generation
            .load(std::sync::atomic::Ordering::SeqCst)
            == u64::MAX
        {
            self.delete_stale_dirs();
        }
        self.synced_generation
            .store(generation, std::sync::atomic::Ordering::SeqCst);
        if election::elect_leaders(cluster, &views).await? {
            // The elections changed the catalog; the watch reloads it.
            tracing::debug!("took over leadership of partitions whose leader is gone");
        }
        // A changed topic key brings the ids back with the next sync.
        self.assign_missing_ids(cluster).await;
        Ok(revision)
    }

    /// Whether a membership change since the last sync calls for another one.
    pub fn needs_sync(&self) -> bool {
        self.cluster.as_ref().is_some_and(|c| {
            c.membership.generation()
                != self
                    .synced_generation
                    .load(std::sync::atomic::Ordering::SeqCst)
        })
    }

    /// Leader duty: publishes ISR shrinks (a follower lagging past `lag_limit_ms`) and
    /// expansions (a follower back at the high watermark), and ends reassignments; see
    /// [`isr_upkeep::maintain_isr`].
    pub async fn maintain_isr(&self, lag_limit_ms: i64) {
        let Some(cluster) = &self.cluster else { return };
        isr_upkeep::maintain_isr(cluster, &self.views(), lag_limit_ms).await;
    }

    /// Every topic with its partitions, as of the last catalog sync.
    fn views(&self) -> Vec<TopicView> {
        self.read()
            .iter()
            .map(|(name, topic)| TopicView {
                name: name.clone(),
                unclean_leader_election: topic.spec.unclean_leader_election,
                partitions: topic.partitions.clone(),
            })
            .collect()
    }

    /// Asks the ISR duty to run now (see `isr_wake`).
    pub fn wake_isr_duty(&self) {
        self.isr_wake.notify_one();
    }

    /// Resolves when [`TopicRegistry::wake_isr_duty`] was called since the last time.
    pub async fn isr_duty_woken(&self) {
        self.isr_wake.notified().await;
    }

    fn apply_snapshot(
        &self,
        snapshot: CatalogSnapshot,
    ) -> Result<BTreeMap<String, Topic>, BrokerError> {
        let mut topics = BTreeMap::new();
        for (name, (spec, states)) in snapshot.topics {
            self.retire_older_incarnation(&name, spec.topic_id);
            let mut partitions = Vec::with_capacity(states.len());
            for (p, state) in states.into_iter().enumerate() {
                let p = p as i32;
                let Some((state, catalog_revision)) = state else {
                    continue;
                };
                let local = if state.replicas.contains(&self.broker_id) {
                    let local = self.open_hosted(&name, spec.topic_id, p)?;
                    let role = if state.leader == self.broker_id && !local.must_leave_isr() {
                        Role::Leader
                    } else {
                        Role::Follower {
                            leader: state.leader,
                        }
                    };
                    local.set_replication(
                        role,
                        state.leader_epoch,
                        state.replicas.clone(),
                        state.isr.clone(),
                        spec.min_insync_replicas(),
                    );
                    local.set_topic_settings(spec.config.resolve(&self.settings.topic_defaults));
                    Some(local)
                } else {
                    None
                };
                partitions.push(view_of(p, state, catalog_revision, local));
            }
            topics.insert(name, Topic { spec, partitions });
        }
        Ok(topics)
    }

    /// A partition this broker no longer replicates: no write may land in it any more
    /// (an acks=all produce still waiting fails as a lost leadership), then its
    /// directory goes.
    fn delete_replica(&self, partition: &Partition) {
        partition.retire();
        let dir = partition_dir(&self.data_dir, partition.topic(), partition.index());
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => tracing::info!(
                topic = partition.topic(),
                partition = partition.index(),
                "no longer a replica: deleted the partition"
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                topic = partition.topic(),
                partition = partition.index(),
                error = %e,
                "no longer a replica, but deleting the partition failed; the next sync retries"
            ),
        }
    }

    /// Deletes the directories of partitions this broker does not replicate, left by a
    /// broker that stopped before it could delete them: catalog partitions moved away,
    /// and every partition of a topic the catalog no longer lists (deleted while this
    /// broker was down). A broker opens only partitions of ready topics, so a directory
    /// of a topic the catalog lacks never belongs to a topic being created.
    fn delete_stale_dirs(&self) {
        let entries = match std::fs::read_dir(&self.data_dir) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the data dir for stale partitions");
                return;
            }
        };
        let stale: Vec<(String, i32)> = {
            let topics = self.read();
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| parse_partition_dir(&e.file_name().to_string_lossy()))
                .filter(|(topic, p)| match topics.get(topic) {
                    None => validate_topic_name(topic).is_ok(),
                    Some(t) => match t.partitions.iter().find(|v| v.index == *p) {
                        Some(v) => v.local.is_none(),
                        None => *p >= t.spec.partitions,
                    },
                })
                .collect()
        };
        for (topic, p) in stale {
            let dir = partition_dir(&self.data_dir, &topic, p);
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => tracing::info!(
                    topic,
                    partition = p,
                    "deleted the directory of a partition this broker no longer replicates"
                ),
                Err(e) => {
                    tracing::warn!(topic, partition = p, error = %e, "deleting a stale partition failed")
                }
            }
        }
    }

    /// The already open partition of incarnation `topic_id`, or opens (recovers) it,
    /// deleting first a directory an older incarnation left.
    fn open_hosted(
        &self,
        topic: &str,
        topic_id: TopicId,
        partition: i32,
    ) -> Result<Arc<Partition>, BrokerError> {
        let open = self.read().get(topic).and_then(|t| {
            let local = t
                .partitions
                .iter()
                .find(|v| v.index == partition)?
                .local
                .clone()?;
            Some((t.spec.topic_id, local))
        });
        match open {
            Some((open_id, local)) if open_id == topic_id => return Ok(local),
            // A topic given its id after it was opened: the same incarnation.
            Some((open_id, local)) if open_id.is_zero() => {
                let dir = partition_dir(&self.data_dir, topic, partition);
                Self::record_id(&dir, topic_id);
                return Ok(local);
            }
            _ => {}
        }
        Self::open_incarnation(
            &self.data_dir,
            topic,
            topic_id,
            partition,
            self.settings.clone(),
            self.broker_id,
        )
    }

    /// The local partition to produce to or fetch from: this broker must lead it.
    pub fn partition(&self, topic: &str, partition: i32) -> Result<Arc<Partition>, BrokerError> {
        let unknown = || BrokerError::UnknownTopicOrPartition {
            topic: topic.to_string(),
            partition,
        };
        let topics = self.read();
        let view = topics
            .get(topic)
            .and_then(|t| t.partitions.iter().find(|v| v.index == partition))
            .ok_or_else(unknown)?;
        let fenced = self.cluster.as_ref().is_some_and(|c| {
            !c.membership.holds_lease()
                || c.membership.generation()
                    != self
                        .synced_generation
                        .load(std::sync::atomic::Ordering::SeqCst)
        });
        // The catalog naming this broker is not enough: a replica that restarted as the
        // leader of record with a log its recovery cut does not lead (see
        // `apply_snapshot`); serving produce there, in the old epoch, would write a
        // batch at an offset where the other replicas hold another of the same epoch,
        // which no truncation check can tell apart.
        match &view.local {
            Some(local) if view.leader == self.broker_id && local.is_leader() && !fenced => {
                Ok(local.clone())
            }
            _ => Err(BrokerError::NotLeaderOrFollower {
                topic: topic.to_string(),
                partition,
                leader: view.leader,
            }),
        }
    }

    /// Partitions of the named topics (all topics when `names` is empty); `None` for a
    /// topic that does not exist.
    pub fn describe(&self, names: &[String]) -> Vec<(String, Option<Vec<PartitionView>>)> {
        self.describe_with_ids(names)
            .into_iter()
            .map(|(name, found)| (name, found.map(|(_, partitions)| partitions)))
            .collect()
    }

    /// [`TopicRegistry::describe`] with each topic's id (`ZERO` while a topic created
    /// before ids existed has none yet).
    #[allow(clippy::type_complexity)]
    pub fn describe_with_ids(
        &self,
        names: &[String],
    ) -> Vec<(String, Option<(TopicId, Vec<PartitionView>)>)> {
        let topics = self.read();
        let describe = |t: &Topic| (t.spec.topic_id, t.partitions.clone());
        if names.is_empty() {
            return topics
                .iter()
                .map(|(n, t)| (n.clone(), Some(describe(t))))
                .collect();
        }
        names
            .iter()
            .map(|n| (n.clone(), topics.get(n).map(describe)))
            .collect()
    }

    /// The partition count of topic `name`, if it exists.
    pub fn partition_count(&self, name: &str) -> Option<i32> {
        self.read().get(name).map(|t| t.spec.partitions)
    }

    /// The coordinator keys as of the last catalog sync (empty on a single node).
    pub fn coordinator_view(&self) -> CoordinatorView {
        self.coordinators
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether topics come from the etcd catalog.
    pub fn is_clustered(&self) -> bool {
        self.cluster.is_some()
    }

    /// Stops every replica fetcher and waits until each returned (a clean stop, before
    /// the partitions are flushed): nothing is appended to a followed partition after.
    pub async fn stop_following(&self) {
        let stopped = self
            .fetchers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .stop();
        stopped.await;
    }

    /// Every partition of the catalog (or of this single node), as the partition
    /// health gauges count them.
    pub fn partition_facts(&self) -> Vec<PartitionFacts> {
        self.read()
            .values()
            .flat_map(|t| {
                let min_insync_replicas = t.spec.min_insync_replicas();
                t.partitions.iter().map(move |v| PartitionFacts {
                    leader: v.leader,
                    replicas: v.replicas.clone(),
                    isr: v.isr.clone(),
                    min_insync_replicas,
                })
            })
            .collect()
    }

    /// Every partition hosted here, led or not.
    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.read()
            .values()
            .flat_map(|t| t.partitions.iter().filter_map(|v| v.local.clone()))
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Topic>> {
        self.topics
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Topic>> {
        self.topics
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn sole_replica(broker_id: i32, index: i32, local: Arc<Partition>) -> PartitionView {
    PartitionView {
        index,
        leader: broker_id,
        leader_epoch: 0,
        replicas: vec![broker_id],
        isr: vec![broker_id],
        catalog_revision: 0,
        partition_epoch: 0,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
        local: Some(local),
    }
}

fn view_of(
    index: i32,
    state: PartitionState,
    catalog_revision: i64,
    local: Option<Arc<Partition>>,
) -> PartitionView {
    PartitionView {
        index,
        leader: state.leader,
        leader_epoch: state.leader_epoch,
        replicas: state.replicas,
        isr: state.isr,
        catalog_revision,
        partition_epoch: state.partition_epoch,
        adding_replicas: state.adding_replicas,
        removing_replicas: state.removing_replicas,
        local,
    }
}

/// The partitions `before` hosted that `after` does not: this broker left their
/// replicas.
fn dropped_replicas(
    before: &BTreeMap<String, Topic>,
    after: &BTreeMap<String, Topic>,
) -> Vec<Arc<Partition>> {
    before
        .iter()
        .flat_map(|(name, topic)| {
            topic.partitions.iter().filter_map(move |v| {
                let local = v.local.as_ref()?;
                let still_hosted = after
                    .get(name)
                    .and_then(|t| t.partitions.iter().find(|n| n.index == v.index))
                    .is_some_and(|n| n.local.is_some());
                (!still_hosted).then(|| local.clone())
            })
        })
        .collect()
}

/// `(topic, partition)` of a directory named `<topic>-<partition>`.
fn parse_partition_dir(name: &str) -> Option<(String, i32)> {
    let (topic, p) = name.rsplit_once('-')?;
    let p: i32 = p.parse().ok()?;
    (p >= 0 && !topic.is_empty()).then(|| (topic.to_string(), p))
}

fn partition_dir(data_dir: &Path, topic: &str, partition: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

fn read_topics_file(data_dir: &Path) -> Result<TopicsFile, BrokerError> {
    let path = data_dir.join(TOPICS_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            BrokerError::InvalidRequest(format!(
                "{} is not a valid topics file: {e}",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TopicsFile::default()),
        Err(e) => Err(e.into()),
    }
}

fn write_topics_file(data_dir: &Path, file: &TopicsFile) -> Result<(), BrokerError> {
    let json = serde_json::to_vec_pretty(file)
        .map_err(|e| BrokerError::InvalidRequest(format!("cannot encode topics file: {e}")))?;
    crate::fsutil::write_atomically(&data_dir.join(TOPICS_FILE), &json)?;
    Ok(())
}

/// Runs `work`, which blocks on the disk, without holding up the other tasks of a
/// multi-threaded runtime (the worker hands them to another thread first); on a
/// current-thread runtime (unit tests) it just runs.
fn off_the_workers<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LogConfig;
    use crate::topic_config::{self, TopicDefaults};
    use idem_proto::ErrorCode;

    /// Partition settings of the registry tests here and in `growth`, `deletion`.
    pub(super) fn settings() -> PartitionSettings {
        PartitionSettings {
            log: LogConfig::default(),
            max_batch_bytes: 1 << 20,
            producer_id_expiration_ms: 60_000,
            topic_defaults: TopicDefaults::new(LogConfig::DEFAULT_SEGMENT_BYTES, 1 << 20),
        }
    }

    fn single_node(dir: &Path) -> TopicRegistry {
        TopicRegistry::open(dir, 0, settings(), 100).expect("registry")
    }

    fn value(registry: &TopicRegistry, topic: &str, key: &str) -> (String, bool) {
        let entries = registry.describe_config(topic).expect("known topic");
        let entry = entries.iter().find(|e| e.name == key).expect("listed");
        (entry.value.clone(), entry.from_topic)
    }

    fn set(key: &str, value: &str) -> ConfigOp {
        ConfigOp::Set {
            key: key.into(),
            value: value.into(),
        }
    }

    #[tokio::test]
    async fn given_a_single_node_when_a_config_is_altered_then_partitions_act_on_it_and_a_restart_keeps_it(
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = single_node(dir.path());
        let config =
            TopicConfig::from_pairs([(topic_config::RETENTION_MS, "60000")]).expect("valid");
        registry
            .create("orders", 2, 1, false, config)
            .await
            .expect("create");
        assert_eq!(
            value(&registry, "orders", topic_config::RETENTION_MS),
            ("60000".into(), true)
        );
        registry
            .alter_config(
                "orders",
                &[
                    set(topic_config::MAX_MESSAGE_BYTES, "1000"),
                    ConfigOp::Delete {
                        key: topic_config::RETENTION_MS.into(),
                    },
                ],
                false,
            )
            .await
            .expect("alter");
        let partition = registry.partition("orders", 1).expect("led");
        assert_eq!(partition.topic_settings().max_message_bytes, 1000);
        assert!(!value(&registry, "orders", topic_config::RETENTION_MS).1);
        drop((partition, registry));
        let reopened = single_node(dir.path());
        assert_eq!(
            value(&reopened, "orders", topic_config::MAX_MESSAGE_BYTES),
            ("1000".into(), true)
        );
        let partition = reopened.partition("orders", 0).expect("led");
        assert_eq!(partition.topic_settings().max_message_bytes, 1000);
    }

    #[tokio::test]
    async fn given_a_refused_or_validate_only_alteration_then_nothing_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = single_node(dir.path());
        registry
            .create("orders", 1, 1, false, TopicConfig::default())
            .await
            .expect("create");
        let before = registry.describe_config("orders");
        let file_before = std::fs::read(dir.path().join(TOPICS_FILE)).expect("topics.json");
        let refusals = [
            (
                vec![set(topic_config::SEGMENT_MS, "5"), set("nope", "1")],
                "nope",
            ),
            (
                vec![set(topic_config::MIN_INSYNC_REPLICAS, "2")],
                topic_config::MIN_INSYNC_REPLICAS,
            ),
            (
                vec![set(topic_config::MAX_MESSAGE_BYTES, "2000000")],
                topic_config::MAX_MESSAGE_BYTES,
            ),
            (
                vec![set(topic_config::CLEANUP_POLICY, "purge")],
                topic_config::CLEANUP_POLICY,
            ),
        ];
        for (ops, key) in refusals {
            let e = registry
                .alter_config("orders", &ops, false)
                .await
                .expect_err("refused");
            assert_eq!(e.code(), ErrorCode::InvalidConfig, "{e}");
            assert!(e.to_string().contains(key), "{e}");
        }
        registry
            .alter_config("orders", &[set(topic_config::SEGMENT_MS, "5")], true)
            .await
            .expect("valid");
        assert_eq!(registry.describe_config("orders"), before);
        assert_eq!(
            std::fs::read(dir.path().join(TOPICS_FILE)).expect("topics.json"),
            file_before
        );
        let e = registry
            .alter_config("missing", &[set(topic_config::SEGMENT_MS, "5")], false)
            .await
            .expect_err("unknown");
        assert_eq!(e.code(), ErrorCode::UnknownTopicOrPartition);
    }

    #[tokio::test]
    async fn given_an_internal_topic_then_its_retention_may_change_but_not_its_cleanup_policy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = single_node(dir.path());
        let topic = idem_proto::txn::TXN_LOG_TOPIC;
        registry
            .create(topic, 1, 1, false, TopicConfig::default())
            .await
            .expect("create");
        registry
            .alter_config(topic, &[set(topic_config::RETENTION_MS, "-1")], false)
            .await
            .expect("retention may change");
        let e = registry
            .alter_config(topic, &[set(topic_config::CLEANUP_POLICY, "delete")], false)
            .await
            .expect_err("cleanup policy is kept");
        assert_eq!(e.code(), ErrorCode::InvalidConfig);
        assert!(e.to_string().contains(topic_config::CLEANUP_POLICY), "{e}");
    }

    #[tokio::test]
    async fn given_a_bad_config_at_creation_then_no_topic_is_created() {
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = single_node(dir.path());
        let config =
            TopicConfig::from_pairs([(topic_config::MIN_INSYNC_REPLICAS, "2")]).expect("valid");
        let e = registry
            .create("orders", 1, 1, false, config)
            .await
            .expect_err("min.insync.replicas above the replication factor");
        assert_eq!(e.code(), ErrorCode::InvalidConfig);
        assert!(registry.describe_config("orders").is_none());
        assert!(!dir.path().join("orders-0").exists());
    }

    #[test]
    fn partition_dirs_parse_back_to_topic_and_index() {
        assert_eq!(
            parse_partition_dir("orders-eu-12"),
            Some(("orders-eu".to_string(), 12))
        );
        assert_eq!(
            parse_partition_dir("__transaction_state-0"),
            Some(("__transaction_state".to_string(), 0))
        );
        assert_eq!(parse_partition_dir("pidstore"), None);
        assert_eq!(parse_partition_dir("-3"), None);
        assert_eq!(
            parse_partition_dir("x--1"),
            Some(("x-".to_string(), 1)),
            "topic names may end in a dash"
        );
        assert_eq!(parse_partition_dir("x-1a"), None);
    }

    #[test]
    fn the_internal_transaction_log_topic_is_a_valid_name() {
        assert!(validate_topic_name(idem_proto::txn::TXN_LOG_TOPIC).is_ok());
        assert!(validate_topic_name("__consumer_offsets").is_ok());
        assert!(validate_topic_name("__transaction state").is_err());
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_eu-west").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name(".").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a/b").is_err());
        assert!(validate_topic_name("é").is_err());
        assert!(validate_topic_name(&"x".repeat(249)).is_ok());
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
    }

    #[test]
    fn given_a_replication_factor_then_0_and_minus_1_mean_one_and_other_negatives_are_refused() {
        assert_eq!(resolve_replication_factor(0).expect("default"), 1);
        assert_eq!(resolve_replication_factor(-1).expect("default"), 1);
        assert_eq!(resolve_replication_factor(1).expect("one"), 1);
        assert_eq!(resolve_replication_factor(3).expect("three"), 3);
        for n in [-2, -100, i32::MIN] {
            let error = resolve_replication_factor(n).expect_err("refused");
            assert_eq!(
                error.code(),
                idem_proto::ErrorCode::InvalidReplicationFactor,
                "{n}"
            );
            assert!(error.to_string().contains(&n.to_string()), "{error}");
        }
    }
}
