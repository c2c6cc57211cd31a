//! The gRPC service `idem.v1.GroupCoordinator`: a thin translation between the wire and
//! the group shell ([`crate::group::serve::Groups`]). Refusals and decider errors
//! travel as `ErrorCode`s in the answer; gRPC status codes are left to transport
//! failures.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use idem_proto::v1::group_coordinator_server::GroupCoordinator;
use idem_proto::v1::{
    ClassicHeartbeatRequest, ClassicHeartbeatResponse, ClassicJoinGroupRequest,
    ClassicJoinGroupResponse, ClassicLeaveGroupRequest, ClassicLeaveGroupResponse,
    ClassicLeaveResult, ClassicSyncGroupRequest, ClassicSyncGroupResponse,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DeleteGroupResult,
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupDescription, GroupListing, GroupMemberDescription, GroupTopicPartitions,
    ListGroupsRequest, ListGroupsResponse, OffsetCommitPartitionResult, OffsetCommitRequest,
    OffsetCommitResponse, OffsetCommitTopic, OffsetCommitTopicResult, OffsetFetchPartition,
    OffsetFetchRequest, OffsetFetchResponse, OffsetFetchTopic, OwnedPartitions,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use idem_proto::ErrorCode;
use idem_runtime::acl::{Authorizer, Operation, Resource};
use idem_runtime::authn::principal_of;
use tonic::{Request, Response, Status};

use crate::core::Refusal;
use crate::group::classic;
use crate::group::membership::{self, Group, Heartbeat, LEAVE_EPOCH};
use crate::group::offsets::Committer;
use crate::group::reconcile::MemberState;
use crate::group::serve::{FetchedOffset, Groups, OffsetToCommit, PartitionResult};
use crate::group::txn_offsets::TxnProducer;
use crate::txn::decide::TopicPartition;
use idem_proto::v1::{OffsetDeletePartitionResult, OffsetDeleteRequest, OffsetDeleteResponse};

pub struct GroupCoordinatorService {
    groups: Arc<Groups>,
    /// `--authorizer`: checked before the group sees the request (docs/operations.md).
    authorizer: Authorizer,
}

impl GroupCoordinatorService {
    pub fn new(groups: Arc<Groups>) -> Self {
        GroupCoordinatorService {
            groups,
            authorizer: Authorizer::open(),
        }
    }

    pub fn with_authorizer(mut self, authorizer: Authorizer) -> Self {
        self.authorizer = authorizer;
        self
    }

    /// Every one of `needs`, or the refusal naming the first one denied.
    fn authorize(
        &self,
        principal: &str,
        needs: impl IntoIterator<Item = (Operation, Resource)>,
    ) -> Result<(), Refusal> {
        Refusal::unless_authorized(&self.authorizer, principal, needs)
    }

    /// Read on the group and on every topic whose offsets are committed (Kafka's
    /// OffsetCommit rule).
    fn authorize_commit(
        &self,
        principal: &str,
        group_id: &str,
        topics: &[OffsetCommitTopic],
    ) -> Result<(), Refusal> {
        self.authorize(
            principal,
            std::iter::once((Operation::Read, Resource::group(group_id))).chain(
                topics
                    .iter()
                    .map(|t| (Operation::Read, Resource::topic(&t.name))),
            ),
        )
    }
}

fn partitions_of(topics: &[GroupTopicPartitions]) -> BTreeSet<TopicPartition> {
    topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| TopicPartition {
                topic: t.topic.clone(),
                partition: *p,
            })
        })
        .collect()
}

fn grouped<'a>(
    partitions: impl IntoIterator<Item = &'a TopicPartition>,
) -> Vec<GroupTopicPartitions> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    by_topic
        .into_iter()
        .map(|(topic, partitions)| GroupTopicPartitions {
            topic: topic.to_string(),
            partitions,
        })
        .collect()
}

fn offsets_to_commit(topics: &[OffsetCommitTopic]) -> Vec<OffsetToCommit> {
    topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| OffsetToCommit {
                tp: TopicPartition {
                    topic: t.name.clone(),
                    partition: p.partition,
                },
                offset: p.offset,
                leader_epoch: p.leader_epoch,
                metadata: p.metadata.clone(),
            })
        })
        .collect()
}

/// Empty member id with epoch -1: a commit without a member.
fn committer(member_id: &str, member_epoch: i32) -> Committer {
    if member_id.is_empty() && member_epoch == LEAVE_EPOCH {
        Committer::Nobody
    } else {
        Committer::Member {
            member_id: member_id.to_string(),
            member_epoch,
        }
    }
}

fn commit_results(results: Vec<PartitionResult>) -> Vec<OffsetCommitTopicResult> {
    let mut by_topic: BTreeMap<String, Vec<OffsetCommitPartitionResult>> = BTreeMap::new();
    for (tp, result) in results {
        let (code, message) = match result {
            Ok(()) => (ErrorCode::None, String::new()),
            Err(r) => (r.code, r.message),
        };
        by_topic
            .entry(tp.topic)
            .or_default()
            .push(OffsetCommitPartitionResult {
                partition: tp.partition,
                error_code: code as i32,
                error_message: message,
            });
    }
    by_topic
        .into_iter()
        .map(|(name, mut partitions)| {
            partitions.sort_by_key(|p| p.partition);
            OffsetCommitTopicResult { name, partitions }
        })
        .collect()
}

fn fetch_results(results: Vec<FetchedOffset>) -> Vec<OffsetFetchTopic> {
    let mut by_topic: BTreeMap<String, Vec<OffsetFetchPartition>> = BTreeMap::new();
    for (tp, result) in results {
        let partition = match result {
            Ok(found) => OffsetFetchPartition {
                partition: tp.partition,
                offset: found.as_ref().map_or(-1, |o| o.offset),
                leader_epoch: found.as_ref().and_then(|o| o.leader_epoch),
                metadata: found.map(|o| o.metadata).unwrap_or_default(),
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
            },
            Err(r) => OffsetFetchPartition {
                partition: tp.partition,
                offset: -1,
                leader_epoch: None,
                metadata: String::new(),
                error_code: r.code as i32,
                error_message: r.message,
            },
        };
        by_topic.entry(tp.topic).or_default().push(partition);
    }
    by_topic
        .into_iter()
        .map(|(name, partitions)| OffsetFetchTopic { name, partitions })
        .collect()
}

fn member_state(state: MemberState) -> &'static str {
    match state {
        MemberState::Stable => "Stable",
        MemberState::UnrevokedPartitions => "UnrevokedPartitions",
        MemberState::UnreleasedPartitions => "UnreleasedPartitions",
    }
}

/// Empty (no members), Reconciling (some member is not at the target yet), Stable.
fn group_state(group: &Group) -> &'static str {
    if group.members.is_empty() {
        return "Empty";
    }
    let settled = group.members.values().all(|m| {
        m.assignment.member_epoch == group.target_epoch && m.assignment.state == MemberState::Stable
    });
    if settled {
        "Stable"
    } else {
        "Reconciling"
    }
}

fn describe(group_id: &str, group: &Group, coordinator_id: i32) -> GroupDescription {
    let empty = BTreeSet::new();
    GroupDescription {
        group_id: group_id.to_string(),
        error_code: ErrorCode::None as i32,
        error_message: String::new(),
        state: group_state(group).to_string(),
        group_epoch: group.group_epoch,
        target_epoch: group.target_epoch,
        members: group
            .members
            .iter()
            .map(|(id, m)| GroupMemberDescription {
                member_id: id.clone(),
                instance_id: m.instance_id.clone(),
                member_epoch: m.assignment.member_epoch,
                subscribed_topics: m.subscribed.iter().cloned().collect(),
                assignment: grouped(&m.assignment.assigned),
                target_assignment: grouped(group.target.get(id).unwrap_or(&empty)),
                state: member_state(m.assignment.state).to_string(),
            })
            .collect(),
        coordinator_id,
        assignor_name: membership::group_assignor(group).name().to_string(),
    }
}

#[tonic::async_trait]
impl GroupCoordinator for GroupCoordinatorService {
    async fn classic_join_group(
        &self,
        request: Request<ClassicJoinGroupRequest>,
    ) -> Result<Response<ClassicJoinGroupResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        let joined = match self.authorize(
            &principal,
            [(Operation::Read, Resource::group(&request.group_id))],
        ) {
            Ok(()) => {
                let join = classic::Join {
                    member_id: request.member_id.clone(),
                    instance_id: request.group_instance_id.clone(),
                    session_timeout_ms: request.session_timeout_ms,
                    rebalance_timeout_ms: request.rebalance_timeout_ms,
                    protocols: request.protocols,
                    subscribed: request.subscribed_topics.into_iter().collect(),
                    owned: partitions_of(&request.owned),
                };
                self.groups.classic_join(&request.group_id, join).await
            }
            Err(refusal) => Err(refusal),
        };
        Ok(Response::new(match joined {
            Ok(joined) => ClassicJoinGroupResponse {
                member_id: request.member_id,
                generation_id: joined.generation,
                protocol_name: joined.protocol_name,
                ..ClassicJoinGroupResponse::default()
            },
            Err(Refusal { code, message }) => ClassicJoinGroupResponse {
                error_code: code as i32,
                error_message: message,
                member_id: request.member_id,
                generation_id: -1,
                ..ClassicJoinGroupResponse::default()
            },
        }))
    }

    async fn classic_sync_group(
        &self,
        request: Request<ClassicSyncGroupRequest>,
    ) -> Result<Response<ClassicSyncGroupResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        let synced = match self.authorize(
            &principal,
            [(Operation::Read, Resource::group(&request.group_id))],
        ) {
            Ok(()) => {
                self.groups
                    .classic_sync(
                        &request.group_id,
                        classic::Sender {
                            member_id: &request.member_id,
                            instance_id: request.group_instance_id.as_deref(),
                        },
                        request.generation_id,
                        (
                            request.protocol_type.as_deref(),
                            request.protocol_name.as_deref(),
                        ),
                    )
                    .await
            }
            Err(refusal) => Err(refusal),
        };
        Ok(Response::new(match synced {
            Ok(synced) => ClassicSyncGroupResponse {
                protocol_name: synced.protocol_name,
                assignment: grouped(&synced.assignment),
                ..ClassicSyncGroupResponse::default()
            },
            Err(Refusal { code, message }) => ClassicSyncGroupResponse {
                error_code: code as i32,
                error_message: message,
                ..ClassicSyncGroupResponse::default()
            },
        }))
    }

    async fn classic_heartbeat(
        &self,
        request: Request<ClassicHeartbeatRequest>,
    ) -> Result<Response<ClassicHeartbeatResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        let beat = match self.authorize(
            &principal,
            [(Operation::Read, Resource::group(&request.group_id))],
        ) {
            Ok(()) => {
                self.groups
                    .classic_heartbeat(
                        &request.group_id,
                        classic::Sender {
                            member_id: &request.member_id,
                            instance_id: request.group_instance_id.as_deref(),
                        },
                        request.generation_id,
                    )
                    .await
            }
            Err(refusal) => Err(refusal),
        };
        Ok(Response::new(match beat {
            Ok(classic::Beat::Stay) => ClassicHeartbeatResponse::default(),
            Ok(classic::Beat::Rejoin) => ClassicHeartbeatResponse {
                error_code: ErrorCode::RebalanceInProgress as i32,
                error_message: "the group moved to a new assignment: join again".into(),
            },
            Err(Refusal { code, message }) => ClassicHeartbeatResponse {
                error_code: code as i32,
                error_message: message,
            },
        }))
    }

    async fn classic_leave_group(
        &self,
        request: Request<ClassicLeaveGroupRequest>,
    ) -> Result<Response<ClassicLeaveGroupResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        let left = match self.authorize(
            &principal,
            [(Operation::Read, Resource::group(&request.group_id))],
        ) {
            Ok(()) => {
                // Brokers that predate `members` name member ids only.
                let leaving: Vec<classic::Leaving> = if request.members.is_empty() {
                    request
                        .member_ids
                        .iter()
                        .map(|id| classic::Leaving {
                            member_id: id.clone(),
                            instance_id: None,
                        })
                        .collect()
                } else {
                    request
                        .members
                        .iter()
                        .map(|m| classic::Leaving {
                            member_id: m.member_id.clone(),
                            instance_id: m.group_instance_id.clone(),
                        })
                        .collect()
                };
                self.groups.classic_leave(&request.group_id, &leaving).await
            }
            Err(refusal) => Err(refusal),
        };
        Ok(Response::new(match left {
            Ok(results) => ClassicLeaveGroupResponse {
                members: results
                    .into_iter()
                    .map(|(member_id, result)| match result {
                        Ok(()) => ClassicLeaveResult {
                            member_id,
                            ..ClassicLeaveResult::default()
                        },
                        Err(Refusal { code, message }) => ClassicLeaveResult {
                            member_id,
                            error_code: code as i32,
                            error_message: message,
                        },
                    })
                    .collect(),
                ..ClassicLeaveGroupResponse::default()
            },
            Err(Refusal { code, message }) => ClassicLeaveGroupResponse {
                error_code: code as i32,
                error_message: message,
                members: Vec::new(),
            },
        }))
    }

    async fn consumer_group_heartbeat(
        &self,
        request: Request<ConsumerGroupHeartbeatRequest>,
    ) -> Result<Response<ConsumerGroupHeartbeatResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        if let Err(Refusal { code, message }) = self.authorize(
            &principal,
            [(Operation::Read, Resource::group(&request.group_id))],
        ) {
            return Ok(Response::new(ConsumerGroupHeartbeatResponse {
                error_code: code as i32,
                error_message: message,
                member_id: request.member_id,
                member_epoch: request.member_epoch,
                heartbeat_interval_ms: self.groups.settings().heartbeat_interval_ms(),
                assignment: None,
            }));
        }
        let heartbeat = Heartbeat {
            member_id: request.member_id.clone(),
            member_epoch: request.member_epoch,
            instance_id: request.instance_id.clone(),
            rebalance_timeout_ms: request.rebalance_timeout_ms,
            subscribed: request
                .subscribed
                .as_ref()
                .map(|s| s.topics.iter().cloned().collect()),
            owned: request.owned.as_ref().map(|o| partitions_of(&o.topics)),
        };
        let interval = self.groups.settings().heartbeat_interval_ms();
        let answer = match self
            .groups
            .heartbeat(
                &request.group_id,
                heartbeat,
                request.server_assignor.as_deref(),
            )
            .await
        {
            Ok(answer) => ConsumerGroupHeartbeatResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                member_id: request.member_id,
                member_epoch: answer.member_epoch,
                heartbeat_interval_ms: interval,
                assignment: answer.assignment.map(|a| OwnedPartitions {
                    topics: grouped(&a),
                }),
            },
            Err(Refusal { code, message }) => ConsumerGroupHeartbeatResponse {
                error_code: code as i32,
                error_message: message,
                member_id: request.member_id,
                member_epoch: request.member_epoch,
                heartbeat_interval_ms: interval,
                assignment: None,
            },
        };
        Ok(Response::new(answer))
    }

    async fn offset_commit(
        &self,
        request: Request<OffsetCommitRequest>,
    ) -> Result<Response<OffsetCommitResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        let committed = match self.authorize_commit(&principal, &request.group_id, &request.topics)
        {
            Ok(()) => {
                self.groups
                    .commit(
                        &request.group_id,
                        committer(&request.member_id, request.member_epoch),
                        offsets_to_commit(&request.topics),
                    )
                    .await
            }
            Err(r) => Err(r),
        };
        let answer = match committed {
            Ok(results) => OffsetCommitResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                topics: commit_results(results),
            },
            Err(r) => OffsetCommitResponse {
                error_code: r.code as i32,
                error_message: r.message,
                topics: Vec::new(),
            },
        };
        Ok(Response::new(answer))
    }

    async fn offset_fetch(
        &self,
        request: Request<OffsetFetchRequest>,
    ) -> Result<Response<OffsetFetchResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        let wanted = (!request.topics.is_empty())
            .then(|| partitions_of(&request.topics).into_iter().collect());
        let fetched = self
            .authorize(
                &principal,
                [(Operation::Describe, Resource::group(&request.group_id))],
            )
            .and_then(|()| {
                self.groups
                    .fetch_offsets(&request.group_id, wanted, request.require_stable)
            });
        let answer = match fetched {
            Ok(results) => OffsetFetchResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                topics: fetch_results(results),
            },
            Err(r) => OffsetFetchResponse {
                error_code: r.code as i32,
                error_message: r.message,
                topics: Vec::new(),
            },
        };
        Ok(Response::new(answer))
    }

    async fn txn_offset_commit(
        &self,
        request: Request<TxnOffsetCommitRequest>,
    ) -> Result<Response<TxnOffsetCommitResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        // Write on the transactional id, read on the group and its topics.
        let authorized = self
            .authorize(
                &principal,
                [(
                    Operation::Write,
                    Resource::transactional_id(&request.transactional_id),
                )],
            )
            .and_then(|()| self.authorize_commit(&principal, &request.group_id, &request.topics));
        let epoch = i16::try_from(request.producer_epoch)
            .ok()
            .filter(|e| *e >= 0);
        let outcome = match (authorized, epoch) {
            (Err(r), _) => Err(r),
            (Ok(()), None) => Err(Refusal::new(
                ErrorCode::InvalidRequest,
                format!("producer epoch {} out of range", request.producer_epoch),
            )),
            (Ok(()), Some(_)) if request.producer_id < 0 => Err(Refusal::new(
                ErrorCode::InvalidRequest,
                "TxnOffsetCommit needs the producer's id",
            )),
            (Ok(()), Some(producer_epoch)) => {
                self.groups
                    .txn_commit(
                        &request.group_id,
                        TxnProducer {
                            producer_id: request.producer_id,
                            producer_epoch,
                        },
                        committer(&request.member_id, request.member_epoch),
                        offsets_to_commit(&request.topics),
                    )
                    .await
            }
        };
        let answer = match outcome {
            Ok(results) => TxnOffsetCommitResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                topics: commit_results(results),
            },
            Err(r) => TxnOffsetCommitResponse {
                error_code: r.code as i32,
                error_message: r.message,
                topics: Vec::new(),
            },
        };
        Ok(Response::new(answer))
    }

    async fn describe_groups(
        &self,
        request: Request<DescribeGroupsRequest>,
    ) -> Result<Response<DescribeGroupsResponse>, Status> {
        let coordinator_id = self.groups.settings().coordinator_id;
        let principal = principal_of(&request).to_string();
        let groups = request
            .into_inner()
            .group_ids
            .into_iter()
            .map(|id| {
                self.authorize(&principal, [(Operation::Describe, Resource::group(&id))])
                    .and_then(|()| self.groups.describe(&id))
                    .map_err(|r| (id.clone(), r))
                    .map(|group| (id, group))
            })
            .map(|described| match described {
                Ok((id, group)) => describe(&id, &group, coordinator_id),
                Err((id, r)) => GroupDescription {
                    group_id: id,
                    error_code: r.code as i32,
                    error_message: r.message,
                    coordinator_id,
                    ..GroupDescription::default()
                },
            })
            .collect();
        Ok(Response::new(DescribeGroupsResponse { groups }))
    }

    async fn list_groups(
        &self,
        request: Request<ListGroupsRequest>,
    ) -> Result<Response<ListGroupsResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let states = request.into_inner().states;
        // Only the groups the principal may describe (as Kafka does).
        let (listed, owned_partitions) = self.groups.list_slices();
        let groups = listed
            .into_iter()
            .filter(|(group_id, _)| {
                self.authorize(
                    &principal,
                    [(Operation::Describe, Resource::group(group_id))],
                )
                .is_ok()
            })
            .map(|(group_id, group)| GroupListing {
                group_id,
                state: group_state(&group).to_string(),
            })
            .filter(|g| states.is_empty() || states.contains(&g.state))
            .collect();
        Ok(Response::new(ListGroupsResponse {
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            groups,
            owned_partitions,
        }))
    }

    async fn delete_groups(
        &self,
        request: Request<DeleteGroupsRequest>,
    ) -> Result<Response<DeleteGroupsResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let mut results = Vec::new();
        for group_id in request.into_inner().group_ids {
            let deleted = match self.authorize(
                &principal,
                [(Operation::Delete, Resource::group(&group_id))],
            ) {
                Ok(()) => self.groups.delete(&group_id).await,
                Err(r) => Err(r),
            };
            let (code, message) = match deleted {
                Ok(()) => (ErrorCode::None, String::new()),
                Err(r) => (r.code, r.message),
            };
            results.push(DeleteGroupResult {
                group_id,
                error_code: code as i32,
                error_message: message,
            });
        }
        Ok(Response::new(DeleteGroupsResponse { results }))
    }

    async fn offset_delete(
        &self,
        request: Request<OffsetDeleteRequest>,
    ) -> Result<Response<OffsetDeleteResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        // Delete on the group, read on each topic (Kafka's rules for OffsetDelete).
        let needs = std::iter::once((Operation::Delete, Resource::group(&request.group_id)))
            .chain(
                request
                    .topics
                    .iter()
                    .map(|t| (Operation::Read, Resource::topic(&t.topic))),
            )
            .collect::<Vec<_>>();
        let asked: Vec<TopicPartition> = request
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| TopicPartition {
                    topic: t.topic.clone(),
                    partition: *p,
                })
            })
            .collect();
        let deleted = match self.authorize(&principal, needs) {
            Ok(()) => self.groups.delete_offsets(&request.group_id, &asked).await,
            Err(r) => Err(r),
        };
        let answer = match deleted {
            Ok(results) => OffsetDeleteResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                results: results
                    .into_iter()
                    .map(|(tp, code)| OffsetDeletePartitionResult {
                        topic: tp.topic,
                        partition: tp.partition,
                        error_code: code as i32,
                    })
                    .collect(),
            },
            Err(r) => OffsetDeleteResponse {
                error_code: r.code as i32,
                error_message: r.message,
                results: Vec::new(),
            },
        };
        Ok(Response::new(answer))
    }
}
