//! The etcd layout of coordinator ownership (docs/transactions.md) and the pure choices
//! made from a snapshot of it: which partitions to claim next.
//!
//! ```text
//! {prefix}/coordinators/members/{id}  {"id", "address", "external_address"?}         lease of the coordinator
//! {prefix}/coordinators/owners/{p}    {"coordinator_id", "address", "external_address"?,
//!                                      "coordinator_epoch"}                            lease of the owner
//! {prefix}/coordinators/epochs/{p}    {"coordinator_epoch", "writer_producer_id"}          persistent
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberValue {
    pub id: i32,
    pub address: String,
    /// Its external listener's address (`--external-listen`), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_address: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerValue {
    pub coordinator_id: i32,
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_address: Option<String>,
    pub coordinator_epoch: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochValue {
    pub coordinator_epoch: i32,
    pub writer_producer_id: i64,
}

pub fn dir(prefix: &str) -> String {
    format!("{}/coordinators/", prefix.trim_end_matches('/'))
}

pub fn member_key(prefix: &str, id: i32) -> String {
    format!("{}members/{id}", dir(prefix))
}

pub fn owner_key(prefix: &str, partition: i32) -> String {
    format!("{}owners/{partition}", dir(prefix))
}

pub fn epoch_key(prefix: &str, partition: i32) -> String {
    format!("{}epochs/{partition}", dir(prefix))
}

/// An owner key as read, with what a compare-and-swap needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerEntry {
    pub value: OwnerValue,
    pub lease: i64,
    pub mod_revision: i64,
}

/// Everything under `{prefix}/coordinators/` at one revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub members: BTreeMap<i32, MemberValue>,
    pub owners: BTreeMap<i32, OwnerEntry>,
    pub epochs: BTreeMap<i32, (EpochValue, i64)>,
}

/// One key-value pair as etcd returns it.
pub struct RawKv<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub lease: i64,
    pub mod_revision: i64,
}

impl Snapshot {
    /// Sorts the keys of the coordinators dir into members, owners and epochs. A key
    /// that does not parse is reported in the second half and otherwise ignored (an
    /// unreadable owner key still blocks claims: its partition counts as owned).
    pub fn parse<'a>(
        prefix: &str,
        kvs: impl IntoIterator<Item = RawKv<'a>>,
    ) -> (Snapshot, Vec<String>) {
        let dir = dir(prefix);
        let mut snapshot = Snapshot::default();
        let mut bad = Vec::new();
        for kv in kvs {
            let key = String::from_utf8_lossy(kv.key);
            let Some(rest) = key.strip_prefix(&dir) else {
                continue;
            };
            let Some((kind, number)) = rest.split_once('/') else {
                continue;
            };
            let Ok(number) = number.parse::<i32>() else {
                bad.push(key.to_string());
                continue;
            };
            let parsed = match kind {
                "members" => serde_json::from_slice::<MemberValue>(kv.value)
                    .map(|v| {
                        snapshot.members.insert(number, v);
                    })
                    .is_ok(),
                "owners" => match serde_json::from_slice::<OwnerValue>(kv.value) {
                    Ok(value) => {
                        snapshot.owners.insert(
                            number,
                            OwnerEntry {
                                value,
                                lease: kv.lease,
                                mod_revision: kv.mod_revision,
                            },
                        );
                        true
                    }
                    Err(_) => {
                        snapshot.owners.insert(
                            number,
                            OwnerEntry {
                                value: OwnerValue {
                                    coordinator_id: -1,
                                    address: String::new(),
                                    external_address: None,
                                    coordinator_epoch: -1,
                                },
                                lease: kv.lease,
                                mod_revision: kv.mod_revision,
                            },
                        );
                        false
                    }
                },
                "epochs" => serde_json::from_slice::<EpochValue>(kv.value)
                    .map(|v| {
                        snapshot.epochs.insert(number, (v, kv.mod_revision));
                    })
                    .is_ok(),
                _ => true,
            };
            if !parsed {
                bad.push(key.to_string());
            }
        }
        (snapshot, bad)
    }
}

/// How many partitions each coordinator should own: `ceil(partitions / live)`.
pub fn fair_share(partitions: i32, live_coordinators: usize) -> usize {
    let partitions = partitions.max(0) as usize;
    partitions.div_ceil(live_coordinators.max(1))
}

/// What one scan of the ownership keys decides for this coordinator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanPlan {
    /// Claims held here whose owner key is gone or is no longer the one we wrote: they
    /// are lost (someone else may own the partition now).
    pub lost: Vec<i32>,
    /// Owner keys bound to this coordinator's live lease that it does not serve: a claim
    /// given up while etcd was unreachable whose key outlived it (etcd renews leases when
    /// it restarts). Left alone, the partition would be owned on paper and served by
    /// nobody, forever; claimed again here under a new epoch.
    pub reclaim: Vec<i32>,
    /// Unowned partitions to claim, best first, up to the fair share.
    pub claim: Vec<i32>,
}

/// Decides, from one snapshot, which claims are lost, which of our own keys to claim
/// again and which unowned partitions to claim. `held`: the claims this coordinator
/// serves, by partition, with the owner key's `mod_revision` when it wrote it.
pub fn plan_scan(
    snapshot: &Snapshot,
    partitions: i32,
    my_id: i32,
    my_lease: i64,
    held: &BTreeMap<i32, i64>,
) -> ScanPlan {
    let lost: Vec<i32> = held
        .iter()
        .filter(|(p, revision)| {
            snapshot
                .owners
                .get(p)
                .is_none_or(|o| o.lease != my_lease || o.mod_revision != **revision)
        })
        .map(|(p, _)| *p)
        .collect();
    let reclaim: Vec<i32> = snapshot
        .owners
        .iter()
        .filter(|(p, o)| {
            **p < partitions && my_lease != 0 && o.lease == my_lease && !held.contains_key(p)
        })
        .map(|(p, _)| *p)
        .collect();
    let owned = held.len() - lost.len() + reclaim.len();
    let claim = partitions_to_claim(snapshot, partitions, my_id, owned);
    ScanPlan {
        lost,
        reclaim,
        claim,
    }
}

/// The unowned partitions this coordinator should try to claim now, best first: as many
/// as its fair share allows beyond what it owns, starting at a place that depends on its
/// id so that coordinators starting together do not all race for partition 0.
pub fn partitions_to_claim(
    snapshot: &Snapshot,
    partitions: i32,
    my_id: i32,
    owned_by_me: usize,
) -> Vec<i32> {
    if partitions <= 0 {
        return Vec::new();
    }
    let live = snapshot.members.len().max(1);
    let room = fair_share(partitions, live).saturating_sub(owned_by_me);
    let start = my_id.rem_euclid(partitions);
    (0..partitions)
        .map(|i| (start + i) % partitions)
        .filter(|p| !snapshot.owners.contains_key(p))
        .take(room)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(id: i32) -> OwnerEntry {
        OwnerEntry {
            value: OwnerValue {
                coordinator_id: id,
                address: format!("c{id}:1"),
                external_address: None,
                coordinator_epoch: 1,
            },
            lease: 10 + i64::from(id),
            mod_revision: 5,
        }
    }

    fn members(ids: &[i32]) -> BTreeMap<i32, MemberValue> {
        ids.iter()
            .map(|id| {
                (
                    *id,
                    MemberValue {
                        id: *id,
                        address: String::new(),
                        external_address: None,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn keys_are_the_documented_layout() {
        assert_eq!(member_key("/idem", 2), "/idem/coordinators/members/2");
        assert_eq!(owner_key("/idem/", 7), "/idem/coordinators/owners/7");
        assert_eq!(epoch_key("/x", 0), "/x/coordinators/epochs/0");
    }

    #[test]
    fn the_fair_share_rounds_up() {
        assert_eq!(fair_share(8, 1), 8);
        assert_eq!(fair_share(8, 3), 3);
        assert_eq!(fair_share(8, 8), 1);
        assert_eq!(fair_share(8, 20), 1);
        assert_eq!(fair_share(8, 0), 8);
    }

    #[test]
    fn a_coordinator_claims_only_unowned_partitions_up_to_its_share() {
        let mut snapshot = Snapshot {
            members: members(&[1, 2]),
            ..Snapshot::default()
        };
        snapshot.owners.insert(0, owner(2));
        snapshot.owners.insert(1, owner(2));
        // 8 partitions, 2 live: a share of 4; coordinator 1 owns none yet.
        let claims = partitions_to_claim(&snapshot, 8, 1, 0);
        assert_eq!(claims, vec![2, 3, 4, 5]);
        assert_eq!(partitions_to_claim(&snapshot, 8, 1, 3), vec![2]);
        assert!(partitions_to_claim(&snapshot, 8, 1, 4).is_empty());
    }

    #[test]
    fn when_a_coordinator_died_its_partitions_become_claimable() {
        let mut snapshot = Snapshot {
            members: members(&[1]),
            ..Snapshot::default()
        };
        for p in 0..4 {
            snapshot.owners.insert(p, owner(1));
        }
        // Coordinator 2's owner keys of 4..8 vanished with its lease.
        assert_eq!(partitions_to_claim(&snapshot, 8, 1, 4), vec![4, 5, 6, 7]);
    }

    fn mine(lease: i64, mod_revision: i64) -> OwnerEntry {
        owner(1).clone_with(lease, mod_revision)
    }

    #[test]
    fn given_our_key_outlived_a_claim_we_gave_up_then_we_claim_it_again() {
        // etcd restarted: it renewed our lease (11), so our keys of 0 and 1 are still
        // there, but the claims were given up while it was away.
        let mut snapshot = Snapshot {
            members: members(&[1, 2]),
            ..Snapshot::default()
        };
        snapshot.owners.insert(0, mine(11, 5));
        snapshot.owners.insert(1, mine(11, 6));
        snapshot.owners.insert(2, owner(2));
        let plan = plan_scan(&snapshot, 4, 1, 11, &BTreeMap::new());
        assert_eq!(plan.reclaim, vec![0, 1]);
        assert!(plan.lost.is_empty());
        // 4 partitions, 2 live: a share of 2, both taken by the reclaimed ones.
        assert!(plan.claim.is_empty());
    }

    #[test]
    fn given_a_key_bound_to_an_old_lease_then_it_is_left_to_lapse() {
        let mut snapshot = Snapshot {
            members: members(&[1]),
            ..Snapshot::default()
        };
        snapshot.owners.insert(0, mine(9, 5));
        let plan = plan_scan(&snapshot, 2, 1, 11, &BTreeMap::new());
        assert!(
            plan.reclaim.is_empty(),
            "only keys of our live lease are ours"
        );
        assert_eq!(plan.claim, vec![1]);
    }

    #[test]
    fn given_a_held_claim_whose_key_changed_or_vanished_then_it_is_lost() {
        let mut snapshot = Snapshot {
            members: members(&[1, 2]),
            ..Snapshot::default()
        };
        snapshot.owners.insert(0, mine(11, 5));
        snapshot.owners.insert(1, owner(2));
        snapshot.owners.insert(2, mine(11, 9));
        let held: BTreeMap<i32, i64> = [(0, 5), (1, 6), (2, 7), (3, 8)].into();
        let plan = plan_scan(&snapshot, 4, 1, 11, &held);
        assert_eq!(plan.lost, vec![1, 2, 3]);
        assert!(
            plan.reclaim.is_empty(),
            "a key rewritten under our lease is being lost, not reclaimed, in this scan"
        );
        assert_eq!(plan.claim, vec![3], "one claim held, a share of 2");
    }

    #[test]
    fn the_snapshot_sorts_keys_and_reports_unreadable_ones() {
        let member = serde_json::to_vec(&MemberValue {
            id: 1,
            address: "a:1".into(),
            external_address: None,
        })
        .expect("json");
        let owner_value = serde_json::to_vec(&owner(1).value).expect("json");
        let epoch = br#"{"coordinator_epoch": 3, "writer_producer_id": 77}"#;
        let kvs = vec![
            RawKv {
                key: b"/idem/coordinators/members/1",
                value: &member,
                lease: 11,
                mod_revision: 2,
            },
            RawKv {
                key: b"/idem/coordinators/owners/4",
                value: &owner_value,
                lease: 11,
                mod_revision: 5,
            },
            RawKv {
                key: b"/idem/coordinators/owners/5",
                value: b"garbage",
                lease: 12,
                mod_revision: 6,
            },
            RawKv {
                key: b"/idem/coordinators/epochs/4",
                value: epoch,
                lease: 0,
                mod_revision: 5,
            },
        ];
        let (snapshot, bad) = Snapshot::parse("/idem", kvs);
        assert_eq!(snapshot.members.len(), 1);
        assert_eq!(snapshot.owners[&4], owner(1).clone_with(11, 5));
        assert!(
            snapshot.owners.contains_key(&5),
            "an unreadable owner still blocks claims"
        );
        assert_eq!(
            snapshot.epochs[&4],
            (
                EpochValue {
                    coordinator_epoch: 3,
                    writer_producer_id: 77
                },
                5
            )
        );
        assert_eq!(bad, vec!["/idem/coordinators/owners/5".to_string()]);
    }

    impl OwnerEntry {
        fn clone_with(&self, lease: i64, mod_revision: i64) -> OwnerEntry {
            OwnerEntry {
                lease,
                mod_revision,
                ..self.clone()
            }
        }
    }
}
