//! What this broker follows of a partition, and the assignment one leader's fetcher
//! shares with the registry: the registry writes it after every catalog sync, the
//! fetcher reads it whenever its version moves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use crate::cluster::partition_view::TopicView;
use crate::partition::Partition;

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
    pub(crate) fn new() -> Arc<FetcherShared> {
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

    /// Replaces the assignment; true when anything changed (a partition opened anew,
    /// as when its topic was deleted and created again, is a change even in the same
    /// leader epoch).
    pub(crate) fn replace(&self, wanted: Assignment) -> bool {
        let mut current = self.assignment();
        let same = current.len() == wanted.len()
            && wanted.iter().all(|(key, (following, partition))| {
                current.get(key).is_some_and(|(held, held_partition)| {
                    held == following && Arc::ptr_eq(held_partition, partition)
                })
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

/// Every hosted partition this broker (`me`) follows, with the leader and epoch it
/// follows: a partition whose leader or epoch changed starts over with a truncation
/// check.
pub fn followed(me: i32, topics: &[TopicView]) -> Assignment {
    let mut wanted = Assignment::new();
    for topic in topics {
        for view in &topic.partitions {
            let Some(local) = &view.local else { continue };
            if view.leader == me || view.leader < 0 {
                continue;
            }
            let following = Following {
                me,
                leader: view.leader,
                leader_epoch: view.leader_epoch,
            };
            wanted.insert((topic.name.clone(), view.index), (following, local.clone()));
        }
    }
    wanted
}
