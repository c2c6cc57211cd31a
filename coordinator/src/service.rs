//! The gRPC service `idem.v1.TxnCoordinator`: a thin translation between the wire and
//! the core. Refusals and decider errors travel as `ErrorCode`s in the answer; gRPC
//! status codes are left to transport failures.

use idem_runtime::acl::{Authorizer, Operation, Resource};
use idem_runtime::authn::principal_of;
use idem_runtime::listeners::{pick, BoundListeners};
use std::collections::BTreeMap;
use std::sync::Arc;

use idem_proto::internal::is_internal_topic;
use idem_proto::txn::OFFSETS_TOPIC;
use idem_proto::v1::txn_coordinator_server::TxnCoordinator;
use idem_proto::v1::{
    AbortTransactionRequest, AbortTransactionResponse, AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    DescribeTransactionRequest, DescribeTransactionResponse, EndTxnRequest, EndTxnResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, ListTransactionsRequest,
    ListTransactionsResponse, TransactionDescription, TxnInitProducerIdRequest,
    TxnInitProducerIdResponse, TxnTopicPartitions,
};
use idem_proto::ErrorCode;
use tonic::{Request, Response, Status};

use crate::core::{txn_error_code, Coordinator, Refusal};
use crate::txn::decide::{self, Reply, TopicPartition, TxnMetadata};
use crate::txn::state::TxnState;

pub struct TxnCoordinatorService {
    core: Arc<Coordinator>,
    /// The server's sockets, to answer FindCoordinator with the addresses of the
    /// listener it was asked on (`None`: one listener).
    bound: Option<BoundListeners>,
    /// `--authorizer`: every RPC's (operation, resource) pairs are checked before the
    /// core sees the request, so a refused one changes nothing (docs/operations.md).
    authorizer: Authorizer,
}

impl TxnCoordinatorService {
    pub fn new(core: Arc<Coordinator>) -> Self {
        TxnCoordinatorService {
            core,
            bound: None,
            authorizer: Authorizer::open(),
        }
    }

    pub fn with_authorizer(mut self, authorizer: Authorizer) -> Self {
        self.authorizer = authorizer;
        self
    }

    /// Every one of `needs`, or the refusal naming the first one denied.
    fn authorize(
        &self,
        principal: &str,
        needs: impl IntoIterator<Item = (Operation, Resource)>,
    ) -> Result<(), Refusal> {
        Refusal::unless_authorized(&self.authorizer, principal, needs)
    }

    pub fn with_listeners(mut self, bound: BoundListeners) -> Self {
        self.bound = Some(bound);
        self
    }
}

/// A producer epoch from the wire; out of range is INVALID_REQUEST.
fn producer_epoch(epoch: i32) -> Result<i16, Refusal> {
    i16::try_from(epoch)
        .ok()
        .filter(|e| *e >= 0)
        .ok_or_else(|| {
            Refusal::new(
                ErrorCode::InvalidRequest,
                format!("producer epoch {epoch} out of range"),
            )
        })
}

/// The code and message of a reply that is not a success.
fn failure(reply: &Reply) -> Option<(ErrorCode, String)> {
    match reply {
        Reply::Error(e) => Some((txn_error_code(*e), format!("{e:?}"))),
        _ => None,
    }
}

fn topics_of(partitions: impl IntoIterator<Item = TopicPartition>) -> Vec<TxnTopicPartitions> {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(tp.topic).or_default().push(tp.partition);
    }
    by_topic
        .into_iter()
        .map(|(topic, partitions)| TxnTopicPartitions { topic, partitions })
        .collect()
}

fn description(core: &Coordinator, partition: i32, meta: TxnMetadata) -> TransactionDescription {
    TransactionDescription {
        transactional_id: meta.transactional_id,
        producer_id: meta.producer_id,
        producer_epoch: i32::from(meta.producer_epoch),
        state: meta.state.name().to_string(),
        timeout_ms: meta.timeout_ms,
        topics: topics_of(meta.partitions),
        txn_start_ms: meta.txn_start_ms,
        last_update_ms: meta.last_update_ms,
        coordinator_id: core.coordinator_id(),
        txn_log_partition: partition,
        pending_end: match &meta.pending_end {
            Some(end) if end.commit => "COMMIT".to_string(),
            Some(_) => "ABORT".to_string(),
            None => String::new(),
        },
        pending_end_topics: topics_of(
            meta.pending_end
                .map(|end| end.partitions)
                .unwrap_or_default(),
        ),
    }
}

impl TxnCoordinatorService {
    /// AddPartitionsToTxn's decision and its answer.
    async fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i32,
        partitions: Vec<TopicPartition>,
    ) -> (ErrorCode, String) {
        let decided = match producer_epoch(epoch) {
            Ok(producer_epoch) => {
                self.core
                    .handle(
                        transactional_id,
                        decide::Request::AddPartitions {
                            producer_id,
                            producer_epoch,
                            partitions,
                        },
                    )
                    .await
            }
            Err(r) => Err(r),
        };
        match decided {
            Ok(reply) => failure(&reply).unwrap_or((ErrorCode::None, String::new())),
            Err(r) => (r.code, r.message),
        }
    }
}

#[tonic::async_trait]
impl TxnCoordinator for TxnCoordinatorService {
    async fn find_coordinator(
        &self,
        request: Request<FindCoordinatorRequest>,
    ) -> Result<Response<FindCoordinatorResponse>, Status> {
        let listener = BoundListeners::of_request(self.bound, &request);
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        // A group lives in the slice its id hashes to, like a transactional id.
        let (id, resource) = if request.transactional_id.is_empty() {
            let resource = Resource::group(&request.group_id);
            (request.group_id, resource)
        } else {
            let resource = Resource::transactional_id(&request.transactional_id);
            (request.transactional_id, resource)
        };
        let found = self
            .authorize(&principal, [(Operation::Describe, resource)])
            .and_then(|()| self.core.find_coordinator(&id));
        let answer = match found {
            Ok((partition, owner)) => FindCoordinatorResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                coordinator_id: owner.coordinator_id,
                address: pick(listener, &owner.address, owner.external_address.as_deref()).into(),
                txn_log_partition: partition,
                coordinator_epoch: owner.coordinator_epoch,
            },
            Err(r) => FindCoordinatorResponse {
                error_code: r.code as i32,
                error_message: r.message,
                coordinator_id: -1,
                txn_log_partition: self.core.log_partition_of(&id).unwrap_or(-1),
                ..FindCoordinatorResponse::default()
            },
        };
        Ok(Response::new(answer))
    }

    async fn init_producer_id(
        &self,
        request: Request<TxnInitProducerIdRequest>,
    ) -> Result<Response<TxnInitProducerIdResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        let authorized = self.authorize(
            &principal,
            [(
                Operation::Write,
                Resource::transactional_id(&request.transactional_id),
            )],
        );
        let renewing = match authorized.map(|()| request.producer_id) {
            Err(refusal) => Err(refusal),
            Ok(None) => Ok(None),
            Ok(Some(producer_id)) => producer_epoch(request.producer_epoch).map(|producer_epoch| {
                Some(decide::ProducerIdentity {
                    producer_id,
                    producer_epoch,
                })
            }),
        };
        let decided = match renewing {
            Ok(renewing) => {
                self.core
                    .handle(
                        &request.transactional_id,
                        decide::Request::InitProducerId {
                            timeout_ms: request.transaction_timeout_ms,
                            renewing,
                        },
                    )
                    .await
            }
            Err(refusal) => Err(refusal),
        };
        let answer = match decided {
            Ok(Reply::ProducerId {
                producer_id,
                producer_epoch,
            }) => TxnInitProducerIdResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                producer_id,
                producer_epoch: i32::from(producer_epoch),
            },
            Ok(other) => {
                let (code, message) = failure(&other).unwrap_or((
                    ErrorCode::UnknownServerError,
                    format!("unexpected {other:?}"),
                ));
                TxnInitProducerIdResponse {
                    error_code: code as i32,
                    error_message: message,
                    producer_id: -1,
                    producer_epoch: -1,
                }
            }
            Err(r) => TxnInitProducerIdResponse {
                error_code: r.code as i32,
                error_message: r.message,
                producer_id: -1,
                producer_epoch: -1,
            },
        };
        Ok(Response::new(answer))
    }

    async fn add_partitions_to_txn(
        &self,
        request: Request<AddPartitionsToTxnRequest>,
    ) -> Result<Response<AddPartitionsToTxnResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        // Write on the transactional id and on every topic joining it (Kafka's rule).
        let needs = std::iter::once((
            Operation::Write,
            Resource::transactional_id(&request.transactional_id),
        ))
        .chain(
            request
                .topics
                .iter()
                .map(|t| (Operation::Write, Resource::topic(&t.topic))),
        );
        if let Err(r) = self.authorize(&principal, needs) {
            return Ok(Response::new(AddPartitionsToTxnResponse {
                error_code: r.code as i32,
                error_message: r.message,
            }));
        }
        let partitions: Vec<TopicPartition> = request
            .topics
            .into_iter()
            .flat_map(|t| {
                let topic = t.topic;
                t.partitions
                    .into_iter()
                    .map(move |partition| TopicPartition {
                        topic: topic.clone(),
                        partition,
                    })
            })
            .collect();
        // A group's offsets partition joins only through AddOffsetsToTxn (which names the
        // group); other internal topics never join a transaction.
        let internal = partitions.iter().find(|tp| is_internal_topic(&tp.topic));
        let (code, message) = match internal {
            Some(tp) => (
                ErrorCode::InvalidTopicException,
                format!(
                    "{} is an internal topic: it never joins a transaction through AddPartitionsToTxn (offsets join with AddOffsetsToTxn)",
                    tp.topic
                ),
            ),
            None => {
                self.add_partitions(
                    &request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    partitions,
                )
                .await
            }
        };
        Ok(Response::new(AddPartitionsToTxnResponse {
            error_code: code as i32,
            error_message: message,
        }))
    }

    async fn add_offsets_to_txn(
        &self,
        request: Request<AddOffsetsToTxnRequest>,
    ) -> Result<Response<AddOffsetsToTxnResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        let partition = self
            .authorize(
                &principal,
                [
                    (
                        Operation::Write,
                        Resource::transactional_id(&request.transactional_id),
                    ),
                    (Operation::Read, Resource::group(&request.group_id)),
                ],
            )
            .and_then(|()| self.core.log_partition_of(&request.group_id));
        let (code, message) = match partition {
            // The group's slice of `__consumer_offsets` joins the transaction like any
            // partition: registered, then opened there with a BEGIN marker.
            Ok(partition) => {
                let offsets = TopicPartition {
                    topic: OFFSETS_TOPIC.to_string(),
                    partition,
                };
                self.add_partitions(
                    &request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    vec![offsets],
                )
                .await
            }
            Err(r) => (r.code, r.message),
        };
        Ok(Response::new(AddOffsetsToTxnResponse {
            error_code: code as i32,
            error_message: message,
        }))
    }

    async fn end_txn(
        &self,
        request: Request<EndTxnRequest>,
    ) -> Result<Response<EndTxnResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let request = request.into_inner();
        let epoch = self
            .authorize(
                &principal,
                [(
                    Operation::Write,
                    Resource::transactional_id(&request.transactional_id),
                )],
            )
            .and_then(|()| producer_epoch(request.producer_epoch));
        let decided = match epoch {
            Ok(epoch) => {
                self.core
                    .handle(
                        &request.transactional_id,
                        decide::Request::EndTxn {
                            producer_id: request.producer_id,
                            producer_epoch: epoch,
                            commit: request.commit,
                            keep_epoch: request.keep_epoch,
                        },
                    )
                    .await
            }
            Err(r) => Err(r),
        };
        let answer = match decided {
            Ok(Reply::Ok { producer_epoch }) => EndTxnResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                producer_epoch: i32::from(producer_epoch),
            },
            Ok(other) => {
                let (code, message) = failure(&other).unwrap_or((
                    ErrorCode::UnknownServerError,
                    format!("unexpected {other:?}"),
                ));
                EndTxnResponse {
                    error_code: code as i32,
                    error_message: message,
                    producer_epoch: -1,
                }
            }
            Err(r) => EndTxnResponse {
                error_code: r.code as i32,
                error_message: r.message,
                producer_epoch: -1,
            },
        };
        Ok(Response::new(answer))
    }

    async fn list_transactions(
        &self,
        request: Request<ListTransactionsRequest>,
    ) -> Result<Response<ListTransactionsResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let mut states = Vec::new();
        for name in request.into_inner().states {
            match TxnState::from_name(&name) {
                Some(state) => states.push(state),
                None => {
                    return Ok(Response::new(ListTransactionsResponse {
                        error_code: ErrorCode::InvalidRequest as i32,
                        error_message: format!("unknown transaction state {name:?}"),
                        ..ListTransactionsResponse::default()
                    }))
                }
            }
        }
        let (txns, owned) = self.core.list(&states);
        Ok(Response::new(ListTransactionsResponse {
            error_code: ErrorCode::None as i32,
            error_message: String::new(),
            // Only the transactions the principal may describe (as Kafka does).
            transactions: txns
                .into_iter()
                .filter(|(_, meta)| {
                    self.authorize(
                        &principal,
                        [(
                            Operation::Describe,
                            Resource::transactional_id(&meta.transactional_id),
                        )],
                    )
                    .is_ok()
                })
                .map(|(partition, meta)| description(&self.core, partition, meta))
                .collect(),
            owned_partitions: owned,
        }))
    }

    async fn describe_transaction(
        &self,
        request: Request<DescribeTransactionRequest>,
    ) -> Result<Response<DescribeTransactionResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let id = request.into_inner().transactional_id;
        let described = self
            .authorize(
                &principal,
                [(Operation::Describe, Resource::transactional_id(&id))],
            )
            .and_then(|()| self.core.describe(&id));
        let answer = match described {
            Ok((partition, meta)) => DescribeTransactionResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                transaction: Some(description(&self.core, partition, meta)),
            },
            Err(r) => DescribeTransactionResponse {
                error_code: r.code as i32,
                error_message: r.message,
                transaction: None,
            },
        };
        Ok(Response::new(answer))
    }

    async fn abort_transaction(
        &self,
        request: Request<AbortTransactionRequest>,
    ) -> Result<Response<AbortTransactionResponse>, Status> {
        let principal = principal_of(&request).to_string();
        let id = request.into_inner().transactional_id;
        let aborted = match self.authorize(
            &principal,
            [(Operation::Write, Resource::transactional_id(&id))],
        ) {
            Ok(()) => self.core.handle(&id, decide::Request::Abort).await,
            Err(r) => Err(r),
        };
        let (code, message) = match aborted {
            Ok(reply) => failure(&reply).unwrap_or((ErrorCode::None, String::new())),
            Err(r) => (r.code, r.message),
        };
        Ok(Response::new(AbortTransactionResponse {
            error_code: code as i32,
            error_message: message,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_grouped_per_topic_for_the_wire() {
        let tp = |topic: &str, partition| TopicPartition {
            topic: topic.into(),
            partition,
        };
        assert_eq!(
            topics_of([tp("b", 1), tp("a", 0), tp("b", 0)]),
            vec![
                TxnTopicPartitions {
                    topic: "a".into(),
                    partitions: vec![0]
                },
                TxnTopicPartitions {
                    topic: "b".into(),
                    partitions: vec![1, 0]
                },
            ]
        );
    }

    #[test]
    fn producer_epochs_outside_i16_are_invalid_requests() {
        assert_eq!(producer_epoch(5), Ok(5));
        assert_eq!(
            producer_epoch(-1).map_err(|r| r.code),
            Err(ErrorCode::InvalidRequest)
        );
        assert_eq!(
            producer_epoch(40_000).map_err(|r| r.code),
            Err(ErrorCode::InvalidRequest)
        );
    }
}
