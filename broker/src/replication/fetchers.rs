//! Which partitions this broker follows, grouped by leader: one [`fetcher`] task per
//! leader broker. Its quiet partitions share one long-poll Fetch, as in Kafka's replica
//! fetcher; a fetch loop per partition cost an idle cluster one long-poll per followed
//! partition every 500 ms (240 idle partitions with replication factor 3 took 20 to 24%
//! of a core).
//!
//! The registry hands over the whole wanted set after every catalog sync; a fetcher
//! whose partitions changed hears of it at once and restarts its shared long-poll, so a
//! new partition is not kept waiting for a long-poll it is not part of. A fetcher no
//! longer wanted is told to stop and ends between two fetches, never mid-append;
//! [`Fetchers::stop`] waits for every one.

use std::collections::HashMap;
use std::sync::Arc;

use idem_runtime::shutdown::{CancellationToken, Duties};
use idem_runtime::tls::PeerTls;

use crate::cluster::membership::Membership;
use crate::partition::Partition;
use crate::replication::fetcher;
use crate::replication::following::{Assignment, FetcherShared, Following, PartitionKey};

struct RunningFetcher {
    shared: Arc<FetcherShared>,
    /// Stops this fetcher alone.
    stop: CancellationToken,
}

/// Every fetcher of this broker, by leader id.
pub struct Fetchers {
    running: HashMap<i32, RunningFetcher>,
    duties: Duties,
}

impl Default for Fetchers {
    fn default() -> Self {
        Fetchers {
            running: HashMap::new(),
            duties: Duties::under(&CancellationToken::new()),
        }
    }
}

impl Fetchers {
    /// Stops every fetcher; the future resolves once each returned, so nothing is
    /// appended to a replica after it (the broker's flush comes next).
    pub fn stop(&mut self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.running.clear();
        let duties = self.duties.clone();
        async move { duties.stop().await }
    }

    /// Follows exactly `wanted`: starts a fetcher for each new leader, hands every
    /// fetcher its partitions, and stops the fetchers of leaders nothing is followed
    /// from any more.
    pub fn reconcile(
        &mut self,
        me: i32,
        wanted: HashMap<PartitionKey, (Following, Arc<Partition>)>,
        membership: &Arc<Membership>,
        peer_tls: Option<&PeerTls>,
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
                fetcher.stop.cancel();
            }
            keep
        });
        for (leader, assignment) in by_leader {
            let fetcher = self.running.entry(leader).or_insert_with(|| {
                let shared = FetcherShared::new();
                let stop = self.duties.spawn_stoppable(|stop| {
                    fetcher::run(
                        me,
                        leader,
                        shared.clone(),
                        membership.clone(),
                        peer_tls.cloned(),
                        stop,
                    )
                });
                RunningFetcher { shared, stop }
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
        // Each fetcher returns at its next stop point; nobody is left to wait for them.
        self.duties.token().cancel();
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
