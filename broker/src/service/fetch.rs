//! Fetch, for consumers and followers alike, and OffsetForLeaderEpoch, which a follower
//! asks before fetching to find where its log diverges. The long-poll itself lives
//! beside the partition read path (`partition::long_poll`); this file reads the wire
//! request, reads each partition once per round and writes the answer.

use std::time::Duration;

use bytes::Bytes;
use idem_proto::v1::{
    FetchPartitionResponse, FetchRequest, FetchResponse, FetchTopicResponse, IsolationLevel,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};
use idem_proto::ErrorCode;
use idem_runtime::acl::Operation;
use tokio::sync::watch;

use super::fetch_budget::FetchBudget;
use super::refusal::log_refusal;
use super::BrokerService;
use crate::error::BrokerError;
use crate::partition::long_poll::{long_poll, ReadSummary, Reader};
use crate::partition::{stored_batches, FollowerRead, PartitionOffsets};
use crate::quota::{hold_response, QuotaKind};
use crate::topics::TopicRegistry;

/// What one partition of a Fetch answers when it succeeds.
struct Served {
    records: Vec<u8>,
    next_fetch_offset: i64,
    offsets: PartitionOffsets,
}

impl BrokerService {
    pub(crate) async fn serve_fetch(
        &self,
        principal: &str,
        request: FetchRequest,
    ) -> FetchResponse {
        let wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0));
        let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
        let watches = self.watched_partitions(&request);
        let topics = long_poll(watches, wait, min_bytes, || {
            self.fetch_once(principal, &request)
        })
        .await;
        let bytes: usize = topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.len())
            .sum();
        let reader = if request.replica_id.is_some() {
            "replica"
        } else {
            "consumer"
        };
        metrics::counter!("idem_bytes_out_total", "reader" => reader).increment(bytes as u64);
        // Replication is the cluster's own traffic: only consumers' reads count.
        let hold = if request.replica_id.is_some() {
            Duration::ZERO
        } else {
            let read = topics.iter().flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.name.as_str(), p.records.len()))
            });
            self.quota_hold(QuotaKind::Fetch, principal, read)
        };
        let throttle_time_ms = hold_response(hold).await;
        FetchResponse {
            topics,
            throttle_time_ms,
        }
    }

    /// Reads every requested partition once; returns the responses and what the
    /// long-poll needs of them: the bytes found, and whether the answer must go now (a
    /// refused partition, or a consumer position moved past filtered batches without
    /// returning any, which the consumer must hear of now, not after the long-poll).
    fn fetch_once(
        &self,
        principal: &str,
        request: &FetchRequest,
    ) -> (Vec<FetchTopicResponse>, ReadSummary) {
        let mut budget = FetchBudget::new(request.max_bytes, self.max_fetch_bytes);
        let mut total = 0usize;
        let mut skipped = false;
        let isolation = IsolationLevel::try_from(request.isolation_level);
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in &request.topics {
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            // A consumer reads a topic it may read; a follower's fetch was authorized for
            // the cluster before (see `service/mod.rs`). Once per topic, not per
            // partition: the answer is the topic's.
            let topic_access = match request.replica_id {
                Some(_) => Ok(()),
                None => self
                    .authorizer
                    .check_topic(principal, Operation::Read, &topic.name),
            };
            for wanted in &topic.partitions {
                let limit = budget.next(wanted.partition_max_bytes);
                let result = topic_access
                    .clone()
                    .map_err(BrokerError::Unauthorized)
                    .and_then(|()| check_fetch_sizes(request.max_bytes, wanted.partition_max_bytes))
                    .and_then(|()| self.topics.partition(&topic.name, wanted.partition))
                    .and_then(|p| match request.replica_id {
                        Some(follower) => {
                            let FollowerRead {
                                records,
                                offsets,
                                may_rejoin,
                            } = p.read_for_follower(
                                follower,
                                wanted.fetch_offset,
                                limit,
                                wanted.current_leader_epoch,
                            )?;
                            if may_rejoin {
                                self.topics.wake_isr_duty();
                            }
                            let next_fetch_offset = stored_batches(&records)
                                .map_while(Result::ok)
                                .last()
                                .map_or(wanted.fetch_offset, |(h, _)| h.next_offset());
                            Ok(Served {
                                records,
                                next_fetch_offset,
                                offsets,
                            })
                        }
                        None => {
                            let isolation = isolation.map_err(|_| {
                                BrokerError::InvalidRequest(format!(
                                    "unknown isolation level {}",
                                    request.isolation_level
                                ))
                            })?;
                            p.check_epoch(wanted.current_leader_epoch)?;
                            let read = p.read_visible(
                                wanted.fetch_offset,
                                limit,
                                isolation,
                                request.include_control_batches,
                            )?;
                            Ok(Served {
                                records: read.records,
                                next_fetch_offset: read.next_fetch_offset,
                                offsets: read.offsets,
                            })
                        }
                    });
                let response = match result {
                    Ok(served) => {
                        let records = served.records;
                        total += records.len();
                        budget.spend(records.len());
                        skipped |=
                            records.is_empty() && served.next_fetch_offset > wanted.fetch_offset;
                        FetchPartitionResponse {
                            partition: wanted.partition,
                            error_code: ErrorCode::None as i32,
                            error_message: String::new(),
                            high_watermark: served.offsets.high_watermark,
                            last_stable_offset: served.offsets.last_stable_offset,
                            log_start_offset: served.offsets.log_start_offset,
                            aborted_transactions: Vec::new(),
                            next_fetch_offset: served.next_fetch_offset,
                            records: Bytes::from(records),
                        }
                    }
                    Err(e) => {
                        log_refusal(&topic.name, wanted.partition, &e);
                        // The partition's offsets, where known, let a follower whose
                        // fetch offset is past the leader's log cut its tail.
                        // Not to a principal that may not read the topic.
                        let offsets = match e {
                            BrokerError::Unauthorized(_) => None,
                            _ => self
                                .topics
                                .partition(&topic.name, wanted.partition)
                                .ok()
                                .map(|p| p.offsets()),
                        };
                        FetchPartitionResponse {
                            partition: wanted.partition,
                            error_code: e.code() as i32,
                            error_message: e.to_string(),
                            high_watermark: offsets.map_or(-1, |o| o.high_watermark),
                            last_stable_offset: offsets.map_or(-1, |o| o.last_stable_offset),
                            log_start_offset: offsets.map_or(-1, |o| o.log_start_offset),
                            aborted_transactions: Vec::new(),
                            next_fetch_offset: wanted.fetch_offset,
                            records: Bytes::new(),
                        }
                    }
                };
                partitions.push(response);
            }
            topics.push(FetchTopicResponse {
                name: topic.name.clone(),
                partitions,
            });
        }
        let refused = topics
            .iter()
            .flat_map(|t| &t.partitions)
            .any(|p| p.error_code != ErrorCode::None as i32);
        let found = ReadSummary {
            bytes: total,
            answer_now: skipped || refused,
        };
        (topics, found)
    }

    /// The offset of each requested partition whose growth gives this reader more.
    fn watched_partitions(&self, request: &FetchRequest) -> Vec<watch::Receiver<i64>> {
        let reader = match request.replica_id {
            Some(_) => Reader::Follower,
            None => Reader::Consumer {
                read_committed: request.isolation_level == IsolationLevel::ReadCommitted as i32,
            },
        };
        request
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.name.as_str(), p.partition))
            })
            .filter_map(|(topic, partition)| self.topics.partition(topic, partition).ok())
            .map(|p| p.watch_readable_end(reader))
            .collect()
    }

    pub(super) fn serve_offset_for_leader_epoch(
        &self,
        request: OffsetForLeaderEpochRequest,
    ) -> OffsetForLeaderEpochResponse {
        match offset_for_leader_epoch(&self.topics, &request) {
            Ok((leader_epoch, end_offset)) => OffsetForLeaderEpochResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                leader_epoch,
                end_offset,
            },
            Err(e) => {
                log_refusal(&request.topic, request.partition, &e);
                OffsetForLeaderEpochResponse {
                    error_code: e.code() as i32,
                    error_message: e.to_string(),
                    leader_epoch: -1,
                    end_offset: -1,
                }
            }
        }
    }
}

/// Fetch sizes: 0 means "up to the broker's limit" (`--max-fetch-bytes`, and for a
/// partition what is left of the response's budget); a negative size is refused rather
/// than read as "no limit".
fn check_fetch_sizes(max_bytes: i32, partition_max_bytes: i32) -> Result<(), BrokerError> {
    if max_bytes < 0 || partition_max_bytes < 0 {
        return Err(BrokerError::InvalidRequest(format!(
            "fetch sizes must be >= 0 (0: the broker's limit); got max_bytes {max_bytes}, partition_max_bytes {partition_max_bytes}"
        )));
    }
    Ok(())
}

impl BrokerService {
    /// OffsetForLeaderEpoch for a Kafka consumer validating its position (KIP-320):
    /// `current_leader_epoch` `None` when the client knows none (Kafka's -1).
    pub(crate) fn epoch_end_offset(
        &self,
        topic: &str,
        partition: i32,
        current_leader_epoch: Option<i32>,
        leader_epoch: i32,
    ) -> Result<(i32, i64), BrokerError> {
        let partition = self.topics.partition(topic, partition)?;
        partition.check_epoch(current_leader_epoch)?;
        Ok(partition.epoch_end(leader_epoch))
    }
}

fn offset_for_leader_epoch(
    topics: &TopicRegistry,
    request: &OffsetForLeaderEpochRequest,
) -> Result<(i32, i64), BrokerError> {
    let partition = topics.partition(&request.topic, request.partition)?;
    partition.check_epoch(Some(request.current_leader_epoch))?;
    Ok(partition.epoch_end(request.leader_epoch))
}
