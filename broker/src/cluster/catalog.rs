//! Topics and per-partition state in etcd, the cluster's only source of truth.
//!
//! ```text
//! {prefix}/topics/{name}              {"spec": {...}, "status": "creating" | "ready"}
//! {prefix}/partitions/{name}/{p}      {"replicas": [..], "leader": id, "leader_epoch": n,
//!                                      "isr": [..], "partition_epoch": n,
//!                                      "adding_replicas": [..], "removing_replicas": [..]}
//! {prefix}/coordinators/members/{id}  {"id": 1, "address": "host:port"}        (read only)
//! {prefix}/coordinators/owners/{p}    {"coordinator_id": 1, "address": "...",
//!                                      "coordinator_epoch": 7}                  (read only)
//! {prefix}/coordinators/epochs/{p}    {"coordinator_epoch": 7,
//!                                      "writer_producer_id": 1234}              (read only)
//! ```
//! Creation claims the name (`create_revision == 0`), writes the partition keys in
//! chunks guarded by the topic key's `mod_revision` (etcd caps operations per
//! transaction), then flips the topic to `ready` by compare-and-swap: readers see a topic
//! only once it is ready, so never half of one. Every later change of a partition key is
//! a compare-and-swap on its own `mod_revision`, and so is a change of a ready topic's
//! spec (its config) on the topic key's. Deletion removes the topic key and every
//! partition key of the topic in one transaction guarded by the topic key's
//! `mod_revision`: readers see the whole topic or none of it.

pub mod growth;

use std::collections::BTreeMap;

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use serde::{Deserialize, Serialize};

use idem_runtime::etcd_call::{bounded, connect, EtcdCallError};
use idem_runtime::topic_catalog;

use crate::cluster::assignment::assign_replicas;
use crate::coordinators::CoordinatorView;
use crate::topic_spec::TopicSpec;

/// Partition keys written per transaction (etcd's default limit is 128 operations).
const PARTITIONS_PER_TXN: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(transparent)]
    Etcd(#[from] EtcdCallError),
    #[error("topic {0:?} already exists")]
    TopicAlreadyExists(String),
    #[error("replication factor {factor} needs that many live brokers; {live} are registered")]
    NotEnoughBrokers { factor: i32, live: usize },
    #[error("{key} holds invalid JSON: {reason}")]
    Corrupt { key: String, reason: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopicStatus {
    Creating,
    Ready,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    pub spec: TopicSpec,
    pub status: TopicStatus,
}

/// The replicated state of one partition, as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    pub replicas: Vec<i32>,
    pub leader: i32,
    pub leader_epoch: i32,
    pub isr: Vec<i32>,
    pub partition_epoch: i32,
    /// While a reassignment runs (`cluster::reassignment`): replicas joining. `replicas`
    /// is then the target followed by the original replicas not in it. Absent from keys
    /// written before reassignment existed, and left out of keys while empty, so
    /// those keys read (and are written) as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<i32>,
    /// While a reassignment runs: replicas leaving once every target replica is in sync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<i32>,
}

/// A partition's state with the `mod_revision` of its key (for compare-and-swap).
pub type VersionedState = (PartitionState, i64);

/// Every ready topic with its partition states, read at one etcd revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatalogSnapshot {
    pub revision: i64,
    /// Per topic: its spec and each partition's state with the key's `mod_revision`.
    pub topics: BTreeMap<String, (TopicSpec, Vec<Option<VersionedState>>)>,
    /// The transaction coordinators' membership and ownership keys.
    pub coordinators: CoordinatorView,
}

#[derive(Clone)]
pub struct EtcdCatalog {
    client: Client,
    prefix: String,
}

impl EtcdCatalog {
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<Self, CatalogError> {
        let client = connect(endpoints).await?;
        Ok(EtcdCatalog {
            client,
            prefix: prefix.trim_end_matches('/').to_string(),
        })
    }

    fn topic_key(&self, name: &str) -> String {
        topic_catalog::topic_key(&self.prefix, name)
    }

    fn partition_key(&self, name: &str, partition: i32) -> String {
        topic_catalog::partition_key(&self.prefix, name, partition)
    }

    /// Creates a topic with its replicas spread over `live_brokers`; the first replica of
    /// each partition starts as its leader at epoch 0 with the full replica set in sync.
    pub async fn create_topic(
        &self,
        spec: &TopicSpec,
        live_brokers: &[i32],
    ) -> Result<(), CatalogError> {
        let factor = spec.replication_factor;
        if factor < 1 || factor as usize > live_brokers.len() {
            return Err(CatalogError::NotEnoughBrokers {
                factor,
                live: live_brokers.len(),
            });
        }
        let mut client = self.client.clone();
        let topic_key = self.topic_key(&spec.name);
        let creating = encode(
            &topic_key,
            &TopicRecord {
                spec: spec.clone(),
                status: TopicStatus::Creating,
            },
        )?;
        let claim = Txn::new()
            .when([Compare::create_revision(
                topic_key.as_str(),
                CompareOp::Equal,
                0,
            )])
            .and_then([TxnOp::put(topic_key.as_str(), creating.as_str(), None)])
            .or_else([TxnOp::get(topic_key.as_str(), None)]);
        let answer = bounded("claim topic", client.txn(claim)).await?;
        let (claimed_at, spec) = if answer.succeeded() {
            (answer.header().map_or(0, |h| h.revision()), spec.clone())
        } else {
            // Resume a creation that stopped half way, if it is for the same topic; it
            // keeps the id it was claimed with.
            match existing_topic(&topic_key, &answer)? {
                Some((record, mod_revision))
                    if record.status == TopicStatus::Creating
                        && TopicSpec {
                            topic_id: record.spec.topic_id,
                            ..spec.clone()
                        } == record.spec =>
                {
                    (mod_revision, record.spec)
                }
                _ => return Err(CatalogError::TopicAlreadyExists(spec.name.clone())),
            }
        };
        let spec = &spec;
        let start = start_offset(&spec.name, live_brokers.len());
        let layout = assign_replicas(spec.partitions, factor, live_brokers, start);
        let states: Vec<(String, String)> = layout
            .into_iter()
            .enumerate()
            .map(|(p, replicas)| {
                let key = self.partition_key(&spec.name, p as i32);
                let state = PartitionState {
                    leader: replicas[0],
                    isr: replicas.clone(),
                    replicas,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    adding_replicas: Vec::new(),
                    removing_replicas: Vec::new(),
                };
                encode(&key, &state).map(|value| (key, value))
            })
            .collect::<Result<_, _>>()?;
        for chunk in states.chunks(PARTITIONS_PER_TXN) {
            let puts: Vec<TxnOp> = chunk
                .iter()
                .map(|(k, v)| TxnOp::put(k.as_str(), v.as_str(), None))
                .collect();
            let write = Txn::new()
                .when([Compare::mod_revision(
                    topic_key.as_str(),
                    CompareOp::Equal,
                    claimed_at,
                )])
                .and_then(puts);
            if !bounded("write partitions", client.txn(write))
                .await?
                .succeeded()
            {
                return Err(CatalogError::TopicAlreadyExists(spec.name.clone()));
            }
        }
        let ready = encode(
            &topic_key,
            &TopicRecord {
                spec: spec.clone(),
                status: TopicStatus::Ready,
            },
        )?;
        let publish = Txn::new()
            .when([Compare::mod_revision(
                topic_key.as_str(),
                CompareOp::Equal,
                claimed_at,
            )])
            .and_then([TxnOp::put(topic_key.as_str(), ready.as_str(), None)]);
        if !bounded("publish topic", client.txn(publish))
            .await?
            .succeeded()
        {
            return Err(CatalogError::TopicAlreadyExists(spec.name.clone()));
        }
        Ok(())
    }

    /// Replaces a partition's state if its key is still at `mod_revision`; `false` when
    /// someone changed it first (nothing written).
    pub async fn compare_and_set_partition(
        &self,
        topic: &str,
        partition: i32,
        mod_revision: i64,
        state: &PartitionState,
    ) -> Result<bool, CatalogError> {
        let key = self.partition_key(topic, partition);
        let value = encode(&key, state)?;
        let swap = Txn::new()
            .when([Compare::mod_revision(
                key.as_str(),
                CompareOp::Equal,
                mod_revision,
            )])
            .and_then([TxnOp::put(key.as_str(), value.as_str(), None)]);
        let mut client = self.client.clone();
        Ok(bounded("update partition", client.txn(swap))
            .await?
            .succeeded())
    }

    /// A ready topic's spec with its key's `mod_revision` (for
    /// [`EtcdCatalog::compare_and_set_topic`]); `None` when there is no ready topic of
    /// that name.
    pub async fn read_topic(&self, name: &str) -> Result<Option<(TopicSpec, i64)>, CatalogError> {
        let key = self.topic_key(name);
        let mut client = self.client.clone();
        let answer = bounded("read topic", client.get(key.as_str(), None)).await?;
        let Some(kv) = answer.kvs().first() else {
            return Ok(None);
        };
        let record: TopicRecord = decode(&key, kv.value())?;
        Ok((record.status == TopicStatus::Ready).then_some((record.spec, kv.mod_revision())))
    }

    /// Replaces a ready topic's spec if its key is still at `mod_revision` (as
    /// [`EtcdCatalog::read_topic`] returned it); `false` when someone changed it first
    /// (nothing written). Partition keys are left alone: the spec's name, partition
    /// count and replication factor are the caller's to keep.
    pub async fn compare_and_set_topic(
        &self,
        mod_revision: i64,
        spec: &TopicSpec,
    ) -> Result<bool, CatalogError> {
        let key = self.topic_key(&spec.name);
        let value = encode(
            &key,
            &TopicRecord {
                spec: spec.clone(),
                status: TopicStatus::Ready,
            },
        )?;
        let swap = Txn::new()
            .when([Compare::mod_revision(
                key.as_str(),
                CompareOp::Equal,
                mod_revision,
            )])
            .and_then([TxnOp::put(key.as_str(), value.as_str(), None)]);
        let mut client = self.client.clone();
        Ok(bounded("update topic", client.txn(swap)).await?.succeeded())
    }

    /// One partition of a ready topic with the topic's spec, read at one revision;
    /// `None` when the topic is not ready or has no such partition.
    pub async fn read_partition(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Option<(TopicSpec, VersionedState)>, CatalogError> {
        let topic_key = self.topic_key(topic);
        let partition_key = self.partition_key(topic, partition);
        let read = Txn::new().and_then([
            TxnOp::get(topic_key.as_str(), None),
            TxnOp::get(partition_key.as_str(), None),
        ]);
        let mut client = self.client.clone();
        let answer = bounded("read partition", client.txn(read)).await?;
        let mut found = answer.op_responses().into_iter().map(|r| match r {
            TxnOpResponse::Get(get) => get.kvs().first().cloned(),
            _ => None,
        });
        let (Some(Some(topic_kv)), Some(Some(partition_kv))) = (found.next(), found.next()) else {
            return Ok(None);
        };
        let record: TopicRecord = decode(&topic_key, topic_kv.value())?;
        if record.status != TopicStatus::Ready {
            return Ok(None);
        }
        let state: PartitionState = decode(&partition_key, partition_kv.value())?;
        Ok(Some((record.spec, (state, partition_kv.mod_revision()))))
    }

    /// Every ready topic and its partitions, read at one revision.
    pub async fn snapshot(&self) -> Result<CatalogSnapshot, CatalogError> {
        let mut client = self.client.clone();
        let all = bounded(
            "read catalog",
            client.get(
                format!("{}/", self.prefix),
                Some(GetOptions::new().with_prefix()),
            ),
        )
        .await?;
        let revision = all.header().map_or(0, |h| h.revision());
        let topics_dir = topic_catalog::topics_dir(&self.prefix);
        let partitions_dir = topic_catalog::partitions_dir(&self.prefix);
        let coordinators_dir = format!("{}/coordinators/", self.prefix);
        let mut coordinators = CoordinatorView::default();
        let mut topics = BTreeMap::new();
        let mut states: Vec<(String, i32, PartitionState, i64)> = Vec::new();
        for kv in all.kvs() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            if let Some(name) = key.strip_prefix(&topics_dir) {
                let record: TopicRecord = decode(&key, kv.value())?;
                if record.status == TopicStatus::Ready {
                    let count = record.spec.partitions.max(0) as usize;
                    topics.insert(name.to_string(), (record.spec, vec![None; count]));
                }
            } else if let Some(rest) = key.strip_prefix(&partitions_dir) {
                let Some((name, p)) = rest.rsplit_once('/') else {
                    continue;
                };
                let Ok(p) = p.parse::<i32>() else { continue };
                states.push((
                    name.to_string(),
                    p,
                    decode(&key, kv.value())?,
                    kv.mod_revision(),
                ));
            } else if let Some(rest) = key.strip_prefix(&coordinators_dir) {
                record_coordinator_key(&mut coordinators, rest, kv.value());
            }
        }
        for (name, p, state, mod_revision) in states {
            if let Some((_, partitions)) = topics.get_mut(&name) {
                if let Some(slot) = usize::try_from(p).ok().and_then(|i| partitions.get_mut(i)) {
                    *slot = Some((state, mod_revision));
                }
            }
        }
        Ok(CatalogSnapshot {
            revision,
            topics,
            coordinators,
        })
    }
}

/// Adds one key under `{prefix}/coordinators/` (`rest` is the part after it) to `view`.
/// Coordinators write these keys, not brokers: one a broker cannot read is skipped with a
/// warning rather than failing the whole catalog, and keys it does not know (anything
/// newer) are ignored.
pub(crate) fn record_coordinator_key(view: &mut CoordinatorView, rest: &str, value: &[u8]) {
    let (kind, id) = match rest.split_once('/') {
        Some((kind, id)) if !id.contains('/') => (kind, id),
        _ => return,
    };
    let Ok(id) = id.parse::<i32>() else { return };
    let parsed = match kind {
        "members" => serde_json::from_slice(value).map(|member| {
            view.members.insert(id, member);
        }),
        "owners" => serde_json::from_slice(value).map(|owner| {
            view.owners.insert(id, owner);
        }),
        "epochs" => serde_json::from_slice(value).map(|epoch| {
            view.epochs.insert(id, epoch);
        }),
        _ => Ok(()),
    };
    if let Err(error) = parsed {
        tracing::warn!(key = rest, %error, "skipping unreadable coordinator key");
    }
}

/// A watch on everything under the catalog prefix.
pub struct CatalogChanges {
    stream: etcd_client::WatchStream,
}

impl CatalogChanges {
    /// Resolves at the next change; `None` when the watch ended.
    pub async fn next_change(&mut self) -> Result<Option<()>, CatalogError> {
        match self.stream.message().await {
            Ok(Some(_)) => Ok(Some(())),
            Ok(None) => Ok(None),
            Err(source) => Err(CatalogError::Etcd(EtcdCallError::Failed {
                what: "watch catalog",
                source,
            })),
        }
    }
}

impl EtcdCatalog {
    /// Changes to brokers, topics and partition states from `revision` on.
    pub async fn watch_from(&self, revision: i64) -> Result<CatalogChanges, CatalogError> {
        let mut client = self.client.clone();
        // [{prefix}/brokers/, {prefix}/topics0) holds broker registrations (a leader
        // that dies must trigger an election), partition states and topics.
        let options = etcd_client::WatchOptions::new()
            .with_range(format!("{}/topics0", self.prefix))
            .with_start_revision(revision);
        let start = format!("{}/brokers/", self.prefix);
        let stream = bounded("watch catalog", client.watch(start, Some(options))).await?;
        Ok(CatalogChanges { stream })
    }
}

impl EtcdCatalog {
    /// Deletes a ready topic whose key is still at `mod_revision` (as
    /// [`EtcdCatalog::read_topic`] returned it) with every one of its partition keys,
    /// in one transaction; `false` when the topic key changed first (nothing deleted).
    pub async fn delete_topic(&self, name: &str, mod_revision: i64) -> Result<bool, CatalogError> {
        let topic_key = self.topic_key(name);
        // Topic names hold no '/': this prefix is this topic's partitions and no other's.
        let partitions = topic_catalog::topic_partitions_dir(&self.prefix, name);
        let delete = Txn::new()
            .when([Compare::mod_revision(
                topic_key.as_str(),
                CompareOp::Equal,
                mod_revision,
            )])
            .and_then([
                TxnOp::delete(topic_key.as_str(), None),
                TxnOp::delete(
                    partitions.as_str(),
                    Some(etcd_client::DeleteOptions::new().with_prefix()),
                ),
            ]);
        let mut client = self.client.clone();
        Ok(bounded("delete topic", client.txn(delete))
            .await?
            .succeeded())
    }
}

/// Rotates where a topic's first partition leads, so topics spread their leaders.
fn start_offset(name: &str, brokers: usize) -> usize {
    let hash = name
        .bytes()
        .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
    hash % brokers.max(1)
}

fn existing_topic(
    key: &str,
    answer: &etcd_client::TxnResponse,
) -> Result<Option<(TopicRecord, i64)>, CatalogError> {
    for response in answer.op_responses() {
        if let TxnOpResponse::Get(get) = response {
            if let Some(kv) = get.kvs().first() {
                return Ok(Some((decode(key, kv.value())?, kv.mod_revision())));
            }
        }
    }
    Ok(None)
}

fn encode<T: Serialize>(key: &str, value: &T) -> Result<String, CatalogError> {
    serde_json::to_string(value).map_err(|e| CatalogError::Corrupt {
        key: key.to_string(),
        reason: e.to_string(),
    })
}

fn decode<T: for<'de> Deserialize<'de>>(key: &str, bytes: &[u8]) -> Result<T, CatalogError> {
    serde_json::from_slice(bytes).map_err(|e| CatalogError::Corrupt {
        key: key.to_string(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinators::{CoordinatorEpoch, CoordinatorMember, CoordinatorOwner};

    #[test]
    fn a_topic_key_as_written_reads_as_the_same_incarnation_for_the_coordinator() {
        let spec = TopicSpec {
            name: "orders".into(),
            topic_id: crate::topic_id::TopicId::random(),
            partitions: 6,
            replication_factor: 3,
            min_insync_replicas: 2,
            unclean_leader_election: false,
            config: Default::default(),
        };
        for status in [TopicStatus::Creating, TopicStatus::Ready] {
            let record = TopicRecord {
                spec: spec.clone(),
                status,
            };
            let written = encode("k", &record).expect("encode");
            let read = topic_catalog::decode_topic_incarnation(written.as_bytes())
                .expect("the coordinator's decoder reads what the broker writes");
            assert_eq!(read.topic_id, spec.topic_id.to_string());
            assert_eq!(read.partitions, 6);
        }
    }

    #[test]
    fn given_a_partition_key_written_before_reassignment_then_it_reads_with_nothing_moving() {
        let old =
            br#"{"replicas":[1,2,3],"leader":1,"leader_epoch":4,"isr":[1,2],"partition_epoch":9}"#;
        let state: PartitionState = decode("k", old).expect("old keys decode");
        assert!(state.adding_replicas.is_empty() && state.removing_replicas.is_empty());
        assert_eq!(
            encode("k", &state).expect("encode").as_bytes(),
            old,
            "written back as before"
        );
        let moving = PartitionState {
            replicas: vec![2, 3, 4, 1],
            adding_replicas: vec![4],
            removing_replicas: vec![1],
            ..state
        };
        let again: PartitionState =
            decode("k", encode("k", &moving).expect("encode").as_bytes()).expect("decode");
        assert_eq!(again, moving);
    }

    #[test]
    fn coordinator_members_owners_and_epochs_are_read_and_everything_else_ignored() {
        let mut view = CoordinatorView::default();
        record_coordinator_key(&mut view, "members/1", br#"{"id":1,"address":"h:1"}"#);
        record_coordinator_key(
            &mut view,
            "owners/3",
            br#"{"coordinator_id":1,"address":"h:1","coordinator_epoch":7,"extra":true}"#,
        );
        record_coordinator_key(
            &mut view,
            "epochs/3",
            br#"{"coordinator_epoch":7,"writer_producer_id":1234}"#,
        );
        record_coordinator_key(&mut view, "owners/x", b"{}");
        record_coordinator_key(&mut view, "owners/4/deeper", b"{}");
        record_coordinator_key(&mut view, "members/2", b"not json");
        record_coordinator_key(&mut view, "leases", b"");
        assert_eq!(
            view.members.into_iter().collect::<Vec<_>>(),
            vec![(
                1,
                CoordinatorMember {
                    id: 1,
                    address: "h:1".into(),
                    external_address: None,
                }
            )]
        );
        assert_eq!(
            view.owners.into_iter().collect::<Vec<_>>(),
            vec![(
                3,
                CoordinatorOwner {
                    coordinator_id: 1,
                    address: "h:1".into(),
                    external_address: None,
                    coordinator_epoch: 7
                }
            )]
        );
        assert_eq!(
            view.epochs.into_iter().collect::<Vec<_>>(),
            vec![(
                3,
                CoordinatorEpoch {
                    coordinator_epoch: 7,
                    writer_producer_id: 1234
                }
            )]
        );
    }
}
