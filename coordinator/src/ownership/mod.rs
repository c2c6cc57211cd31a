//! Which transaction log partitions this coordinator owns, behind one trait with two
//! backends: [`etcd::EtcdOwnership`] (a cluster: owner keys bound to this coordinator's
//! lease, claimed by compare-and-swap, each claim bumping the partition's coordinator
//! epoch) and [`solo::SoloOwnership`] (`idem dev`: one coordinator owns every
//! partition; its epoch lives in a file in the data dir).
//!
//! Contract: every claim comes with a fresh coordinator epoch higher than any earlier
//! claim of that partition, and a token that is lost the moment the claim may no longer
//! be held (owner key gone, lease lapsed); the core serves a partition only while its
//! token is not lost and [`Ownership::holds_lease`] is true.

pub mod etcd;
pub mod keys;
pub mod solo;
pub mod token;

use std::sync::Arc;

use idem_pidstore::BoxFuture;
use tokio::sync::mpsc;

use self::token::OwnershipToken;

/// One claim of one partition.
#[derive(Debug, Clone)]
pub struct Claim {
    pub partition: i32,
    pub coordinator_epoch: i32,
    pub writer_producer_id: i64,
    pub token: OwnershipToken,
}

/// Who owns a partition, as FindCoordinator reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerInfo {
    pub coordinator_id: i32,
    pub address: String,
    /// Its external listener's address, if it has one.
    pub external_address: Option<String>,
    pub coordinator_epoch: i32,
}

pub trait Ownership: Send + Sync {
    /// Claims partitions of the `partitions`-partition log for as long as it runs,
    /// sending every new claim on `claims`.
    fn run(
        self: Arc<Self>,
        partitions: i32,
        claims: mpsc::UnboundedSender<Claim>,
    ) -> BoxFuture<'static, ()>;

    /// The owner of `partition` as last seen.
    fn owner_of(&self, partition: i32) -> Option<OwnerInfo>;

    /// Whether this coordinator surely still holds its lease; when not, it serves
    /// nothing.
    fn holds_lease(&self) -> bool;

    /// Gives a claim up (a broker fenced it, or it failed) so that the partition is
    /// claimed again under a new epoch, by this coordinator or another.
    /// `coordinator_epoch` names the claim; a newer claim of the partition is kept.
    fn release(&self, partition: i32, coordinator_epoch: i32) -> BoxFuture<'_, ()>;

    /// Gives everything up at once (clean shutdown).
    fn leave(&self) -> BoxFuture<'_, ()>;
}
