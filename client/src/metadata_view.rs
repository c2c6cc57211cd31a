//! What a connection knows of the cluster: the metadata cache behind its lock, and the
//! one refresh of it that may run at a time. Refreshes are coalesced (a caller joins
//! the one under way) and rate-limited ([`RefreshGate`]); how a refresh asks a broker
//! is the caller's, so this file knows nothing of channels or RPCs. It also remembers
//! when each topic was last described, so a topic's metadata can be asked for again
//! once it is older than the client's `metadata_max_age` (a topic grows without any
//! request failing).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};

use crate::metadata::{ClusterMetadata, MetadataCache, Route};
use crate::refresh::{RefreshGate, RefreshPlan};

/// A refresh any number of callers may wait for.
pub(crate) type RefreshFuture = Shared<BoxFuture<'static, ()>>;

#[derive(Debug, Default)]
pub(crate) struct MetadataView {
    cache: RwLock<MetadataCache>,
    refresh: Mutex<RefreshSlot>,
    /// When each topic the cache holds was last described by a broker.
    learned_at: Mutex<HashMap<String, tokio::time::Instant>>,
}

#[derive(Default)]
struct RefreshSlot {
    gate: RefreshGate,
    current: Option<RefreshFuture>,
}

impl std::fmt::Debug for RefreshSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefreshSlot")
            .field("gate", &self.gate)
            .field("in_flight", &self.current.is_some())
            .finish()
    }
}

/// Marks the running refresh finished however its future ends (even dropped).
struct RefreshDone(Arc<MetadataView>);

impl Drop for RefreshDone {
    fn drop(&mut self) {
        if let Ok(mut slot) = self.0.refresh.lock() {
            slot.gate.finished();
            slot.current = None;
        }
    }
}

impl MetadataView {
    /// Where the cache says to send a request for `topic`/`partition`; `None` when the
    /// cache cannot be read.
    pub(crate) fn route(&self, topic: &str, partition: i32, bootstrap: &str) -> Option<Route> {
        Some(self.cache.read().ok()?.route(topic, partition, bootstrap))
    }

    /// The leader epoch the cache holds for this partition.
    pub(crate) fn leader_epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        self.cache.read().ok()?.leader_epoch(topic, partition)
    }

    /// Whether the cache lists this partition.
    pub(crate) fn knows_partition(&self, topic: &str, partition: i32) -> bool {
        self.cache
            .read()
            .is_ok_and(|m| m.knows_partition(topic, partition))
    }

    pub(crate) fn partition_count(&self, topic: &str) -> Option<i32> {
        self.cache.read().ok()?.partition_count(topic)
    }

    /// Forgets what the cache knows about `topic`.
    pub(crate) fn invalidate(&self, topic: &str) {
        if let Ok(mut cache) = self.cache.write() {
            cache.invalidate(topic);
        }
        if let Ok(mut learned_at) = self.learned_at.lock() {
            learned_at.remove(topic);
        }
    }

    /// Whether what the cache holds of `topic` was described longer than `max_age` ago
    /// (or never: a topic it does not hold).
    pub(crate) fn is_older_than(&self, topic: &str, max_age: Duration) -> bool {
        self.learned_at.lock().map_or(true, |learned_at| {
            learned_at
                .get(topic)
                .is_none_or(|at| at.elapsed() >= max_age)
        })
    }

    /// Addresses of the live brokers other than the one behind `bootstrap`.
    pub(crate) fn brokers_besides(&self, bootstrap: &str) -> Vec<String> {
        let Ok(cache) = self.cache.read() else {
            return Vec::new();
        };
        cache
            .broker_addresses()
            .into_iter()
            .filter(|(broker_id, address)| {
                address.trim() != bootstrap.trim() && cache.bootstrap_broker() != Some(*broker_id)
            })
            .map(|(_, address)| address)
            .collect()
    }

    /// Takes in a Metadata answer; `from_bootstrap` when the bootstrap broker gave it,
    /// which tells which broker id stands behind the bootstrap address; `every_topic`
    /// when it answers a request for every topic, so a cached topic it lacks is gone.
    pub(crate) fn learn(
        &self,
        metadata: &ClusterMetadata,
        from_bootstrap: bool,
        every_topic: bool,
    ) {
        if let Ok(mut cache) = self.cache.write() {
            // An answer for every topic also says which are gone (deleted).
            if every_topic {
                cache.update_all(metadata);
            } else {
                cache.update(metadata);
            }
            if from_bootstrap {
                cache.learn_bootstrap_broker(metadata);
            }
        }
        if let Ok(mut learned_at) = self.learned_at.lock() {
            let now = tokio::time::Instant::now();
            for topic in &metadata.topics {
                if topic.error.is_none() {
                    learned_at.insert(topic.name.clone(), now);
                } else {
                    learned_at.remove(&topic.name);
                }
            }
        }
    }

    /// The refresh under way, if any.
    pub(crate) fn current_refresh(&self) -> Option<RefreshFuture> {
        self.refresh
            .lock()
            .ok()
            .and_then(|slot| slot.current.clone())
    }

    /// The refresh to wait for: the one under way, or a new one running `fetch` (no
    /// sooner than the gate allows, driven by its own task so it completes even if
    /// nobody waits).
    pub(crate) fn start_refresh(
        self: &Arc<Self>,
        fetch: impl FnOnce() -> BoxFuture<'static, ()>,
    ) -> Option<RefreshFuture> {
        let mut slot = self.refresh.lock().ok()?;
        let now = tokio::time::Instant::now();
        match slot.gate.plan(now.into_std()) {
            RefreshPlan::Join => slot.current.clone(),
            RefreshPlan::Start { at } => {
                let done = RefreshDone(self.clone());
                let fetch = fetch();
                let refresh: RefreshFuture = async move {
                    let _done = done;
                    tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
                    fetch.await;
                }
                .boxed()
                .shared();
                slot.current = Some(refresh.clone());
                drop(slot);
                tokio::spawn(refresh.clone());
                Some(refresh)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::TopicMetadata;
    use idem_proto::ErrorCode;

    fn answer(topics: &[(&str, Option<ErrorCode>)]) -> ClusterMetadata {
        ClusterMetadata {
            topics: topics
                .iter()
                .map(|(name, error)| TopicMetadata {
                    name: name.to_string(),
                    error: *error,
                    partitions: Vec::new(),
                    topic_id: String::new(),
                })
                .collect(),
            ..ClusterMetadata::default()
        }
    }

    #[tokio::test]
    async fn given_a_topic_described_then_it_is_old_only_once_max_age_has_passed() {
        let view = MetadataView::default();
        let max_age = Duration::from_millis(300);
        assert!(view.is_older_than("orders", max_age), "never described");
        view.learn(&answer(&[("orders", None)]), false, false);
        assert!(!view.is_older_than("orders", max_age));
        tokio::time::sleep(max_age).await;
        assert!(view.is_older_than("orders", max_age));
        view.learn(&answer(&[("orders", None)]), false, false);
        assert!(!view.is_older_than("orders", max_age), "described again");
        view.learn(
            &answer(&[("orders", Some(ErrorCode::UnknownTopicOrPartition))]),
            false,
            false,
        );
        assert!(view.is_older_than("orders", max_age), "gone");
        view.learn(&answer(&[("orders", None)]), false, false);
        view.invalidate("orders");
        assert!(view.is_older_than("orders", max_age), "forgotten");
    }
}
