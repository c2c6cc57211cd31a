//! Writing transaction markers (BEGIN, COMMIT, ABORT) to partition leaders: one
//! WriteTxnMarkers per leader for the partitions it leads, all leaders at once, and the
//! partitions not yet answered NONE again after a backoff (with fresh metadata when a
//! leader moved), until every partition answered NONE; or one round only, for a caller
//! with a fallback.
//!
//! TRANSACTION_COORDINATOR_FENCED (or an epoch refusal of a COMMIT/ABORT) means a newer
//! owner wrote markers for this producer: the claim is lost. A BEGIN refused for another
//! reason is handed back to the caller (the producer is told); a COMMIT/ABORT is never
//! given up, because the outcome is persisted and must reach every partition that
//! exists: only a partition the topic catalog says is gone (its topic deleted) is
//! dropped from it, as Kafka drops a deleted topic's partitions from its pending
//! markers (`marker_fate.rs` decides).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use futures::future::join_all;
use idem_client::{ClientError, Connection};
use idem_proto::v1::{ControlType, TxnTopicPartitions, WriteTxnMarkersRequest};
use idem_proto::ErrorCode;

use super::marker_fate::{asks_catalog, settle, MarkerOutcome, PartitionAnswer};
use crate::error::CoordinatorError;
use crate::ownership::token::OwnershipToken;
use crate::retry::{self, Failed};
use crate::topic_catalog::{TopicCatalog, TopicPresence};
use crate::txn::decide::TopicPartition;

const MARKER_TIMEOUT_MS: i32 = 10_000;
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// One marker for one producer in a set of partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerJob {
    /// Whose transaction this is (for logs).
    pub transactional_id: String,
    /// The transaction log partition whose owner writes (for errors and logs).
    pub log_partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub control: ControlType,
    pub coordinator_epoch: i32,
    pub partitions: BTreeSet<TopicPartition>,
    /// A COMMIT/ABORT at the transaction's own epoch, which the producer keeps (Kafka's
    /// transaction version 1), rather than at the next one.
    pub at_transaction_epoch: bool,
}

/// The request for one leader.
fn request(job: &MarkerJob, partitions: &[TopicPartition]) -> WriteTxnMarkersRequest {
    let mut topics: Vec<TxnTopicPartitions> = Vec::new();
    for tp in partitions {
        match topics.iter_mut().find(|t| t.topic == tp.topic) {
            Some(t) => t.partitions.push(tp.partition),
            None => topics.push(TxnTopicPartitions {
                topic: tp.topic.clone(),
                partitions: vec![tp.partition],
            }),
        }
    }
    WriteTxnMarkersRequest {
        producer_id: job.producer_id,
        producer_epoch: i32::from(job.producer_epoch),
        control_type: job.control as i32,
        coordinator_epoch: job.coordinator_epoch,
        topics,
        timeout_ms: MARKER_TIMEOUT_MS,
        at_transaction_epoch: job.at_transaction_epoch,
    }
}

/// Writes `job` to every partition; returns once all answered NONE, or, for a
/// COMMIT/ABORT, were dropped because the topic catalog says they no longer exist
/// (`marker_fate.rs`).
pub async fn write_markers(
    conn: &Connection,
    catalog: &dyn TopicCatalog,
    job: &MarkerJob,
    token: &OwnershipToken,
) -> Result<(), CoordinatorError> {
    // How long the markers took, for docs/benchmarks.md; the clock is read only when
    // the debug log below is on.
    let started = tracing::enabled!(tracing::Level::DEBUG).then(std::time::Instant::now);
    // Each round takes the partitions still pending and leaves those still pending.
    let pending = tokio::sync::Mutex::new(job.partitions.clone());
    let round = || async {
        let mut pending = pending.lock().await;
        if pending.is_empty() {
            return Ok(());
        }
        if token.is_lost() {
            return Err(Failed::Stop(CoordinatorError::ownership_lost(
                job.log_partition,
                "claim lost while writing markers",
            )));
        }
        let refresh = send_round(conn, catalog, job, &mut pending)
            .await
            .map_err(Failed::Stop)?;
        if pending.is_empty() {
            return Ok(());
        }
        if refresh {
            conn.request_refresh();
        }
        Err(Failed::Again(format!(
            "{} partitions not written yet",
            pending.len()
        )))
    };
    // send_round logs why each partition is still pending.
    retry::while_owned(token, BACKOFF_MAX, round, |_| {}).await?;
    let us = started.map_or(0, crate::clock::micros_since);
    tracing::debug!(producer_id = job.producer_id, epoch = job.producer_epoch, control = ?job.control, partitions = job.partitions.len(), us, "markers written");
    Ok(())
}

/// Sends `job` once to every partition, without retrying, and returns the partitions
/// that did not answer NONE (for whatever reason: the caller falls back to
/// [`write_markers`] for them, which tells the reasons apart).
pub async fn write_markers_once(
    conn: &Connection,
    catalog: &dyn TopicCatalog,
    job: &MarkerJob,
) -> BTreeSet<TopicPartition> {
    let mut pending = job.partitions.clone();
    if let Err(e) = send_round(conn, catalog, job, &mut pending).await {
        tracing::debug!(producer_id = job.producer_id, control = ?job.control, error = %e, "a single attempt of markers stopped");
    }
    pending
}

/// One round: one WriteTxnMarkers per leader for its partitions among `pending`, all
/// leaders at once, then the catalog's word on the topics that answered as deleted
/// ones do. Removes the partitions answered NONE and those dropped; says whether
/// metadata should be refreshed before another round.
#[tracing::instrument(
    level = "debug",
    name = "marker_round",
    skip_all,
    fields(
        transactional_id = %job.transactional_id,
        producer_id = job.producer_id,
        producer_epoch = job.producer_epoch,
        control = ?job.control,
        partitions = pending.len(),
    )
)]
async fn send_round(
    conn: &Connection,
    catalog: &dyn TopicCatalog,
    job: &MarkerJob,
    pending: &mut BTreeSet<TopicPartition>,
) -> Result<bool, CoordinatorError> {
    // Each pending partition's answer this round, with the broker's message.
    let mut answers: BTreeMap<TopicPartition, (PartitionAnswer, String)> = BTreeMap::new();
    let mut by_leader: HashMap<String, (_, Vec<TopicPartition>)> = HashMap::new();
    for tp in pending.iter() {
        match conn.leader_client(&tp.topic, tp.partition).await {
            Ok((leader, client)) => by_leader
                .entry(leader)
                .or_insert_with(|| (client, Vec::new()))
                .1
                .push(tp.clone()),
            Err(ClientError::UnknownTopic { .. }) if job.control == ControlType::Begin => {
                return Err(CoordinatorError::Refused {
                    what: format!("BEGIN in {}/{}", tp.topic, tp.partition),
                    code: ErrorCode::UnknownTopicOrPartition,
                    message: "no broker lists the partition".into(),
                });
            }
            Err(ClientError::UnknownTopic { .. }) => {
                tracing::debug!(topic = %tp.topic, partition = tp.partition, "no broker lists the partition of a marker");
                answers.insert(
                    tp.clone(),
                    (
                        PartitionAnswer::NotInMetadata,
                        "no broker lists the partition".into(),
                    ),
                );
            }
            Err(e) => {
                tracing::debug!(topic = %tp.topic, partition = tp.partition, error = %e, "no leader for a marker yet");
                answers.insert(tp.clone(), (PartitionAnswer::NoAnswer, e.to_string()));
            }
        }
    }
    let sends = by_leader.into_values().map(|(mut client, partitions)| {
        let request = request(job, &partitions);
        async move {
            let answer = conn.call(client.write_txn_markers(request)).await;
            (partitions, answer)
        }
    });
    for (partitions, answer) in join_all(sends).await {
        // A partition the response leaves out counts as unanswered.
        for tp in &partitions {
            answers.insert(tp.clone(), (PartitionAnswer::NoAnswer, String::new()));
        }
        let response = match answer {
            Ok(response) => response,
            Err(e) => {
                tracing::debug!(error = %e, producer_id = job.producer_id, "WriteTxnMarkers got no answer; retrying");
                continue;
            }
        };
        for result in response.results {
            let tp = TopicPartition {
                topic: result.topic,
                partition: result.partition,
            };
            if !partitions.contains(&tp) {
                continue;
            }
            let code =
                ErrorCode::try_from(result.error_code).unwrap_or(ErrorCode::UnknownServerError);
            answers.insert(tp, (PartitionAnswer::Code(code), result.error_message));
        }
    }
    let presence = read_catalog(catalog, job, &answers).await;
    let mut refresh = false;
    // Every answer is settled before stopping, so `pending` keeps only the partitions
    // not done.
    let mut stop = None;
    for (tp, (answer, message)) in answers {
        let in_catalog = presence.get(&tp.topic);
        let code = match answer {
            PartitionAnswer::Code(code) => code,
            PartitionAnswer::NotInMetadata => ErrorCode::UnknownTopicOrPartition,
            PartitionAnswer::NoAnswer => ErrorCode::RequestTimedOut,
        };
        match settle(job.control, answer, tp.partition, in_catalog) {
            MarkerOutcome::Done => {
                pending.remove(&tp);
            }
            MarkerOutcome::Dropped => {
                let topic_id = match in_catalog {
                    Some(TopicPresence::Present { topic_id, .. }) => topic_id.as_str(),
                    _ => "",
                };
                tracing::warn!(
                    transactional_id = %job.transactional_id,
                    producer_id = job.producer_id,
                    epoch = job.producer_epoch,
                    control = ?job.control,
                    topic = %tp.topic,
                    partition = tp.partition,
                    current_topic_id = topic_id,
                    "the topic catalog no longer holds this partition (its topic was deleted): its marker is dropped"
                );
                pending.remove(&tp);
            }
            MarkerOutcome::Retry => refresh = true,
            MarkerOutcome::Fenced => {
                stop.get_or_insert(CoordinatorError::ownership_lost(
                    job.log_partition,
                    format!(
                        "{:?} marker for producer {} in {}/{}: {code:?} {message}",
                        job.control, job.producer_id, tp.topic, tp.partition,
                    ),
                ));
            }
            MarkerOutcome::Refused if job.control == ControlType::Begin => {
                stop.get_or_insert(CoordinatorError::Refused {
                    what: format!("BEGIN in {}/{}", tp.topic, tp.partition),
                    code,
                    message,
                });
            }
            MarkerOutcome::Refused => {
                // The outcome is persisted: it must land. A refusal here is a
                // bug somewhere; keep trying, loudly.
                tracing::error!(topic = %tp.topic, partition = tp.partition, producer_id = job.producer_id, epoch = job.producer_epoch, ?code, %message, "a broker refuses a {:?} marker; retrying", job.control);
            }
        }
    }
    stop.map_or(Ok(refresh), Err)
}

/// The catalog's word on every topic one of whose partitions answered as a deleted
/// topic's does; a topic it cannot be read for is left out (its partitions are retried).
async fn read_catalog(
    catalog: &dyn TopicCatalog,
    job: &MarkerJob,
    answers: &BTreeMap<TopicPartition, (PartitionAnswer, String)>,
) -> HashMap<String, TopicPresence> {
    let topics: BTreeSet<&str> = answers
        .iter()
        .filter(|(_, (answer, _))| asks_catalog(job.control, *answer))
        .map(|(tp, _)| tp.topic.as_str())
        .collect();
    let mut presence = HashMap::new();
    for topic in topics {
        match catalog.presence(topic).await {
            Ok(found) => {
                presence.insert(topic.to_string(), found);
            }
            Err(e) => {
                tracing::debug!(topic, producer_id = job.producer_id, error = %e, "cannot ask the topic catalog; the marker is retried");
            }
        }
    }
    presence
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    #[test]
    fn one_request_per_leader_groups_partitions_by_topic() {
        let job = MarkerJob {
            transactional_id: "t".into(),
            log_partition: 3,
            producer_id: 9,
            producer_epoch: 4,
            control: ControlType::Commit,
            coordinator_epoch: 7,
            partitions: BTreeSet::new(),
            at_transaction_epoch: false,
        };
        let built = request(&job, &[tp("a", 0), tp("b", 1), tp("a", 2)]);
        assert_eq!(
            (
                built.producer_id,
                built.producer_epoch,
                built.control_type,
                built.coordinator_epoch
            ),
            (9, 4, ControlType::Commit as i32, 7)
        );
        assert_eq!(
            built.topics,
            vec![
                TxnTopicPartitions {
                    topic: "a".into(),
                    partitions: vec![0, 2]
                },
                TxnTopicPartitions {
                    topic: "b".into(),
                    partitions: vec![1]
                },
            ]
        );
    }
}
