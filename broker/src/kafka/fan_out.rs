//! Listings of the whole cluster (ListGroups, ListTransactions): groups and
//! transactional ids live in the slices of `__transaction_state`, spread over the
//! coordinators, so the broker asks every coordinator owning a slice and answers only
//! when every slice was listed by its owner. A slice nobody owns or a coordinator that
//! cannot be reached is COORDINATOR_NOT_AVAILABLE, a slice its owner has not loaded yet
//! COORDINATOR_LOAD_IN_PROGRESS: the client retries, and never sees a shorter list.

use std::collections::BTreeMap;

use idem_proto::v1::{ListGroupsRequest, ListGroupsResponse};
use idem_proto::v1::{ListTransactionsRequest, ListTransactionsResponse};
use idem_proto::ErrorCode;
use kafka_protocol::ResponseError;

use super::coordinator_link::LinkError;
use super::errors::kafka_code;
use super::forward::Refused;
use super::KafkaContext;
use crate::coordinators::FoundCoordinator;

/// The slices each coordinator address owns, from the owner of every slice;
/// COORDINATOR_NOT_AVAILABLE when one slice has no owner.
pub fn slices_by_owner(
    owners: Vec<(i32, Option<FoundCoordinator>)>,
) -> Result<BTreeMap<String, Vec<i32>>, Refused> {
    let mut by_owner: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (partition, owner) in owners {
        let owner = owner.ok_or_else(|| {
            Refused::new(
                ResponseError::CoordinatorNotAvailable.code(),
                format!(
                    "no coordinator owns {} partition {partition}",
                    idem_proto::txn::TXN_LOG_TOPIC
                ),
            )
        })?;
        by_owner.entry(owner.address).or_default().push(partition);
    }
    Ok(by_owner)
}

/// Whether the coordinator at `address` listed every slice it was asked for:
/// COORDINATOR_LOAD_IN_PROGRESS for the first `expected` slice it has not loaded (it
/// is loading it, or has just lost it to a coordinator the catalog does not name yet).
pub fn covered(address: &str, expected: &[i32], listed: &[i32]) -> Result<(), Refused> {
    match expected.iter().find(|p| !listed.contains(p)) {
        None => Ok(()),
        Some(missing) => Err(Refused::new(
            ResponseError::CoordinatorLoadInProgress.code(),
            format!(
                "the coordinator at {address} has not loaded {} partition {missing}",
                idem_proto::txn::TXN_LOG_TOPIC
            ),
        )),
    }
}

/// The slices to ask for, by owner address.
fn owners(context: &KafkaContext) -> Result<BTreeMap<String, Vec<i32>>, Refused> {
    let owners = context
        .service
        .coordinator_owners()
        .map_err(|e| Refused::new(kafka_code(e.code() as i32), e.to_string()))?;
    slices_by_owner(owners)
}

/// A coordinator's own refusal of a listing.
fn refused_by(address: &str, code: i32, message: &str) -> Option<Refused> {
    (code != ErrorCode::None as i32).then(|| {
        Refused::new(
            kafka_code(code),
            format!("the coordinator at {address} refused to list: {message}"),
        )
    })
}

/// What the fan-out checks of one coordinator's listing: its own refusal and the
/// slices it covered.
trait SliceListing {
    fn refusal(&self) -> (i32, &str);
    fn owned_partitions(&self) -> &[i32];
}

impl SliceListing for ListGroupsResponse {
    fn refusal(&self) -> (i32, &str) {
        (self.error_code, &self.error_message)
    }
    fn owned_partitions(&self) -> &[i32] {
        &self.owned_partitions
    }
}

impl SliceListing for ListTransactionsResponse {
    fn refusal(&self) -> (i32, &str) {
        (self.error_code, &self.error_message)
    }
    fn owned_partitions(&self) -> &[i32] {
        &self.owned_partitions
    }
}

/// Every owner's listing, in `owners`' order, or the first refusal: a link error, the
/// coordinator's own code, or a slice it was asked for and did not list.
fn checked<L: SliceListing>(
    owners: &BTreeMap<String, Vec<i32>>,
    answers: Vec<Result<L, LinkError>>,
) -> Result<Vec<L>, Refused> {
    let mut lists = Vec::with_capacity(answers.len());
    for ((address, expected), answer) in owners.iter().zip(answers) {
        let list = answer.map_err(|e| Refused::new(e.kafka_code(), e.to_string()))?;
        let (code, message) = list.refusal();
        if let Some(refused) = refused_by(address, code, message) {
            return Err(refused);
        }
        covered(address, expected, list.owned_partitions())?;
        lists.push(list);
    }
    Ok(lists)
}

/// Every group of the cluster, as the coordinators owning its slices list them (all
/// states; the caller filters).
pub async fn list_groups(context: &KafkaContext) -> Result<Vec<ListGroupsResponse>, Refused> {
    let owners = owners(context)?;
    let answers = futures::future::join_all(owners.keys().map(|address| {
        context.link.group(address, |mut client| async move {
            client
                .list_groups(ListGroupsRequest { states: Vec::new() })
                .await
        })
    }))
    .await;
    checked(&owners, answers)
}

/// Every transactional id of the cluster, as the coordinators owning its slices list
/// them (all states; the caller filters).
pub async fn list_transactions(
    context: &KafkaContext,
) -> Result<Vec<ListTransactionsResponse>, Refused> {
    let owners = owners(context)?;
    let answers = futures::future::join_all(owners.keys().map(|address| {
        context.link.txn(address, |mut client| async move {
            client
                .list_transactions(ListTransactionsRequest { states: Vec::new() })
                .await
        })
    }))
    .await;
    checked(&owners, answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(id: i32, partition: i32) -> Option<FoundCoordinator> {
        Some(FoundCoordinator {
            coordinator_id: id,
            address: format!("c{id}:9000"),
            external_address: None,
            txn_log_partition: partition,
            coordinator_epoch: 1,
        })
    }

    #[test]
    fn given_every_slice_owned_then_each_owner_is_asked_for_its_slices() {
        let by_owner = slices_by_owner(vec![(0, owner(1, 0)), (1, owner(2, 1)), (2, owner(1, 2))])
            .expect("every slice owned");
        assert_eq!(
            by_owner,
            BTreeMap::from([
                ("c1:9000".to_string(), vec![0, 2]),
                ("c2:9000".to_string(), vec![1]),
            ])
        );
    }

    #[test]
    fn given_a_slice_without_owner_then_coordinator_not_available() {
        let refused = slices_by_owner(vec![(0, owner(1, 0)), (1, None)]).expect_err("refused");
        assert_eq!(refused.code, 15);
        assert!(refused.message.contains("partition 1"), "{refused}");
    }

    #[test]
    fn given_a_slice_not_listed_by_its_owner_then_load_in_progress() {
        assert_eq!(covered("c1:9000", &[0, 2], &[0, 2, 5]), Ok(()));
        assert_eq!(covered("c1:9000", &[], &[]), Ok(()));
        let refused = covered("c1:9000", &[0, 2], &[0]).expect_err("slice 2 missing");
        assert_eq!(refused.code, 14);
        assert!(refused.message.contains("partition 2"), "{refused}");
    }

    #[test]
    fn given_a_coordinators_refusal_then_its_kafka_code() {
        assert_eq!(refused_by("c", 0, ""), None);
        let refused = refused_by("c", ErrorCode::NotCoordinator as i32, "moved").expect("refused");
        assert_eq!(refused.code, 16);
    }
}
