//! Whether every slice (partition) of the transaction log is served: the owner etcd
//! names, through a broker's metadata, against what that owner says it has loaded. A
//! slice owned by nobody, or owned on paper by a coordinator that does not serve it, makes
//! every transactional id of the slice unavailable; this names such slices, so an
//! operator sees more than NOT_COORDINATOR answers.

use std::collections::HashMap;
use std::fmt;

use super::Admin;
use crate::error::ClientError;
use crate::metadata::TxnLogOwnerMetadata;

/// What is true of one slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceStatus {
    /// Its owner has it loaded and answers for its transactional ids.
    Served,
    /// Owned in etcd, but the owner does not list it as loaded: loading, or stuck.
    NotServedByOwner,
    /// Owned in etcd by a coordinator that did not answer (the reason).
    OwnerNotAnswering(String),
    /// No coordinator owns it.
    Unowned,
}

impl fmt::Display for SliceStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SliceStatus::Served => write!(f, "served"),
            SliceStatus::NotServedByOwner => write!(f, "NOT SERVED by its owner"),
            SliceStatus::OwnerNotAnswering(why) => write!(f, "owner not answering ({why})"),
            SliceStatus::Unowned => write!(f, "NO OWNER"),
        }
    }
}

/// One partition of `__transaction_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogSlice {
    pub partition: i32,
    pub owner: Option<TxnLogOwnerMetadata>,
    pub status: SliceStatus,
}

/// Puts the owners etcd names together with what each owner said it has loaded (by
/// coordinator id: its loaded partitions, or why it did not answer). Pure.
pub fn slice_statuses(
    owners: &[(i32, Option<TxnLogOwnerMetadata>)],
    loaded: &HashMap<i32, Result<Vec<i32>, String>>,
) -> Vec<TxnLogSlice> {
    owners
        .iter()
        .map(|(partition, owner)| {
            let status = match owner {
                None => SliceStatus::Unowned,
                Some(o) => match loaded.get(&o.coordinator_id) {
                    Some(Ok(partitions)) if partitions.contains(partition) => SliceStatus::Served,
                    Some(Ok(_)) => SliceStatus::NotServedByOwner,
                    Some(Err(why)) => SliceStatus::OwnerNotAnswering(why.clone()),
                    None => SliceStatus::OwnerNotAnswering("not asked".into()),
                },
            };
            TxnLogSlice {
                partition: *partition,
                owner: owner.clone(),
                status,
            }
        })
        .collect()
}

impl Admin {
    /// Every slice of the transaction log with its owner and whether the owner serves
    /// it. Each owner is asked once.
    pub async fn txn_log_slices(&self) -> Result<Vec<TxnLogSlice>, ClientError> {
        let metadata = self.metadata(&[]).await?;
        let mut owners: HashMap<i32, String> = HashMap::new();
        for owner in metadata
            .txn_log_owners
            .iter()
            .filter_map(|(_, o)| o.as_ref())
        {
            owners.insert(owner.coordinator_id, owner.address.clone());
        }
        let link = self.coordinators();
        let answers = futures::future::join_all(owners.into_iter().map(|(id, address)| {
            let link = &link;
            async move {
                let answer = link
                    .list(&address)
                    .await
                    .map(|list| list.owned_partitions)
                    .map_err(|e| e.to_string());
                (id, answer)
            }
        }))
        .await;
        let loaded: HashMap<i32, Result<Vec<i32>, String>> = answers.into_iter().collect();
        Ok(slice_statuses(&metadata.txn_log_owners, &loaded))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned_by(id: i32) -> Option<TxnLogOwnerMetadata> {
        Some(TxnLogOwnerMetadata {
            coordinator_id: id,
            address: format!("c{id}:9094"),
            coordinator_epoch: 3,
        })
    }

    #[test]
    fn each_slice_is_served_unowned_not_served_or_behind_a_silent_owner() {
        let owners = vec![
            (0, owned_by(1)),
            (1, owned_by(1)),
            (2, None),
            (3, owned_by(2)),
        ];
        let loaded = HashMap::from([(1, Ok(vec![0])), (2, Err("connection refused".to_string()))]);
        let statuses: Vec<SliceStatus> = slice_statuses(&owners, &loaded)
            .into_iter()
            .map(|s| s.status)
            .collect();
        assert_eq!(
            statuses,
            vec![
                SliceStatus::Served,
                SliceStatus::NotServedByOwner,
                SliceStatus::Unowned,
                SliceStatus::OwnerNotAnswering("connection refused".into()),
            ]
        );
    }
}
