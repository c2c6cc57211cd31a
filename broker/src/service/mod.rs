//! The `idem.v1.Broker` gRPC service: a thin translation from wire messages onto
//! `TopicRegistry` / `Partition` calls and back. Refusals travel as per-partition
//! `ErrorCode`s; gRPC statuses are left to transport-level failures. Each RPC family
//! has its file (`produce`, `producer_id`, `fetch`, `txn`, `admin`, `delete_topics`);
//! this one holds the service's state and hands every RPC to its family.

use std::sync::Arc;
use std::time::Duration;

use idem_pidstore::ProducerIdManager;
use idem_proto::v1::broker_server::Broker;
use idem_proto::v1::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, CreateAclsRequest,
    CreateAclsResponse, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteAclsRequest, DeleteAclsResponse, DeleteRecordsRequest,
    DeleteRecordsResponse, DeleteTopicsRequest, DeleteTopicsResponse, DescribeAclsRequest,
    DescribeAclsResponse, DescribeConfigsRequest, DescribeConfigsResponse, FetchRequest,
    FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListOffsetsRequest, ListOffsetsResponse, ListOpenTransactionsRequest,
    ListOpenTransactionsResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse, MetadataRequest, MetadataResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ProduceRequest, ProduceResponse,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use idem_runtime::acl::{AclStore, Authorizer, Operation, Resource};
use idem_runtime::authn::principal_of;
use idem_runtime::listeners::{Advertised, BoundListeners, Listener};
use tonic::{Request, Response, Status};

use crate::cluster::membership::Membership;
use crate::coordinators::Coordinators;
use crate::producer_id_cap::ProducerIdCap;
use crate::quota::{QuotaKind, Quotas};
use crate::topics::TopicRegistry;
use idem_proto::internal::is_internal_topic;

mod access;
mod acls;
mod admin;
mod create_partitions;
mod delete_records;
mod delete_topics;
mod fetch;
mod fetch_budget;
mod null_produce;
mod produce;
mod producer_id;
mod refusal;
mod txn;
use null_produce::NullProduce;
pub(crate) use produce::ProduceInFlight;

pub struct BrokerService {
    broker_id: i32,
    /// This broker's addresses, one per listener.
    advertised: Advertised,
    /// Its sockets, to tell which listener a request came in on (`None`: one listener).
    bound: Option<BoundListeners>,
    topics: Arc<TopicRegistry>,
    producer_ids: Arc<ProducerIdManager>,
    max_fetch_bytes: usize,
    membership: Option<Arc<Membership>>,
    /// `--coordinator` of a single-node broker.
    static_coordinator: Option<String>,
    /// `--null-produce`: Produce validates and discards (benchmarks only).
    null_produce: Option<NullProduce>,
    /// `--authorizer`: open, or ACL checks on every RPC (see `access.rs`).
    authorizer: Authorizer,
    /// Where CreateAcls / DeleteAcls store ACLs (`None` without etcd).
    acl_store: Option<AclStore>,
    /// `--max-new-producer-ids-per-minute` (`None`: no cap).
    producer_id_cap: Option<std::sync::Mutex<ProducerIdCap>>,
    /// `--quota-file`: produce and fetch byte rates per principal (`None`: unlimited).
    quotas: Option<Quotas>,
    /// `--kafka-advertise`: what Kafka clients dial for this broker (`None`: no Kafka
    /// listener).
    kafka_advertised: Option<String>,
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
            advertised: Advertised {
                internal: advertised,
                external: None,
            },
            bound: None,
            topics,
            producer_ids,
            max_fetch_bytes,
            membership: None,
            static_coordinator: None,
            null_produce: None,
            authorizer: Authorizer::open(),
            acl_store: None,
            producer_id_cap: None,
            quotas: None,
            kafka_advertised: None,
        }
    }

    /// Holds produce and fetch responses of principals over their byte rates.
    pub fn with_quotas(mut self, quotas: Option<Quotas>) -> Self {
        self.quotas = quotas;
        self
    }

    /// Counts the bytes of `kind` that `topics` carry for clients (internal topics are
    /// the cluster's own traffic) against `principal`'s quota: how long to hold the
    /// response. Without `--quota-file` it costs nothing: the bytes are not even summed.
    fn quota_hold<'a>(
        &self,
        kind: QuotaKind,
        principal: &str,
        topics: impl Iterator<Item = (&'a str, usize)>,
    ) -> Duration {
        let Some(quotas) = &self.quotas else {
            return Duration::ZERO;
        };
        let bytes = topics
            .filter(|(name, _)| !is_internal_topic(name))
            .map(|(_, bytes)| bytes)
            .sum();
        quotas.hold(kind, principal, bytes)
    }

    /// At most `per_minute` new producer ids per principal per minute (0: no cap).
    pub fn with_producer_id_cap(mut self, per_minute: usize) -> Self {
        self.producer_id_cap =
            (per_minute > 0).then(|| std::sync::Mutex::new(ProducerIdCap::new(per_minute)));
        self
    }

    /// This broker's id.
    pub fn broker_id(&self) -> i32 {
        self.broker_id
    }

    /// The address Kafka clients dial for this broker (`--kafka-listen`).
    pub fn with_kafka_advertised(mut self, address: Option<String>) -> Self {
        self.kafka_advertised = address;
        self
    }

    /// What Kafka clients dial for this broker (`None`: no Kafka listener).
    /// Every topic's name and id (KIP-516 topic ids, as Metadata v10+ names them to
    /// Kafka clients); a topic created before ids existed has the zero id.
    pub(crate) fn topic_ids(&self) -> Vec<(String, crate::topic_id::TopicId)> {
        self.topics
            .describe_with_ids(&[])
            .into_iter()
            .filter_map(|(name, found)| found.map(|(id, _)| (name, id)))
            .collect()
    }

    pub fn kafka_advertised(&self) -> Option<&str> {
        self.kafka_advertised.as_deref()
    }

    /// Checks every RPC against `authorizer` (open by default).
    pub fn with_authorizer(mut self, authorizer: Authorizer) -> Self {
        self.authorizer = authorizer;
        self
    }

    /// Serves CreateAcls / DescribeAcls / DeleteAcls from `store`.
    pub fn with_acl_store(mut self, store: Option<AclStore>) -> Self {
        self.acl_store = store;
        self
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

    /// The server's sockets and what it advertises for each: requests arriving on the
    /// external listener (`--external-listen`) are answered with external addresses.
    pub fn with_listeners(mut self, bound: BoundListeners, advertised: Advertised) -> Self {
        self.bound = Some(bound);
        self.advertised = advertised;
        self
    }

    /// The listener `request` arrived on.
    fn listener_of<T>(&self, request: &Request<T>) -> Listener {
        BoundListeners::of_request(self.bound, request)
    }

    /// The transaction coordinator of a single-node broker (`--coordinator`).
    pub fn with_coordinator(mut self, address: Option<String>) -> Self {
        self.static_coordinator = address;
        self
    }

    /// Answers `Metadata` with the brokers registered in the cluster.
    pub fn with_membership(mut self, membership: Option<Arc<Membership>>) -> Self {
        self.membership = membership;
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
}

#[tonic::async_trait]
impl Broker for BrokerService {
    async fn metadata(
        &self,
        request: Request<MetadataRequest>,
    ) -> Result<Response<MetadataResponse>, Status> {
        let listener = self.listener_of(&request);
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        let named = !request.topics.is_empty();
        let response = self.serve_metadata(request, listener).await?;
        Ok(Response::new(
            self.filter_metadata(&principal, named, response),
        ))
    }

    async fn create_topics(
        &self,
        request: Request<CreateTopicsRequest>,
    ) -> Result<Response<CreateTopicsResponse>, Status> {
        let principal = principal_of(&request);
        if !self.authorizer.is_open() {
            for topic in &request.get_ref().topics {
                // Kafka: create on the cluster, or on the topic.
                if self
                    .require(principal, [(Operation::Create, Resource::cluster())])
                    .is_err()
                {
                    self.require(
                        principal,
                        [(Operation::Create, Resource::topic(&topic.name))],
                    )?;
                }
            }
        }
        Ok(Response::new(
            self.serve_create_topics(request.into_inner()).await,
        ))
    }

    async fn produce(
        &self,
        request: Request<ProduceRequest>,
    ) -> Result<Response<ProduceResponse>, Status> {
        let principal = principal_of(&request).to_string();
        Ok(Response::new(
            self.serve_produce(&principal, request.into_inner()).await,
        ))
    }

    async fn fetch(
        &self,
        request: Request<FetchRequest>,
    ) -> Result<Response<FetchResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        if request.replica_id.is_some() {
            // A follower's fetch: inter-node traffic (Kafka's CLUSTER_ACTION).
            self.require(&principal, [(Operation::Alter, Resource::cluster())])?;
        }
        Ok(Response::new(self.serve_fetch(&principal, request).await))
    }

    async fn list_offsets(
        &self,
        request: Request<ListOffsetsRequest>,
    ) -> Result<Response<ListOffsetsResponse>, Status> {
        self.require_topics(
            principal_of(&request),
            Operation::Describe,
            request.get_ref().topics.iter().map(|t| &t.name),
        )?;
        Ok(Response::new(self.serve_list_offsets(request.into_inner())))
    }

    async fn offset_for_leader_epoch(
        &self,
        request: Request<OffsetForLeaderEpochRequest>,
    ) -> Result<Response<OffsetForLeaderEpochResponse>, Status> {
        self.require_topics(
            principal_of(&request),
            Operation::Describe,
            [&request.get_ref().topic],
        )?;
        Ok(Response::new(
            self.serve_offset_for_leader_epoch(request.into_inner()),
        ))
    }

    async fn init_producer_id(
        &self,
        request: Request<InitProducerIdRequest>,
    ) -> Result<Response<InitProducerIdResponse>, Status> {
        let principal = principal_of(&request);
        match request.get_ref().transactional_id.as_str() {
            "" => self.require_idempotent_write(principal)?,
            id => self.require(
                principal,
                [(Operation::Write, Resource::transactional_id(id))],
            )?,
        }
        let asks_new_id = {
            let r = request.get_ref();
            r.transactional_id.is_empty() && r.producer_id.is_none()
        };
        if asks_new_id {
            if let Some(refused) = self.over_producer_id_cap(principal) {
                return Ok(Response::new(refused));
            }
        }
        Ok(Response::new(
            self.serve_init_producer_id(request.into_inner()).await,
        ))
    }

    async fn find_coordinator(
        &self,
        request: Request<FindCoordinatorRequest>,
    ) -> Result<Response<FindCoordinatorResponse>, Status> {
        let listener = self.listener_of(&request);
        let wanted = request.get_ref();
        let resource = if wanted.group_id.is_empty() {
            Resource::transactional_id(&wanted.transactional_id)
        } else {
            Resource::group(&wanted.group_id)
        };
        self.require(principal_of(&request), [(Operation::Describe, resource)])?;
        Ok(Response::new(
            self.serve_find_coordinator(request.into_inner(), listener),
        ))
    }

    async fn write_txn_markers(
        &self,
        request: Request<WriteTxnMarkersRequest>,
    ) -> Result<Response<WriteTxnMarkersResponse>, Status> {
        // Inter-node: only coordinators write markers (Kafka's CLUSTER_ACTION).
        self.require(
            principal_of(&request),
            [(Operation::Alter, Resource::cluster())],
        )?;
        Ok(Response::new(
            self.serve_write_txn_markers(request.into_inner()).await,
        ))
    }

    async fn list_open_transactions(
        &self,
        request: Request<ListOpenTransactionsRequest>,
    ) -> Result<Response<ListOpenTransactionsResponse>, Status> {
        self.require(
            principal_of(&request),
            [(Operation::Describe, Resource::cluster())],
        )?;
        Ok(Response::new(
            self.serve_list_open_transactions(request.into_inner()),
        ))
    }

    async fn alter_partition_reassignments(
        &self,
        request: Request<AlterPartitionReassignmentsRequest>,
    ) -> Result<Response<AlterPartitionReassignmentsResponse>, Status> {
        self.require(
            principal_of(&request),
            [(Operation::Alter, Resource::cluster())],
        )?;
        Ok(Response::new(
            self.serve_alter_partition_reassignments(request.into_inner())
                .await,
        ))
    }

    async fn list_partition_reassignments(
        &self,
        request: Request<ListPartitionReassignmentsRequest>,
    ) -> Result<Response<ListPartitionReassignmentsResponse>, Status> {
        self.require(
            principal_of(&request),
            [(Operation::Describe, Resource::cluster())],
        )?;
        Ok(Response::new(
            self.serve_list_partition_reassignments(request.into_inner()),
        ))
    }

    async fn describe_configs(
        &self,
        request: Request<DescribeConfigsRequest>,
    ) -> Result<Response<DescribeConfigsResponse>, Status> {
        self.require_topics(
            principal_of(&request),
            Operation::Describe,
            &request.get_ref().topics,
        )?;
        Ok(Response::new(
            self.serve_describe_configs(request.into_inner()),
        ))
    }

    async fn incremental_alter_configs(
        &self,
        request: Request<IncrementalAlterConfigsRequest>,
    ) -> Result<Response<IncrementalAlterConfigsResponse>, Status> {
        self.require_topics(
            principal_of(&request),
            Operation::Alter,
            request.get_ref().topics.iter().map(|t| &t.topic),
        )?;
        Ok(Response::new(
            self.serve_incremental_alter_configs(request.into_inner())
                .await,
        ))
    }

    async fn delete_records(
        &self,
        request: Request<DeleteRecordsRequest>,
    ) -> Result<Response<DeleteRecordsResponse>, Status> {
        self.require_topics(
            principal_of(&request),
            Operation::Delete,
            request.get_ref().topics.iter().map(|t| &t.name),
        )?;
        Ok(Response::new(
            self.serve_delete_records(request.into_inner()),
        ))
    }

    async fn create_partitions(
        &self,
        request: Request<CreatePartitionsRequest>,
    ) -> Result<Response<CreatePartitionsResponse>, Status> {
        self.require_topics(
            principal_of(&request),
            Operation::Alter,
            request.get_ref().topics.iter().map(|t| &t.name),
        )?;
        Ok(Response::new(
            self.serve_create_partitions(request.into_inner()).await,
        ))
    }

    async fn delete_topics(
        &self,
        request: Request<DeleteTopicsRequest>,
    ) -> Result<Response<DeleteTopicsResponse>, Status> {
        self.require_topics(
            principal_of(&request),
            Operation::Delete,
            &request.get_ref().topics,
        )?;
        Ok(Response::new(
            self.serve_delete_topics(request.into_inner()).await,
        ))
    }

    async fn create_acls(
        &self,
        request: Request<CreateAclsRequest>,
    ) -> Result<Response<CreateAclsResponse>, Status> {
        self.require(
            principal_of(&request),
            [(Operation::Alter, Resource::cluster())],
        )?;
        Ok(Response::new(
            self.serve_create_acls(request.into_inner()).await,
        ))
    }

    async fn describe_acls(
        &self,
        request: Request<DescribeAclsRequest>,
    ) -> Result<Response<DescribeAclsResponse>, Status> {
        self.require(
            principal_of(&request),
            [(Operation::Describe, Resource::cluster())],
        )?;
        Ok(Response::new(
            self.serve_describe_acls(request.into_inner()).await,
        ))
    }

    async fn delete_acls(
        &self,
        request: Request<DeleteAclsRequest>,
    ) -> Result<Response<DeleteAclsResponse>, Status> {
        self.require(
            principal_of(&request),
            [(Operation::Alter, Resource::cluster())],
        )?;
        Ok(Response::new(
            self.serve_delete_acls(request.into_inner()).await,
        ))
    }
}

#[cfg(test)]
mod tests;
