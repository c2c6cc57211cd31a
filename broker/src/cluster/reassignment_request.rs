//! AlterPartitionReassignments on any broker of a cluster: reads the partition's key,
//! checks the request against it ([`reassignment::start`]) and records the target by
//! compare-and-swap. A lost race (the leader changed the ISR meanwhile) reads again,
//! a bounded number of times; a refusal writes nothing.

use crate::cluster::catalog::EtcdCatalog;
use crate::cluster::membership::Membership;
use crate::cluster::reassignment::{self, Start};
use crate::error::BrokerError;

/// Attempts before a request that keeps losing the compare-and-swap gives up
/// (REQUEST_TIMED_OUT: retriable). The leader changes a partition's key a few times
/// a second at most, so losing this often means something is wrong.
const ATTEMPTS: usize = 5;

/// Starts moving `topic`-`partition` to `replicas` (or finds it already moving there).
pub async fn alter_reassignment(
    catalog: &EtcdCatalog,
    membership: &Membership,
    topic: &str,
    partition: i32,
    replicas: &[i32],
) -> Result<(), BrokerError> {
    let cluster = |e: &dyn std::fmt::Display| BrokerError::Cluster(e.to_string());
    let registered: Vec<i32> = membership
        .live_brokers()
        .await
        .map_err(|e| cluster(&e))?
        .into_iter()
        .map(|b| b.broker_id)
        .collect();
    for attempt in 1..=ATTEMPTS {
        let Some((spec, (state, revision))) = catalog
            .read_partition(topic, partition)
            .await
            .map_err(|e| cluster(&e))?
        else {
            return Err(BrokerError::UnknownTopicOrPartition {
                topic: topic.to_string(),
                partition,
            });
        };
        let next = reassignment::start(&state, replicas, &registered, spec.min_insync_replicas())
            .map_err(|refusal| BrokerError::Reassignment {
            topic: topic.to_string(),
            partition,
            refusal,
        })?;
        let Start::Publish(next) = next else {
            return Ok(());
        };
        let swapped = catalog
            .compare_and_set_partition(topic, partition, revision, &next)
            .await
            .map_err(|e| cluster(&e))?;
        if swapped {
            tracing::info!(
                topic,
                partition,
                from = ?state.replicas,
                to = ?replicas,
                adding = ?next.adding_replicas,
                removing = ?next.removing_replicas,
                "reassignment started"
            );
            return Ok(());
        }
        tracing::debug!(
            topic,
            partition,
            attempt,
            "reassignment lost a race; reading again"
        );
    }
    Err(BrokerError::Cluster(format!(
        "{topic}-{partition} changed under each of {ATTEMPTS} attempts to reassign it; try again"
    )))
}
