//! The transaction RPCs a broker serves: FindCoordinator (which coordinator owns a
//! transactional id or a consumer group), WriteTxnMarkers (the coordinator's COMMIT/ABORT control batches,
//! each partition on its own) and ListOpenTransactions (what holds each LSO back).

use std::time::Duration;

use idem_proto::internal::is_internal_topic;
use idem_proto::txn::{OFFSETS_TOPIC, TXN_LOG_TOPIC};
use idem_proto::v1::{
    ControlType, FindCoordinatorRequest, FindCoordinatorResponse, ListOpenTransactionsRequest,
    ListOpenTransactionsResponse, OpenTransaction, TxnMarkerPartitionResult,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use idem_proto::ErrorCode;
use idem_runtime::listeners::{pick, Listener};

use super::produce::replication_timeout;
use super::refusal::log_refusal;
use super::BrokerService;
use crate::coordinators::FoundCoordinator;
use crate::error::BrokerError;
use crate::producer_state::{MarkerEpoch, ProducerEntry};

impl BrokerService {
    /// The coordinator owning `id` (a transactional id or a group id: both hash to the
    /// same slice), as FindCoordinator finds it; the Kafka listener forwards there.
    pub(crate) fn coordinator_of(&self, id: &str) -> Result<FoundCoordinator, BrokerError> {
        self.coordinators()
            .find(id, self.topics.partition_count(TXN_LOG_TOPIC))
    }

    /// The owner of every `__transaction_state` partition (`None`: nobody owns it now),
    /// by partition: the coordinators a cluster-wide listing asks. COORDINATOR_NOT_AVAILABLE
    /// before the topic exists.
    pub(crate) fn coordinator_owners(
        &self,
    ) -> Result<Vec<(i32, Option<FoundCoordinator>)>, BrokerError> {
        let partitions = self
            .topics
            .partition_count(TXN_LOG_TOPIC)
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                BrokerError::CoordinatorNotAvailable(format!(
                    "topic {TXN_LOG_TOPIC} does not exist yet"
                ))
            })?;
        Ok(self.coordinators().owners(partitions))
    }

    /// Every producer `topic`/`partition` keeps state for, as its leader holds it
    /// (Kafka's DescribeProducers). The registry hands out leaders only: any other
    /// replica, whose state may lag, is NOT_LEADER_OR_FOLLOWER.
    pub(crate) fn producers_of(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<(i64, ProducerEntry)>, BrokerError> {
        Ok(self.topics.partition(topic, partition)?.producers())
    }

    pub(super) fn serve_find_coordinator(
        &self,
        request: FindCoordinatorRequest,
        listener: Listener,
    ) -> FindCoordinatorResponse {
        let partitions = self.topics.partition_count(TXN_LOG_TOPIC);
        // A group lives in the slice its id hashes to, like a transactional id.
        let id = if request.transactional_id.is_empty() {
            &request.group_id
        } else {
            &request.transactional_id
        };
        let found = self.coordinators().find(id, partitions);
        match found {
            Ok(found) => FindCoordinatorResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                coordinator_id: found.coordinator_id,
                address: pick(listener, &found.address, found.external_address.as_deref()).into(),
                txn_log_partition: found.txn_log_partition,
                coordinator_epoch: found.coordinator_epoch,
            },
            Err(e) => {
                tracing::debug!(
                    transactional_id = %request.transactional_id,
                    group_id = %request.group_id,
                    code = e.code().as_str_name(),
                    error = %e,
                    "FindCoordinator refused"
                );
                FindCoordinatorResponse {
                    error_code: e.code() as i32,
                    error_message: e.to_string(),
                    coordinator_id: -1,
                    address: String::new(),
                    txn_log_partition: -1,
                    coordinator_epoch: -1,
                }
            }
        }
    }

    pub(super) async fn serve_write_txn_markers(
        &self,
        request: WriteTxnMarkersRequest,
    ) -> WriteTxnMarkersResponse {
        let timeout = replication_timeout(request.timeout_ms);
        let writes = request.topics.iter().flat_map(|topic| {
            topic
                .partitions
                .iter()
                .map(|partition| self.write_marker(&request, &topic.topic, *partition, timeout))
        });
        // Partitions are independent: each waits for its own in-sync replicas at once.
        let results = futures::future::join_all(writes).await;
        WriteTxnMarkersResponse { results }
    }

    pub(super) fn serve_list_open_transactions(
        &self,
        request: ListOpenTransactionsRequest,
    ) -> ListOpenTransactionsResponse {
        let mut transactions = Vec::new();
        for (topic, views) in self.topics.describe(&request.topics) {
            for view in views.iter().flatten() {
                if view.leader != self.broker_id {
                    continue;
                }
                let Ok(partition) = self.topics.partition(&topic, view.index) else {
                    continue;
                };
                transactions.extend(partition.open_transactions().into_iter().map(|t| {
                    OpenTransaction {
                        topic: topic.clone(),
                        partition: view.index,
                        producer_id: t.producer_id,
                        producer_epoch: i32::from(t.producer_epoch),
                        first_offset: t.first_offset,
                        last_update_ms: t.last_update_ms,
                    }
                }));
            }
        }
        ListOpenTransactionsResponse { transactions }
    }

    /// One partition of WriteTxnMarkers.
    async fn write_marker(
        &self,
        request: &WriteTxnMarkersRequest,
        topic: &str,
        partition: i32,
        timeout: Duration,
    ) -> TxnMarkerPartitionResult {
        let result = match marker_of(request, topic) {
            Ok((producer_epoch, control_type)) => match self.topics.partition(topic, partition) {
                Ok(p) => {
                    let end_epoch = if request.at_transaction_epoch {
                        MarkerEpoch::Transaction
                    } else {
                        MarkerEpoch::Next
                    };
                    p.append_marker(
                        request.producer_id,
                        producer_epoch,
                        control_type,
                        request.coordinator_epoch,
                        end_epoch,
                        timeout,
                    )
                    .await
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(offset) => TxnMarkerPartitionResult {
                topic: topic.to_string(),
                partition,
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                offset: offset.unwrap_or(-1),
            },
            Err(e) => {
                log_refusal(topic, partition, &e);
                TxnMarkerPartitionResult {
                    topic: topic.to_string(),
                    partition,
                    error_code: e.code() as i32,
                    error_message: e.to_string(),
                    offset: -1,
                }
            }
        }
    }
}

/// The producer epoch and marker type of a WriteTxnMarkers request, checked.
fn marker_of(
    request: &WriteTxnMarkersRequest,
    topic: &str,
) -> Result<(i16, ControlType), BrokerError> {
    // Internal topics are written by their coordinators, not transactions; the one
    // exception is a group's offsets stored inside a transaction (AddOffsetsToTxn).
    if is_internal_topic(topic) && topic != OFFSETS_TOPIC {
        return Err(BrokerError::InternalTopic {
            topic: topic.to_string(),
            reason: format!(
                "transaction markers are never written to internal topics but {OFFSETS_TOPIC}"
            ),
        });
    }
    if request.producer_id < 0 {
        return Err(BrokerError::InvalidRequest(format!(
            "producer id {} of a transaction marker is negative",
            request.producer_id
        )));
    }
    let producer_epoch = i16::try_from(request.producer_epoch)
        .ok()
        .filter(|e| *e >= 0)
        .ok_or_else(|| {
            BrokerError::InvalidRequest(format!(
                "producer epoch {} is not between 0 and {}",
                request.producer_epoch,
                i16::MAX
            ))
        })?;
    let control_type = ControlType::try_from(request.control_type).map_err(|_| {
        BrokerError::InvalidRequest(format!("unknown control type {}", request.control_type))
    })?;
    Ok((producer_epoch, control_type))
}
