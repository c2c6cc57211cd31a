//! Moving partitions between brokers (Kafka's KIP-455): ask for a partition's target
//! replicas, and list the moves in progress. A broker records the target in the
//! cluster's catalog and the partition's leader carries the move out; a repeated
//! request for the same target changes nothing, so lost answers are retried.

use idem_proto::v1::{
    AlterPartitionReassignmentsRequest, ListPartitionReassignmentsRequest, ReassignablePartition,
};

use super::Admin;
use crate::error::ClientError;

/// A partition being moved: `replicas` holds the target followed by the replicas that
/// leave once every target replica is in sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReassignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
}

impl Admin {
    /// Asks to move each `(partition, target replicas)` of `topic`. The outer error is
    /// the request's (no broker answered); each partition has its own outcome:
    /// `Ok(())` when the target is recorded (or already was), else the broker's code:
    /// `UNKNOWN_TOPIC_OR_PARTITION`, `INVALID_REPLICA_ASSIGNMENT` (empty, duplicated or
    /// unregistered ids, fewer than min.insync.replicas), `REASSIGNMENT_IN_PROGRESS`
    /// (another target is being reached), `INVALID_REQUEST` (a single-node broker).
    pub async fn alter_partition_reassignments(
        &self,
        topic: &str,
        targets: &[(i32, Vec<i32>)],
    ) -> Result<Vec<(i32, Result<(), ClientError>)>, ClientError> {
        let request = AlterPartitionReassignmentsRequest {
            topic: topic.to_string(),
            partitions: targets
                .iter()
                .map(|(partition, replicas)| ReassignablePartition {
                    partition: *partition,
                    replicas: replicas.clone(),
                })
                .collect(),
        };
        let answer = self
            .connection()
            .call_retrying(|mut client| {
                let request = request.clone();
                async move { client.alter_partition_reassignments(request).await }
            })
            .await?;
        self.connection().invalidate(topic);
        targets
            .iter()
            .map(|(partition, _)| {
                let result = answer
                    .partitions
                    .iter()
                    .find(|r| r.partition == *partition)
                    .ok_or_else(|| {
                        ClientError::Protocol(format!(
                            "reassignment answer lacks {topic}-{partition}"
                        ))
                    })?;
                let outcome = match result.error_code {
                    0 => Ok(()),
                    code => Err(ClientError::broker(code, result.error_message.clone())),
                };
                Ok((*partition, outcome))
            })
            .collect()
    }

    /// [`Admin::alter_partition_reassignments`] for one partition.
    pub async fn alter_partition_reassignment(
        &self,
        topic: &str,
        partition: i32,
        replicas: &[i32],
    ) -> Result<(), ClientError> {
        let mut outcomes = self
            .alter_partition_reassignments(topic, &[(partition, replicas.to_vec())])
            .await?;
        match outcomes.pop() {
            Some((_, outcome)) => outcome,
            None => Err(ClientError::Protocol(format!(
                "reassignment answer lacks {topic}-{partition}"
            ))),
        }
    }

    /// The partitions being moved, of `topics` (every topic when empty), as the
    /// answering broker last read the catalog. An unknown topic is
    /// `UNKNOWN_TOPIC_OR_PARTITION`.
    pub async fn list_partition_reassignments(
        &self,
        topics: &[&str],
    ) -> Result<Vec<PartitionReassignment>, ClientError> {
        let request = ListPartitionReassignmentsRequest {
            topics: topics.iter().map(|t| t.to_string()).collect(),
        };
        let answer = self
            .connection()
            .call_retrying(|mut client| {
                let request = request.clone();
                async move { client.list_partition_reassignments(request).await }
            })
            .await?;
        if answer.error_code != 0 {
            return Err(ClientError::broker(answer.error_code, answer.error_message));
        }
        Ok(answer
            .reassignments
            .into_iter()
            .map(|r| PartitionReassignment {
                topic: r.topic,
                partition: r.partition,
                replicas: r.replicas,
                adding_replicas: r.adding_replicas,
                removing_replicas: r.removing_replicas,
            })
            .collect())
    }
}
