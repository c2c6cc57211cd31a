//! Produce: each partition's batch is checked (acks, internal-topic ownership) and
//! appended by its partition, or validated and discarded under `--null-produce`; every
//! partition gets its own answer, so one refusal never fails the others.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;
use idem_proto::batch;
use idem_proto::internal::is_internal_topic;
use idem_proto::txn::{OFFSETS_TOPIC, TXN_LOG_TOPIC};
use idem_proto::v1::{
    PartitionProduceResponse, ProduceRequest, ProduceResponse, TopicProduceResponse,
};
use idem_proto::ErrorCode;
use idem_runtime::acl::Operation;

use super::refusal::log_refusal;
use super::BrokerService;
use crate::coordinators::Coordinators;
use crate::error::BrokerError;
use crate::internal_topics::{self, OwnerFacts};
use crate::partition::{AppendedBatch, Partition};
use crate::quota::{hold_response, QuotaKind};

impl BrokerService {
    pub(crate) async fn serve_produce(
        &self,
        principal: &str,
        request: ProduceRequest,
    ) -> ProduceResponse {
        self.begin_produce(principal, request).await.settle().await
    }

    /// The first half of a produce: every partition's batch checked and appended (or
    /// refused), in the request's order; nothing is durable yet. Appending all first
    /// and then settling them together lets a request's partitions share their fsync
    /// time, and lets a Kafka connection append its next request meanwhile
    /// (`kafka/connection.rs`).
    pub(crate) async fn begin_produce(
        &self,
        principal: &str,
        request: ProduceRequest,
    ) -> ProduceInFlight {
        let bytes: usize = request
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.len())
            .sum();
        metrics::counter!("idem_bytes_in_total").increment(bytes as u64);
        let refused_acks = match request.acks {
            -1..=1 => None,
            acks => Some(BrokerError::InvalidRequiredAcks(acks)),
        };
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in &request.topics {
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            // Checked before anything is appended; a cached decision (a hash lookup).
            // A transactional batch needs no check of its transactional id here: the
            // partition takes it only once the coordinator registered it, which took
            // write on the transactional id and on this topic (docs/operations.md).
            let refused = refused_acks
                .as_ref()
                .map(|e| (e.code(), e.to_string()))
                .or_else(|| {
                    self.authorize_topic(principal, Operation::Write, &topic.name)
                        .err()
                        .map(|e| {
                            for data in &topic.partitions {
                                log_refusal(&topic.name, data.partition, &e);
                            }
                            (e.code(), e.to_string())
                        })
                });
            for data in &topic.partitions {
                let in_flight = match &refused {
                    None => {
                        self.begin_one(&topic.name, data.partition, &data.records, &request)
                            .await
                    }
                    Some((code, message)) => {
                        PartitionInFlight::Answered(PartitionProduceResponse {
                            partition: data.partition,
                            error_code: *code as i32,
                            error_message: message.clone(),
                            base_offset: -1,
                            log_append_time_ms: -1,
                            log_start_offset: -1,
                        })
                    }
                };
                partitions.push(in_flight);
            }
            topics.push((topic.name.clone(), partitions));
        }
        let sent = request.topics.iter().flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.as_str(), p.records.len()))
        });
        let hold = self.quota_hold(QuotaKind::Produce, principal, sent);
        ProduceInFlight { topics, hold }
    }

    /// What the catalog knows of the owner of an internal topic's partition: one claim
    /// covers the same partition of `__transaction_state` and `__consumer_offsets`
    /// (docs/groups.md), and only a cluster knows it.
    fn owner_facts(&self, topic: &str, partition: i32) -> OwnerFacts {
        match self.coordinators() {
            Coordinators::Clustered(view) if topic == TXN_LOG_TOPIC || topic == OFFSETS_TOPIC => {
                view.owner_facts(partition)
            }
            _ => OwnerFacts::default(),
        }
    }

    /// One partition's batch appended, or its refusal.
    async fn begin_one(
        &self,
        topic: &str,
        partition: i32,
        records: &Bytes,
        request: &ProduceRequest,
    ) -> PartitionInFlight {
        let (acks, timeout) = (request.acks, replication_timeout(request.timeout_ms));
        // Internal topics: only their owning coordinator writes (nothing is appended
        // otherwise), checked after the partition is known to exist here.
        let partition_here = self.topics.partition(topic, partition).and_then(|p| {
            if is_internal_topic(topic) {
                let header = batch::decode_header(records).ok();
                internal_topics::check_produce(
                    topic,
                    request.coordinator_epoch,
                    header.as_ref(),
                    self.owner_facts(topic, partition),
                )?;
            }
            Ok(p)
        });
        let begun = match (partition_here, &self.null_produce) {
            (Err(e), _) => Err(e),
            (Ok(_), Some(null)) => null.accept(records).map(|base_offset| {
                PartitionInFlight::Answered(accepted(partition, base_offset, 0))
            }),
            (Ok(p), None) => p.begin_append(records, acks, timeout).await.map(|batch| {
                PartitionInFlight::Appended {
                    partition,
                    log: p,
                    batch,
                }
            }),
        };
        begun.unwrap_or_else(|e| PartitionInFlight::Answered(refusal(topic, partition, &e)))
    }
}

/// A produce request between [`BrokerService::begin_produce`] and its answer.
pub(crate) struct ProduceInFlight {
    topics: Vec<(String, Vec<PartitionInFlight>)>,
    /// The quota's hold (`--quota-file`), served before the answer.
    hold: Duration,
}

/// One partition of a [`ProduceInFlight`].
enum PartitionInFlight {
    Answered(PartitionProduceResponse),
    Appended {
        partition: i32,
        log: Arc<Partition>,
        batch: AppendedBatch,
    },
}

impl ProduceInFlight {
    /// The answer, once every appended batch is durable (and, for acks=all,
    /// replicated): all of them waited for together.
    pub(crate) async fn settle(self) -> ProduceResponse {
        let topics = join_all(
            self.topics
                .into_iter()
                .map(|(name, partitions)| async move {
                    let partitions =
                        join_all(partitions.into_iter().map(|p| settle_one(&name, p))).await;
                    TopicProduceResponse { name, partitions }
                }),
        )
        .await;
        let throttle_time_ms = hold_response(self.hold).await;
        ProduceResponse {
            topics,
            throttle_time_ms,
        }
    }
}

async fn settle_one(topic: &str, in_flight: PartitionInFlight) -> PartitionProduceResponse {
    match in_flight {
        PartitionInFlight::Answered(response) => response,
        PartitionInFlight::Appended {
            partition,
            log,
            batch,
        } => match log.settle_append(batch).await {
            Ok(outcome) => accepted(partition, outcome.base_offset, outcome.log_start_offset),
            Err(e) => refusal(topic, partition, &e),
        },
    }
}

fn accepted(partition: i32, base_offset: i64, log_start_offset: i64) -> PartitionProduceResponse {
    PartitionProduceResponse {
        partition,
        error_code: ErrorCode::None as i32,
        error_message: String::new(),
        base_offset,
        log_append_time_ms: -1,
        log_start_offset,
    }
}

fn refusal(topic: &str, partition: i32, e: &BrokerError) -> PartitionProduceResponse {
    log_refusal(topic, partition, e);
    PartitionProduceResponse {
        partition,
        error_code: e.code() as i32,
        error_message: e.to_string(),
        base_offset: -1,
        log_append_time_ms: -1,
        log_start_offset: -1,
    }
}

/// How long acks=all waits for the in-sync replicas: the request's timeout, 30 s when
/// unset.
pub(super) fn replication_timeout(timeout_ms: i32) -> Duration {
    match u64::try_from(timeout_ms) {
        Ok(ms) if ms > 0 => Duration::from_millis(ms),
        _ => Duration::from_secs(30),
    }
}
