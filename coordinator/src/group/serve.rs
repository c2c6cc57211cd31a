//! The group coordinator's shell: the `__consumer_offsets` partitions this coordinator
//! owns (one per claimed slice of the transaction log), loaded on claim, tailed for
//! transaction markers, and the requests on their groups. For a request on a group it
//! finds the owning slice (NOT_COORDINATOR when not ours, COORDINATOR_LOAD_IN_PROGRESS
//! while loading), takes the group's lock (a group's requests apply in order), decides
//! with the pure rules, appends what changed (acks=all) and only then applies it and
//! answers.
//!
//! Each check interval, the offsets of empty groups whose retention passed are
//! tombstoned, and so are groups left with nothing ([`expiry`]).
//!
//! Invariants: nothing is answered before it is persisted, nor forgotten before its
//! tombstone is; a heartbeat that changes nothing writes nothing; a claim whose writes a
//! broker fenced, or that the ownership backend lost, stops serving its groups at once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use idem_client::{ClientError, Connection};
use idem_proto::txn::{txn_log_partition, OFFSETS_TOPIC};
use idem_proto::ErrorCode;
use tokio::sync::watch;
use tokio::time::Instant;

use super::classic::{self, ClassicError};
use super::expiry::{self, Expired};
use super::lag;
use super::load::{self, ReadFailure};
use super::membership::{self, Answer, Group, Heartbeat, HeartbeatError, TopicSizes};
use super::offset_delete;
use super::offsets::{check_commit, CommitRefusal, Committer, OffsetAndMetadata};
use super::records::GroupRecord;
use super::sessions::{MemberKey, Sessions};
use super::slice::{replay, Replay, SliceState};
use super::txn_offsets::{self, TxnProducer};
use crate::claim_slots::{claim_writer, give_back, load_while_owned, remove_claim, ClaimSlot};
use crate::clock::now_ms;
use crate::core::Refusal;
use crate::error::CoordinatorError;
use crate::log::writer::TxnLogWriter;
use crate::ownership::token::OwnershipToken;
use crate::ownership::{Claim, Ownership};
use crate::retry;
use crate::txn::decide::TopicPartition;

/// Longest group id (Kafka's limit for names).
pub const MAX_GROUP_ID_BYTES: usize = 249;
/// Longest heartbeat interval a member is told to keep.
const MAX_HEARTBEAT_INTERVAL_MS: u64 = 5_000;
/// How long one read of the tail waits for the log to grow.
const TAIL_WAIT_MS: i32 = 500;
/// How long TxnOffsetCommit waits for the tail to reach the log end before it writes.
const TAIL_CATCH_UP: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
pub struct GroupSettings {
    pub coordinator_id: i32,
    pub session_timeout: Duration,
    /// How long the offsets of a group with no members are kept.
    pub offsets_retention: Duration,
}

impl GroupSettings {
    /// What a member is told: a third of the session timeout, at most 5 s.
    pub fn heartbeat_interval_ms(&self) -> i32 {
        let third = u64::try_from(self.session_timeout.as_millis() / 3).unwrap_or(u64::MAX);
        i32::try_from(third.clamp(1, MAX_HEARTBEAT_INTERVAL_MS)).unwrap_or(1)
    }
}

/// One loaded `__consumer_offsets` partition.
pub struct GroupSlice {
    pub index: i32,
    pub coordinator_epoch: i32,
    pub token: OwnershipToken,
    writer: TxnLogWriter,
    state: Mutex<SliceState>,
    sessions: Mutex<Sessions>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Serialises transactional offset batches (their sequences).
    txn_writes: tokio::sync::Mutex<()>,
    /// Where the tail has read to.
    tail: watch::Sender<i64>,
}

impl GroupSlice {
    fn lock_for(&self, group_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        match self.locks.lock() {
            Ok(mut locks) => locks.entry(group_id.to_string()).or_default().clone(),
            Err(_) => Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SliceState> {
        // Poisoned only by a panic while applying, which ended that request.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn group(&self, group_id: &str) -> Option<Group> {
        self.state().groups.get(group_id).cloned()
    }

    /// Appends `records` in one batch and applies them with their offsets.
    async fn persist(&self, records: Vec<GroupRecord>) -> Result<(), CoordinatorError> {
        if records.is_empty() {
            return Ok(());
        }
        let first = self
            .writer
            .append_encoded(records.iter().map(GroupRecord::encode).collect())
            .await?;
        let mut state = self.state();
        for (i, record) in records.into_iter().enumerate() {
            state.apply(with_record_offset(record, first + i as i64));
        }
        Ok(())
    }
}

/// An offset record's value carries where it lies in the log.
fn with_record_offset(record: GroupRecord, at: i64) -> GroupRecord {
    match record {
        GroupRecord::Offset {
            group_id,
            tp,
            mut value,
        } => {
            value.record_offset = at;
            GroupRecord::Offset {
                group_id,
                tp,
                value,
            }
        }
        other => other,
    }
}

enum Slot {
    Loading { coordinator_epoch: i32 },
    Ready(Arc<GroupSlice>),
}

impl ClaimSlot for Slot {
    fn coordinator_epoch(&self) -> i32 {
        match self {
            Slot::Loading { coordinator_epoch } => *coordinator_epoch,
            Slot::Ready(slice) => slice.coordinator_epoch,
        }
    }
}

/// One partition's answer of a commit.
pub type PartitionResult = (TopicPartition, Result<(), Refusal>);

/// A partition's offset as OffsetFetch answers it.
pub type FetchedOffset = (TopicPartition, Result<Option<OffsetAndMetadata>, Refusal>);

/// One offset to commit.
#[derive(Debug, Clone)]
pub struct OffsetToCommit {
    pub tp: TopicPartition,
    pub offset: i64,
    pub leader_epoch: Option<i32>,
    pub metadata: String,
}

pub struct Groups {
    settings: GroupSettings,
    conn: Connection,
    ownership: Arc<dyn Ownership>,
    /// `__consumer_offsets`'s partition count (the transaction log's); 0 until known.
    partition_count: AtomicI32,
    slots: RwLock<HashMap<i32, Slot>>,
}

impl Groups {
    pub fn new(
        settings: GroupSettings,
        conn: Connection,
        ownership: Arc<dyn Ownership>,
    ) -> Arc<Self> {
        Arc::new(Groups {
            settings,
            conn,
            ownership,
            partition_count: AtomicI32::new(0),
            slots: RwLock::new(HashMap::new()),
        })
    }

    pub fn settings(&self) -> GroupSettings {
        self.settings
    }

    /// Groups are served once `__consumer_offsets` has the transaction log's count.
    pub fn set_partition_count(&self, partitions: i32) {
        self.partition_count.store(partitions, Ordering::SeqCst);
    }

    // ---- ownership ------------------------------------------------------------------

    /// A new claim of a slice: its `__consumer_offsets` partition loads, then serves
    /// until the claim is lost.
    pub fn on_claim(self: &Arc<Self>, claim: Claim) {
        if let Ok(mut slots) = self.slots.write() {
            slots.insert(
                claim.partition,
                Slot::Loading {
                    coordinator_epoch: claim.coordinator_epoch,
                },
            );
        }
        tokio::spawn(self.clone().load(claim));
    }

    fn remove_slot(&self, partition: i32, coordinator_epoch: i32) {
        if remove_claim(&self.slots, partition, coordinator_epoch) {
            tracing::warn!(
                partition,
                coordinator_epoch,
                "stopped serving the groups of a {OFFSETS_TOPIC} partition"
            );
        }
    }

    /// Stops serving a claim a broker fenced and gives it back (the transaction core
    /// sees the same token lost).
    fn lose(&self, partition: i32, coordinator_epoch: i32, token: &OwnershipToken) {
        self.remove_slot(partition, coordinator_epoch);
        give_back(&self.ownership, partition, coordinator_epoch, token);
    }

    async fn load(self: Arc<Self>, claim: Claim) {
        let Some(writer) = claim_writer(&self.conn, OFFSETS_TOPIC, &claim) else {
            self.remove_slot(claim.partition, claim.coordinator_epoch);
            return;
        };
        let loaded = load_while_owned(&claim, OFFSETS_TOPIC, || {
            load::load(
                &self.conn,
                &writer,
                claim.partition,
                claim.coordinator_epoch,
                &claim.token,
            )
        })
        .await;
        let Claim {
            partition,
            coordinator_epoch,
            token,
            ..
        } = claim;
        let mut loaded = match loaded {
            Ok(loaded) => loaded,
            Err(CoordinatorError::OwnershipLost { reason, .. }) => {
                tracing::warn!(partition, coordinator_epoch, %reason, "claim lost while loading {OFFSETS_TOPIC}");
                self.lose(partition, coordinator_epoch, &token);
                return;
            }
            Err(e) => {
                // Serving without a record could forget a member's partitions or an
                // offset: the slice's groups stay unavailable.
                tracing::error!(partition, coordinator_epoch, error = %e, "the {OFFSETS_TOPIC} partition cannot be loaded; its groups stay unavailable");
                return;
            }
        };
        let loaded_at_ms = now_ms();
        for group in loaded.state.groups.values_mut() {
            expiry::empty_since_load(group, loaded_at_ms);
        }
        let now = Instant::now();
        let mut sessions = Sessions::new(self.settings.session_timeout);
        // Every member starts a fresh session with the new owner.
        for (group_id, group) in &loaded.state.groups {
            sessions.sync(group_id, Some(group), None, now);
        }
        let (tail, _) = watch::channel(loaded.fence_offset);
        let slice = Arc::new(GroupSlice {
            index: partition,
            coordinator_epoch,
            token: token.clone(),
            writer,
            state: Mutex::new(loaded.state),
            sessions: Mutex::new(sessions),
            locks: Mutex::new(HashMap::new()),
            txn_writes: tokio::sync::Mutex::new(()),
            tail,
        });
        let installed = self.slots.write().is_ok_and(|mut slots| {
            let current = matches!(
                slots.get(&partition),
                Some(Slot::Loading { coordinator_epoch: e }) if *e == coordinator_epoch
            );
            if current && !token.is_lost() {
                slots.insert(partition, Slot::Ready(slice.clone()));
            }
            current
        });
        if !installed {
            return;
        }
        tracing::info!(
            partition,
            coordinator_epoch,
            "serving the groups of the {OFFSETS_TOPIC} partition"
        );
        tokio::select! {
            () = token.lost() => {}
            () = self.tail(&slice) => {}
        }
        self.remove_slot(partition, coordinator_epoch);
    }

    /// Reads the partition on from the fence for as long as the claim holds, applying
    /// every COMMIT/ABORT marker to the offsets pending for its producer.
    async fn tail(&self, slice: &GroupSlice) {
        let partition = slice.index;
        loop {
            let from = *slice.tail.borrow();
            let read = retry::while_owned(
                &slice.token,
                Duration::from_secs(1),
                || async {
                    if slice.token.is_lost() {
                        return Err(retry::Failed::Stop(CoordinatorError::ownership_lost(
                            partition,
                            "claim lost",
                        )));
                    }
                    match load::read_once(&self.conn, partition, from, TAIL_WAIT_MS).await {
                        Ok(read) => Ok(read),
                        Err(ReadFailure::OutOfRange) => {
                            let start = load::log_start(&self.conn, partition, &slice.token)
                                .await
                                .map_err(retry::Failed::Stop)?;
                            Ok((bytes::Bytes::new(), start.max(from)))
                        }
                        Err(ReadFailure::Retry(reason)) => {
                            self.conn.request_refresh();
                            Err(retry::Failed::Again(reason))
                        }
                    }
                },
                |reason| tracing::debug!(partition, offset = from, %reason, "{OFFSETS_TOPIC} tail read will retry"),
            )
            .await;
            let Ok((bytes, next_fetch_offset)) = read else {
                return;
            };
            let replayed = {
                let mut state = slice.state();
                replay(&mut state, partition, &bytes, from, Replay::MarkersOnly)
            };
            match replayed {
                Ok(done) => {
                    let next = done.next_offset.max(next_fetch_offset).max(from);
                    slice.tail.send_replace(next);
                }
                Err(e) => {
                    tracing::error!(partition, error = %e, "a batch of {OFFSETS_TOPIC} does not decode; the tail stops");
                    return;
                }
            }
        }
    }

    /// Whether every slice claimed for groups is loaded.
    pub fn serves_every_claimed_slice(&self) -> bool {
        self.slots
            .read()
            .is_ok_and(|slots| slots.values().all(|s| matches!(s, Slot::Ready(_))))
    }

    /// Gives every slice up (clean shutdown; the ownership backend is left by the core).
    pub fn leave(&self) {
        if let Ok(mut slots) = self.slots.write() {
            slots.clear();
        }
    }

    // ---- requests -------------------------------------------------------------------

    /// The `__consumer_offsets` partition of `group_id`.
    pub fn partition_of(&self, group_id: &str) -> Result<i32, Refusal> {
        check_group_id(group_id)?;
        let partitions = self.partition_count.load(Ordering::SeqCst);
        if partitions <= 0 {
            return Err(Refusal::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("{OFFSETS_TOPIC} is not known yet"),
            ));
        }
        Ok(txn_log_partition(group_id, partitions))
    }

    fn serving(&self, group_id: &str) -> Result<Arc<GroupSlice>, Refusal> {
        let partition = self.partition_of(group_id)?;
        if !self.ownership.holds_lease() {
            return Err(Refusal::new(
                ErrorCode::NotCoordinator,
                "this coordinator's lease may have lapsed",
            ));
        }
        let slots = self
            .slots
            .read()
            .map_err(|_| Refusal::new(ErrorCode::UnknownServerError, "state poisoned"))?;
        match slots.get(&partition) {
            None => Err(Refusal::new(
                ErrorCode::NotCoordinator,
                format!("{OFFSETS_TOPIC} partition {partition} is not owned here"),
            )),
            Some(Slot::Loading { .. }) => Err(Refusal::new(
                ErrorCode::CoordinatorLoadInProgress,
                format!("{OFFSETS_TOPIC} partition {partition} is loading"),
            )),
            Some(Slot::Ready(slice)) if slice.token.is_lost() => Err(Refusal::new(
                ErrorCode::NotCoordinator,
                format!("{OFFSETS_TOPIC} partition {partition} is no longer owned here"),
            )),
            Some(Slot::Ready(slice)) => Ok(slice.clone()),
        }
    }

    fn ready_slices(&self) -> Vec<Arc<GroupSlice>> {
        let Ok(slots) = self.slots.read() else {
            return Vec::new();
        };
        let mut slices: Vec<Arc<GroupSlice>> = slots
            .values()
            .filter_map(|s| match s {
                Slot::Ready(slice) if !slice.token.is_lost() => Some(slice.clone()),
                _ => None,
            })
            .collect();
        slices.sort_by_key(|s| s.index);
        slices
    }

    /// The answer for a failed append; a fenced claim is dropped.
    fn refuse(&self, slice: &GroupSlice, error: CoordinatorError) -> Refusal {
        match error {
            CoordinatorError::OwnershipLost { reason, .. } => {
                tracing::warn!(partition = slice.index, coordinator_epoch = slice.coordinator_epoch, %reason, "ownership lost");
                self.lose(slice.index, slice.coordinator_epoch, &slice.token);
                Refusal::new(ErrorCode::NotCoordinator, reason)
            }
            CoordinatorError::Refused { code, message, .. } => Refusal::new(code, message),
            other => Refusal::new(ErrorCode::CoordinatorNotAvailable, other.to_string()),
        }
    }

    /// The partition counts of `topics` (`None`: no such topic). A count the brokers
    /// cannot tell now is the one the group last saw, so nothing moves for a passing
    /// failure.
    async fn topic_sizes(
        &self,
        topics: impl IntoIterator<Item = String>,
        known: &BTreeMap<String, i32>,
    ) -> BTreeMap<String, Option<i32>> {
        let mut sizes = BTreeMap::new();
        for topic in topics {
            let size = match self.conn.partition_count(&topic).await {
                Ok(n) => Some(n),
                Err(ClientError::UnknownTopic { .. }) => None,
                Err(e) => {
                    tracing::debug!(%topic, error = %e, "partition count unknown; keeping the last one seen");
                    known.get(&topic).copied()
                }
            };
            sizes.insert(topic, size);
        }
        sizes
    }

    /// ConsumerGroupHeartbeat; `server_assignor` as the request names it.
    pub async fn heartbeat(
        &self,
        group_id: &str,
        request: Heartbeat,
        server_assignor: Option<&str>,
    ) -> Result<Answer, Refusal> {
        let more_topics: BTreeSet<String> = request.subscribed.iter().flatten().cloned().collect();
        // A member that joined, heartbeated or left statically starts a full session
        // again; one refused or leaving for good does not.
        let renewed = |answer: &Answer| {
            (answer.member_epoch >= 0 || answer.member_epoch == membership::STATIC_LEAVE_EPOCH)
                .then_some(request.member_id.as_str())
        };
        self.decide(group_id, &more_topics, renewed, |group, sizes| {
            membership::heartbeat_naming_assignor(group, &request, server_assignor, sizes)
                .map_err(heartbeat_refusal)
        })
        .await
    }

    /// One decision on `group_id` under its lock: the decider sees the group and its
    /// subscribed topics' sizes (and `more_topics`'); a changed group is persisted
    /// before the answer; the member `renew` names from the answer (one that spoke)
    /// starts a full session again.
    async fn decide<'m, T>(
        &self,
        group_id: &str,
        more_topics: &BTreeSet<String>,
        renew: impl FnOnce(&T) -> Option<&'m str>,
        decider: impl FnOnce(&Group, TopicSizes<'_>) -> Result<(Group, T), Refusal>,
    ) -> Result<T, Refusal> {
        let slice = self.serving(group_id)?;
        let lock = slice.lock_for(group_id);
        let _guard = lock.lock().await;
        let group = slice.group(group_id).unwrap_or_default();
        let topics: BTreeSet<String> = group
            .members
            .values()
            .flat_map(|m| m.subscribed.iter().cloned())
            .chain(more_topics.iter().cloned())
            .collect();
        let sizes = self.topic_sizes(topics, &group.partition_counts).await;
        let size_of = |t: &str| sizes.get(t).copied().flatten();
        let (next, answer) = decider(&group, &size_of)?;
        let next = expiry::note_emptiness(&group, next, now_ms());
        if next != group {
            slice
                .persist(vec![GroupRecord::Group {
                    group_id: group_id.to_string(),
                    group: next.clone(),
                }])
                .await
                .map_err(|e| self.refuse(&slice, e))?;
        }
        slice
            .sessions()
            .sync(group_id, Some(&next), renew(&answer), Instant::now());
        Ok(answer)
    }

    /// Kafka's JoinGroup for a classic member ([`classic::join`]).
    pub async fn classic_join(
        &self,
        group_id: &str,
        join: classic::Join,
    ) -> Result<classic::Joined, Refusal> {
        let member_id = join.member_id.clone();
        self.decide(
            group_id,
            &join.subscribed,
            |_| Some(member_id.as_str()),
            |group, sizes| classic::join(group, &join, sizes).map_err(classic_refusal),
        )
        .await
    }

    /// Kafka's SyncGroup for a classic member ([`classic::sync`]): changes nothing but
    /// the member's session.
    pub async fn classic_sync(
        &self,
        group_id: &str,
        sender: classic::Sender<'_>,
        generation: i32,
        protocol: (Option<&str>, Option<&str>),
    ) -> Result<classic::Joined, Refusal> {
        self.decide(
            group_id,
            &BTreeSet::new(),
            |_| Some(sender.member_id),
            |group, _| {
                classic::sync(group, sender, generation, protocol.0, protocol.1)
                    .map(|synced| (group.clone(), synced))
                    .map_err(classic_refusal)
            },
        )
        .await
    }

    /// Kafka's Heartbeat for a classic member ([`classic::heartbeat`]).
    pub async fn classic_heartbeat(
        &self,
        group_id: &str,
        sender: classic::Sender<'_>,
        generation: i32,
    ) -> Result<classic::Beat, Refusal> {
        self.decide(
            group_id,
            &BTreeSet::new(),
            |_| Some(sender.member_id),
            |group, sizes| {
                classic::heartbeat(group, sender, generation, sizes).map_err(classic_refusal)
            },
        )
        .await
    }

    /// Kafka's LeaveGroup of classic members ([`classic::leave`]).
    pub async fn classic_leave(
        &self,
        group_id: &str,
        leaving: &[classic::Leaving],
    ) -> Result<Vec<(String, Result<(), Refusal>)>, Refusal> {
        self.decide(
            group_id,
            &BTreeSet::new(),
            |_| None,
            |group, sizes| {
                let (next, results) = classic::leave(group, leaving, sizes);
                let results = results
                    .into_iter()
                    .map(|(id, r)| (id, r.map_err(classic_refusal)))
                    .collect();
                Ok((next, results))
            },
        )
        .await
    }

    /// OffsetCommit: the accepted partitions are appended in one batch; refused ones
    /// get their code and nothing is written for them.
    pub async fn commit(
        &self,
        group_id: &str,
        committer: Committer,
        offsets: Vec<OffsetToCommit>,
    ) -> Result<Vec<PartitionResult>, Refusal> {
        let slice = self.serving(group_id)?;
        let lock = slice.lock_for(group_id);
        let _guard = lock.lock().await;
        let (accepted, mut results) = self
            .check_offsets(&slice, group_id, &committer, &offsets)
            .await;
        let records: Vec<GroupRecord> = accepted
            .iter()
            .map(|o| offset_record(group_id, o))
            .collect();
        let written = slice.persist(records).await;
        if let Err(e) = written {
            return Err(self.refuse(&slice, e));
        }
        results.extend(accepted.into_iter().map(|o| (o.tp, Ok(()))));
        Ok(results)
    }

    async fn check_offsets(
        &self,
        slice: &GroupSlice,
        group_id: &str,
        committer: &Committer,
        offsets: &[OffsetToCommit],
    ) -> (Vec<OffsetToCommit>, Vec<PartitionResult>) {
        let group = slice.group(group_id).unwrap_or_default();
        let topics: BTreeSet<String> = offsets.iter().map(|o| o.tp.topic.clone()).collect();
        let sizes = self.topic_sizes(topics, &group.partition_counts).await;
        let size_of = |t: &str| sizes.get(t).copied().flatten();
        let mut accepted = Vec::new();
        let mut refused = Vec::new();
        for o in offsets {
            match check_commit(&group, committer, &o.tp, o.offset, &o.metadata, &size_of) {
                Ok(()) => accepted.push(o.clone()),
                Err(refusal) => refused.push((o.tp.clone(), Err(commit_refusal(refusal)))),
            }
        }
        (accepted, refused)
    }

    /// TxnOffsetCommit: the accepted offsets go into the producer's transaction as one
    /// transactional batch (see [`txn_offsets`]) and are pending until its marker.
    pub async fn txn_commit(
        &self,
        group_id: &str,
        producer: TxnProducer,
        committer: Committer,
        offsets: Vec<OffsetToCommit>,
    ) -> Result<Vec<PartitionResult>, Refusal> {
        let slice = self.serving(group_id)?;
        let lock = slice.lock_for(group_id);
        let _guard = lock.lock().await;
        let (accepted, mut results) = self
            .check_offsets(&slice, group_id, &committer, &offsets)
            .await;
        if accepted.is_empty() {
            return Ok(results);
        }
        let _writes = slice.txn_writes.lock().await;
        // Every marker written before this request (the producer's previous outcome
        // here) must be applied first: it decides the pending offsets and the
        // sequence of the batch.
        self.catch_up(&slice).await?;
        let records: Vec<GroupRecord> = accepted
            .iter()
            .map(|o| offset_record(group_id, o))
            .collect();
        let sequence = slice
            .state()
            .next_sequence(producer.producer_id, producer.producer_epoch);
        let bytes = txn_offsets::encode(producer, sequence, &records);
        slice.state().begin_txn_write(producer.producer_id);
        let appended = txn_offsets::append(
            &self.conn,
            slice.index,
            slice.coordinator_epoch,
            &slice.token,
            bytes,
        )
        .await;
        let first = match appended {
            Ok(first) => first,
            Err(e) => {
                slice.state().abandon_txn_write();
                return Err(self.refuse(&slice, e));
            }
        };
        let count = records.len() as i32;
        let records = records
            .into_iter()
            .enumerate()
            .map(|(i, record)| with_record_offset(record, first + i as i64))
            .collect();
        slice.state().finish_txn_write(
            producer.producer_id,
            producer.producer_epoch,
            first,
            idem_proto::batch::sequence_add(sequence, count - 1),
            records,
        );
        results.extend(accepted.into_iter().map(|o| (o.tp, Ok(()))));
        Ok(results)
    }

    /// Waits until the tail has read the partition up to its high watermark now.
    async fn catch_up(&self, slice: &GroupSlice) -> Result<(), Refusal> {
        let high_watermark = load::high_watermark(&self.conn, slice.index)
            .await
            .map_err(|e| Refusal::new(ErrorCode::CoordinatorNotAvailable, e.to_string()))?;
        let mut tail = slice.tail.subscribe();
        let reached =
            tokio::time::timeout(TAIL_CATCH_UP, tail.wait_for(|at| *at >= high_watermark)).await;
        match reached {
            Ok(Ok(_)) => Ok(()),
            _ => Err(Refusal::new(
                ErrorCode::CoordinatorNotAvailable,
                format!(
                    "{OFFSETS_TOPIC} partition {} is not read up to offset {high_watermark} yet",
                    slice.index
                ),
            )),
        }
    }

    /// OffsetFetch: `partitions` `None` asks for every committed offset of the group.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<Vec<TopicPartition>>,
        require_stable: bool,
    ) -> Result<Vec<FetchedOffset>, Refusal> {
        let slice = self.serving(group_id)?;
        let state = slice.state();
        let offsets = state.offsets.get(group_id);
        let wanted = partitions.unwrap_or_else(|| {
            offsets
                .map(|o| o.committed().keys().cloned().collect())
                .unwrap_or_default()
        });
        Ok(wanted
            .into_iter()
            .map(|tp| {
                let answer = match offsets.map(|o| o.fetch(&tp, require_stable)) {
                    None => Ok(None),
                    Some(Ok(found)) => Ok(found.cloned()),
                    Some(Err(unstable)) => Err(Refusal::new(
                        ErrorCode::UnstableOffsetCommit,
                        format!(
                            "an open transaction holds offsets of {}-{} (producer ids {:?})",
                            tp.topic, tp.partition, unstable.producer_ids
                        ),
                    )),
                };
                (tp, answer)
            })
            .collect())
    }

    /// The group as its owner holds it.
    pub fn describe(&self, group_id: &str) -> Result<Group, Refusal> {
        let slice = self.serving(group_id)?;
        let state = slice.state();
        match state.groups.get(group_id) {
            Some(group) => Ok(group.clone()),
            None if state.offsets.contains_key(group_id) => Ok(Group::default()),
            None => Err(Refusal::new(
                ErrorCode::GroupIdNotFound,
                format!("no group {group_id:?}"),
            )),
        }
    }

    /// How many groups the loaded slices hold (a group with only offsets counts), as
    /// [`Self::list`] would list them, without copying any.
    pub fn count(&self) -> usize {
        if !self.ownership.holds_lease() {
            return 0;
        }
        self.ready_slices()
            .iter()
            .map(|slice| {
                let state = slice.state();
                let mut ids: std::collections::BTreeSet<&String> = state.offsets.keys().collect();
                ids.extend(state.groups.keys());
                ids.len()
            })
            .sum()
    }

    /// Every committed offset of the groups the loaded slices hold (not those pending
    /// in transactions): what the lag gauge is measured from.
    pub fn committed_offsets(&self) -> Vec<lag::Committed> {
        if !self.ownership.holds_lease() {
            return Vec::new();
        }
        let mut all = Vec::new();
        for slice in self.ready_slices() {
            let state = slice.state();
            for (group_id, offsets) in &state.offsets {
                all.extend(
                    offsets
                        .committed()
                        .iter()
                        .map(|(tp, value)| lag::Committed {
                            group_id: group_id.clone(),
                            tp: tp.clone(),
                            offset: value.offset,
                        }),
                );
            }
        }
        all
    }

    /// Every group of the slices this coordinator serves (those with only offsets as
    /// empty groups), and the slices it was read from (by partition).
    pub fn list_slices(&self) -> (BTreeMap<String, Group>, Vec<i32>) {
        if !self.ownership.holds_lease() {
            return (BTreeMap::new(), Vec::new());
        }
        let mut all = BTreeMap::new();
        let slices = self.ready_slices();
        let partitions = slices.iter().map(|s| s.index).collect();
        for slice in slices {
            let state = slice.state();
            for id in state.offsets.keys() {
                all.insert(id.clone(), Group::default());
            }
            for (id, group) in &state.groups {
                all.insert(id.clone(), group.clone());
            }
        }
        (all, partitions)
    }

    /// DeleteGroups for one group: an empty group and its offsets are tombstoned.
    pub async fn delete(&self, group_id: &str) -> Result<(), Refusal> {
        let slice = self.serving(group_id)?;
        let lock = slice.lock_for(group_id);
        let _guard = lock.lock().await;
        let records = {
            let state = slice.state();
            if !state.knows(group_id) {
                return Err(Refusal::new(
                    ErrorCode::GroupIdNotFound,
                    format!("no group {group_id:?}"),
                ));
            }
            if let Some(group) = state.groups.get(group_id).filter(|g| !g.members.is_empty()) {
                return Err(Refusal::new(
                    ErrorCode::NonEmptyGroup,
                    format!("group {group_id:?} has {} members", group.members.len()),
                ));
            }
            let offsets = state.offsets.get(group_id);
            if offsets.is_some_and(|o| o.has_pending()) {
                return Err(Refusal::new(
                    ErrorCode::NonEmptyGroup,
                    format!("an open transaction holds offsets of group {group_id:?}"),
                ));
            }
            let mut records = vec![GroupRecord::GroupRemoved {
                group_id: group_id.to_string(),
            }];
            records.extend(offsets.into_iter().flat_map(|o| {
                o.committed().keys().map(|tp| GroupRecord::OffsetRemoved {
                    group_id: group_id.to_string(),
                    tp: tp.clone(),
                })
            }));
            records
        };
        slice
            .persist(records)
            .await
            .map_err(|e| self.refuse(&slice, e))?;
        slice.sessions().sync(group_id, None, None, Instant::now());
        Ok(())
    }

    /// OffsetDelete for one group (`offset_delete::decide`): the committed offsets of
    /// topics no member subscribes to are tombstoned; each asked partition's code.
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        asked: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, ErrorCode)>, Refusal> {
        let slice = self.serving(group_id)?;
        let lock = slice.lock_for(group_id);
        let _guard = lock.lock().await;
        let deletion = {
            let state = slice.state();
            if !state.knows(group_id) {
                return Err(Refusal::new(
                    ErrorCode::GroupIdNotFound,
                    format!("no group {group_id:?}"),
                ));
            }
            offset_delete::decide(
                state.groups.get(group_id),
                state.offsets.get(group_id),
                asked,
            )
        };
        let records: Vec<GroupRecord> = deletion
            .removed
            .into_iter()
            .map(|tp| GroupRecord::OffsetRemoved {
                group_id: group_id.to_string(),
                tp,
            })
            .collect();
        if !records.is_empty() {
            slice
                .persist(records)
                .await
                .map_err(|e| self.refuse(&slice, e))?;
        }
        Ok(deletion.results)
    }

    /// Removes every member whose session ended (persisted like a leave).
    pub async fn expire_sessions(&self) {
        for slice in self.ready_slices() {
            let due = slice.sessions().expired(Instant::now());
            for member in due {
                if let Err(refusal) = self.expire(&slice, &member).await {
                    tracing::warn!(group_id = %member.0, member_id = %member.1, code = ?refusal.code, message = %refusal.message, "removing an expired member failed");
                }
            }
        }
    }

    async fn expire(&self, slice: &GroupSlice, member: &MemberKey) -> Result<(), Refusal> {
        let (group_id, member_id) = member;
        let lock = slice.lock_for(group_id);
        let _guard = lock.lock().await;
        // It may have heartbeated, or left, since it was listed.
        if !slice.sessions().is_expired(member, Instant::now()) {
            return Ok(());
        }
        let Some(group) = slice
            .group(group_id)
            .filter(|g| g.members.contains_key(member_id))
        else {
            slice.sessions().forget(member);
            return Ok(());
        };
        let topics: BTreeSet<String> = group
            .members
            .values()
            .flat_map(|m| m.subscribed.iter().cloned())
            .collect();
        let sizes = self.topic_sizes(topics, &group.partition_counts).await;
        let size_of = |t: &str| sizes.get(t).copied().flatten();
        let next = expiry::note_emptiness(
            &group,
            membership::remove_member(&group, member_id, &size_of),
            now_ms(),
        );
        tracing::info!(partition = slice.index, %group_id, %member_id, group_epoch = next.group_epoch, "member's session expired; removing it");
        slice
            .persist(vec![GroupRecord::Group {
                group_id: group_id.clone(),
                group: next.clone(),
            }])
            .await
            .map_err(|e| self.refuse(slice, e))?;
        slice
            .sessions()
            .sync(group_id, Some(&next), None, Instant::now());
        Ok(())
    }

    /// Tombstones the expired offsets of every empty group of every loaded slice, and
    /// the groups left with nothing; each group's tombstones are one batch, persisted
    /// before they are applied. A slice whose claim is lost stops at once.
    pub async fn expire_offsets(&self) {
        // Another coordinator may own the slices by now; its broker would fence the
        // writes anyway, but there is no point trying.
        if !self.ownership.holds_lease() {
            return;
        }
        let retention_ms =
            i64::try_from(self.settings.offsets_retention.as_millis()).unwrap_or(i64::MAX);
        for slice in self.ready_slices() {
            // A first look without the groups' locks; each is decided again under its lock.
            let candidates: Vec<String> = {
                let state = slice.state();
                let now = now_ms();
                state
                    .groups
                    .keys()
                    .chain(state.offsets.keys())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .filter(|id| !expired_in(&state, id, retention_ms, now).is_empty())
                    .cloned()
                    .collect()
            };
            for group_id in candidates {
                if slice.token.is_lost() {
                    break;
                }
                if let Err(refusal) = self.expire_group(&slice, &group_id, retention_ms).await {
                    tracing::warn!(partition = slice.index, %group_id, code = ?refusal.code, message = %refusal.message, "expiring a group's offsets failed; the next check tries again");
                    if refusal.code == ErrorCode::NotCoordinator {
                        break;
                    }
                }
            }
        }
    }

    async fn expire_group(
        &self,
        slice: &GroupSlice,
        group_id: &str,
        retention_ms: i64,
    ) -> Result<(), Refusal> {
        let lock = slice.lock_for(group_id);
        let _guard = lock.lock().await;
        // A member may have joined, or an offset been committed, since the first look.
        let expired = expired_in(&slice.state(), group_id, retention_ms, now_ms());
        if expired.is_empty() {
            return Ok(());
        }
        slice
            .persist(expired.records(group_id))
            .await
            .map_err(|e| self.refuse(slice, e))?;
        tracing::info!(
            partition = slice.index,
            %group_id,
            offsets = expired.offsets.len(),
            group_removed = expired.remove_group,
            "offsets of an empty group expired"
        );
        if expired.remove_group {
            slice.sessions().sync(group_id, None, None, Instant::now());
        }
        Ok(())
    }
}

fn expired_in(state: &SliceState, group_id: &str, retention_ms: i64, now_ms: i64) -> Expired {
    expiry::expired(
        state.groups.get(group_id),
        state.offsets.get(group_id),
        retention_ms,
        now_ms,
    )
}

fn offset_record(group_id: &str, o: &OffsetToCommit) -> GroupRecord {
    GroupRecord::Offset {
        group_id: group_id.to_string(),
        tp: o.tp.clone(),
        value: OffsetAndMetadata {
            offset: o.offset,
            leader_epoch: o.leader_epoch,
            metadata: o.metadata.clone(),
            commit_ms: now_ms(),
            // Set from where the append lands.
            record_offset: -1,
        },
    }
}

/// INVALID_GROUP_ID for an empty group id or one longer than 249 bytes.
pub fn check_group_id(group_id: &str) -> Result<(), Refusal> {
    if group_id.is_empty() {
        return Err(Refusal::new(
            ErrorCode::InvalidGroupId,
            "the group id is empty",
        ));
    }
    if group_id.len() > MAX_GROUP_ID_BYTES {
        return Err(Refusal::new(
            ErrorCode::InvalidGroupId,
            format!(
                "the group id is {} bytes; at most {MAX_GROUP_ID_BYTES}",
                group_id.len()
            ),
        ));
    }
    Ok(())
}

/// The wire code of a refused heartbeat, with the decider's message.
pub fn heartbeat_refusal(error: HeartbeatError) -> Refusal {
    let code = match &error {
        HeartbeatError::UnknownMemberId { .. } => ErrorCode::UnknownMemberId,
        HeartbeatError::FencedMemberEpoch { .. } => ErrorCode::FencedMemberEpoch,
        HeartbeatError::UnreleasedInstanceId { .. } => ErrorCode::UnreleasedInstanceId,
        HeartbeatError::FencedInstanceId { .. } => ErrorCode::FencedInstanceId,
        HeartbeatError::UnsupportedAssignor { .. } => ErrorCode::UnsupportedAssignor,
        HeartbeatError::InvalidRequest(_) => ErrorCode::InvalidRequest,
    };
    Refusal::new(code, error.to_string())
}

/// The wire code of a refused classic request, with the decider's message.
pub fn classic_refusal(error: ClassicError) -> Refusal {
    let code = match &error {
        ClassicError::UnknownMemberId { .. } => ErrorCode::UnknownMemberId,
        ClassicError::IllegalGeneration { .. } => ErrorCode::IllegalGeneration,
        ClassicError::InconsistentGroupProtocol(_) => ErrorCode::InconsistentGroupProtocol,
        ClassicError::InvalidSessionTimeout(_) => ErrorCode::InvalidSessionTimeout,
        ClassicError::RebalanceInProgress => ErrorCode::RebalanceInProgress,
        ClassicError::InvalidRequest(_) => ErrorCode::InvalidRequest,
        ClassicError::FencedInstanceId { .. } => ErrorCode::FencedInstanceId,
    };
    Refusal::new(code, error.to_string())
}

/// The wire code of a refused commit of one partition, with the decider's message.
pub fn commit_refusal(error: CommitRefusal) -> Refusal {
    let code = match &error {
        CommitRefusal::UnknownMemberId { .. } => ErrorCode::UnknownMemberId,
        // A partition the member does not hold is refused like a stale epoch: the
        // member heartbeats to learn what it holds (docs/groups.md).
        CommitRefusal::StaleMemberEpoch { .. } | CommitRefusal::NotOwned { .. } => {
            ErrorCode::StaleMemberEpoch
        }
        CommitRefusal::UnknownPartition { .. } => ErrorCode::UnknownTopicOrPartition,
        CommitRefusal::InvalidOffset { .. } | CommitRefusal::MetadataTooLarge { .. } => {
            ErrorCode::InvalidRequest
        }
    };
    Refusal::new(code, error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_ids_that_are_empty_or_longer_than_249_bytes_are_invalid() {
        assert_eq!(
            check_group_id("").expect_err("empty").code,
            ErrorCode::InvalidGroupId
        );
        assert_eq!(
            check_group_id(&"g".repeat(250)).expect_err("long").code,
            ErrorCode::InvalidGroupId
        );
        assert!(check_group_id(&"g".repeat(249)).is_ok());
    }

    #[test]
    fn the_heartbeat_interval_is_a_third_of_the_session_capped_at_five_seconds() {
        let of = |ms| {
            GroupSettings {
                coordinator_id: 0,
                session_timeout: Duration::from_millis(ms),
                offsets_retention: Duration::from_secs(1),
            }
            .heartbeat_interval_ms()
        };
        assert_eq!(of(45_000), 5_000);
        assert_eq!(of(3_000), 1_000);
        assert_eq!(of(1), 1);
    }

    #[test]
    fn decider_errors_map_to_their_wire_codes() {
        let code = |e| heartbeat_refusal(e).code;
        assert_eq!(
            code(HeartbeatError::UnknownMemberId {
                member_id: "m".into()
            }),
            ErrorCode::UnknownMemberId
        );
        assert_eq!(
            code(HeartbeatError::FencedMemberEpoch {
                member_id: "m".into(),
                sent: 1,
                current: 2
            }),
            ErrorCode::FencedMemberEpoch
        );
        assert_eq!(
            code(HeartbeatError::UnsupportedAssignor {
                name: "sticky".into()
            }),
            ErrorCode::UnsupportedAssignor
        );
        let refused = commit_refusal(CommitRefusal::NotOwned {
            member_id: "m".into(),
            topic: "t".into(),
            partition: 3,
        });
        assert_eq!(refused.code, ErrorCode::StaleMemberEpoch);
        assert!(refused.message.contains("t-3"), "{}", refused.message);
    }
}
