//! Consumer group helpers for end-to-end tests: a raw `GroupCoordinator` client that
//! finds the group's coordinator through a broker (and finds it again, as a client
//! must, when the answer is NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or
//! COORDINATOR_NOT_AVAILABLE, or the coordinator is gone), and a member driven like a
//! KIP-848 consumer: it reports what it owns and owns what the answer assigns.

use std::collections::BTreeSet;
use std::time::Duration;

use idem_proto::v1::group_coordinator_client::GroupCoordinatorClient;
use idem_proto::v1::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DescribeGroupsRequest,
    FindCoordinatorRequest, GroupDescription, GroupTopicPartitions, OffsetCommitPartition,
    OffsetCommitRequest, OffsetCommitResponse, OffsetCommitTopic, OffsetFetchRequest,
    OffsetFetchResponse, OwnedPartitions, SubscribedTopics, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};
use idem_proto::ErrorCode;
use tonic::transport::Channel;

use crate::raw;
use crate::wait::{wait_until, Seen, PATIENCE};

pub type RawGroupCoordinator = GroupCoordinatorClient<Channel>;

/// A topic partition as a member owns it.
pub type Owned = BTreeSet<(String, i32)>;

/// Codes after which a client finds the coordinator again.
fn coordinator_moved(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NotCoordinator
            | ErrorCode::CoordinatorLoadInProgress
            | ErrorCode::CoordinatorNotAvailable
    )
}

/// A client of one group's coordinator.
#[derive(Debug, Clone)]
pub struct GroupClient {
    bootstrap: String,
    pub group_id: String,
}

impl GroupClient {
    pub fn new(bootstrap: &str, group_id: &str) -> Self {
        GroupClient {
            bootstrap: bootstrap.to_string(),
            group_id: group_id.to_string(),
        }
    }

    /// The cluster this client asks.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// FindCoordinator(group_id) at a broker: (coordinator id, address).
    pub async fn find(&self) -> Result<(i32, String), String> {
        let mut broker = raw::connect(&self.bootstrap).await;
        let answer = broker
            .find_coordinator(FindCoordinatorRequest {
                transactional_id: String::new(),
                group_id: self.group_id.clone(),
            })
            .await
            .map_err(|e| e.to_string())?
            .into_inner();
        if answer.error_code() != ErrorCode::None {
            return Err(answer.error_message);
        }
        Ok((answer.coordinator_id, answer.address))
    }

    async fn connect(&self) -> Result<RawGroupCoordinator, String> {
        let (_, address) = self.find().await?;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(10))
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        Ok(GroupCoordinatorClient::new(channel))
    }

    /// Sends one request to the group's coordinator, finding it again until an answer
    /// is not "the coordinator moved"; `code` reads the answer's request-level code.
    async fn call<T, F, Fut>(&self, what: &str, code: fn(&T) -> ErrorCode, rpc: F) -> T
    where
        T: std::fmt::Debug,
        F: Fn(RawGroupCoordinator) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let (answer, _) = wait_until(PATIENCE, what, || async {
            let client = match self.connect().await {
                Ok(client) => client,
                Err(e) => return Seen::Not(e),
            };
            match rpc(client).await {
                Ok(answer) => {
                    let answer = answer.into_inner();
                    if coordinator_moved(code(&answer)) {
                        Seen::Not(format!("{answer:?}"))
                    } else {
                        Seen::Reached(answer)
                    }
                }
                Err(status) => Seen::Not(status.to_string()),
            }
        })
        .await;
        answer
    }

    pub async fn heartbeat(
        &self,
        request: ConsumerGroupHeartbeatRequest,
    ) -> ConsumerGroupHeartbeatResponse {
        self.call(
            "a heartbeat is answered",
            |a: &ConsumerGroupHeartbeatResponse| a.error_code(),
            |mut c| {
                let request = request.clone();
                async move { c.consumer_group_heartbeat(request).await }
            },
        )
        .await
    }

    /// OffsetCommit of `offsets` (topic, partition, offset).
    pub async fn commit(
        &self,
        member_id: &str,
        member_epoch: i32,
        offsets: &[(&str, i32, i64)],
    ) -> OffsetCommitResponse {
        let request = OffsetCommitRequest {
            group_id: self.group_id.clone(),
            member_id: member_id.into(),
            member_epoch,
            topics: commit_topics(offsets),
        };
        self.call(
            "a commit is answered",
            |a: &OffsetCommitResponse| a.error_code(),
            |mut c| {
                let request = request.clone();
                async move { c.offset_commit(request).await }
            },
        )
        .await
    }

    /// TxnOffsetCommit of `offsets` inside the producer's transaction.
    pub async fn txn_commit(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        member: (&str, i32),
        offsets: &[(&str, i32, i64)],
    ) -> TxnOffsetCommitResponse {
        let request = TxnOffsetCommitRequest {
            transactional_id: transactional_id.into(),
            producer_id: producer.0,
            producer_epoch: i32::from(producer.1),
            group_id: self.group_id.clone(),
            member_id: member.0.into(),
            member_epoch: member.1,
            topics: commit_topics(offsets),
        };
        self.call(
            "a TxnOffsetCommit is answered",
            |a: &TxnOffsetCommitResponse| a.error_code(),
            |mut c| {
                let request = request.clone();
                async move { c.txn_offset_commit(request).await }
            },
        )
        .await
    }

    /// OffsetFetch of every partition of `topic` up to `partitions`.
    pub async fn fetch(
        &self,
        topic: &str,
        partitions: i32,
        require_stable: bool,
    ) -> OffsetFetchResponse {
        let request = OffsetFetchRequest {
            group_id: self.group_id.clone(),
            topics: vec![GroupTopicPartitions {
                topic: topic.into(),
                partitions: (0..partitions).collect(),
            }],
            require_stable,
        };
        self.call(
            "an OffsetFetch is answered",
            |a: &OffsetFetchResponse| a.error_code(),
            |mut c| {
                let request = request.clone();
                async move { c.offset_fetch(request).await }
            },
        )
        .await
    }

    /// The committed offsets of `topic`'s partitions (-1: none), by partition.
    pub async fn committed(&self, topic: &str, partitions: i32) -> Vec<i64> {
        let answer = self.fetch(topic, partitions, false).await;
        assert_eq!(
            answer.error_code(),
            ErrorCode::None,
            "{}",
            answer.error_message
        );
        let mut offsets = vec![-1; partitions as usize];
        for p in answer.topics.iter().flat_map(|t| &t.partitions) {
            assert_eq!(p.error_code(), ErrorCode::None, "{}", p.error_message);
            offsets[p.partition as usize] = p.offset;
        }
        offsets
    }

    /// Waits until the group's members own `counts` partitions (in the order
    /// DescribeGroups lists them).
    pub async fn wait_until_owned(&self, counts: &[usize], within: Duration, what: &str) {
        wait_until(within, what, || async {
            let owned: Vec<usize> = self
                .describe()
                .await
                .members
                .iter()
                .map(|m| m.assignment.iter().map(|t| t.partitions.len()).sum())
                .collect();
            if owned == counts {
                Seen::Reached(())
            } else {
                Seen::Not(format!("owned {owned:?}"))
            }
        })
        .await;
    }

    pub async fn describe(&self) -> GroupDescription {
        let request = DescribeGroupsRequest {
            group_ids: vec![self.group_id.clone()],
        };
        let answer = self
            .call(
                "a DescribeGroups is answered",
                |a: &idem_proto::v1::DescribeGroupsResponse| {
                    a.groups.first().map_or(ErrorCode::None, |g| g.error_code())
                },
                |mut c| {
                    let request = request.clone();
                    async move { c.describe_groups(request).await }
                },
            )
            .await;
        answer
            .groups
            .into_iter()
            .next()
            .expect("one group described")
    }
}

fn commit_topics(offsets: &[(&str, i32, i64)]) -> Vec<OffsetCommitTopic> {
    let mut topics: Vec<OffsetCommitTopic> = Vec::new();
    for (topic, partition, offset) in offsets {
        let entry = match topics.iter_mut().find(|t| t.name == *topic) {
            Some(t) => t,
            None => {
                topics.push(OffsetCommitTopic {
                    name: (*topic).into(),
                    partitions: Vec::new(),
                });
                topics.last_mut().expect("just pushed")
            }
        };
        entry.partitions.push(OffsetCommitPartition {
            partition: *partition,
            offset: *offset,
            leader_epoch: None,
            metadata: String::new(),
        });
    }
    topics
}

pub fn owned_of(partitions: &[GroupTopicPartitions]) -> Owned {
    partitions
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))
        .collect()
}

fn partitions_of(owned: &Owned) -> Vec<GroupTopicPartitions> {
    let mut out: Vec<GroupTopicPartitions> = Vec::new();
    for (topic, partition) in owned {
        match out.iter_mut().find(|t| &t.topic == topic) {
            Some(t) => t.partitions.push(*partition),
            None => out.push(GroupTopicPartitions {
                topic: topic.clone(),
                partitions: vec![*partition],
            }),
        }
    }
    out
}

/// A member driven like a consumer.
#[derive(Debug, Clone)]
pub struct Member {
    pub member_id: String,
    pub epoch: i32,
    pub owned: Owned,
    topics: Vec<String>,
    /// The server-side assignor it names on every heartbeat (None: names none).
    pub assignor: Option<String>,
}

impl Member {
    pub fn new(member_id: &str, topics: &[&str]) -> Self {
        Member {
            member_id: member_id.into(),
            epoch: 0,
            owned: Owned::new(),
            topics: topics.iter().map(|t| (*t).to_string()).collect(),
            assignor: None,
        }
    }

    /// One heartbeat: reports what it owns; on success owns what the answer assigns at
    /// the answer's epoch.
    pub async fn heartbeat(&mut self, client: &GroupClient) -> ConsumerGroupHeartbeatResponse {
        let answer = client
            .heartbeat(ConsumerGroupHeartbeatRequest {
                group_id: client.group_id.clone(),
                member_id: self.member_id.clone(),
                member_epoch: self.epoch,
                instance_id: None,
                rebalance_timeout_ms: 30_000,
                subscribed: (self.epoch == 0).then(|| SubscribedTopics {
                    topics: self.topics.clone(),
                }),
                owned: Some(OwnedPartitions {
                    topics: partitions_of(&self.owned),
                }),
                server_assignor: self.assignor.clone(),
            })
            .await;
        if answer.error_code() == ErrorCode::None {
            self.epoch = answer.member_epoch;
            if let Some(assignment) = &answer.assignment {
                self.owned = owned_of(&assignment.topics);
            }
        }
        answer
    }

    /// Leaves the group (-1).
    pub async fn leave(&mut self, client: &GroupClient) -> ConsumerGroupHeartbeatResponse {
        let answer = client
            .heartbeat(ConsumerGroupHeartbeatRequest {
                group_id: client.group_id.clone(),
                member_id: self.member_id.clone(),
                member_epoch: -1,
                instance_id: None,
                rebalance_timeout_ms: 30_000,
                subscribed: None,
                owned: None,
                server_assignor: None,
            })
            .await;
        self.owned.clear();
        answer
    }
}

/// Heartbeats every member in turn until `settled` holds, checking after each answer
/// that no two members own one partition. Panics after `rounds` rounds.
pub async fn drive_until(
    client: &GroupClient,
    members: &mut [Member],
    rounds: usize,
    settled: impl Fn(&[Member]) -> bool,
) {
    for _ in 0..rounds {
        for i in 0..members.len() {
            let answer = members[i].heartbeat(client).await;
            assert_eq!(
                answer.error_code(),
                ErrorCode::None,
                "{}: {}",
                members[i].member_id,
                answer.error_message
            );
            assert_disjoint(members);
        }
        if settled(members) {
            return;
        }
    }
    panic!("the group did not settle in {rounds} rounds: {members:?}");
}

/// No partition is owned by two members.
pub fn assert_disjoint(members: &[Member]) {
    for (i, a) in members.iter().enumerate() {
        for b in &members[i + 1..] {
            let both: Vec<_> = a.owned.intersection(&b.owned).collect();
            assert!(
                both.is_empty(),
                "{} and {} both own {both:?}",
                a.member_id,
                b.member_id
            );
        }
    }
}

/// Every member owns `each` partitions at one epoch, and together all of `total`.
pub fn balanced(members: &[Member], each: usize, total: usize) -> bool {
    let all: Owned = members
        .iter()
        .flat_map(|m| m.owned.iter().cloned())
        .collect();
    members
        .iter()
        .all(|m| m.owned.len() == each && m.epoch == members[0].epoch)
        && all.len() == total
}

/// A raw AddOffsetsToTxn for `group_id` at the transactional id's coordinator.
pub async fn add_offsets_to_txn(
    bootstrap: &str,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    group_id: &str,
) -> idem_proto::v1::AddOffsetsToTxnResponse {
    let (answer, _) = wait_until(PATIENCE, "AddOffsetsToTxn is answered", || async {
        let found = crate::txn::find_coordinator(bootstrap, transactional_id).await;
        let Ok(mut coordinator) = crate::txn::coordinator_client(&found.address).await else {
            return Seen::Not("coordinator unreachable".into());
        };
        match coordinator
            .add_offsets_to_txn(idem_proto::v1::AddOffsetsToTxnRequest {
                transactional_id: transactional_id.into(),
                producer_id,
                producer_epoch: i32::from(producer_epoch),
                group_id: group_id.into(),
            })
            .await
        {
            Ok(answer) => {
                let answer = answer.into_inner();
                if coordinator_moved(answer.error_code()) {
                    Seen::Not(answer.error_message)
                } else {
                    Seen::Reached(answer)
                }
            }
            Err(status) => Seen::Not(status.to_string()),
        }
    })
    .await;
    answer
}
