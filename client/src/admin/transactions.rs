//! Operators' view of transactions: what the coordinators hold (`list_transactions`,
//! `describe_transaction`), what the partition leaders hold open
//! (`list_open_transactions`), the two compared (`find_hanging`), and
//! `abort_transaction`. Listings ask every coordinator or broker the metadata names and
//! fail if one does not answer: a partial listing would make transactions look hanging
//! (or not) when they are not.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use idem_proto::v1 as proto;
use idem_proto::ErrorCode;
use tokio::time::Instant;

use super::Admin;
use crate::clock::now_ms;
use crate::connection::{with_timeout, Node};
use crate::coordinator::CoordinatorLink;
use crate::error::ClientError;

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A transactional id's state at its coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TransactionState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    PrepareEpochFence,
    Dead,
    /// A name this SDK does not know (a newer coordinator).
    Other(String),
}

impl TransactionState {
    /// The coordinator will still write markers for the transaction's partitions.
    pub fn is_open(&self) -> bool {
        matches!(
            self,
            TransactionState::Ongoing
                | TransactionState::PrepareCommit
                | TransactionState::PrepareAbort
        )
    }
}

impl FromStr for TransactionState {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "Empty" => TransactionState::Empty,
            "Ongoing" => TransactionState::Ongoing,
            "PrepareCommit" => TransactionState::PrepareCommit,
            "PrepareAbort" => TransactionState::PrepareAbort,
            "CompleteCommit" => TransactionState::CompleteCommit,
            "CompleteAbort" => TransactionState::CompleteAbort,
            "PrepareEpochFence" => TransactionState::PrepareEpochFence,
            "Dead" => TransactionState::Dead,
            other => TransactionState::Other(other.to_string()),
        })
    }
}

impl fmt::Display for TransactionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransactionState::Other(name) => f.write_str(name),
            known => write!(f, "{known:?}"),
        }
    }
}

/// One transactional id as its coordinator holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub state: TransactionState,
    pub timeout_ms: i32,
    /// The open (or ending) transaction's partitions, sorted.
    pub partitions: Vec<TopicPartition>,
    /// Coordinator clock (ms since the Unix epoch); `None` when no transaction is open.
    pub txn_start_ms: Option<i64>,
    pub last_update_ms: i64,
    pub coordinator_id: i32,
    pub txn_log_partition: i32,
    /// The previous transaction's outcome whose markers are still being written, when
    /// this (Ongoing) one began behind it.
    pub pending_end: Option<PendingEnd>,
}

/// A decided outcome whose markers are under way, at the description's epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEnd {
    pub commit: bool,
    /// Sorted.
    pub partitions: Vec<TopicPartition>,
}

impl fmt::Display for PendingEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.commit { "COMMIT" } else { "ABORT" })
    }
}

fn sorted_partitions(topics: Vec<proto::TxnTopicPartitions>) -> Vec<TopicPartition> {
    let mut partitions: Vec<TopicPartition> = topics
        .into_iter()
        .flat_map(|tp| {
            let topic = tp.topic;
            tp.partitions
                .into_iter()
                .map(move |partition| TopicPartition {
                    topic: topic.clone(),
                    partition,
                })
        })
        .collect();
    partitions.sort();
    partitions
}

impl From<proto::TransactionDescription> for TransactionDescription {
    fn from(t: proto::TransactionDescription) -> Self {
        let partitions = sorted_partitions(t.topics);
        let pending_end = match t.pending_end.as_str() {
            "COMMIT" | "ABORT" => Some(PendingEnd {
                commit: t.pending_end == "COMMIT",
                partitions: sorted_partitions(t.pending_end_topics),
            }),
            _ => None,
        };
        TransactionDescription {
            state: t.state.parse().unwrap_or(TransactionState::Other(t.state)),
            transactional_id: t.transactional_id,
            producer_id: t.producer_id,
            producer_epoch: t.producer_epoch,
            timeout_ms: t.timeout_ms,
            partitions,
            txn_start_ms: (t.txn_start_ms >= 0).then_some(t.txn_start_ms),
            last_update_ms: t.last_update_ms,
            coordinator_id: t.coordinator_id,
            txn_log_partition: t.txn_log_partition,
            pending_end,
        }
    }
}

/// A transaction open in a partition, as the partition's leader reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenTransaction {
    /// The broker that reported it (the partition's leader).
    pub broker_id: i32,
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i32,
    /// The BEGIN marker's offset: the partition's LSO cannot pass it.
    pub first_offset: i64,
    /// Broker clock (ms since the Unix epoch) when it last saw the producer.
    pub last_update_ms: i64,
}

/// Why an open transaction looks hanging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HangingReason {
    /// No coordinator lists the producer with this partition in an open transaction:
    /// no marker will ever close it.
    UnknownToCoordinator,
    /// A coordinator knows it, but it has been open longer than the limit asked for.
    OlderThan { age_ms: i64, max_age_ms: i64 },
}

impl fmt::Display for HangingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HangingReason::UnknownToCoordinator => f.write_str("no coordinator knows it"),
            HangingReason::OlderThan { age_ms, max_age_ms } => {
                write!(f, "open for {age_ms} ms (limit {max_age_ms} ms)")
            }
        }
    }
}

/// An open transaction at a broker that no coordinator is going to end (soon).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HangingTransaction {
    pub open: OpenTransaction,
    /// The coordinator's transactional id for the producer, when one lists it.
    pub transactional_id: Option<String>,
    pub reason: HangingReason,
}

/// The open transactions of `open` that `listing` does not account for, or that are
/// older than `max_age` at `now_ms` (pure). A partition's open transaction is accounted
/// for by a coordinator entry of the same producer id that lists the partition and is
/// Ongoing at the same epoch, or PrepareCommit/PrepareAbort (whose epoch is already the
/// next one, markers under way), or that lists it in the pending end of the transaction
/// begun behind it (one epoch up, markers under way too). Its age counts from the
/// coordinator's transaction start, or from the broker's last sight of the producer
/// when no coordinator has one or the coordinator's start is the next transaction's.
pub fn hanging_transactions(
    open: &[OpenTransaction],
    listing: &[TransactionDescription],
    now_ms: i64,
    max_age: Duration,
) -> Vec<HangingTransaction> {
    let max_age_ms = max_age.as_millis().min(i64::MAX as u128) as i64;
    let mut by_producer: HashMap<i64, Vec<&TransactionDescription>> = HashMap::new();
    for t in listing {
        by_producer.entry(t.producer_id).or_default().push(t);
    }
    let mut hanging = Vec::new();
    for o in open {
        let lists = |partitions: &[TopicPartition]| {
            partitions
                .iter()
                .any(|tp| tp.topic == o.topic && tp.partition == o.partition)
        };
        // The entry accounting for it, and whether through its pending end.
        let owner = by_producer.get(&o.producer_id).and_then(|entries| {
            entries.iter().copied().find_map(|t| {
                let epoch_fits = match t.state {
                    TransactionState::Ongoing => t.producer_epoch == o.producer_epoch,
                    TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                        t.producer_epoch == o.producer_epoch
                            || t.producer_epoch == o.producer_epoch + 1
                    }
                    _ => false,
                };
                if epoch_fits && lists(&t.partitions) {
                    return Some((t, false));
                }
                let in_pending_end = t.pending_end.as_ref().is_some_and(|end| {
                    t.producer_epoch == o.producer_epoch + 1 && lists(&end.partitions)
                });
                in_pending_end.then_some((t, true))
            })
        });
        let reason = match owner {
            None => Some(HangingReason::UnknownToCoordinator),
            Some((t, by_pending_end)) => {
                let since = match t.txn_start_ms {
                    Some(start) if !by_pending_end => start,
                    _ => o.last_update_ms,
                };
                let age_ms = now_ms.saturating_sub(since);
                (age_ms > max_age_ms).then_some(HangingReason::OlderThan { age_ms, max_age_ms })
            }
        };
        if let Some(reason) = reason {
            let transactional_id = by_producer
                .get(&o.producer_id)
                .and_then(|e| e.first())
                .map(|t| t.transactional_id.clone());
            hanging.push(HangingTransaction {
                open: o.clone(),
                transactional_id,
                reason,
            });
        }
    }
    hanging
}

/// Keeps the entry updated last when two coordinators list the same id (during a
/// handover); sorted by transactional id.
fn merge_listings(lists: Vec<Vec<TransactionDescription>>) -> Vec<TransactionDescription> {
    let mut merged: HashMap<String, TransactionDescription> = HashMap::new();
    for t in lists.into_iter().flatten() {
        match merged.get(&t.transactional_id) {
            Some(kept) if kept.last_update_ms >= t.last_update_ms => {}
            _ => {
                merged.insert(t.transactional_id.clone(), t);
            }
        }
    }
    let mut merged: Vec<_> = merged.into_values().collect();
    merged.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
    merged
}

/// One entry per (partition, producer, first offset) — two brokers that both believe
/// they lead report the same transaction — sorted by partition.
fn merge_open(lists: Vec<Vec<OpenTransaction>>) -> Vec<OpenTransaction> {
    let mut merged: Vec<OpenTransaction> = Vec::new();
    for o in lists.into_iter().flatten() {
        let seen = merged.iter().any(|m| {
            m.topic == o.topic
                && m.partition == o.partition
                && m.producer_id == o.producer_id
                && m.first_offset == o.first_offset
        });
        if !seen {
            merged.push(o);
        }
    }
    merged.sort_by(|a, b| {
        (&a.topic, a.partition, a.first_offset).cmp(&(&b.topic, b.partition, b.first_offset))
    });
    merged
}

impl Admin {
    pub(super) fn coordinators(&self) -> CoordinatorLink {
        CoordinatorLink::new(self.connection().clone())
    }

    pub(super) fn admin_deadline(&self) -> Instant {
        Instant::now() + self.connection().request_timeout()
    }

    /// Every transactional id every live coordinator holds, merged, sorted by id.
    pub async fn list_transactions(&self) -> Result<Vec<TransactionDescription>, ClientError> {
        let metadata = self.metadata(&[]).await?;
        let link = self.coordinators();
        let answers = futures::future::join_all(metadata.coordinators.iter().map(|c| {
            let link = &link;
            async move {
                link.list(&c.address)
                    .await
                    .map_err(|e| (c.coordinator_id, c.address.clone(), e))
            }
        }))
        .await;
        let mut lists = Vec::with_capacity(answers.len());
        for answer in answers {
            match answer {
                Ok(list) => lists.push(
                    list.transactions
                        .into_iter()
                        .map(TransactionDescription::from)
                        .collect(),
                ),
                Err((id, address, e)) => {
                    return Err(ClientError::Protocol(format!(
                        "coordinator {id} at {address} did not list its transactions: {e}"
                    )))
                }
            }
        }
        Ok(merge_listings(lists))
    }

    /// The transactional id as its coordinator (found through a broker) holds it;
    /// `TRANSACTIONAL_ID_NOT_FOUND` for an id never initialised.
    pub async fn describe_transaction(
        &self,
        transactional_id: &str,
    ) -> Result<TransactionDescription, ClientError> {
        let answer = self
            .coordinators()
            .describe(transactional_id, self.admin_deadline())
            .await?;
        answer
            .transaction
            .map(TransactionDescription::from)
            .ok_or_else(|| {
                ClientError::Protocol(format!(
                    "the coordinator described no transaction for {transactional_id:?}"
                ))
            })
    }

    /// Aborts the transactional id's open transaction under its next epoch (its
    /// producer is fenced), as a transaction timeout would. `INVALID_TXN_STATE` when no
    /// transaction is open — unless an earlier attempt went unanswered, which then is
    /// the one that aborted it.
    pub async fn abort_transaction(&self, transactional_id: &str) -> Result<(), ClientError> {
        let answer = self
            .coordinators()
            .abort(transactional_id, self.admin_deadline())
            .await;
        match answer.result {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some(ErrorCode::InvalidTxnState) && answer.lost_attempts > 0 => {
                tracing::info!(
                    transactional_id,
                    "no open transaction after an unanswered abort: that abort ended it"
                );
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Every transaction open in any partition, as each live broker reports those of
    /// the partitions it leads.
    pub async fn list_open_transactions(&self) -> Result<Vec<OpenTransaction>, ClientError> {
        let metadata = self.metadata(&[]).await?;
        let conn = self.connection();
        let nodes: Vec<(i32, Node)> = if metadata.brokers.is_empty() {
            vec![(-1, Node::Bootstrap)]
        } else {
            metadata
                .brokers
                .iter()
                .map(|b| (b.broker_id, Node::Broker(b.address.clone())))
                .collect()
        };
        let answers =
            futures::future::join_all(nodes.into_iter().map(|(broker_id, node)| async move {
                let result = match conn.client_for(&node) {
                    Ok(mut client) => {
                        with_timeout(
                            conn.request_timeout(),
                            client.list_open_transactions(proto::ListOpenTransactionsRequest {
                                topics: Vec::new(),
                            }),
                        )
                        .await
                    }
                    Err(e) => Err(e),
                };
                (broker_id, node, result)
            }))
            .await;
        let mut lists = Vec::new();
        for (broker_id, node, answer) in answers {
            let answer = answer.map_err(|e| {
                ClientError::Protocol(format!(
                    "broker {broker_id} ({node:?}) did not list its open transactions: {e}"
                ))
            })?;
            lists.push(
                answer
                    .transactions
                    .into_iter()
                    .map(|t| OpenTransaction {
                        broker_id,
                        topic: t.topic,
                        partition: t.partition,
                        producer_id: t.producer_id,
                        producer_epoch: t.producer_epoch,
                        first_offset: t.first_offset,
                        last_update_ms: t.last_update_ms,
                    })
                    .collect(),
            );
        }
        Ok(merge_open(lists))
    }

    /// Open transactions at the brokers that no coordinator is going to end, or that
    /// have been open longer than `max_age` (see [`hanging_transactions`]). The brokers
    /// are asked first and once more after the coordinators: a transaction that ended
    /// between the two listings is not reported.
    pub async fn find_hanging(
        &self,
        max_age: Duration,
    ) -> Result<Vec<HangingTransaction>, ClientError> {
        let open = self.list_open_transactions().await?;
        if open.is_empty() {
            return Ok(Vec::new());
        }
        let listing = self.list_transactions().await?;
        let candidates = hanging_transactions(&open, &listing, now_ms(), max_age);
        if candidates.is_empty() {
            return Ok(candidates);
        }
        let still_open = self.list_open_transactions().await?;
        Ok(candidates
            .into_iter()
            .filter(|h| {
                still_open.iter().any(|o| {
                    o.topic == h.open.topic
                        && o.partition == h.open.partition
                        && o.producer_id == h.open.producer_id
                        && o.first_offset == h.open.first_offset
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(topic: &str, partition: i32, producer_id: i64, epoch: i32) -> OpenTransaction {
        OpenTransaction {
            broker_id: 1,
            topic: topic.into(),
            partition,
            producer_id,
            producer_epoch: epoch,
            first_offset: 10,
            last_update_ms: 1_000,
        }
    }

    fn txn(
        id: &str,
        producer_id: i64,
        epoch: i32,
        state: TransactionState,
        partitions: &[(&str, i32)],
    ) -> TransactionDescription {
        TransactionDescription {
            transactional_id: id.into(),
            producer_id,
            producer_epoch: epoch,
            state,
            timeout_ms: 60_000,
            partitions: partitions
                .iter()
                .map(|(t, p)| TopicPartition {
                    topic: (*t).into(),
                    partition: *p,
                })
                .collect(),
            txn_start_ms: Some(5_000),
            last_update_ms: 5_000,
            coordinator_id: 1,
            txn_log_partition: 0,
            pending_end: None,
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn an_ongoing_transaction_with_the_partition_at_the_same_epoch_is_not_hanging() {
        let o = [open("orders", 0, 7, 3)];
        let l = [txn("a", 7, 3, TransactionState::Ongoing, &[("orders", 0)])];
        assert!(hanging_transactions(&o, &l, 6_000, HOUR).is_empty());
    }

    #[test]
    fn ending_transactions_are_accounted_for_at_their_next_epoch() {
        for state in [
            TransactionState::PrepareCommit,
            TransactionState::PrepareAbort,
        ] {
            let o = [open("orders", 0, 7, 3)];
            let l = [txn("a", 7, 4, state.clone(), &[("orders", 0)])];
            assert!(
                hanging_transactions(&o, &l, 6_000, HOUR).is_empty(),
                "{state}"
            );
        }
    }

    #[test]
    fn a_transaction_whose_markers_are_pending_behind_the_next_one_is_not_hanging() {
        let o = [open("orders", 0, 7, 3), open("orders", 1, 7, 3)];
        let mut next = txn("a", 7, 4, TransactionState::Ongoing, &[("audit", 0)]);
        next.pending_end = Some(PendingEnd {
            commit: true,
            partitions: vec![TopicPartition {
                topic: "orders".into(),
                partition: 0,
            }],
        });
        let hanging = hanging_transactions(&o, &[next.clone()], 6_000, HOUR);
        let which: Vec<i32> = hanging.iter().map(|h| h.open.partition).collect();
        assert_eq!(which, vec![1], "orders-1 is in neither transaction");
        // Its age counts from the broker's last sight of the producer (1,000 in
        // `open`), not from the next transaction's start.
        let limit = Duration::from_secs(10);
        let late = hanging_transactions(&o[..1], &[next.clone()], 11_001, limit);
        assert_eq!(
            late.first().map(|h| h.reason.clone()),
            Some(HangingReason::OlderThan {
                age_ms: 10_001,
                max_age_ms: 10_000
            })
        );
        // Pending at another epoch accounts for nothing.
        next.producer_epoch = 5;
        assert_eq!(hanging_transactions(&o[..1], &[next], 6_000, HOUR).len(), 1);
    }

    #[test]
    fn a_producer_the_coordinators_do_not_hold_open_with_that_partition_is_hanging() {
        let o = [
            open("orders", 0, 7, 3),
            open("orders", 1, 7, 3),
            open("orders", 2, 8, 0),
            open("orders", 3, 9, 2),
            open("orders", 4, 10, 1),
        ];
        let l = [
            txn("a", 7, 3, TransactionState::Ongoing, &[("orders", 0)]),
            txn("b", 9, 3, TransactionState::Ongoing, &[("orders", 3)]),
            txn(
                "c",
                10,
                2,
                TransactionState::CompleteCommit,
                &[("orders", 4)],
            ),
        ];
        let hanging = hanging_transactions(&o, &l, 6_000, HOUR);
        let which: Vec<(i32, Option<&str>)> = hanging
            .iter()
            .map(|h| (h.open.partition, h.transactional_id.as_deref()))
            .collect();
        // 1: not in a's partitions; 2: unknown producer; 3: older epoch than the
        // coordinator's; 4: the coordinator's transaction is complete.
        assert_eq!(
            which,
            vec![(1, Some("a")), (2, None), (3, Some("b")), (4, Some("c"))]
        );
        assert!(hanging
            .iter()
            .all(|h| h.reason == HangingReason::UnknownToCoordinator));
    }

    #[test]
    fn a_known_transaction_older_than_the_limit_is_hanging() {
        let o = [open("orders", 0, 7, 3)];
        let l = [txn("a", 7, 3, TransactionState::Ongoing, &[("orders", 0)])];
        let limit = Duration::from_secs(10);
        assert!(hanging_transactions(&o, &l, 15_000, limit).is_empty());
        let hanging = hanging_transactions(&o, &l, 15_001, limit);
        assert_eq!(
            hanging.first().map(|h| h.reason.clone()),
            Some(HangingReason::OlderThan {
                age_ms: 10_001,
                max_age_ms: 10_000
            })
        );
    }

    #[test]
    fn descriptions_convert_states_partitions_and_the_no_transaction_start() {
        let d = TransactionDescription::from(proto::TransactionDescription {
            transactional_id: "a".into(),
            producer_id: 7,
            producer_epoch: 2,
            state: "PrepareCommit".into(),
            timeout_ms: 1_000,
            topics: vec![
                proto::TxnTopicPartitions {
                    topic: "b".into(),
                    partitions: vec![1, 0],
                },
                proto::TxnTopicPartitions {
                    topic: "a".into(),
                    partitions: vec![3],
                },
            ],
            txn_start_ms: -1,
            last_update_ms: 9,
            coordinator_id: 2,
            txn_log_partition: 5,
            ..Default::default()
        });
        assert_eq!(d.state, TransactionState::PrepareCommit);
        assert_eq!(d.txn_start_ms, None);
        assert_eq!(d.pending_end, None);
        let behind = TransactionDescription::from(proto::TransactionDescription {
            state: "Ongoing".into(),
            pending_end: "ABORT".into(),
            pending_end_topics: vec![proto::TxnTopicPartitions {
                topic: "b".into(),
                partitions: vec![2, 0],
            }],
            ..Default::default()
        });
        let end = behind.pending_end.expect("pending end");
        assert!(!end.commit);
        let parts: Vec<String> = end.partitions.iter().map(|p| p.to_string()).collect();
        assert_eq!(parts, vec!["b-0", "b-2"]);
        let parts: Vec<String> = d.partitions.iter().map(|p| p.to_string()).collect();
        assert_eq!(parts, vec!["a-3", "b-0", "b-1"]);
        assert_eq!(
            "Zombie".parse::<TransactionState>().ok(),
            Some(TransactionState::Other("Zombie".into()))
        );
        assert_eq!(TransactionState::Ongoing.to_string(), "Ongoing");
    }

    #[test]
    fn listings_keep_the_latest_entry_per_id_and_open_transactions_one_per_partition() {
        let mut old = txn("a", 7, 3, TransactionState::Ongoing, &[]);
        old.last_update_ms = 1;
        let new = txn("a", 7, 4, TransactionState::CompleteCommit, &[]);
        let other = txn("0", 1, 0, TransactionState::Empty, &[]);
        let merged = merge_listings(vec![vec![new.clone()], vec![old, other.clone()]]);
        assert_eq!(merged, vec![other, new]);

        let a = open("t", 1, 7, 0);
        let mut b = a.clone();
        b.broker_id = 2;
        let c = open("t", 0, 8, 0);
        assert_eq!(
            merge_open(vec![vec![a.clone()], vec![b, c.clone()]]),
            vec![c, a]
        );
    }
}
