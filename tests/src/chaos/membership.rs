//! Membership faults of the nemesis: a partition moved to another replica set (a replica
//! added on one broker and removed from another, by partition reassignment), and a
//! broker removed from the cluster (every replica it holds moved to the others, then the
//! broker stopped) and later added back, empty, as a new member.

use std::time::Duration;

use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::v1::{
    AlterPartitionReassignmentsRequest, ListPartitionReassignmentsRequest, MetadataRequest,
    ReassignablePartition,
};
use idem_proto::ErrorCode;

use crate::chaos::recorder::TOPICS;
use crate::wait::{wait_until, Seen};
use crate::{raw, Cluster};

/// How long a move may take before the run fails: a stuck move is a product bug.
const MOVE_PATIENCE: Duration = Duration::from_secs(60);

/// One partition and its replicas, as a broker describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
}

/// Every partition of the workload's topics and of the transaction log, as broker
/// `observer` describes them.
pub async fn placements(cluster: &Cluster, observer: i32) -> Vec<Placement> {
    let mut client = raw::connect(&cluster.broker(observer).bootstrap()).await;
    let mut topics: Vec<String> = TOPICS.iter().map(|t| t.to_string()).collect();
    topics.push(TXN_LOG_TOPIC.to_string());
    let answer = client
        .metadata(MetadataRequest { topics })
        .await
        .expect("Metadata for the placements")
        .into_inner();
    answer
        .topics
        .into_iter()
        .flat_map(|topic| {
            let name = topic.name;
            topic.partitions.into_iter().map(move |p| Placement {
                topic: name.clone(),
                partition: p.partition,
                replicas: p.replicas,
            })
        })
        .collect()
}

/// The placement that takes `broker` out of `placement`, putting the first of `brokers`
/// that does not hold a replica yet in its place; `None` when it holds none.
pub fn without(placement: &Placement, broker: i32, brokers: &[i32]) -> Option<Placement> {
    let at = placement.replicas.iter().position(|b| *b == broker)?;
    let newcomer = brokers
        .iter()
        .copied()
        .find(|b| *b != broker && !placement.replicas.contains(b))?;
    let mut replicas = placement.replicas.clone();
    replicas[at] = newcomer;
    Some(Placement {
        replicas,
        ..placement.clone()
    })
}

/// Asks broker `via` to move each placement to its replicas; every request must be
/// accepted.
pub async fn reassign(cluster: &Cluster, via: i32, moves: &[Placement]) {
    let mut client = raw::connect(&cluster.broker(via).bootstrap()).await;
    for target in moves {
        let answer = client
            .alter_partition_reassignments(AlterPartitionReassignmentsRequest {
                topic: target.topic.clone(),
                partitions: vec![ReassignablePartition {
                    partition: target.partition,
                    replicas: target.replicas.clone(),
                }],
            })
            .await
            .expect("AlterPartitionReassignments")
            .into_inner();
        for result in answer.partitions {
            assert_eq!(
                result.error_code(),
                ErrorCode::None,
                "moving {}-{} to {:?}: {}",
                target.topic,
                target.partition,
                target.replicas,
                result.error_message
            );
        }
    }
}

/// Waits until broker `observer` reports no move in progress.
pub async fn wait_until_settled(cluster: &Cluster, observer: i32) {
    wait_until(MOVE_PATIENCE, "no partition move in progress", || async {
        let mut client = raw::connect(&cluster.broker(observer).bootstrap()).await;
        let answer = client
            .list_partition_reassignments(ListPartitionReassignmentsRequest { topics: vec![] })
            .await
            .map(|answer| answer.into_inner());
        match answer {
            Ok(a) if a.error_code() == ErrorCode::None && a.reassignments.is_empty() => {
                Seen::Reached(())
            }
            other => Seen::Not(format!("{other:?}")),
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(replicas: &[i32]) -> Placement {
        Placement {
            topic: "t".into(),
            partition: 0,
            replicas: replicas.to_vec(),
        }
    }

    #[test]
    fn a_removed_broker_is_replaced_in_place_by_one_that_holds_no_replica() {
        let moved = without(&placement(&[2, 1, 3]), 1, &[1, 2, 3, 4]).expect("moved");
        assert_eq!(moved.replicas, vec![2, 4, 3]);
        assert_eq!(without(&placement(&[2, 3, 4]), 1, &[1, 2, 3, 4]), None);
        assert_eq!(
            without(&placement(&[1, 2, 3, 4]), 1, &[1, 2, 3, 4]),
            None,
            "no broker left to take its place"
        );
    }
}
