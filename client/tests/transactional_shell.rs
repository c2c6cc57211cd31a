//! The transactional producer's shell against an in-process fake broker and coordinator
//! (one gRPC server): partitions are registered before their first batch, batches are
//! transactional with sequences from 0 per transaction, commit adopts the answered
//! epoch, failed or fenced sends refuse the commit. The fake broker refuses a
//! transactional batch for an unregistered partition, as the real one does.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_client::{
    ClientError, ErrorCode, ProducerRecord, TransactionalConfig, TransactionalProducer,
    TxnErrorClass, TxnState,
};
use idem_proto::batch;
use idem_proto::v1::broker_server::{Broker, BrokerServer};
use idem_proto::v1::txn_coordinator_server::{TxnCoordinator, TxnCoordinatorServer};
use idem_proto::v1::*;
use tonic::{Request, Response, Status};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Init,
    Add(i32),
    Produce {
        partition: i32,
        epoch: i16,
        base_sequence: i32,
        transactional: bool,
    },
    End {
        commit: bool,
        epoch: i32,
    },
}

#[derive(Debug, Default)]
struct State {
    address: String,
    events: Vec<Event>,
    epoch: i32,
    registered: HashSet<i32>,
    next_offset: HashMap<i32, i64>,
    /// Every produce is answered with this code.
    produce_error: Option<ErrorCode>,
    /// The partitions of each AddPartitionsToTxn call, in call order.
    add_calls: Vec<Vec<i32>>,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<State>>);

impl Fake {
    fn events(&self) -> Vec<Event> {
        self.0.lock().expect("state").events.clone()
    }
    fn set_produce_error(&self, code: Option<ErrorCode>) {
        self.0.lock().expect("state").produce_error = code;
    }
}

const PID: i64 = 7;

#[tonic::async_trait]
impl Broker for Fake {
    async fn metadata(
        &self,
        _: Request<MetadataRequest>,
    ) -> Result<Response<MetadataResponse>, Status> {
        let address = self.0.lock().expect("state").address.clone();
        Ok(Response::new(MetadataResponse {
            brokers: vec![BrokerInfo {
                broker_id: 1,
                address: address.clone(),
            }],
            topics: vec![TopicMetadata {
                topic_id: String::new(),
                error_code: 0,
                name: "t".into(),
                partitions: (0..6)
                    .map(|p| PartitionMetadata {
                        partition: p,
                        leader_id: 1,
                        replicas: vec![1],
                        isr: vec![1],
                        ..Default::default()
                    })
                    .collect(),
            }],
            controller_id: 1,
            coordinators: vec![CoordinatorInfo {
                coordinator_id: 1,
                address,
            }],
            txn_log_owners: Vec::new(),
        }))
    }

    async fn produce(
        &self,
        request: Request<ProduceRequest>,
    ) -> Result<Response<ProduceResponse>, Status> {
        let request = request.into_inner();
        let mut state = self.0.lock().expect("state");
        let mut topics = Vec::new();
        for topic in request.topics {
            let mut partitions = Vec::new();
            for p in topic.partitions {
                let header = batch::decode_header(&p.records)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                state.events.push(Event::Produce {
                    partition: p.partition,
                    epoch: header.producer_epoch,
                    base_sequence: header.base_sequence,
                    transactional: header.is_transactional(),
                });
                let code = match state.produce_error {
                    Some(code) => code,
                    None if !state.registered.contains(&p.partition) => ErrorCode::InvalidTxnState,
                    None if i32::from(header.producer_epoch) != state.epoch => {
                        ErrorCode::InvalidProducerEpoch
                    }
                    None => ErrorCode::None,
                };
                let offset = state.next_offset.entry(p.partition).or_insert(0);
                let base_offset = *offset;
                if code == ErrorCode::None {
                    *offset += i64::from(header.record_count);
                }
                partitions.push(PartitionProduceResponse {
                    partition: p.partition,
                    error_code: code as i32,
                    base_offset,
                    ..Default::default()
                });
            }
            topics.push(TopicProduceResponse {
                name: topic.name,
                partitions,
            });
        }
        Ok(Response::new(ProduceResponse {
            topics,
            throttle_time_ms: 0,
        }))
    }

    async fn find_coordinator(
        &self,
        _: Request<FindCoordinatorRequest>,
    ) -> Result<Response<FindCoordinatorResponse>, Status> {
        let address = self.0.lock().expect("state").address.clone();
        Ok(Response::new(FindCoordinatorResponse {
            coordinator_id: 1,
            address,
            ..Default::default()
        }))
    }

    async fn create_topics(
        &self,
        _: Request<CreateTopicsRequest>,
    ) -> Result<Response<CreateTopicsResponse>, Status> {
        Err(Status::unimplemented("create_topics"))
    }

    async fn fetch(&self, _: Request<FetchRequest>) -> Result<Response<FetchResponse>, Status> {
        Err(Status::unimplemented("fetch"))
    }

    async fn list_offsets(
        &self,
        _: Request<ListOffsetsRequest>,
    ) -> Result<Response<ListOffsetsResponse>, Status> {
        Err(Status::unimplemented("list_offsets"))
    }

    async fn init_producer_id(
        &self,
        _: Request<InitProducerIdRequest>,
    ) -> Result<Response<InitProducerIdResponse>, Status> {
        Err(Status::unimplemented("init_producer_id"))
    }

    async fn offset_for_leader_epoch(
        &self,
        _: Request<OffsetForLeaderEpochRequest>,
    ) -> Result<Response<OffsetForLeaderEpochResponse>, Status> {
        Err(Status::unimplemented("offset_for_leader_epoch"))
    }

    async fn write_txn_markers(
        &self,
        _: Request<WriteTxnMarkersRequest>,
    ) -> Result<Response<WriteTxnMarkersResponse>, Status> {
        Err(Status::unimplemented("write_txn_markers"))
    }

    async fn list_open_transactions(
        &self,
        _: Request<ListOpenTransactionsRequest>,
    ) -> Result<Response<ListOpenTransactionsResponse>, Status> {
        Err(Status::unimplemented("list_open_transactions"))
    }

    async fn alter_partition_reassignments(
        &self,
        _: Request<idem_proto::v1::AlterPartitionReassignmentsRequest>,
    ) -> Result<Response<idem_proto::v1::AlterPartitionReassignmentsResponse>, Status> {
        Err(Status::unimplemented("alter_partition_reassignments"))
    }

    async fn list_partition_reassignments(
        &self,
        _: Request<idem_proto::v1::ListPartitionReassignmentsRequest>,
    ) -> Result<Response<idem_proto::v1::ListPartitionReassignmentsResponse>, Status> {
        Err(Status::unimplemented("list_partition_reassignments"))
    }

    async fn describe_configs(
        &self,
        _: Request<idem_proto::v1::DescribeConfigsRequest>,
    ) -> Result<Response<idem_proto::v1::DescribeConfigsResponse>, Status> {
        Err(Status::unimplemented("describe_configs"))
    }

    async fn incremental_alter_configs(
        &self,
        _: Request<idem_proto::v1::IncrementalAlterConfigsRequest>,
    ) -> Result<Response<idem_proto::v1::IncrementalAlterConfigsResponse>, Status> {
        Err(Status::unimplemented("incremental_alter_configs"))
    }

    async fn delete_records(
        &self,
        _: Request<idem_proto::v1::DeleteRecordsRequest>,
    ) -> Result<Response<idem_proto::v1::DeleteRecordsResponse>, Status> {
        Err(Status::unimplemented("delete_records"))
    }

    async fn create_partitions(
        &self,
        _: Request<idem_proto::v1::CreatePartitionsRequest>,
    ) -> Result<Response<idem_proto::v1::CreatePartitionsResponse>, Status> {
        Err(Status::unimplemented("create_partitions"))
    }

    async fn delete_topics(
        &self,
        _: Request<idem_proto::v1::DeleteTopicsRequest>,
    ) -> Result<Response<idem_proto::v1::DeleteTopicsResponse>, Status> {
        Err(Status::unimplemented("delete_topics"))
    }

    async fn create_acls(
        &self,
        _: Request<idem_proto::v1::CreateAclsRequest>,
    ) -> Result<Response<idem_proto::v1::CreateAclsResponse>, Status> {
        Err(Status::unimplemented("create_acls"))
    }

    async fn describe_acls(
        &self,
        _: Request<idem_proto::v1::DescribeAclsRequest>,
    ) -> Result<Response<idem_proto::v1::DescribeAclsResponse>, Status> {
        Err(Status::unimplemented("describe_acls"))
    }

    async fn delete_acls(
        &self,
        _: Request<idem_proto::v1::DeleteAclsRequest>,
    ) -> Result<Response<idem_proto::v1::DeleteAclsResponse>, Status> {
        Err(Status::unimplemented("delete_acls"))
    }
}

#[tonic::async_trait]
impl TxnCoordinator for Fake {
    async fn find_coordinator(
        &self,
        request: Request<FindCoordinatorRequest>,
    ) -> Result<Response<FindCoordinatorResponse>, Status> {
        Broker::find_coordinator(self, request).await
    }

    async fn init_producer_id(
        &self,
        _: Request<TxnInitProducerIdRequest>,
    ) -> Result<Response<TxnInitProducerIdResponse>, Status> {
        let mut state = self.0.lock().expect("state");
        state.events.push(Event::Init);
        state.epoch += 1;
        state.registered.clear();
        Ok(Response::new(TxnInitProducerIdResponse {
            producer_id: PID,
            producer_epoch: state.epoch,
            ..Default::default()
        }))
    }

    async fn add_partitions_to_txn(
        &self,
        request: Request<AddPartitionsToTxnRequest>,
    ) -> Result<Response<AddPartitionsToTxnResponse>, Status> {
        let request = request.into_inner();
        let mut state = self.0.lock().expect("state");
        let call = request.topics.iter().flat_map(|t| t.partitions.clone());
        let call: Vec<i32> = call.collect();
        state.add_calls.push(call);
        let code = if request.producer_epoch != state.epoch {
            ErrorCode::ProducerFenced
        } else {
            for p in request.topics.iter().flat_map(|t| t.partitions.clone()) {
                state.events.push(Event::Add(p));
                state.registered.insert(p);
            }
            ErrorCode::None
        };
        Ok(Response::new(AddPartitionsToTxnResponse {
            error_code: code as i32,
            error_message: String::new(),
        }))
    }

    async fn end_txn(
        &self,
        request: Request<EndTxnRequest>,
    ) -> Result<Response<EndTxnResponse>, Status> {
        let request = request.into_inner();
        let mut state = self.0.lock().expect("state");
        state.events.push(Event::End {
            commit: request.commit,
            epoch: request.producer_epoch,
        });
        state.epoch += 1;
        state.registered.clear();
        Ok(Response::new(EndTxnResponse {
            producer_epoch: state.epoch,
            ..Default::default()
        }))
    }

    async fn list_transactions(
        &self,
        _: Request<ListTransactionsRequest>,
    ) -> Result<Response<ListTransactionsResponse>, Status> {
        Err(Status::unimplemented("list_transactions"))
    }

    async fn describe_transaction(
        &self,
        _: Request<DescribeTransactionRequest>,
    ) -> Result<Response<DescribeTransactionResponse>, Status> {
        Err(Status::unimplemented("describe_transaction"))
    }

    async fn abort_transaction(
        &self,
        _: Request<AbortTransactionRequest>,
    ) -> Result<Response<AbortTransactionResponse>, Status> {
        Err(Status::unimplemented("abort_transaction"))
    }

    async fn add_offsets_to_txn(
        &self,
        _: Request<AddOffsetsToTxnRequest>,
    ) -> Result<Response<AddOffsetsToTxnResponse>, Status> {
        Err(Status::unimplemented("add_offsets_to_txn"))
    }
}

async fn start() -> (Fake, TransactionalProducer) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let fake = Fake::default();
    fake.0.lock().expect("state").address = address.clone();
    let server = tonic::transport::Server::builder()
        .add_service(BrokerServer::new(fake.clone()))
        .add_service(TxnCoordinatorServer::new(fake.clone()))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
    tokio::spawn(server);
    let config = TransactionalConfig {
        request_timeout: Duration::from_secs(2),
        delivery_timeout: Duration::from_secs(5),
        linger: Duration::ZERO,
        ..TransactionalConfig::new(address, "app")
    };
    let producer = TransactionalProducer::connect(config)
        .await
        .expect("connects");
    (fake, producer)
}

async fn send(
    producer: &TransactionalProducer,
    partition: i32,
    value: &str,
) -> Result<i64, ClientError> {
    producer
        .send(ProducerRecord::new("t", value.to_string()).partition(partition))
        .await?
        .await
        .map(|m| m.offset)
}

fn produced(events: &[Event]) -> Vec<(i32, i16, i32)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Produce {
                partition,
                epoch,
                base_sequence,
                transactional,
            } => {
                assert!(transactional, "every batch is transactional");
                Some((*partition, *epoch, *base_sequence))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn given_two_transactions_then_partitions_are_registered_first_and_each_commit_moves_the_epoch(
) {
    let (fake, producer) = start().await;
    assert!(producer.producer_id().is_none());
    assert!(matches!(
        producer.begin(),
        Err(ClientError::IllegalState(_))
    ));
    producer.init_transactions().await.expect("init");
    assert_eq!(
        producer
            .producer_id()
            .map(|p| (p.producer_id, p.producer_epoch)),
        Some((PID, 1))
    );

    producer.begin().expect("begin");
    assert_eq!(send(&producer, 0, "a").await.expect("a"), 0);
    assert_eq!(send(&producer, 0, "b").await.expect("b"), 1);
    assert_eq!(send(&producer, 1, "c").await.expect("c"), 0);
    producer.commit().await.expect("commit");
    assert_eq!(producer.producer_id().map(|p| p.producer_epoch), Some(2));
    assert_eq!(producer.state(), TxnState::Ready);

    producer.begin().expect("begin");
    send(&producer, 1, "d").await.expect("d");
    producer.commit().await.expect("commit");

    let events = fake.events();
    assert_eq!(
        events,
        vec![
            Event::Init,
            Event::Add(0),
            Event::Produce {
                partition: 0,
                epoch: 1,
                base_sequence: 0,
                transactional: true
            },
            Event::Produce {
                partition: 0,
                epoch: 1,
                base_sequence: 1,
                transactional: true
            },
            Event::Add(1),
            Event::Produce {
                partition: 1,
                epoch: 1,
                base_sequence: 0,
                transactional: true
            },
            Event::End {
                commit: true,
                epoch: 1
            },
            Event::Add(1),
            Event::Produce {
                partition: 1,
                epoch: 2,
                base_sequence: 0,
                transactional: true
            },
            Event::End {
                commit: true,
                epoch: 2
            },
        ]
    );
    producer.close().await;
    assert!(matches!(producer.begin(), Err(ClientError::Closed)));
}

#[tokio::test]
async fn given_concurrent_first_sends_to_one_partition_then_it_is_registered_once_and_commit_waits_for_all(
) {
    let (fake, producer) = start().await;
    producer.init_transactions().await.expect("init");
    producer.begin().expect("begin");
    let mut deliveries = Vec::new();
    let sends: Vec<_> = (0..20)
        .map(|i| {
            let producer = producer.clone();
            tokio::spawn(async move {
                producer
                    .send(ProducerRecord::new("t", format!("v{i}")).partition(0))
                    .await
            })
        })
        .collect();
    for send in sends {
        deliveries.push(send.await.expect("task").expect("send"));
    }
    producer.commit().await.expect("commit");
    for d in deliveries {
        d.await.expect("acknowledged before commit returned");
    }
    let events = fake.events();
    assert_eq!(events.iter().filter(|e| **e == Event::Add(0)).count(), 1);
    let seqs: Vec<i32> = produced(&events).iter().map(|p| p.2).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "sequences in send order: {seqs:?}"
    );
    assert_eq!(seqs.first(), Some(&0));
}

#[tokio::test]
async fn given_a_failed_send_then_commit_is_refused_as_abortable_and_abort_ends_the_transaction() {
    let (fake, producer) = start().await;
    producer.init_transactions().await.expect("init");
    producer.begin().expect("begin");
    fake.set_produce_error(Some(ErrorCode::MessageTooLarge));
    let error = send(&producer, 0, "big").await.expect_err("refused");
    assert_eq!(error.code(), Some(ErrorCode::MessageTooLarge));
    fake.set_produce_error(None);
    let error = producer
        .commit()
        .await
        .expect_err("a failed send refuses the commit");
    assert_eq!(error.txn_class(), TxnErrorClass::Abortable, "{error}");
    assert_eq!(error.code(), Some(ErrorCode::MessageTooLarge));
    assert_eq!(producer.state(), TxnState::AbortableError);
    assert!(producer.begin().is_err());
    producer.abort().await.expect("abort");
    assert_eq!(producer.producer_id().map(|p| p.producer_epoch), Some(2));
    assert!(!fake
        .events()
        .iter()
        .any(|e| matches!(e, Event::End { commit: true, .. })));
    assert!(fake.events().contains(&Event::End {
        commit: false,
        epoch: 1
    }));
    // The next transaction works.
    producer.begin().expect("begin");
    send(&producer, 0, "ok").await.expect("ok");
    producer.commit().await.expect("commit");
}

#[tokio::test]
async fn given_a_newer_instance_then_the_old_one_is_fenced_for_good() {
    let (fake, zombie) = start().await;
    zombie.init_transactions().await.expect("init");
    zombie.begin().expect("begin");
    send(&zombie, 0, "z1").await.expect("z1");
    // A newer instance takes over: the epoch moves on, partition 0's batches of the old
    // epoch are refused, and so is registering partition 1.
    {
        let mut state = fake.0.lock().expect("state");
        state.epoch += 1;
        state.registered.insert(0);
    }
    let error = send(&zombie, 0, "z2")
        .await
        .expect_err("fenced at the broker");
    assert_eq!(error.code(), Some(ErrorCode::InvalidProducerEpoch));
    let error = send(&zombie, 1, "z3").await.expect_err("fenced");
    assert_eq!(error.txn_class(), TxnErrorClass::Fatal, "{error}");
    for error in [
        zombie.commit().await.expect_err("commit"),
        zombie.abort().await.expect_err("abort"),
        zombie.begin().expect_err("begin"),
    ] {
        assert_eq!(error.txn_class(), TxnErrorClass::Fatal, "{error}");
    }
    assert_eq!(zombie.state(), TxnState::FatalError);
    assert!(!fake.events().iter().any(|e| matches!(e, Event::End { .. })));
}

#[tokio::test]
async fn given_no_send_then_commit_ends_locally_and_keeps_the_epoch() {
    let (fake, producer) = start().await;
    producer.init_transactions().await.expect("init");
    producer.begin().expect("begin");
    producer.commit().await.expect("commit");
    producer.begin().expect("begin");
    producer.abort().await.expect("abort");
    assert_eq!(producer.producer_id().map(|p| p.producer_epoch), Some(1));
    assert_eq!(fake.events(), vec![Event::Init]);
}

#[tokio::test]
async fn given_first_sends_to_many_partitions_then_registrations_are_batched_and_none_holds_up_send(
) {
    let (fake, producer) = start().await;
    producer.init_transactions().await.expect("init");
    producer.begin().expect("begin");
    let mut deliveries = Vec::new();
    for partition in 0..6 {
        let record = ProducerRecord::new("t", format!("p{partition}")).partition(partition);
        deliveries.push(producer.send(record).await.expect("send"));
    }
    producer.commit().await.expect("commit");
    for d in deliveries {
        d.await.expect("acknowledged");
    }
    let state = fake.0.lock().expect("state");
    let mut registered: Vec<i32> = state.add_calls.iter().flatten().copied().collect();
    registered.sort_unstable();
    assert_eq!(
        registered,
        (0..6).collect::<Vec<_>>(),
        "each partition once"
    );
    assert!(
        state.add_calls.len() <= 2,
        "six first sends need at most two round trips: {:?}",
        state.add_calls
    );
    // No batch of a partition before its registration.
    for (i, event) in state.events.iter().enumerate() {
        if let Event::Produce { partition, .. } = event {
            assert!(
                state.events[..i].contains(&Event::Add(*partition)),
                "partition {partition} produced before it was registered"
            );
        }
    }
}
