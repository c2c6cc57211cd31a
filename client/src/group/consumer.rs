//! A consumer in a group (`subscribe`): the coordinator assigns the partitions, the
//! consumer reads them from the group's committed offsets and commits its positions.
//!
//! Heartbeats go out from [`GroupConsumer::poll`] when due. An answer that changes the
//! assignment is returned as events by that `poll`, with no records: revoked partitions
//! are no longer read from then on, and the coordinator learns they are released only
//! from the next heartbeat, sent by a later `poll`, so the caller commits (or aborts a
//! transaction) for them first. A newly assigned partition starts at the group's
//! committed offset, read with `require_stable`, or at `ConsumerConfig::start` when the
//! group has none. An offset an open transaction holds (UNSTABLE_OFFSET_COMMIT: the
//! previous owner died mid-transaction, say, and its timeout has not aborted it yet) is
//! waited for as Kafka's consumer waits: that partition is not read and its offset is
//! asked again every [`UNSTABLE_OFFSET_RETRY`] from `poll`, while the other partitions
//! are read and heartbeats go on. Failing the `poll` instead would make a caller that
//! retries read the partition from `start`, and one that exits hand the partition, and
//! the wait, to the next member.
//!
//! Commits (`commit`, `commit_offsets`, `commit_async`, auto-commit) go through one
//! queue ([`committer`](super::committer)) and are sent in the order they were asked
//! for, each after the previous one is answered: an older commit never overwrites a
//! newer one, and a `commit` or `close` waits for the asynchronous ones before it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use idem_proto::v1::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupTopicPartitions,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    OwnedPartitions, SubscribedTopics,
};
use idem_proto::ErrorCode;
use tokio::time::Instant;

use super::committer::{CommitHandle, Committer, Offsets, Stamp};
use super::member::{Event, HeartbeatAnswer, Membership, Refusal, TopicPartition};
use crate::consumer::{Consumer, ConsumerConfig, ConsumerRecord};
use crate::coordinator::{
    commit_topics, first_refusal, CoordinatorKey, CoordinatorLink, GroupClient,
};
use crate::error::ClientError;
pub use crate::types::GroupMetadata;

/// Settings of a group member, each with a documented default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    pub group_id: String,
    /// This member's id, kept across its heartbeats. Default: 32 random hex digits.
    pub member_id: String,
    /// A static member's instance id (a restart under the same one keeps its partitions
    /// without a rebalance). Default none.
    pub instance_id: Option<String>,
    /// How long this member may take to release revoked partitions. Default 60 s.
    pub rebalance_timeout: Duration,
    /// The server-side assignor this member asks the group for (KIP-848's
    /// `group.remote.assignor`): `"uniform"` or `"range"`; sent on its heartbeats. The
    /// group uses the one most members ask for. Default none: the group's (`uniform`
    /// unless most members ask for another). A name the coordinator does not have makes
    /// `poll` fail with UNSUPPORTED_ASSIGNOR.
    pub assignor: Option<String>,
    /// Commit automatically: from `poll`, every this often, the positions of the
    /// records already returned (asynchronously); before a revocation is acknowledged,
    /// the revoked partitions' positions (waiting for the answer); and everything on
    /// `close`. Default `None`, off: idem's exactly-once pipelines commit their input
    /// offsets inside the output transaction (`send_offsets_to_transaction`), and an
    /// automatic commit beside it could commit records whose outputs the transaction
    /// then aborts. So a consumer with auto-commit on refuses `group_metadata`.
    pub auto_commit_interval: Option<Duration>,
    /// Reading: isolation, fetch sizes, where a partition without a committed offset
    /// starts (`start`).
    pub consumer: ConsumerConfig,
}

impl GroupConfig {
    pub fn new(group_id: impl Into<String>) -> GroupConfig {
        GroupConfig {
            group_id: group_id.into(),
            member_id: format!("{:032x}", rand::random::<u128>()),
            instance_id: None,
            rebalance_timeout: Duration::from_secs(60),
            assignor: None,
            auto_commit_interval: None,
            consumer: ConsumerConfig::default(),
        }
    }
}

/// What one `poll` brought: records, or the assignment changes to handle first.
#[derive(Debug, Default)]
pub struct Polled {
    pub records: Vec<ConsumerRecord>,
    pub events: Vec<Event>,
}

/// The member epoch a heartbeat carries to leave the group for good.
const LEAVE_EPOCH: i32 = -1;
/// The member epoch a static member's heartbeat carries to leave for a while (a
/// restart): the group keeps its partitions for its instance id.
const STATIC_LEAVE_EPOCH: i32 = -2;

/// How long before the first heartbeat answer says how often to beat.
const FIRST_INTERVAL: Duration = Duration::from_secs(1);

/// How often `poll` asks again for committed offsets an open transaction holds (Kafka's
/// `retry.backoff.ms` is 100 ms; an open transaction lasts seconds to its timeout).
pub const UNSTABLE_OFFSET_RETRY: Duration = Duration::from_millis(200);

/// A member of a consumer group reading what the group assigns it.
pub struct GroupConsumer {
    consumer: Consumer,
    link: Arc<CoordinatorLink>,
    key: CoordinatorKey,
    config: GroupConfig,
    membership: Membership,
    next_heartbeat: Instant,
    interval: Duration,
    committer: Committer,
    /// When `poll` next commits automatically (auto-commit on).
    next_auto_commit: Option<Instant>,
    /// Owned partitions whose committed offset is not known yet (an open transaction
    /// holds it): not read until it is.
    awaiting_offsets: BTreeSet<TopicPartition>,
    /// When `poll` next asks for them.
    next_offset_fetch: Instant,
}

impl GroupConsumer {
    /// Joins `config.group_id` subscribed to `topics` (the join itself goes out with the
    /// first `poll`).
    pub async fn subscribe(
        bootstrap: &str,
        config: GroupConfig,
        topics: &[&str],
    ) -> Result<GroupConsumer, ClientError> {
        if config.group_id.is_empty() {
            return Err(ClientError::InvalidConfig("group_id is empty".into()));
        }
        if topics.is_empty() {
            return Err(ClientError::InvalidConfig(
                "a group member subscribes to at least one topic".into(),
            ));
        }
        if config.auto_commit_interval.is_some_and(|i| i.is_zero()) {
            return Err(ClientError::InvalidConfig(
                "auto_commit_interval must be positive (None turns auto-commit off)".into(),
            ));
        }
        let consumer = Consumer::connect(bootstrap, config.consumer.clone()).await?;
        let link = Arc::new(CoordinatorLink::new(consumer.connection().clone()));
        let key = CoordinatorKey::Group(config.group_id.clone());
        let committer = {
            let (link, key) = (link.clone(), key.clone());
            let (group_id, member_id) = (config.group_id.clone(), config.member_id.clone());
            Committer::spawn(move |offsets: Offsets, member_epoch| {
                let request = OffsetCommitRequest {
                    group_id: group_id.clone(),
                    member_id: member_id.clone(),
                    member_epoch,
                    topics: commit_topics(&offsets),
                };
                let (link, key) = (link.clone(), key.clone());
                async move { send_commit(&link, &key, request).await }
            })
        };
        Ok(GroupConsumer {
            consumer,
            link,
            key,
            membership: Membership::joining(topics.iter().map(|t| t.to_string()).collect()),
            next_heartbeat: Instant::now(),
            interval: FIRST_INTERVAL,
            committer,
            next_auto_commit: config.auto_commit_interval.map(|i| Instant::now() + i),
            config,
            awaiting_offsets: BTreeSet::new(),
            next_offset_fetch: Instant::now(),
        })
    }

    /// Heartbeats if due, then reads up to `timeout`. Events are returned alone: handle
    /// them (a revocation above all) before the next `poll`.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Polled, ClientError> {
        self.auto_commit_if_due();
        if Instant::now() >= self.next_heartbeat {
            let events = self.heartbeat().await?;
            if !events.is_empty() {
                return Ok(Polled {
                    records: Vec::new(),
                    events,
                });
            }
        }
        if !self.awaiting_offsets.is_empty() && Instant::now() >= self.next_offset_fetch {
            self.fetch_awaited_offsets().await?;
        }
        let mut wake = self.next_heartbeat;
        if !self.awaiting_offsets.is_empty() {
            wake = wake.min(self.next_offset_fetch);
        }
        let until_wake = wake.saturating_duration_since(Instant::now());
        let records = self.consumer.poll(timeout.min(until_wake)).await?;
        Ok(Polled {
            records,
            events: Vec::new(),
        })
    }

    /// Auto-commit: queues a commit of the returned records' positions once the
    /// interval has passed. Nobody awaits it; a failure is logged and the next one
    /// commits the positions again.
    fn auto_commit_if_due(&mut self) {
        let (Some(interval), Some(due)) = (self.config.auto_commit_interval, self.next_auto_commit)
        else {
            return;
        };
        let now = Instant::now();
        if now >= due {
            self.next_auto_commit = Some(now + interval);
            drop(self.commit_async());
        }
    }

    /// One heartbeat now; the assignment changes it brought (already applied to what
    /// this consumer reads).
    pub async fn heartbeat(&mut self) -> Result<Vec<Event>, ClientError> {
        let next = self.membership.next_heartbeat();
        let request = ConsumerGroupHeartbeatRequest {
            group_id: self.config.group_id.clone(),
            member_id: self.config.member_id.clone(),
            member_epoch: next.member_epoch,
            instance_id: self.config.instance_id.clone(),
            rebalance_timeout_ms: millis(self.config.rebalance_timeout),
            subscribed: next.subscribed.map(|topics| SubscribedTopics {
                topics: topics.into_iter().collect(),
            }),
            owned: Some(OwnedPartitions {
                topics: by_topic(&next.owned),
            }),
            server_assignor: self.config.assignor.clone(),
        };
        let deadline = Instant::now() + self.link.request_timeout();
        let answer = self
            .link
            .call_on(&self.key, deadline, |mut c: GroupClient| {
                let request = request.clone();
                async move { c.consumer_group_heartbeat(request).await }
            })
            .await
            .result;
        self.next_heartbeat = Instant::now() + self.interval;
        let answer = match answer {
            Ok(answer) => {
                if answer.heartbeat_interval_ms > 0 {
                    self.interval = Duration::from_millis(answer.heartbeat_interval_ms as u64);
                    self.next_heartbeat = Instant::now() + self.interval;
                }
                heartbeat_answer(&answer)
            }
            Err(e) => match e.code() {
                Some(code) => HeartbeatAnswer {
                    error: code,
                    member_epoch: -1,
                    assignment: None,
                },
                None => return Err(e),
            },
        };
        let answered = self.membership.on_answer(&answer);
        self.committer.set_stamp(Stamp {
            rejoins: self.membership.rejoins(),
            member_epoch: self.membership.epoch(),
        });
        let events = match answered {
            Ok(events) => events,
            Err(Refusal::Retry) => return Ok(Vec::new()),
            Err(Refusal::Rejoin | Refusal::Fatal) => {
                return Err(ClientError::broker(
                    answer.error as i32,
                    format!("group {} refused the heartbeat", self.config.group_id),
                ))
            }
        };
        if self.config.auto_commit_interval.is_some() {
            for event in &events {
                if let Event::Revoked(revoked) = event {
                    self.commit_revoked(revoked).await;
                }
            }
        }
        self.follow(&events).await?;
        Ok(events)
    }

    /// Auto-commit: the revoked partitions' positions, committed before the next
    /// heartbeat tells the coordinator they are released (the coordinator still takes
    /// commits for partitions pending revocation). A failure is logged: the partitions
    /// go to their next owner either way, which then reads from the last commit.
    async fn commit_revoked(&self, revoked: &BTreeSet<TopicPartition>) {
        let offsets: Offsets = self
            .consumer
            .known_positions()
            .into_iter()
            .filter(|(tp, _)| revoked.contains(tp))
            .collect();
        if let Err(e) = self.committer.commit(offsets).await {
            tracing::warn!(group = %self.config.group_id, error = %e, "committing revoked partitions failed");
        }
    }

    /// Reads what the membership owns; new partitions from the committed offsets.
    async fn follow(&mut self, events: &[Event]) -> Result<(), ClientError> {
        if events.is_empty() {
            return Ok(());
        }
        for event in events {
            if let Event::Assigned(added) = event {
                self.awaiting_offsets.extend(added.iter().cloned());
            }
        }
        let owned = self.membership.owned();
        self.awaiting_offsets.retain(|tp| owned.contains(tp));
        self.consumer.assign(self.readable());
        self.fetch_awaited_offsets().await
    }

    /// The owned partitions this consumer reads: all but those awaiting their offset.
    fn readable(&self) -> Vec<TopicPartition> {
        self.membership
            .owned()
            .iter()
            .filter(|tp| !self.awaiting_offsets.contains(*tp))
            .cloned()
            .collect()
    }

    /// Asks once for the committed offsets of the partitions awaiting them; those
    /// answered are read from there on (from `ConsumerConfig::start` when the group
    /// has none), those an open transaction still holds are asked for again after
    /// [`UNSTABLE_OFFSET_RETRY`].
    async fn fetch_awaited_offsets(&mut self) -> Result<(), ClientError> {
        if self.awaiting_offsets.is_empty() {
            return Ok(());
        }
        let answered = self.committed(&self.awaiting_offsets).await?;
        let mut positioned = Vec::new();
        for (tp, offset) in answered {
            if let Some(offset) = offset {
                self.awaiting_offsets.remove(&tp);
                positioned.push((tp, offset));
            }
        }
        self.consumer.assign(self.readable());
        for ((topic, partition), offset) in positioned {
            if offset >= 0 {
                self.consumer.seek(&topic, partition, offset)?;
            } else {
                self.consumer.reset(&topic, partition)?;
            }
        }
        if !self.awaiting_offsets.is_empty() {
            tracing::debug!(group = %self.config.group_id, partitions = ?self.awaiting_offsets, "committed offsets held by an open transaction; not reading these partitions yet");
            self.next_offset_fetch = Instant::now() + UNSTABLE_OFFSET_RETRY;
        }
        Ok(())
    }

    /// Rewinds every owned partition to the group's committed offset (or to
    /// `ConsumerConfig::start` when it has none): after an aborted transaction, the
    /// records it consumed are read again. A partition whose offset an open transaction
    /// still holds (the aborted one's ABORT may not have reached the group yet) is not
    /// read until `poll` learns it.
    pub async fn seek_to_committed(&mut self) -> Result<(), ClientError> {
        self.awaiting_offsets = self.membership.owned().clone();
        // Forgets every position: none is read from until its offset is known.
        self.consumer.assign(Vec::new());
        self.fetch_awaited_offsets().await
    }

    /// The group's committed offsets of `partitions` (-1: none; `None`: an open
    /// transaction holds it), from one OffsetFetch with `require_stable`.
    async fn committed(
        &self,
        partitions: &BTreeSet<TopicPartition>,
    ) -> Result<Vec<(TopicPartition, Option<i64>)>, ClientError> {
        let request = OffsetFetchRequest {
            group_id: self.config.group_id.clone(),
            topics: by_topic(partitions),
            require_stable: true,
        };
        let deadline = Instant::now() + self.link.request_timeout();
        let answer: OffsetFetchResponse = self
            .link
            .call_on(&self.key, deadline, |mut c: GroupClient| {
                let request = request.clone();
                async move { c.offset_fetch(request).await }
            })
            .await
            .result?;
        stable_offsets(answer)
    }

    /// Commits the position of every partition this member owns and reads (one still
    /// awaiting its committed offset was not read: there is nothing to commit).
    pub async fn commit(&mut self) -> Result<(), ClientError> {
        let mut offsets = Vec::new();
        for (topic, partition) in self.readable() {
            let position = self.consumer.position(&topic, partition).await?;
            offsets.push(((topic, partition), position));
        }
        self.commit_offsets(&offsets).await
    }

    /// Commits `offsets` (the next offset to read, per partition) for this member,
    /// after every commit asked for before.
    pub async fn commit_offsets(
        &self,
        offsets: &[(TopicPartition, i64)],
    ) -> Result<(), ClientError> {
        self.committer.commit(offsets.to_vec()).await
    }

    /// Commits the positions of the records returned so far (every owned partition
    /// that was read or sought) without waiting: the commit goes out after every one
    /// asked for before. Await the handle for its outcome, or drop it.
    pub fn commit_async(&self) -> CommitHandle {
        self.committer.commit(self.consumed_positions())
    }

    /// The positions of the owned partitions the consumer knows without asking.
    fn consumed_positions(&self) -> Offsets {
        let owned = self.membership.owned();
        self.consumer
            .known_positions()
            .into_iter()
            .filter(|(tp, _)| owned.contains(tp))
            .collect()
    }

    /// What `send_offsets_to_transaction` needs. Refused (`InvalidConfig`) when
    /// auto-commit is on: the automatic commits would race the transaction's, and may
    /// commit records whose outputs it aborts.
    pub fn group_metadata(&self) -> Result<GroupMetadata, ClientError> {
        if self.config.auto_commit_interval.is_some() {
            return Err(ClientError::InvalidConfig(format!(
                "group {}: auto-commit is on (GroupConfig::auto_commit_interval), so its \
                 offsets cannot also be sent in a transaction: the automatic commits could \
                 commit records whose outputs the transaction aborts; turn auto-commit off \
                 for a consumer that feeds a transaction",
                self.config.group_id
            )));
        }
        Ok(GroupMetadata {
            group_id: self.config.group_id.clone(),
            member_id: self.config.member_id.clone(),
            member_epoch: self.membership.epoch(),
        })
    }

    /// The partitions this member owns.
    pub fn assignment(&self) -> &BTreeSet<TopicPartition> {
        self.membership.owned()
    }

    /// The offset the next read of an owned partition starts at.
    pub async fn position(&mut self, topic: &str, partition: i32) -> Result<i64, ClientError> {
        self.consumer.position(topic, partition).await
    }

    /// The next read of an owned partition starts at `offset` (the database Inbox seeks
    /// newly assigned partitions to the positions its database holds): one awaiting
    /// its committed offset no longer waits for it.
    pub fn seek(&mut self, topic: &str, partition: i32, offset: i64) -> Result<(), ClientError> {
        if self
            .awaiting_offsets
            .remove(&(topic.to_string(), partition))
        {
            self.consumer.assign(self.readable());
        }
        self.consumer.seek(topic, partition, offset)
    }

    /// Leaves the group (its partitions go to the others at once), once every commit
    /// asked for is answered; with auto-commit, after committing the positions of the
    /// records returned. A failed final commit is reported after leaving.
    pub async fn close(self) -> Result<(), ClientError> {
        let committed = match self.config.auto_commit_interval {
            Some(_) => self.committer.commit(self.consumed_positions()).await,
            None => Ok(()),
        };
        self.committer.flush().await;
        // A static member leaves for a while (-2): the group keeps its partitions for
        // the next member with its instance id, without a rebalance (KIP-345/848); any
        // other member leaves for good (-1) and its partitions move now.
        let member_epoch = if self.config.instance_id.is_some() {
            STATIC_LEAVE_EPOCH
        } else {
            LEAVE_EPOCH
        };
        let request = ConsumerGroupHeartbeatRequest {
            group_id: self.config.group_id.clone(),
            member_id: self.config.member_id.clone(),
            member_epoch,
            instance_id: self.config.instance_id.clone(),
            rebalance_timeout_ms: millis(self.config.rebalance_timeout),
            subscribed: None,
            owned: None,
            server_assignor: None,
        };
        let deadline = Instant::now() + self.link.request_timeout();
        let left = self
            .link
            .call_on(&self.key, deadline, |mut c: GroupClient| {
                let request = request.clone();
                async move { c.consumer_group_heartbeat(request).await }
            })
            .await
            .result
            .map(|_| ());
        committed.and(left)
    }
}

/// One OffsetCommit at the group's coordinator; the first refused partition's error.
async fn send_commit(
    link: &CoordinatorLink,
    key: &CoordinatorKey,
    request: OffsetCommitRequest,
) -> Result<(), ClientError> {
    let deadline = Instant::now() + link.request_timeout();
    let answer: OffsetCommitResponse = link
        .call_on(key, deadline, |mut c: GroupClient| {
            let request = request.clone();
            async move { c.offset_commit(request).await }
        })
        .await
        .result?;
    first_refusal(&answer.topics).map_or(Ok(()), Err)
}

/// Each partition's committed offset in an OffsetFetch answer (`None`: an open
/// transaction holds it, UNSTABLE_OFFSET_COMMIT); any other refusal is the error.
fn stable_offsets(
    answer: OffsetFetchResponse,
) -> Result<Vec<(TopicPartition, Option<i64>)>, ClientError> {
    let mut offsets = Vec::new();
    for topic in answer.topics {
        for p in topic.partitions {
            let offset = match ErrorCode::try_from(p.error_code) {
                Ok(ErrorCode::None) => Some(p.offset),
                Ok(ErrorCode::UnstableOffsetCommit) => None,
                _ => return Err(ClientError::broker(p.error_code, p.error_message)),
            };
            offsets.push(((topic.name.clone(), p.partition), offset));
        }
    }
    Ok(offsets)
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

fn by_topic(partitions: &BTreeSet<TopicPartition>) -> Vec<GroupTopicPartitions> {
    let mut topics: Vec<GroupTopicPartitions> = Vec::new();
    for (topic, partition) in partitions {
        match topics.last_mut() {
            Some(t) if t.topic == *topic => t.partitions.push(*partition),
            _ => topics.push(GroupTopicPartitions {
                topic: topic.clone(),
                partitions: vec![*partition],
            }),
        }
    }
    topics
}

fn heartbeat_answer(answer: &ConsumerGroupHeartbeatResponse) -> HeartbeatAnswer {
    HeartbeatAnswer {
        error: ErrorCode::try_from(answer.error_code).unwrap_or(ErrorCode::UnknownServerError),
        member_epoch: answer.member_epoch,
        assignment: answer.assignment.as_ref().map(|a| {
            a.topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))
                .collect()
        }),
    }
}

#[cfg(test)]
mod tests {
    use idem_proto::v1::{OffsetFetchPartition, OffsetFetchTopic};

    use super::*;

    fn fetched(partition: i32, offset: i64, code: ErrorCode) -> OffsetFetchPartition {
        OffsetFetchPartition {
            partition,
            offset,
            error_code: code as i32,
            error_message: format!("{code:?}"),
            ..Default::default()
        }
    }

    #[test]
    fn an_offset_an_open_transaction_holds_is_unknown_and_any_other_refusal_fails() {
        let answer = |partitions| OffsetFetchResponse {
            topics: vec![OffsetFetchTopic {
                name: "in".into(),
                partitions,
            }],
            ..Default::default()
        };
        let offsets = stable_offsets(answer(vec![
            fetched(0, 7, ErrorCode::None),
            fetched(1, -1, ErrorCode::UnstableOffsetCommit),
            fetched(2, -1, ErrorCode::None),
        ]))
        .expect("answered");
        assert_eq!(
            offsets,
            [
                (("in".to_string(), 0), Some(7)),
                (("in".to_string(), 1), None),
                (("in".to_string(), 2), Some(-1)),
            ]
        );
        let refused = stable_offsets(answer(vec![
            fetched(0, 7, ErrorCode::None),
            fetched(1, -1, ErrorCode::GroupAuthorizationFailed),
        ]))
        .expect_err("refused");
        assert_eq!(refused.code(), Some(ErrorCode::GroupAuthorizationFailed));
    }

    #[test]
    fn partitions_group_by_topic_in_order() {
        let ps: BTreeSet<TopicPartition> = [("a".into(), 1), ("a".into(), 0), ("b".into(), 2)]
            .into_iter()
            .collect();
        let grouped = by_topic(&ps);
        assert_eq!(grouped.len(), 2);
        assert_eq!(
            (grouped[0].topic.as_str(), &grouped[0].partitions[..]),
            ("a", &[0, 1][..])
        );
        assert_eq!(
            (grouped[1].topic.as_str(), &grouped[1].partitions[..]),
            ("b", &[2][..])
        );
    }

    #[test]
    fn an_answer_reads_back_as_the_member_sees_it() {
        let answer = ConsumerGroupHeartbeatResponse {
            error_code: 0,
            error_message: String::new(),
            member_id: "m".into(),
            member_epoch: 3,
            heartbeat_interval_ms: 1000,
            assignment: Some(OwnedPartitions {
                topics: by_topic(
                    &[("t".to_string(), 0), ("t".to_string(), 5)]
                        .into_iter()
                        .collect(),
                ),
            }),
        };
        let read = heartbeat_answer(&answer);
        assert_eq!(read.member_epoch, 3);
        assert_eq!(
            read.assignment,
            Some(
                [("t".to_string(), 0), ("t".to_string(), 5)]
                    .into_iter()
                    .collect()
            )
        );
    }
}
