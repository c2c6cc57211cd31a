//! The `idem.v1.Broker` gRPC service: a thin translation from wire messages onto
//! `TopicRegistry` / `Partition` calls and back. Refusals travel as per-partition
//! `ErrorCode`s; gRPC statuses are left to transport-level failures.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use idem_pidstore::ProducerIdManager;
use idem_proto::batch;
use idem_proto::internal::is_internal_topic;
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::v1::broker_server::Broker;
use idem_proto::v1::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerInfo,
    ControlType, CoordinatorInfo, CreateTopicResult, CreateTopicsRequest, CreateTopicsResponse,
    FetchPartitionResponse, FetchRequest, FetchResponse, FetchTopicResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, InitProducerIdRequest, InitProducerIdResponse,
    IsolationLevel, ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse,
    ListOffsetsTopicResponse, ListOpenTransactionsRequest, ListOpenTransactionsResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, MetadataRequest,
    MetadataResponse, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
    OngoingPartitionReassignment, OpenTransaction, PartitionMetadata, PartitionProduceResponse,
    ProduceRequest, ProduceResponse, ReassignablePartitionResult, TopicMetadata,
    TopicProduceResponse, TxnLogOwner, TxnMarkerPartitionResult, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
};
use idem_proto::ErrorCode;
use tonic::{Request, Response, Status};

use crate::cluster::membership::Membership;
use crate::cluster::reassignment_request::alter_reassignment;
use crate::coordinators::Coordinators;
use crate::error::BrokerError;
use crate::internal_topics::{self, OwnerFacts};
use crate::partition::{stored_batches, PartitionOffsets};
use crate::topics::{PartitionView, TopicRegistry};

mod fetch_budget;
mod null_produce;
use fetch_budget::FetchBudget;
use null_produce::NullProduce;

/// `ListOffsets` timestamp asking for the log start offset.
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// `ListOffsets` timestamp asking for the end of what the isolation level can read.
pub const LATEST_TIMESTAMP: i64 = -1;
/// Longest a Fetch may wait for data, whatever the client asks.
const MAX_FETCH_WAIT: Duration = Duration::from_secs(30);

pub struct BrokerService {
    broker_id: i32,
    advertised: String,
    topics: Arc<TopicRegistry>,
    producer_ids: Arc<ProducerIdManager>,
    max_fetch_bytes: usize,
    membership: Option<Arc<Membership>>,
    /// `--coordinator` of a single-node broker.
    static_coordinator: Option<String>,
    /// `--null-produce`: Produce validates and discards (benchmarks only).
    null_produce: Option<NullProduce>,
}

/// What one partition of a Fetch answers when it succeeds.
struct Served {
    records: Vec<u8>,
    next_fetch_offset: i64,
    offsets: PartitionOffsets,
}

impl BrokerService {
    pub fn new(
        broker_id: i32,
        advertised: String,
        topics: Arc<TopicRegistry>,
        producer_ids: Arc<ProducerIdManager>,
        max_fetch_bytes: usize,
    ) -> Self {
        BrokerService {
            broker_id,
            advertised,
            topics,
            producer_ids,
            max_fetch_bytes,
            membership: None,
            static_coordinator: None,
            null_produce: None,
        }
    }

    /// `--null-produce`: Produce validates each batch and writes nothing (benchmarks only;
    /// see `service/null_produce.rs`). Logs a loud warning when enabled.
    pub fn with_null_produce(mut self, enabled: bool) -> Self {
        if enabled {
            tracing::warn!(
                broker_id = self.broker_id,
                "NULL PRODUCE MODE: this broker DISCARDS every record it is sent and answers with fake offsets; for benchmarks only, never for data"
            );
        }
        self.null_produce = enabled.then(NullProduce::default);
        self
    }

    /// The transaction coordinator of a single-node broker (`--coordinator`).
    pub fn with_coordinator(mut self, address: Option<String>) -> Self {
        self.static_coordinator = address;
        self
    }

    /// Where coordinators are known from: the catalog's keys in a cluster, else
    /// `--coordinator`.
    fn coordinators(&self) -> Coordinators {
        if self.topics.is_clustered() {
            Coordinators::Clustered(self.topics.coordinator_view())
        } else {
            Coordinators::Static(self.static_coordinator.clone())
        }
    }

    /// Answers `Metadata` with the brokers registered in the cluster.
    pub fn with_membership(mut self, membership: Option<Arc<Membership>>) -> Self {
        self.membership = membership;
        self
    }

    /// Brokers to list in `Metadata`: the cluster's registrations, or just this broker.
    /// The live brokers. In a cluster, a broker that may have lost its lease (cut off
    /// from etcd) or cannot read the registrations answers UNAVAILABLE rather than its
    /// stale view: a client would otherwise keep following leaders that moved (and, told
    /// of this broker only, forget every other one), while UNAVAILABLE makes it ask
    /// another broker.
    async fn brokers(&self) -> Result<Vec<BrokerInfo>, Status> {
        let me = BrokerInfo {
            broker_id: self.broker_id,
            address: self.advertised.clone(),
        };
        let Some(membership) = &self.membership else {
            return Ok(vec![me]);
        };
        if !membership.holds_lease() {
            return Err(Status::unavailable(format!(
                "broker {} does not hold its etcd lease (cut off from etcd?): its metadata may \
                 be stale; ask another broker",
                self.broker_id
            )));
        }
        match membership.live_brokers().await {
            Ok(registered) => Ok(registered
                .into_iter()
                .map(|r| BrokerInfo {
                    broker_id: r.broker_id,
                    address: r.address,
                })
                .collect()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the cluster's brokers; answering UNAVAILABLE");
                Err(Status::unavailable(format!(
                    "broker {} cannot read the cluster's brokers from etcd: {e}",
                    self.broker_id
                )))
            }
        }
    }

    /// A partition's place in the cluster; offsets only where this broker leads it.
    fn partition_metadata(&self, view: &PartitionView) -> PartitionMetadata {
        let offsets = view
            .local
            .as_ref()
            .filter(|_| view.leader == self.broker_id)
            .map(|p| p.offsets());
        PartitionMetadata {
            error_code: ErrorCode::None as i32,
            partition: view.index,
            leader_id: view.leader,
            leader_epoch: view.leader_epoch,
            replicas: view.replicas.clone(),
            isr: view.isr.clone(),
            log_start_offset: offsets.map_or(-1, |o| o.log_start_offset),
            high_watermark: offsets.map_or(-1, |o| o.high_watermark),
            log_end_offset: offsets.map_or(-1, |o| o.log_end_offset),
            last_stable_offset: offsets.map_or(-1, |o| o.last_stable_offset),
            adding_replicas: view.adding_replicas.clone(),
            removing_replicas: view.removing_replicas.clone(),
        }
    }

    /// One partition of AlterPartitionReassignments.
    async fn reassign(
        &self,
        topic: &str,
        partition: i32,
        replicas: &[i32],
    ) -> Result<(), BrokerError> {
        let Some(cluster) = self.topics.cluster() else {
            return Err(BrokerError::InvalidRequest(
                "partition reassignment needs a cluster: this broker runs alone (no --etcd), \
                 so its partitions have no other broker to move to"
                    .into(),
            ));
        };
        alter_reassignment(
            &cluster.catalog,
            &cluster.membership,
            topic,
            partition,
            replicas,
        )
        .await
    }

    /// What the catalog knows of the owner of an internal topic's partition: only
    /// `__transaction_state` has owners yet, and only a cluster knows them.
    fn owner_facts(&self, topic: &str, partition: i32) -> OwnerFacts {
        match self.coordinators() {
            Coordinators::Clustered(view) if topic == TXN_LOG_TOPIC => view.owner_facts(partition),
            _ => OwnerFacts::default(),
        }
    }

    async fn produce_one(
        &self,
        topic: &str,
        partition: i32,
        records: &Bytes,
        request: &ProduceRequest,
    ) -> PartitionProduceResponse {
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
        // (base offset, log start offset) of the accepted batch.
        let result = match (partition_here, &self.null_produce) {
            (Err(e), _) => Err(e),
            (Ok(_), Some(null)) => null.accept(records).map(|base_offset| (base_offset, 0)),
            (Ok(p), None) => p
                .append(records, acks, timeout)
                .await
                .map(|outcome| (outcome.base_offset, outcome.log_start_offset)),
        };
        match result {
            Ok((base_offset, log_start_offset)) => PartitionProduceResponse {
                partition,
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                base_offset,
                log_append_time_ms: -1,
                log_start_offset,
            },
            Err(e) => {
                log_refusal(topic, partition, &e);
                PartitionProduceResponse {
                    partition,
                    error_code: e.code() as i32,
                    error_message: e.to_string(),
                    base_offset: -1,
                    log_append_time_ms: -1,
                    log_start_offset: -1,
                }
            }
        }
    }

    /// Reads every requested partition once; returns the responses, the bytes found and
    /// whether a consumer position moved past filtered batches without returning any
    /// (the consumer must hear of it now, not after the long-poll).
    fn fetch_once(&self, request: &FetchRequest) -> (Vec<FetchTopicResponse>, usize, bool) {
        let mut budget = FetchBudget::new(request.max_bytes, self.max_fetch_bytes);
        let mut total = 0usize;
        let mut skipped = false;
        let isolation = IsolationLevel::try_from(request.isolation_level);
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in &request.topics {
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for wanted in &topic.partitions {
                let limit = budget.next(wanted.partition_max_bytes);
                let result = check_fetch_sizes(request.max_bytes, wanted.partition_max_bytes)
                    .and_then(|()| self.topics.partition(&topic.name, wanted.partition))
                    .and_then(|p| match request.replica_id {
                        Some(follower) => {
                            let (records, offsets) = p.read_for_follower(
                                follower,
                                wanted.fetch_offset,
                                limit,
                                wanted.current_leader_epoch,
                            )?;
                            if p.follower_may_rejoin(follower) {
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
                            let read =
                                p.read_for_consumer(wanted.fetch_offset, limit, isolation)?;
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
                        let offsets = self
                            .topics
                            .partition(&topic.name, wanted.partition)
                            .ok()
                            .map(|p| p.offsets());
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
        (topics, total, skipped)
    }

    /// KIP-360 for idempotent producers: the same producer id with the next epoch, which
    /// fences every late batch of the old one on every partition. An exhausted epoch
    /// (i16::MAX) moves to a fresh producer id at epoch 0 instead.
    async fn bump_epoch(&self, producer_id: i64, epoch: i32) -> Result<(i64, i16), BrokerError> {
        let epoch = i16::try_from(epoch)
            .ok()
            .filter(|e| *e >= 0)
            .ok_or_else(|| {
                BrokerError::InvalidRequest(format!(
                    "producer epoch {epoch} to bump is not between 0 and {}",
                    i16::MAX
                ))
            })?;
        if producer_id < 0 {
            return Err(BrokerError::InvalidRequest(format!(
                "producer id {producer_id} to bump is negative"
            )));
        }
        match epoch.checked_add(1) {
            Some(next) => Ok((producer_id, next)),
            None => Ok((self.producer_ids.next_producer_id().await?, 0)),
        }
    }

    fn watched_partitions(&self, request: &FetchRequest) -> Vec<tokio::sync::watch::Receiver<i64>> {
        request
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.name.as_str(), p.partition))
            })
            .filter_map(|(topic, partition)| self.topics.partition(topic, partition).ok())
            // Followers read up to the log end, consumers up to the high watermark or,
            // read_committed, the last stable offset (a marker can move it at once).
            .map(|p| match request.replica_id {
                Some(_) => p.watch_log_end(),
                None if request.isolation_level == IsolationLevel::ReadCommitted as i32 => {
                    p.watch_last_stable_offset()
                }
                None => p.watch_high_watermark(),
            })
            .collect()
    }
}

/// How long acks=all waits for the in-sync replicas: the request's timeout, 30 s when
/// unset.
fn replication_timeout(timeout_ms: i32) -> Duration {
    match u64::try_from(timeout_ms) {
        Ok(ms) if ms > 0 => Duration::from_millis(ms),
        _ => Duration::from_secs(30),
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

/// `requested` bytes, at most `limit`; 0 means `limit`.
fn log_refusal(topic: &str, partition: i32, error: &BrokerError) {
    match error.code() {
        ErrorCode::UnknownServerError => {
            tracing::error!(topic, partition, error = %error, "request failed")
        }
        code => {
            tracing::debug!(topic, partition, code = code.as_str_name(), error = %error, "request refused")
        }
    }
}

#[tonic::async_trait]
impl Broker for BrokerService {
    async fn metadata(
        &self,
        request: Request<MetadataRequest>,
    ) -> Result<Response<MetadataResponse>, Status> {
        let request = request.into_inner();
        let topics = self
            .topics
            .describe(&request.topics)
            .into_iter()
            .map(|(name, found)| match found {
                Some(partitions) => TopicMetadata {
                    error_code: ErrorCode::None as i32,
                    name,
                    partitions: partitions
                        .iter()
                        .map(|p| self.partition_metadata(p))
                        .collect(),
                },
                None => TopicMetadata {
                    error_code: ErrorCode::UnknownTopicOrPartition as i32,
                    name,
                    partitions: Vec::new(),
                },
            })
            .collect();
        let coordinators = self.coordinators();
        let txn_log_partitions = self.topics.partition_count(TXN_LOG_TOPIC).unwrap_or(0);
        Ok(Response::new(MetadataResponse {
            brokers: self.brokers().await?,
            topics,
            controller_id: self.broker_id,
            coordinators: coordinators
                .live()
                .into_iter()
                .map(|c| CoordinatorInfo {
                    coordinator_id: c.id,
                    address: c.address,
                })
                .collect(),
            txn_log_owners: coordinators
                .owners(txn_log_partitions)
                .into_iter()
                .map(|(partition, owner)| match owner {
                    Some(o) => TxnLogOwner {
                        partition,
                        coordinator_id: o.coordinator_id,
                        address: o.address,
                        coordinator_epoch: o.coordinator_epoch,
                    },
                    None => TxnLogOwner {
                        partition,
                        coordinator_id: -1,
                        address: String::new(),
                        coordinator_epoch: -1,
                    },
                })
                .collect(),
        }))
    }

    async fn create_topics(
        &self,
        request: Request<CreateTopicsRequest>,
    ) -> Result<Response<CreateTopicsResponse>, Status> {
        let mut results = Vec::new();
        for topic in request.into_inner().topics {
            let result = match internal_topics::check_create(&topic.name, topic.coordinator_id) {
                Ok(()) => {
                    self.topics
                        .create(
                            &topic.name,
                            topic.num_partitions,
                            topic.replication_factor,
                            topic.unclean_leader_election,
                        )
                        .await
                }
                Err(e) => Err(e),
            };
            let (error_code, error_message) = match result {
                Ok(()) => (ErrorCode::None, String::new()),
                Err(e) => (e.code(), e.to_string()),
            };
            results.push(CreateTopicResult {
                name: topic.name,
                error_code: error_code as i32,
                error_message,
            });
        }
        Ok(Response::new(CreateTopicsResponse { topics: results }))
    }

    async fn produce(
        &self,
        request: Request<ProduceRequest>,
    ) -> Result<Response<ProduceResponse>, Status> {
        let request = request.into_inner();
        let refused_acks = match request.acks {
            -1..=1 => None,
            acks => Some(BrokerError::InvalidRequiredAcks(acks)),
        };
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in &request.topics {
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for data in &topic.partitions {
                let response = match &refused_acks {
                    None => {
                        self.produce_one(&topic.name, data.partition, &data.records, &request)
                            .await
                    }
                    Some(e) => PartitionProduceResponse {
                        partition: data.partition,
                        error_code: e.code() as i32,
                        error_message: e.to_string(),
                        base_offset: -1,
                        log_append_time_ms: -1,
                        log_start_offset: -1,
                    },
                };
                partitions.push(response);
            }
            topics.push(TopicProduceResponse {
                name: topic.name.clone(),
                partitions,
            });
        }
        Ok(Response::new(ProduceResponse { topics }))
    }

    async fn fetch(
        &self,
        request: Request<FetchRequest>,
    ) -> Result<Response<FetchResponse>, Status> {
        let request = request.into_inner();
        let wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0))
            .min(MAX_FETCH_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0).max(1);
        let mut watches = self.watched_partitions(&request);
        loop {
            // Subscribe before reading so an append between the read and the wait wakes us.
            for w in &mut watches {
                w.mark_unchanged();
            }
            let (topics, found, skipped) = self.fetch_once(&request);
            let errors = topics
                .iter()
                .flat_map(|t| &t.partitions)
                .any(|p| p.error_code != ErrorCode::None as i32);
            if found >= min_bytes
                || skipped
                || errors
                || watches.is_empty()
                || tokio::time::Instant::now() >= deadline
            {
                return Ok(Response::new(FetchResponse { topics }));
            }
            let changed = futures_any_changed(&mut watches);
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let (topics, _, _) = self.fetch_once(&request);
                return Ok(Response::new(FetchResponse { topics }));
            }
        }
    }

    async fn list_offsets(
        &self,
        request: Request<ListOffsetsRequest>,
    ) -> Result<Response<ListOffsetsResponse>, Status> {
        let request = request.into_inner();
        let isolation = IsolationLevel::try_from(request.isolation_level);
        let topics = request
            .topics
            .iter()
            .map(|topic| ListOffsetsTopicResponse {
                name: topic.name.clone(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|wanted| {
                        let result = self.topics.partition(&topic.name, wanted.partition).and_then(|p| {
                            let offsets = p.offsets();
                            match (wanted.timestamp, isolation) {
                                (_, Err(_)) => Err(BrokerError::InvalidRequest(format!(
                                    "unknown isolation level {}",
                                    request.isolation_level
                                ))),
                                (EARLIEST_TIMESTAMP, _) => Ok(offsets.log_start_offset),
                                (LATEST_TIMESTAMP, Ok(IsolationLevel::ReadCommitted)) => {
                                    Ok(offsets.last_stable_offset)
                                }
                                (LATEST_TIMESTAMP, Ok(IsolationLevel::ReadUncommitted)) => {
                                    Ok(offsets.high_watermark)
                                }
                                (other, _) => Err(BrokerError::InvalidRequest(format!(
                                    "timestamp {other}: only -2 (earliest) and -1 (latest) are supported"
                                ))),
                            }
                        });
                        match result {
                            Ok(offset) => ListOffsetsPartitionResponse {
                                partition: wanted.partition,
                                error_code: ErrorCode::None as i32,
                                error_message: String::new(),
                                offset,
                            },
                            Err(e) => ListOffsetsPartitionResponse {
                                partition: wanted.partition,
                                error_code: e.code() as i32,
                                error_message: e.to_string(),
                                offset: -1,
                            },
                        }
                    })
                    .collect(),
            })
            .collect();
        Ok(Response::new(ListOffsetsResponse { topics }))
    }

    async fn offset_for_leader_epoch(
        &self,
        request: Request<OffsetForLeaderEpochRequest>,
    ) -> Result<Response<OffsetForLeaderEpochResponse>, Status> {
        let request = request.into_inner();
        let response = match offset_for_leader_epoch(&self.topics, &request) {
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
        };
        Ok(Response::new(response))
    }

    async fn init_producer_id(
        &self,
        request: Request<InitProducerIdRequest>,
    ) -> Result<Response<InitProducerIdResponse>, Status> {
        let request = request.into_inner();
        let result = if !request.transactional_id.is_empty() {
            Err(BrokerError::NotCoordinator(
                "transactional ids are served by the transaction coordinator, not by a broker"
                    .into(),
            ))
        } else if let Some(producer_id) = request.producer_id {
            self.bump_epoch(producer_id, request.producer_epoch).await
        } else {
            self.producer_ids
                .next_producer_id()
                .await
                .map(|id| (id, 0))
                .map_err(BrokerError::from)
        };
        let response = match result {
            Ok((producer_id, producer_epoch)) => {
                tracing::debug!(producer_id, producer_epoch, "handed out producer id");
                InitProducerIdResponse {
                    error_code: ErrorCode::None as i32,
                    error_message: String::new(),
                    producer_id,
                    producer_epoch: i32::from(producer_epoch),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "InitProducerId failed");
                InitProducerIdResponse {
                    error_code: e.code() as i32,
                    error_message: e.to_string(),
                    producer_id: -1,
                    producer_epoch: -1,
                }
            }
        };
        Ok(Response::new(response))
    }

    async fn find_coordinator(
        &self,
        request: Request<FindCoordinatorRequest>,
    ) -> Result<Response<FindCoordinatorResponse>, Status> {
        let request = request.into_inner();
        let partitions = self.topics.partition_count(TXN_LOG_TOPIC);
        let found = self
            .coordinators()
            .find(&request.transactional_id, partitions);
        let response = match found {
            Ok(found) => FindCoordinatorResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                coordinator_id: found.coordinator_id,
                address: found.address,
                txn_log_partition: found.txn_log_partition,
                coordinator_epoch: found.coordinator_epoch,
            },
            Err(e) => {
                tracing::debug!(
                    transactional_id = %request.transactional_id,
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
        };
        Ok(Response::new(response))
    }

    async fn write_txn_markers(
        &self,
        request: Request<WriteTxnMarkersRequest>,
    ) -> Result<Response<WriteTxnMarkersResponse>, Status> {
        let request = request.into_inner();
        let timeout = replication_timeout(request.timeout_ms);
        let writes = request.topics.iter().flat_map(|topic| {
            topic
                .partitions
                .iter()
                .map(|partition| self.write_marker(&request, &topic.topic, *partition, timeout))
        });
        // Partitions are independent: each waits for its own in-sync replicas at once.
        let results = futures::future::join_all(writes).await;
        Ok(Response::new(WriteTxnMarkersResponse { results }))
    }

    async fn list_open_transactions(
        &self,
        request: Request<ListOpenTransactionsRequest>,
    ) -> Result<Response<ListOpenTransactionsResponse>, Status> {
        let request = request.into_inner();
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
        Ok(Response::new(ListOpenTransactionsResponse { transactions }))
    }

    async fn alter_partition_reassignments(
        &self,
        request: Request<AlterPartitionReassignmentsRequest>,
    ) -> Result<Response<AlterPartitionReassignmentsResponse>, Status> {
        let request = request.into_inner();
        let mut partitions = Vec::with_capacity(request.partitions.len());
        let mut started = false;
        for wanted in &request.partitions {
            let result = self
                .reassign(&request.topic, wanted.partition, &wanted.replicas)
                .await;
            started |= result.is_ok();
            let (error_code, error_message) = match result {
                Ok(()) => (ErrorCode::None, String::new()),
                Err(e) => {
                    log_refusal(&request.topic, wanted.partition, &e);
                    (e.code(), e.to_string())
                }
            };
            partitions.push(ReassignablePartitionResult {
                partition: wanted.partition,
                error_code: error_code as i32,
                error_message,
            });
        }
        // Answer from the new state: ListPartitionReassignments and Metadata of this
        // broker show the move at once rather than when the catalog watch catches up.
        if started {
            if let Err(e) = self.topics.sync().await {
                tracing::debug!(error = %e, "reading the catalog after a reassignment failed; the watch catches up");
            }
        }
        Ok(Response::new(AlterPartitionReassignmentsResponse {
            topic: request.topic,
            partitions,
        }))
    }

    async fn list_partition_reassignments(
        &self,
        request: Request<ListPartitionReassignmentsRequest>,
    ) -> Result<Response<ListPartitionReassignmentsResponse>, Status> {
        let request = request.into_inner();
        let mut reassignments = Vec::new();
        let mut unknown = Vec::new();
        for (topic, views) in self.topics.describe(&request.topics) {
            let Some(views) = views else {
                unknown.push(topic);
                continue;
            };
            reassignments.extend(
                views
                    .into_iter()
                    .filter(|v| !v.adding_replicas.is_empty() || !v.removing_replicas.is_empty())
                    .map(|v| OngoingPartitionReassignment {
                        topic: topic.clone(),
                        partition: v.index,
                        replicas: v.replicas,
                        adding_replicas: v.adding_replicas,
                        removing_replicas: v.removing_replicas,
                    }),
            );
        }
        let (error_code, error_message) = if unknown.is_empty() {
            (ErrorCode::None, String::new())
        } else {
            (
                ErrorCode::UnknownTopicOrPartition,
                format!("unknown topic(s): {}", unknown.join(", ")),
            )
        };
        Ok(Response::new(ListPartitionReassignmentsResponse {
            error_code: error_code as i32,
            error_message,
            reassignments,
        }))
    }
}

impl BrokerService {
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
                    p.append_marker(
                        request.producer_id,
                        producer_epoch,
                        control_type,
                        request.coordinator_epoch,
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
    // No transaction ever writes an internal topic: its writers are not transactional.
    if is_internal_topic(topic) {
        return Err(BrokerError::InternalTopic {
            topic: topic.to_string(),
            reason: "transaction markers are never written to internal topics".into(),
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

fn offset_for_leader_epoch(
    topics: &TopicRegistry,
    request: &OffsetForLeaderEpochRequest,
) -> Result<(i32, i64), BrokerError> {
    let partition = topics.partition(&request.topic, request.partition)?;
    partition.check_epoch(Some(request.current_leader_epoch))?;
    Ok(partition.epoch_end(request.leader_epoch))
}

/// Resolves when any of the high watermarks changes (or its partition goes away).
async fn futures_any_changed(watches: &mut [tokio::sync::watch::Receiver<i64>]) {
    let futures: Vec<_> = watches.iter_mut().map(|w| Box::pin(w.changed())).collect();
    let _ = futures::future::select_all(futures).await;
}

#[cfg(test)]
mod tests;
