//! Which transaction coordinator answers for a transactional id, as a broker sees it
//! (FindCoordinator, Metadata.coordinators). In a cluster: the ownership keys under
//! `{prefix}/coordinators/` from the broker's last catalog snapshot; on a single node:
//! the one coordinator named by `--coordinator`, owning every partition at epoch 0.
//!
//! Pure: the caller passes the view and `__transaction_state`'s partition count; the
//! partition of an id is `idem_proto::txn::txn_log_partition`, shared with coordinators.

use std::collections::BTreeMap;

use idem_proto::txn::txn_log_partition;
use serde::Deserialize;

use crate::error::BrokerError;
use crate::internal_topics::OwnerFacts;

/// `{prefix}/coordinators/members/{id}`: a live coordinator (bound to its lease).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CoordinatorMember {
    pub id: i32,
    /// host:port a client dials for `TxnCoordinator`.
    pub address: String,
    /// host:port of its external listener, for clients outside the cluster's network.
    #[serde(default)]
    pub external_address: Option<String>,
}

/// `{prefix}/coordinators/owners/{p}`: who owns `__transaction_state` partition `p`
/// (bound to the owner's lease, so it vanishes with the owner).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CoordinatorOwner {
    pub coordinator_id: i32,
    pub address: String,
    #[serde(default)]
    pub external_address: Option<String>,
    pub coordinator_epoch: i32,
}

/// `{prefix}/coordinators/epochs/{p}`: the latest claim of `__transaction_state`
/// partition `p` and the producer id every owner writes it with (persistent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct CoordinatorEpoch {
    pub coordinator_epoch: i32,
    pub writer_producer_id: i64,
}

/// The coordinator keys of one catalog snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoordinatorView {
    pub members: BTreeMap<i32, CoordinatorMember>,
    /// By `__transaction_state` partition.
    pub owners: BTreeMap<i32, CoordinatorOwner>,
    /// By `__transaction_state` partition.
    pub epochs: BTreeMap<i32, CoordinatorEpoch>,
}

impl CoordinatorView {
    /// What the catalog says of the owner of `__transaction_state` partition `partition`
    /// (each fact absent until the catalog has seen its key).
    pub fn owner_facts(&self, partition: i32) -> OwnerFacts {
        let epoch = self.epochs.get(&partition);
        let claimed = epoch.map(|e| e.coordinator_epoch);
        let owning = self.owners.get(&partition).map(|o| o.coordinator_epoch);
        OwnerFacts {
            coordinator_epoch: claimed.max(owning),
            writer_producer_id: epoch.map(|e| e.writer_producer_id),
        }
    }
}

/// Where a broker learns about coordinators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coordinators {
    /// Single node (no etcd): the `--coordinator` address, if one was given.
    Static(Option<String>),
    /// A cluster: the ownership keys in etcd.
    Clustered(CoordinatorView),
}

/// The answer to FindCoordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundCoordinator {
    pub coordinator_id: i32,
    pub address: String,
    /// Its external listener's address, if it has one.
    pub external_address: Option<String>,
    pub txn_log_partition: i32,
    pub coordinator_epoch: i32,
}

/// Id of the coordinator a single-node broker is told about.
pub const STATIC_COORDINATOR_ID: i32 = 0;

impl Coordinators {
    /// The coordinator owning `transactional_id`, given `__transaction_state`'s
    /// partition count (`None`: the topic does not exist yet). COORDINATOR_NOT_AVAILABLE
    /// (retriable) while nobody owns the id's partition.
    pub fn find(
        &self,
        transactional_id: &str,
        txn_log_partitions: Option<i32>,
    ) -> Result<FoundCoordinator, BrokerError> {
        if transactional_id.is_empty() {
            return Err(BrokerError::InvalidRequest(
                "FindCoordinator needs a transactional id or a group id".into(),
            ));
        }
        match self {
            Coordinators::Static(None) => Err(BrokerError::CoordinatorNotAvailable(
                "this single-node broker was started without --coordinator".into(),
            )),
            Coordinators::Static(Some(address)) => Ok(FoundCoordinator {
                coordinator_id: STATIC_COORDINATOR_ID,
                address: address.clone(),
                external_address: None,
                // Before the coordinator created the topic every id maps to 0; the
                // one coordinator owns every partition either way.
                txn_log_partition: txn_log_partitions
                    .filter(|n| *n > 0)
                    .map_or(0, |n| txn_log_partition(transactional_id, n)),
                coordinator_epoch: 0,
            }),
            Coordinators::Clustered(view) => {
                let partitions = txn_log_partitions.filter(|n| *n > 0).ok_or_else(|| {
                    BrokerError::CoordinatorNotAvailable(format!(
                        "topic {} does not exist yet",
                        idem_proto::txn::TXN_LOG_TOPIC
                    ))
                })?;
                let partition = txn_log_partition(transactional_id, partitions);
                let owner = view.owners.get(&partition).ok_or_else(|| {
                    BrokerError::CoordinatorNotAvailable(format!(
                        "no coordinator owns {} partition {partition}",
                        idem_proto::txn::TXN_LOG_TOPIC
                    ))
                })?;
                Ok(FoundCoordinator {
                    coordinator_id: owner.coordinator_id,
                    address: owner.address.clone(),
                    external_address: owner.external_address.clone(),
                    txn_log_partition: partition,
                    coordinator_epoch: owner.coordinator_epoch,
                })
            }
        }
    }

    /// The owner of every one of `txn_log_partitions` partitions (`None`: nobody owns
    /// it), by partition.
    pub fn owners(&self, txn_log_partitions: i32) -> Vec<(i32, Option<FoundCoordinator>)> {
        (0..txn_log_partitions.max(0))
            .map(|partition| {
                let owner = match self {
                    Coordinators::Static(None) => None,
                    Coordinators::Static(Some(address)) => Some(FoundCoordinator {
                        coordinator_id: STATIC_COORDINATOR_ID,
                        address: address.clone(),
                        external_address: None,
                        txn_log_partition: partition,
                        coordinator_epoch: 0,
                    }),
                    Coordinators::Clustered(view) => {
                        view.owners.get(&partition).map(|o| FoundCoordinator {
                            coordinator_id: o.coordinator_id,
                            address: o.address.clone(),
                            external_address: o.external_address.clone(),
                            txn_log_partition: partition,
                            coordinator_epoch: o.coordinator_epoch,
                        })
                    }
                };
                (partition, owner)
            })
            .collect()
    }

    /// The live coordinators, by id.
    pub fn live(&self) -> Vec<CoordinatorMember> {
        match self {
            Coordinators::Static(None) => Vec::new(),
            Coordinators::Static(Some(address)) => vec![CoordinatorMember {
                id: STATIC_COORDINATOR_ID,
                address: address.clone(),
                external_address: None,
            }],
            Coordinators::Clustered(view) => view.members.values().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use idem_proto::ErrorCode;

    use super::*;

    fn owner(id: i32, epoch: i32) -> CoordinatorOwner {
        CoordinatorOwner {
            coordinator_id: id,
            address: format!("10.0.0.{id}:9094"),
            external_address: Some(format!("127.0.0.1:1909{id}")),
            coordinator_epoch: epoch,
        }
    }

    fn code(result: Result<FoundCoordinator, BrokerError>) -> ErrorCode {
        result.map_or_else(|e| e.code(), |_| ErrorCode::None)
    }

    #[test]
    fn given_a_static_coordinator_then_it_owns_every_id_at_epoch_zero() {
        let coordinators = Coordinators::Static(Some("127.0.0.1:9094".into()));
        let found = coordinators.find("orders", Some(8)).expect("found");
        assert_eq!(
            found,
            FoundCoordinator {
                coordinator_id: 0,
                address: "127.0.0.1:9094".into(),
                external_address: None,
                txn_log_partition: txn_log_partition("orders", 8),
                coordinator_epoch: 0,
            }
        );
        let before_topic = coordinators.find("orders", None).expect("found");
        assert_eq!(before_topic.txn_log_partition, 0);
        assert_eq!(coordinators.live().len(), 1);
    }

    #[test]
    fn given_no_static_coordinator_then_coordinator_not_available() {
        let coordinators = Coordinators::Static(None);
        assert_eq!(
            code(coordinators.find("orders", Some(1))),
            ErrorCode::CoordinatorNotAvailable
        );
        assert!(coordinators.live().is_empty());
    }

    #[test]
    fn given_a_cluster_then_the_owner_of_the_ids_partition_answers() {
        let partitions = 4;
        let mut view = CoordinatorView::default();
        for p in 0..partitions {
            view.owners.insert(p, owner(p % 2 + 1, 10 + p));
        }
        view.members.insert(
            1,
            CoordinatorMember {
                id: 1,
                address: "10.0.0.1:9094".into(),
                external_address: None,
            },
        );
        let coordinators = Coordinators::Clustered(view);
        for tid in ["a", "b", "orders", "payments-7"] {
            let p = txn_log_partition(tid, partitions);
            let found = coordinators.find(tid, Some(partitions)).expect("found");
            assert_eq!(found.txn_log_partition, p);
            assert_eq!(found.coordinator_id, p % 2 + 1);
            assert_eq!(found.coordinator_epoch, 10 + p);
            assert_eq!(
                found.external_address,
                Some(format!("127.0.0.1:1909{}", p % 2 + 1)),
                "the owner's external address travels with it"
            );
        }
        assert_eq!(coordinators.live().len(), 1);
    }

    #[test]
    fn every_partition_is_listed_with_its_owner_or_none() {
        let mut view = CoordinatorView::default();
        view.owners.insert(0, owner(2, 7));
        view.owners.insert(2, owner(1, 3));
        let owners = Coordinators::Clustered(view).owners(3);
        let ids: Vec<(i32, Option<(i32, i32)>)> = owners
            .iter()
            .map(|(p, o)| {
                (
                    *p,
                    o.as_ref().map(|o| (o.coordinator_id, o.coordinator_epoch)),
                )
            })
            .collect();
        assert_eq!(ids, vec![(0, Some((2, 7))), (1, None), (2, Some((1, 3)))]);
        let single = Coordinators::Static(Some("127.0.0.1:9094".into())).owners(2);
        assert!(single
            .iter()
            .all(|(_, o)| o.as_ref().is_some_and(|o| o.coordinator_id == 0)));
        assert!(Coordinators::Static(None)
            .owners(2)
            .iter()
            .all(|(_, o)| o.is_none()));
        assert!(Coordinators::Static(None).owners(0).is_empty());
    }

    #[test]
    fn given_a_cluster_without_the_topic_or_an_owner_then_coordinator_not_available() {
        let mut view = CoordinatorView::default();
        let owned = txn_log_partition("orders", 2);
        view.owners.insert(owned, owner(1, 1));
        let coordinators = Coordinators::Clustered(view);
        assert_eq!(
            code(coordinators.find("orders", None)),
            ErrorCode::CoordinatorNotAvailable
        );
        let unowned = (0..100)
            .map(|i| format!("tid-{i}"))
            .find(|t| txn_log_partition(t, 2) != owned)
            .expect("an id of the other partition");
        assert_eq!(
            code(coordinators.find(&unowned, Some(2))),
            ErrorCode::CoordinatorNotAvailable
        );
        assert_eq!(code(coordinators.find("orders", Some(2))), ErrorCode::None);
    }

    #[test]
    fn given_an_empty_transactional_id_then_invalid_request() {
        let coordinators = Coordinators::Static(Some("x:1".into()));
        assert_eq!(
            code(coordinators.find("", Some(1))),
            ErrorCode::InvalidRequest
        );
    }
}
