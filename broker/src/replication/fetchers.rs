//! Which partitions this broker follows, grouped by leader: one [`fetcher`] task per
//! leader broker. Its quiet partitions share one long-poll Fetch, as in Kafka's replica
//! fetcher; a fetch loop per partition cost an idle cluster one long-poll per followed
//! partition every 500 ms (240 idle partitions with replication factor 3 took 20 to 24%
//! of a core).
//!
//! The registry hands over the whole wanted set after every catalog sync; a fetcher
//! whose partitions changed hears of it at once and restarts its shared long-poll, so a
//! new partition is not kept waiting for a long-poll it is not part of.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::membership::Membership;
use crate::partition::Partition;
use crate::replication::fetcher;

/// A partition by topic name and index.
pub type PartitionKey = (String, i32);

/// What this broker follows for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Following {
    pub me: i32,
    pub leader: i32,
    pub leader_epoch: i32,
}

/// One leader's partitions as its fetcher should follow them now.
pub type Assignment = HashMap<PartitionKey, (Following, Arc<Partition>)>;

/// The shared side of one fetcher: the registry writes the assignment, the fetcher
/// reads it whenever the version moves.
pub struct FetcherShared {
    assignment: Mutex<Assignment>,
    version: watch::Sender<u64>,
}

impl FetcherShared {
    fn new() -> Arc<FetcherShared> {
        Arc::new(FetcherShared {
            assignment: Mutex::new(HashMap::new()),
            version: watch::Sender::new(0),
        })
    }

    /// The partitions to follow now.
    pub fn assignment(&self) -> MutexGuard<'_, Assignment> {
        self.assignment
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A receiver that changes whenever the assignment does.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Whether `key` is still followed from the leader epoch `following` names: a
    /// fetched batch is appended only then.
    pub fn still_follows(&self, key: &PartitionKey, following: Following) -> bool {
        self.assignment()
            .get(key)
            .is_some_and(|(current, _)| *current == following)
    }

    /// Replaces the assignment; true when anything changed.
    fn replace(&self, wanted: Assignment) -> bool {
        let mut current = self.assignment();
        let same = current.len() == wanted.len()
            && wanted.iter().all(|(key, (following, _))| {
                current.get(key).is_some_and(|(held, _)| held == following)
            });
        if same {
            return false;
        }
        *current = wanted;
        drop(current);
        self.version.send_modify(|v| *v += 1);
        true
    }
}

struct RunningFetcher {
    shared: Arc<FetcherShared>,
    task: JoinHandle<()>,
}

/// Every fetcher of this broker, by leader id.
#[derive(Default)]
pub struct Fetchers {
    running: HashMap<i32, RunningFetcher>,
}

impl Fetchers {
    /// Follows exactly `wanted`: starts a fetcher for each new leader, hands every
    /// fetcher its partitions, and stops the fetchers of leaders nothing is followed
    /// from any more.
    pub fn reconcile(
        &mut self,
        me: i32,
        wanted: HashMap<PartitionKey, (Following, Arc<Partition>)>,
        membership: &Arc<Membership>,
    ) {
        let mut by_leader: HashMap<i32, Assignment> = HashMap::new();
        for (key, (following, partition)) in wanted {
            by_leader
                .entry(following.leader)
                .or_default()
                .insert(key, (following, partition));
        }
        self.running.retain(|leader, fetcher| {
            let keep = by_leader.contains_key(leader);
            if !keep {
                tracing::info!(leader, "no partition is followed from this leader any more");
                fetcher.task.abort();
            }
            keep
        });
        for (leader, assignment) in by_leader {
            let fetcher = self.running.entry(leader).or_insert_with(|| {
                let shared = FetcherShared::new();
                let task =
                    tokio::spawn(fetcher::run(me, leader, shared.clone(), membership.clone()));
                RunningFetcher { shared, task }
            });
            let mut keys: Vec<_> = assignment
                .iter()
                .filter(|(key, (following, _))| !fetcher.shared.still_follows(key, *following))
                .map(|(key, (following, _))| (key.clone(), following.leader_epoch))
                .collect();
            if fetcher.shared.replace(assignment) {
                keys.sort();
                for ((topic, partition), leader_epoch) in keys {
                    tracing::info!(topic, partition, leader, leader_epoch, "following");
                }
            }
        }
    }
}

impl Drop for Fetchers {
    fn drop(&mut self) {
        for fetcher in self.running.values() {
            fetcher.task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::fetcher::tests::followed;

    #[test]
    fn given_the_same_assignment_then_the_fetcher_is_not_disturbed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shared = FetcherShared::new();
        let version = shared.subscribe();
        let (key, f) = followed(dir.path(), "a", 0);
        let assignment = |epoch: i32| -> Assignment {
            let following = Following {
                leader_epoch: epoch,
                ..f.following
            };
            [(key.clone(), (following, f.partition.clone()))].into()
        };
        assert!(shared.replace(assignment(7)));
        assert_eq!(*version.borrow(), 1);
        assert!(!shared.replace(assignment(7)), "nothing changed");
        assert_eq!(*version.borrow(), 1);
        assert!(shared.still_follows(&key, f.following));
        assert!(shared.replace(assignment(8)), "a new leader epoch");
        assert_eq!(*version.borrow(), 2);
        assert!(!shared.still_follows(&key, f.following));
        assert!(shared.replace(Assignment::new()));
        assert!(!shared.still_follows(
            &key,
            Following {
                leader_epoch: 8,
                ..f.following
            }
        ));
    }
}
