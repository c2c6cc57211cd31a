//! Waits until a whole cluster serves again after a fault: every transaction log slice
//! loaded by a running coordinator, every running broker registered and seen by every
//! other, every partition of the named topics led by a running broker with every running
//! broker in its ISR. Each wait has a bound and fails saying what is still missing.

use std::time::{Duration, Instant};

use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::v1::MetadataRequest;

use crate::cluster::TXN_LOG_PARTITIONS;
use crate::wait::{seen_if, try_wait_until, Seen};
use crate::{raw, txn, Cluster};

impl Cluster {
    /// Every slice of the transaction log is loaded by a running coordinator, within
    /// `bound` of `since`.
    pub async fn wait_until_every_slice_served(&self, since: Instant, bound: Duration) {
        if let Err(problem) = self.every_slice_served_within(since, bound).await {
            panic!("{problem}");
        }
    }

    /// [`Cluster::wait_until_every_slice_served`], saying what is missing instead of
    /// panicking.
    pub async fn every_slice_served_within(
        &self,
        since: Instant,
        bound: Duration,
    ) -> Result<(), String> {
        let served = try_wait_until(remaining(since, bound), || async {
            let running: Vec<String> = self
                .coordinator_ids()
                .into_iter()
                .map(|id| self.coordinator(id))
                .filter(|process| process.is_running())
                .map(|process| process.bootstrap())
                .collect();
            let served = served_slices(&running).await;
            seen_if(served.clone(), served.len() == TXN_LOG_PARTITIONS as usize)
        })
        .await;
        served.map(|_| ()).map_err(|(_, served)| {
            format!(
                "{:?} after the fault healed the coordinators serve only {served} of the \
                 {TXN_LOG_PARTITIONS} {TXN_LOG_TOPIC} partitions",
                since.elapsed()
            )
        })
    }

    /// Every running broker lists every running broker, and every partition of `topics`
    /// has a running leader and every running broker in its ISR (the topics' replicas
    /// are on every broker), within `bound` of `since`.
    pub async fn wait_until_every_broker_serving(
        &self,
        topics: &[&str],
        since: Instant,
        bound: Duration,
    ) {
        if let Err(problem) = self.every_broker_serving_within(topics, since, bound).await {
            panic!("{problem}");
        }
    }

    /// [`Cluster::wait_until_every_broker_serving`], saying what is missing instead of
    /// panicking.
    pub async fn every_broker_serving_within(
        &self,
        topics: &[&str],
        since: Instant,
        bound: Duration,
    ) -> Result<(), String> {
        let running: Vec<i32> = self
            .ids()
            .into_iter()
            .filter(|id| self.broker(*id).is_running())
            .collect();
        let serving = try_wait_until(remaining(since, bound), || async {
            match self.broker_problem(topics, &running).await {
                None => Seen::Reached(()),
                Some(problem) => Seen::Not(problem),
            }
        })
        .await;
        serving.map(|_| ()).map_err(|(_, problem)| {
            format!("{:?} after the fault healed: {problem}", since.elapsed())
        })
    }

    async fn broker_problem(&self, topics: &[&str], running: &[i32]) -> Option<String> {
        let brokers: Vec<(i32, String)> = running
            .iter()
            .map(|id| (*id, self.broker(*id).bootstrap()))
            .collect();
        broker_problem(&brokers, topics).await
    }
}

/// The transaction log partitions the coordinators at `addresses` have loaded, sorted,
/// each once; a coordinator that does not answer serves none.
pub async fn served_slices(addresses: &[String]) -> Vec<i32> {
    let mut served = Vec::new();
    for address in addresses {
        if let Ok(partitions) = txn::owned_partitions(address).await {
            served.extend(partitions);
        }
    }
    served.sort_unstable();
    served.dedup();
    served
}

/// What keeps `brokers` (id and address, every broker that should be running) from
/// serving `topics`, or `None` when each lists exactly these brokers and sees every
/// partition led by one of them with every replica, all among them, in the ISR (the
/// topics' replicas are on every broker). Also for clusters the harness did not start
/// (the compose cluster, through its external listeners).
pub async fn broker_problem(brokers: &[(i32, String)], topics: &[&str]) -> Option<String> {
    let mut running: Vec<i32> = brokers.iter().map(|(id, _)| *id).collect();
    running.sort_unstable();
    for (id, address) in brokers {
        let mut client = match raw::try_connect(address).await {
            Ok(client) => client,
            Err(e) => return Some(format!("broker {id} at {address} does not accept: {e}")),
        };
        let metadata = match client
            .metadata(MetadataRequest {
                topics: topics.iter().map(|t| t.to_string()).collect(),
            })
            .await
        {
            Ok(answer) => answer.into_inner(),
            Err(e) => return Some(format!("broker {id} does not answer Metadata: {e}")),
        };
        let mut registered: Vec<i32> = metadata.brokers.iter().map(|b| b.broker_id).collect();
        registered.sort_unstable();
        if registered != running {
            return Some(format!(
                "broker {id} sees brokers {registered:?}, not {running:?}"
            ));
        }
        for topic in &metadata.topics {
            for p in &topic.partitions {
                // Every replica in sync (the replicas are every broker unless the
                // cluster has more brokers than the replication factor).
                let mut isr = p.isr.clone();
                isr.sort_unstable();
                let mut replicas = p.replicas.clone();
                replicas.sort_unstable();
                if !running.contains(&p.leader_id)
                    || isr != replicas
                    || !replicas.iter().all(|r| running.contains(r))
                {
                    return Some(format!(
                        "broker {id} sees {}-{} led by {} with ISR {:?}",
                        topic.name, p.partition, p.leader_id, p.isr
                    ));
                }
            }
        }
    }
    None
}

/// What is left of `bound` counted from `since`: the bounds here start when the fault
/// healed, not when the wait began (zero once passed, so the state is still asked once).
fn remaining(since: Instant, bound: Duration) -> Duration {
    bound.saturating_sub(since.elapsed())
}
