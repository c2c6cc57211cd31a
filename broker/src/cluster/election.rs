//! Failover: a broker takes over the partitions whose leader is gone, by
//! compare-and-swap of the partition state with `leader_epoch + 1`, so of all the
//! replicas trying at once exactly one wins.

use crate::cluster::catalog::PartitionState;
use crate::cluster::cluster_catalog::ClusterCatalog;
use crate::cluster::partition_view::{PartitionView, TopicView};
use crate::error::BrokerError;

/// Failover: for every partition whose leader is no longer registered and whose
/// ISR holds this broker, try to become leader with `leader_epoch + 1` by
/// compare-and-swap. The first in-sync replica to swap wins; out-of-ISR replicas
/// take over only where the topic enables unclean election and no ISR member lives.
pub async fn elect_leaders(
    cluster: &ClusterCatalog,
    topics: &[TopicView],
) -> Result<bool, BrokerError> {
    let broker_id = cluster.broker_id;
    let live = cluster.live_broker_ids().await?;
    if !live.contains(&broker_id) || !cluster.membership.holds_lease() {
        return Ok(false);
    }
    // Leaderless partitions this broker may take: as an in-sync replica, or, where
    // the topic allows unclean election and no in-sync replica is alive, as any
    // replica (then the ISR restarts as this broker alone).
    let orphans: Vec<(String, PartitionView, bool)> = topics
        .iter()
        .flat_map(|topic| {
            let name = &topic.name;
            let unclean_allowed = topic.unclean_leader_election;
            let live = &live;
            topic.partitions.iter().filter_map(move |v| {
                if live.contains(&v.leader) || !v.replicas.contains(&broker_id) {
                    return None;
                }
                if v.local.as_ref().is_some_and(|l| l.must_leave_isr()) {
                    return None; // not before it has left the ISR
                }
                if v.isr.contains(&broker_id) {
                    return Some((name.clone(), v.clone(), false));
                }
                let isr_gone = !v.isr.iter().any(|b| live.contains(b));
                (unclean_allowed && isr_gone).then(|| (name.clone(), v.clone(), true))
            })
        })
        .collect();
    let mut changed = false;
    for (topic, view, unclean) in orphans {
        let isr: Vec<i32> = if unclean {
            tracing::warn!(
                topic,
                partition = view.index,
                "unclean leader election: records only the lost ISR had are gone"
            );
            vec![broker_id]
        } else {
            view.isr
                .iter()
                .copied()
                .filter(|b| live.contains(b))
                .collect()
        };
        // A reassignment in progress goes on under the new leader.
        let state = PartitionState {
            leader: broker_id,
            leader_epoch: view.leader_epoch + 1,
            isr,
            partition_epoch: view.partition_epoch + 1,
            ..view.catalog_state()
        };
        match cluster.publish(&topic, &view, &state).await {
            Ok(true) => {
                changed = true;
                metrics::counter!("idem_leader_elections_total").increment(1);
                tracing::info!(
                    topic,
                    partition = view.index,
                    old_leader = view.leader,
                    leader_epoch = state.leader_epoch,
                    "became leader"
                );
            }
            Ok(false) => tracing::debug!(
                topic,
                partition = view.index,
                "another replica took over first"
            ),
            Err(e) => {
                tracing::warn!(topic, partition = view.index, error = %e, "taking over leadership failed")
            }
        }
    }
    Ok(changed)
}
