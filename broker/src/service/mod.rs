//! The `idem.v1.Broker` gRPC service: a thin translation from wire messages onto
//! `TopicRegistry` / `Partition` calls and back. Refusals travel as per-partition
//! `ErrorCode`s; gRPC statuses are left to transport-level failures. Each RPC family
//! has its file (`produce`, `producer_id`, `fetch`, `txn`, `admin`, `delete_topics`);
//! this one holds the service's state and hands every RPC to its family.

use std::sync::Arc;

use idem_pidstore::ProducerIdManager;
use idem_proto::v1::broker_server::Broker;
use idem_proto::v1::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteRecordsRequest, DeleteRecordsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, FetchRequest, FetchResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListOffsetsRequest, ListOffsetsResponse, ListOpenTransactionsRequest,
    ListOpenTransactionsResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse, MetadataRequest, MetadataResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ProduceRequest, ProduceResponse,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use idem_runtime::listeners::{Advertised, BoundListeners, Listener};
use tonic::{Request, Response, Status};

use crate::cluster::membership::Membership;
use crate::coordinators::Coordinators;
use crate::topics::TopicRegistry;

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
        Ok(Response::new(
            self.serve_metadata(request.into_inner(), listener).await?,
        ))
    }

    async fn create_topics(
        &self,
        request: Request<CreateTopicsRequest>,
    ) -> Result<Response<CreateTopicsResponse>, Status> {
        Ok(Response::new(
            self.serve_create_topics(request.into_inner()).await,
        ))
    }

    async fn produce(
        &self,
        request: Request<ProduceRequest>,
    ) -> Result<Response<ProduceResponse>, Status> {
        Ok(Response::new(
            self.serve_produce(request.into_inner()).await,
        ))
    }

    async fn fetch(
        &self,
        request: Request<FetchRequest>,
    ) -> Result<Response<FetchResponse>, Status> {
        Ok(Response::new(self.serve_fetch(request.into_inner()).await))
    }

    async fn list_offsets(
        &self,
        request: Request<ListOffsetsRequest>,
    ) -> Result<Response<ListOffsetsResponse>, Status> {
        Ok(Response::new(self.serve_list_offsets(request.into_inner())))
    }

    async fn offset_for_leader_epoch(
        &self,
        request: Request<OffsetForLeaderEpochRequest>,
    ) -> Result<Response<OffsetForLeaderEpochResponse>, Status> {
        Ok(Response::new(
            self.serve_offset_for_leader_epoch(request.into_inner()),
        ))
    }

    async fn init_producer_id(
        &self,
        request: Request<InitProducerIdRequest>,
    ) -> Result<Response<InitProducerIdResponse>, Status> {
        Ok(Response::new(
            self.serve_init_producer_id(request.into_inner()).await,
        ))
    }

    async fn find_coordinator(
        &self,
        request: Request<FindCoordinatorRequest>,
    ) -> Result<Response<FindCoordinatorResponse>, Status> {
        let listener = self.listener_of(&request);
        Ok(Response::new(
            self.serve_find_coordinator(request.into_inner(), listener),
        ))
    }

    async fn write_txn_markers(
        &self,
        request: Request<WriteTxnMarkersRequest>,
    ) -> Result<Response<WriteTxnMarkersResponse>, Status> {
        Ok(Response::new(
            self.serve_write_txn_markers(request.into_inner()).await,
        ))
    }

    async fn list_open_transactions(
        &self,
        request: Request<ListOpenTransactionsRequest>,
    ) -> Result<Response<ListOpenTransactionsResponse>, Status> {
        Ok(Response::new(
            self.serve_list_open_transactions(request.into_inner()),
        ))
    }

    async fn alter_partition_reassignments(
        &self,
        request: Request<AlterPartitionReassignmentsRequest>,
    ) -> Result<Response<AlterPartitionReassignmentsResponse>, Status> {
        Ok(Response::new(
            self.serve_alter_partition_reassignments(request.into_inner())
                .await,
        ))
    }

    async fn list_partition_reassignments(
        &self,
        request: Request<ListPartitionReassignmentsRequest>,
    ) -> Result<Response<ListPartitionReassignmentsResponse>, Status> {
        Ok(Response::new(
            self.serve_list_partition_reassignments(request.into_inner()),
        ))
    }

    async fn describe_configs(
        &self,
        request: Request<DescribeConfigsRequest>,
    ) -> Result<Response<DescribeConfigsResponse>, Status> {
        Ok(Response::new(
            self.serve_describe_configs(request.into_inner()),
        ))
    }

    async fn incremental_alter_configs(
        &self,
        request: Request<IncrementalAlterConfigsRequest>,
    ) -> Result<Response<IncrementalAlterConfigsResponse>, Status> {
        Ok(Response::new(
            self.serve_incremental_alter_configs(request.into_inner())
                .await,
        ))
    }

    async fn delete_records(
        &self,
        request: Request<DeleteRecordsRequest>,
    ) -> Result<Response<DeleteRecordsResponse>, Status> {
        Ok(Response::new(
            self.serve_delete_records(request.into_inner()),
        ))
    }

    async fn create_partitions(
        &self,
        request: Request<CreatePartitionsRequest>,
    ) -> Result<Response<CreatePartitionsResponse>, Status> {
        Ok(Response::new(
            self.serve_create_partitions(request.into_inner()).await,
        ))
    }

    async fn delete_topics(
        &self,
        request: Request<DeleteTopicsRequest>,
    ) -> Result<Response<DeleteTopicsResponse>, Status> {
        Ok(Response::new(
            self.serve_delete_topics(request.into_inner()).await,
        ))
    }
}

#[cfg(test)]
mod tests;
