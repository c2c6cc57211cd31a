//! ISR upkeep, the catalog side: a leader publishes its ISR shrinks and expansions (and
//! ends reassignments), and a replica that must leave an ISR takes itself out, each by
//! compare-and-swap so a lost race changes nothing and is retried at the next sync.

use std::sync::Arc;

use crate::cluster::cluster_catalog::ClusterCatalog;
use crate::cluster::isr_exit::leave_isr;
use crate::cluster::partition_view::{PartitionView, TopicView};
use crate::cluster::reassignment;
use crate::error::BrokerError;
use crate::partition::{now_ms, Partition};

/// Takes this broker out of the ISR of every hosted partition that must leave it
/// (see [`Partition::must_leave_isr`] and [`crate::cluster::isr_exit`]), from the
/// catalog state and revision each view was read at. A lost compare-and-swap leaves the
/// partition marked: the change that won wakes the catalog watch, and the next sync
/// tries again. Until then it elects nothing there.
pub async fn leave_isrs(cluster: &ClusterCatalog, topics: &[TopicView]) -> Result<(), BrokerError> {
    // Collected before the first await: a lazy iterator over borrowed views held across
    // it would make the future not Send.
    let pending: Vec<(&str, &PartitionView, &Arc<Partition>)> = topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().filter_map(move |view| {
                let local = view.local.as_ref()?;
                local
                    .must_leave_isr()
                    .then_some((topic.name.as_str(), view, local))
            })
        })
        .collect();
    for (topic, view, local) in pending {
        let Some(next) = leave_isr(cluster.broker_id, &view.catalog_state()) else {
            // Not in the ISR (any more), or its last member, which stays: no replica is
            // known to hold more.
            local.isr_left();
            continue;
        };
        let written = cluster
            .catalog
            .compare_and_set_partition(topic, view.index, view.catalog_revision, &next)
            .await
            .map_err(|e| BrokerError::Cluster(e.to_string()))?;
        if written {
            local.isr_left();
            tracing::warn!(
                topic,
                partition = view.index,
                isr = ?next.isr,
                leader = next.leader,
                "left the ISR: this replica's log may have lost records it had reported; rejoining once caught up"
            );
        }
    }
    Ok(())
}

/// Leader duty: publishes ISR shrinks (a follower lagging past `lag_limit_ms`) and
/// expansions (a follower back at the high watermark) by compare-and-swap in etcd,
/// and ends a reassignment once every target replica is in sync
/// ([`reassignment::leader_step`]).
pub async fn maintain_isr(cluster: &ClusterCatalog, topics: &[TopicView], lag_limit_ms: i64) {
    let led: Vec<(String, PartitionView)> = topics
        .iter()
        .flat_map(|topic| {
            topic
                .partitions
                .iter()
                .filter(|v| v.leader == cluster.broker_id && v.local.is_some())
                .map(move |v| (topic.name.clone(), v.clone()))
        })
        .collect();
    for (topic, view) in led {
        let Some(local) = &view.local else { continue };
        let high_watermark = local.offsets().high_watermark;
        let isr_change = local
            .replication()
            .isr_change(high_watermark, now_ms(), lag_limit_ms);
        let current = view.catalog_state();
        // Who is alive matters only to pick the next leader when a move ends.
        let live = if reassignment::is_reassigning(&current) {
            cluster.live_broker_ids().await.unwrap_or_default()
        } else {
            Vec::new()
        };
        let Some(state) = reassignment::leader_step(&current, isr_change, &live) else {
            continue;
        };
        match cluster.publish(&topic, &view, &state).await {
            Ok(true)
                if reassignment::is_reassigning(&current)
                    && !reassignment::is_reassigning(&state) =>
            {
                tracing::info!(topic, partition = view.index, replicas = ?state.replicas, isr = ?state.isr, leader = state.leader, leader_epoch = state.leader_epoch, "reassignment complete")
            }
            Ok(true) => {
                let change = if state.isr.len() < view.isr.len() {
                    "shrink"
                } else {
                    "expand"
                };
                metrics::counter!("idem_isr_changes_total", "change" => change).increment(1);
                tracing::info!(topic, partition = view.index, from = ?view.isr, to = ?state.isr, "changed the ISR")
            }
            Ok(false) => tracing::debug!(
                topic,
                partition = view.index,
                "ISR change lost a race; will retry"
            ),
            Err(e) => {
                tracing::warn!(topic, partition = view.index, error = %e, "ISR change failed")
            }
        }
    }
}
