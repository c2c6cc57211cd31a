//! The cluster's description and administration: Metadata (brokers, partitions,
//! coordinators), CreateTopics, ListOffsets (earliest, latest, by timestamp), partition reassignment (start one, list
//! those under way), and topic configs (DescribeConfigs, IncrementalAlterConfigs).

use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::v1::{
    AlterConfigsResult, AlterConfigsTopic, AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse, BrokerInfo, ConfigOpType, ConfigSource, CoordinatorInfo,
    CreatableTopic, CreateTopicResult, CreateTopicsRequest, CreateTopicsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, DescribeConfigsResult, DescribedConfig,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, IsolationLevel,
    ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse,
    ListOffsetsTopicResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse, MetadataRequest, MetadataResponse,
    OngoingPartitionReassignment, PartitionMetadata, ReassignablePartitionResult, TopicMetadata,
    TxnLogOwner,
};
use idem_proto::ErrorCode;
use idem_runtime::listeners::{pick, Listener};
use tonic::Status;

use super::refusal::log_refusal;
use super::BrokerService;
use crate::cluster::reassignment_request::alter_reassignment;
use crate::error::BrokerError;
use crate::internal_topics;
use crate::partition::{Partition, TimeTarget};
use crate::topic_config::{ConfigOp, TopicConfig};
use crate::topics::PartitionView;

/// The operations of one topic of IncrementalAlterConfigs; an operation type this
/// broker does not know (APPEND, SUBTRACT) is INVALID_REQUEST.
fn config_ops(topic: &AlterConfigsTopic) -> Result<Vec<ConfigOp>, BrokerError> {
    topic
        .configs
        .iter()
        .map(|c| match ConfigOpType::try_from(c.op) {
            Ok(ConfigOpType::Set) => Ok(ConfigOp::Set {
                key: c.name.clone(),
                value: c.value.clone(),
            }),
            Ok(ConfigOpType::Delete) => Ok(ConfigOp::Delete {
                key: c.name.clone(),
            }),
            Err(_) => Err(BrokerError::InvalidRequest(format!(
                "config {:?}: operation {} is not supported (0 = SET, 1 = DELETE)",
                c.name, c.op
            ))),
        })
        .collect()
}

/// One partition's ListOffsets answer: `(offset, timestamp)`, the timestamp -1 for the
/// earliest and latest offsets, both -1 when no record has the timestamp asked for.
fn list_offset(
    partition: &Partition,
    timestamp: i64,
    isolation: IsolationLevel,
) -> Result<(i64, i64), BrokerError> {
    let offsets = partition.offsets();
    let by_time = match timestamp {
        EARLIEST_TIMESTAMP => return Ok((offsets.log_start_offset, -1)),
        LATEST_TIMESTAMP => {
            let end = match isolation {
                IsolationLevel::ReadCommitted => offsets.last_stable_offset,
                IsolationLevel::ReadUncommitted => offsets.high_watermark,
            };
            return Ok((end, -1));
        }
        MAX_TIMESTAMP => TimeTarget::Newest,
        at_or_after if at_or_after >= 0 => TimeTarget::AtOrAfter(at_or_after),
        other => {
            return Err(BrokerError::InvalidRequest(format!(
                "timestamp {other}: -2 (earliest), -1 (latest), -3 (largest timestamp) or a \
                 time in ms since the epoch"
            )))
        }
    };
    Ok(partition
        .offset_for_timestamp(by_time, isolation)?
        .map_or((-1, -1), |found| (found.offset, found.timestamp_ms)))
}

/// `ListOffsets` timestamp asking for the record with the largest timestamp.
pub const MAX_TIMESTAMP: i64 = -3;
/// `ListOffsets` timestamp asking for the log start offset.
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// `ListOffsets` timestamp asking for the end of what the isolation level can read.
pub const LATEST_TIMESTAMP: i64 = -1;

impl BrokerService {
    pub(crate) async fn serve_metadata(
        &self,
        request: MetadataRequest,
        listener: Listener,
    ) -> Result<MetadataResponse, Status> {
        let topics = self
            .topics
            .describe_with_ids(&request.topics)
            .into_iter()
            .map(|(name, found)| match found {
                Some((topic_id, partitions)) => TopicMetadata {
                    error_code: ErrorCode::None as i32,
                    name,
                    partitions: partitions
                        .iter()
                        .map(|p| self.partition_metadata(p))
                        .collect(),
                    topic_id: if topic_id.is_zero() {
                        String::new()
                    } else {
                        topic_id.to_string()
                    },
                },
                None => TopicMetadata {
                    error_code: ErrorCode::UnknownTopicOrPartition as i32,
                    name,
                    partitions: Vec::new(),
                    topic_id: String::new(),
                },
            })
            .collect();
        let coordinators = self.coordinators();
        let txn_log_partitions = self.topics.partition_count(TXN_LOG_TOPIC).unwrap_or(0);
        Ok(MetadataResponse {
            brokers: self.brokers(listener).await?,
            topics,
            controller_id: self.broker_id,
            coordinators: coordinators
                .live()
                .into_iter()
                .map(|c| CoordinatorInfo {
                    coordinator_id: c.id,
                    address: pick(listener, &c.address, c.external_address.as_deref()).into(),
                })
                .collect(),
            txn_log_owners: coordinators
                .owners(txn_log_partitions)
                .into_iter()
                .map(|(partition, owner)| match owner {
                    Some(o) => TxnLogOwner {
                        partition,
                        coordinator_id: o.coordinator_id,
                        address: pick(listener, &o.address, o.external_address.as_deref()).into(),
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
        })
    }

    pub(crate) async fn serve_create_topics(
        &self,
        request: CreateTopicsRequest,
    ) -> CreateTopicsResponse {
        let mut results = Vec::new();
        for topic in request.topics {
            let result = self.create_topic(&topic).await;
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
        CreateTopicsResponse { topics: results }
    }

    async fn create_topic(&self, topic: &CreatableTopic) -> Result<(), BrokerError> {
        internal_topics::check_create(&topic.name, topic.coordinator_id)?;
        let config = TopicConfig::from_pairs(
            topic
                .configs
                .iter()
                .map(|c| (c.name.as_str(), c.value.as_str())),
        )?;
        self.topics
            .create(
                &topic.name,
                topic.num_partitions,
                topic.replication_factor,
                topic.unclean_leader_election,
                config,
            )
            .await
    }

    pub(crate) fn serve_describe_configs(
        &self,
        request: DescribeConfigsRequest,
    ) -> DescribeConfigsResponse {
        let topics = request
            .topics
            .into_iter()
            .map(|topic| match self.topics.describe_config(&topic) {
                Some(entries) => DescribeConfigsResult {
                    topic,
                    error_code: ErrorCode::None as i32,
                    error_message: String::new(),
                    configs: entries
                        .into_iter()
                        .map(|e| DescribedConfig {
                            name: e.name,
                            value: e.value,
                            source: if e.from_topic {
                                ConfigSource::TopicConfig
                            } else {
                                ConfigSource::DefaultConfig
                            } as i32,
                        })
                        .collect(),
                },
                None => {
                    let e = BrokerError::UnknownTopic(topic.clone());
                    DescribeConfigsResult {
                        topic,
                        error_code: e.code() as i32,
                        error_message: e.to_string(),
                        configs: Vec::new(),
                    }
                }
            })
            .collect();
        DescribeConfigsResponse { topics }
    }

    pub(crate) async fn serve_incremental_alter_configs(
        &self,
        request: IncrementalAlterConfigsRequest,
    ) -> IncrementalAlterConfigsResponse {
        let mut topics = Vec::with_capacity(request.topics.len());
        for wanted in request.topics {
            let result = match config_ops(&wanted) {
                Ok(ops) => {
                    self.topics
                        .alter_config(&wanted.topic, &ops, request.validate_only)
                        .await
                }
                Err(e) => Err(e),
            };
            let (error_code, error_message) = match result {
                Ok(()) => (ErrorCode::None, String::new()),
                Err(e) => {
                    tracing::info!(topic = %wanted.topic, error = %e, "refused a topic config change");
                    (e.code(), e.to_string())
                }
            };
            topics.push(AlterConfigsResult {
                topic: wanted.topic,
                error_code: error_code as i32,
                error_message,
            });
        }
        IncrementalAlterConfigsResponse { topics }
    }

    pub(crate) fn serve_list_offsets(&self, request: ListOffsetsRequest) -> ListOffsetsResponse {
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
                        let result = match isolation {
                            Ok(isolation) => self
                                .topics
                                .partition(&topic.name, wanted.partition)
                                .and_then(|p| list_offset(&p, wanted.timestamp, isolation)),
                            Err(_) => Err(BrokerError::InvalidRequest(format!(
                                "unknown isolation level {}",
                                request.isolation_level
                            ))),
                        };
                        match result {
                            Ok((offset, timestamp)) => ListOffsetsPartitionResponse {
                                partition: wanted.partition,
                                error_code: ErrorCode::None as i32,
                                error_message: String::new(),
                                offset,
                                timestamp,
                            },
                            Err(e) => ListOffsetsPartitionResponse {
                                partition: wanted.partition,
                                error_code: e.code() as i32,
                                error_message: e.to_string(),
                                offset: -1,
                                timestamp: -1,
                            },
                        }
                    })
                    .collect(),
            })
            .collect();
        ListOffsetsResponse { topics }
    }

    pub(super) async fn serve_alter_partition_reassignments(
        &self,
        request: AlterPartitionReassignmentsRequest,
    ) -> AlterPartitionReassignmentsResponse {
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
        AlterPartitionReassignmentsResponse {
            topic: request.topic,
            partitions,
        }
    }

    pub(super) fn serve_list_partition_reassignments(
        &self,
        request: ListPartitionReassignmentsRequest,
    ) -> ListPartitionReassignmentsResponse {
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
        ListPartitionReassignmentsResponse {
            error_code: error_code as i32,
            error_message,
            reassignments,
        }
    }

    /// Brokers to list in `Metadata`: the cluster's registrations, or just this broker.
    /// The live brokers. In a cluster, a broker that may have lost its lease (cut off
    /// from etcd) or cannot read the registrations answers UNAVAILABLE rather than its
    /// stale view: a client would otherwise keep following leaders that moved (and, told
    /// of this broker only, forget every other one), while UNAVAILABLE makes it ask
    /// another broker.
    async fn brokers(&self, listener: Listener) -> Result<Vec<BrokerInfo>, Status> {
        let me = BrokerInfo {
            broker_id: self.broker_id,
            address: self.advertised.on(listener).into(),
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
                    address: pick(listener, &r.address, r.external_address.as_deref()).into(),
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

    /// Every live broker's Kafka listener address (`None` for one without a Kafka
    /// listener), as the gRPC Metadata lists the brokers: this broker alone outside a
    /// cluster; UNAVAILABLE when the cluster's brokers cannot be read from etcd.
    pub(crate) async fn kafka_brokers(&self) -> Result<Vec<(i32, Option<String>)>, Status> {
        let Some(membership) = &self.membership else {
            return Ok(vec![(self.broker_id, self.kafka_advertised.clone())]);
        };
        if !membership.holds_lease() {
            return Err(Status::unavailable(
                "this broker does not hold its etcd lease",
            ));
        }
        membership
            .live_brokers()
            .await
            .map(|registered| {
                registered
                    .into_iter()
                    .map(|r| (r.broker_id, r.kafka_address))
                    .collect()
            })
            .map_err(|e| Status::unavailable(e.to_string()))
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
}
