//! **idem-pidstore**, producer-id blocks leased from etcd or sled. Depends on no idem
//! crate.
//! Every crate's place: docs/architecture.md, "Crates (workspace)".
//!
//! Producer ids for idempotent producers, leased in blocks of [`BLOCK_SIZE`] from a store
//! shared by every broker (etcd in a cluster, sled for `idem dev`), as Kafka's
//! `ProducerIdManager` does. Invariant: no producer id is ever handed out twice, across
//! brokers, concurrent allocators and crashes; ids lost in a crash are simply skipped.
//!
//! - [`PidBlockStore`]: the store contract (compare-and-swap on the latest block);
//!   [`EtcdPidStore`] is the cluster backend, [`SledPidStore`] the embedded one.
//! - [`ProducerIdManager`]: hands out single ids from the current block.
//! - `contract` (feature `contract-tests`): the test suite every backend must pass,
//!   compiled only into the test builds that run it.

mod block;
mod block_key_access;
#[cfg(feature = "contract-tests")]
pub mod contract;
mod error;
mod etcd_store;
mod manager;
mod sled_store;
mod store;

pub use block::{ProducerIdBlock, BLOCK_SIZE};
pub use block_key_access::BlockKeyAccess;
pub use error::PidStoreError;
pub use etcd_store::{EtcdPidStore, Observed};
pub use manager::ProducerIdManager;
pub use sled_store::{SledPidStore, BLOCK_KEY};
pub use store::{BoxFuture, PidBlockStore};
