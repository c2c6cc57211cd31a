//! Operators' view of consumer groups (docs/groups.md): every group the coordinators
//! hold (`list_groups`, failing if one coordinator does not answer, since a partial
//! listing would hide groups), one group's members and assignment (`describe_group`),
//! its committed offsets beside each partition's end (`group_lag`), and the changes an
//! operator makes to an EMPTY group only (`reset_group_offsets`, `delete_group`).

use std::collections::BTreeMap;

use idem_proto::v1 as proto;
use idem_proto::ErrorCode;

use super::Admin;
use crate::connection::with_timeout;
use crate::coordinator::{commit_topics, first_refusal, CoordinatorKey, GroupClient};
use crate::error::ClientError;
use crate::types::{Isolation, OffsetSpec};

/// One group, as ListGroups names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    /// Empty, Reconciling or Stable.
    pub state: String,
}

/// One member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub member_epoch: i32,
    pub subscribed_topics: Vec<String>,
    /// What it may own now.
    pub assignment: Vec<(String, i32)>,
    /// What the group's target gives it.
    pub target_assignment: Vec<(String, i32)>,
    pub state: String,
}

/// A group as its coordinator holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: String,
    pub group_epoch: i32,
    pub target_epoch: i32,
    pub coordinator_id: i32,
    pub members: Vec<GroupMember>,
}

/// One partition of a group's offsets (`kafka-consumer-groups.sh --describe`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    /// The next offset the group reads; `None` if it never committed one.
    pub committed: Option<i64>,
    /// The partition's high watermark.
    pub log_end: i64,
    /// `log_end - committed`.
    pub lag: Option<i64>,
    /// The member owning the partition now, if any.
    pub owner: Option<String>,
}

fn partitions(topics: &[proto::GroupTopicPartitions]) -> Vec<(String, i32)> {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))
        .collect()
}

impl From<proto::GroupDescription> for GroupDescription {
    fn from(g: proto::GroupDescription) -> Self {
        GroupDescription {
            group_id: g.group_id,
            state: g.state,
            group_epoch: g.group_epoch,
            target_epoch: g.target_epoch,
            coordinator_id: g.coordinator_id,
            members: g
                .members
                .into_iter()
                .map(|m| GroupMember {
                    assignment: partitions(&m.assignment),
                    target_assignment: partitions(&m.target_assignment),
                    member_id: m.member_id,
                    instance_id: m.instance_id,
                    member_epoch: m.member_epoch,
                    subscribed_topics: m.subscribed_topics,
                    state: m.state,
                })
                .collect(),
        }
    }
}

impl Admin {
    /// Every group every live coordinator holds, sorted by id.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>, ClientError> {
        let metadata = self.metadata(&[]).await?;
        let link = self.coordinators();
        let timeout = self.connection().request_timeout();
        let mut groups = BTreeMap::new();
        for c in &metadata.coordinators {
            let mut client = link.group_client(&c.address)?;
            let answer = with_timeout(
                timeout,
                client.list_groups(proto::ListGroupsRequest { states: Vec::new() }),
            )
            .await
            .map_err(|e| {
                ClientError::Protocol(format!(
                    "coordinator {} at {} did not list its groups: {e}",
                    c.coordinator_id, c.address
                ))
            })?;
            if answer.error_code != ErrorCode::None as i32 {
                return Err(ClientError::broker(answer.error_code, answer.error_message));
            }
            for g in answer.groups {
                groups.insert(g.group_id.clone(), g.state);
            }
        }
        Ok(groups
            .into_iter()
            .map(|(group_id, state)| GroupListing { group_id, state })
            .collect())
    }

    /// The group as its coordinator holds it; GROUP_ID_NOT_FOUND for one it does not.
    pub async fn describe_group(&self, group_id: &str) -> Result<GroupDescription, ClientError> {
        let request = proto::DescribeGroupsRequest {
            group_ids: vec![group_id.to_string()],
        };
        let answer = self
            .group_call(group_id, |mut c| {
                let request = request.clone();
                async move { c.describe_groups(request).await }
            })
            .await?;
        let group = answer.groups.into_iter().next().ok_or_else(|| {
            ClientError::Protocol(format!("DescribeGroups answered nothing for {group_id:?}"))
        })?;
        if group.error_code != ErrorCode::None as i32 {
            return Err(ClientError::broker(group.error_code, group.error_message));
        }
        Ok(group.into())
    }

    /// Every partition the group has committed an offset for or a member owns, with its
    /// committed offset, high watermark, lag and owner, sorted.
    pub async fn group_lag(&self, group_id: &str) -> Result<Vec<PartitionLag>, ClientError> {
        let description = self.describe_group(group_id).await?;
        let request = proto::OffsetFetchRequest {
            group_id: group_id.to_string(),
            topics: Vec::new(),
            require_stable: false,
        };
        let fetched = self
            .group_call(group_id, |mut c| {
                let request = request.clone();
                async move { c.offset_fetch(request).await }
            })
            .await?;
        let mut rows: BTreeMap<(String, i32), (Option<i64>, Option<String>)> = BTreeMap::new();
        for topic in fetched.topics {
            for p in topic.partitions {
                let committed = (p.offset >= 0).then_some(p.offset);
                rows.insert((topic.name.clone(), p.partition), (committed, None));
            }
        }
        for member in &description.members {
            for tp in &member.assignment {
                rows.entry(tp.clone()).or_default().1 = Some(member.member_id.clone());
            }
        }
        // All log ends at once: a group of hundreds of partitions is described in about
        // one round trip, not one per partition.
        let log_ends = futures::future::try_join_all(rows.keys().map(|(topic, partition)| {
            self.list_offsets(
                topic,
                *partition,
                OffsetSpec::Latest,
                Isolation::ReadUncommitted,
            )
        }))
        .await?;
        Ok(rows
            .into_iter()
            .zip(log_ends)
            .map(
                |(((topic, partition), (committed, owner)), log_end)| PartitionLag {
                    lag: committed.map(|c| (log_end - c).max(0)),
                    topic,
                    partition,
                    committed,
                    log_end,
                    owner,
                },
            )
            .collect())
    }

    /// Sets the committed offsets of a group without members (the coordinator refuses a
    /// group with members: their progress would be overwritten).
    pub async fn reset_group_offsets(
        &self,
        group_id: &str,
        offsets: &[((String, i32), i64)],
    ) -> Result<(), ClientError> {
        let request = proto::OffsetCommitRequest {
            group_id: group_id.to_string(),
            member_id: String::new(),
            member_epoch: -1,
            topics: commit_topics(offsets),
        };
        let answer = self
            .group_call(group_id, |mut c| {
                let request = request.clone();
                async move { c.offset_commit(request).await }
            })
            .await?;
        first_refusal(&answer.topics).map_or(Ok(()), Err)
    }

    /// Deletes a group without members, and its offsets.
    pub async fn delete_group(&self, group_id: &str) -> Result<(), ClientError> {
        let request = proto::DeleteGroupsRequest {
            group_ids: vec![group_id.to_string()],
        };
        let answer = self
            .group_call(group_id, |mut c| {
                let request = request.clone();
                async move { c.delete_groups(request).await }
            })
            .await?;
        match answer.results.into_iter().next() {
            Some(r) if r.error_code == ErrorCode::None as i32 => Ok(()),
            Some(r) => Err(ClientError::broker(r.error_code, r.error_message)),
            None => Err(ClientError::Protocol(format!(
                "DeleteGroups answered nothing for {group_id:?}"
            ))),
        }
    }

    /// One call to the coordinator of `group_id`, found and retried as coordinator calls
    /// are.
    async fn group_call<T, F, Fut>(&self, group_id: &str, rpc: F) -> Result<T, ClientError>
    where
        F: FnMut(GroupClient) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
        T: crate::coordinator::CoordinatorAnswer,
    {
        let key = CoordinatorKey::Group(group_id.to_string());
        self.coordinators()
            .call_on(&key, self.admin_deadline(), rpc)
            .await
            .result
    }
}
