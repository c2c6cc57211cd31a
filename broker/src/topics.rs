//! The topics this broker hosts and the rules a new topic must pass. On a single node
//! the topic list is `topics.json` in the data dir (written atomically); each partition
//! lives in `<data_dir>/<topic>-<partition>/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::error::BrokerError;
use crate::partition::{Partition, PartitionSettings};

const TOPICS_FILE: &str = "topics.json";
const MAX_TOPIC_NAME_LEN: usize = 249;

/// A topic as recorded on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i32,
}

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

struct Topic {
    spec: TopicSpec,
    partitions: Vec<Arc<Partition>>,
}

/// Topics and their open partitions.
pub struct TopicRegistry {
    data_dir: PathBuf,
    settings: PartitionSettings,
    max_partitions: i32,
    topics: RwLock<BTreeMap<String, Topic>>,
    // Serialises creations so two concurrent creates of one name cannot both succeed.
    create_lock: tokio::sync::Mutex<()>,
}

impl TopicRegistry {
    /// Opens every topic recorded in `data_dir`, recovering each partition's log and
    /// producer state.
    pub fn open(
        data_dir: &Path,
        settings: PartitionSettings,
        max_partitions: i32,
    ) -> Result<Self, BrokerError> {
        std::fs::create_dir_all(data_dir)?;
        let file = read_topics_file(data_dir)?;
        let mut topics = BTreeMap::new();
        for spec in file.topics {
            let mut partitions = Vec::with_capacity(spec.partitions as usize);
            for p in 0..spec.partitions {
                let dir = partition_dir(data_dir, &spec.name, p);
                partitions.push(Arc::new(Partition::open(
                    &spec.name,
                    p,
                    &dir,
                    settings.clone(),
                )?));
            }
            topics.insert(spec.name.clone(), Topic { spec, partitions });
        }
        Ok(TopicRegistry {
            data_dir: data_dir.to_path_buf(),
            settings,
            max_partitions,
            topics: RwLock::new(topics),
            create_lock: tokio::sync::Mutex::new(()),
        })
    }

    /// Creates a topic on this single node. Nothing is written unless every check passes.
    pub async fn create(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
    ) -> Result<(), BrokerError> {
        validate_topic_name(name)?;
        if partitions < 1 || partitions > self.max_partitions {
            return Err(BrokerError::InvalidPartitions {
                count: partitions,
                max: self.max_partitions,
            });
        }
        // 0 or -1 means "the default", which on one node is 1.
        let replication_factor = if replication_factor <= 0 {
            1
        } else {
            replication_factor
        };
        if replication_factor != 1 {
            return Err(BrokerError::InvalidReplicationFactor {
                factor: replication_factor,
                brokers: 1,
            });
        }
        let _guard = self.create_lock.lock().await;
        if self.read().contains_key(name) {
            return Err(BrokerError::TopicAlreadyExists(name.to_string()));
        }
        let spec = TopicSpec {
            name: name.to_string(),
            partitions,
            replication_factor,
        };
        let mut opened = Vec::with_capacity(partitions as usize);
        for p in 0..partitions {
            let dir = partition_dir(&self.data_dir, name, p);
            opened.push(Arc::new(Partition::open(
                name,
                p,
                &dir,
                self.settings.clone(),
            )?));
        }
        let mut specs: Vec<TopicSpec> = self.read().values().map(|t| t.spec.clone()).collect();
        specs.push(spec.clone());
        write_topics_file(&self.data_dir, &TopicsFile { topics: specs })?;
        self.write().insert(
            name.to_string(),
            Topic {
                spec,
                partitions: opened,
            },
        );
        tracing::info!(topic = name, partitions, "created topic");
        Ok(())
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Result<Arc<Partition>, BrokerError> {
        let unknown = || BrokerError::UnknownTopicOrPartition {
            topic: topic.to_string(),
            partition,
        };
        let topics = self.read();
        let t = topics.get(topic).ok_or_else(unknown)?;
        usize::try_from(partition)
            .ok()
            .and_then(|i| t.partitions.get(i))
            .cloned()
            .ok_or_else(unknown)
    }

    /// Partitions of the named topics (all topics when `names` is empty); `None` for a
    /// topic that does not exist.
    pub fn describe(&self, names: &[String]) -> Vec<(String, Option<Vec<Arc<Partition>>>)> {
        let topics = self.read();
        let describe = |t: &Topic| t.partitions.clone();
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

    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.read()
            .values()
            .flat_map(|t| t.partitions.iter().cloned())
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
