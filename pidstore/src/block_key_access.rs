//! Raw access to a store's block key, bypassing its compare-and-swap: what the contract
//! suite (`contract.rs`, feature `contract-tests`) and operator tools use to plant or
//! inspect a value. Every backend implements it; a broker never calls it.

use crate::{BoxFuture, PidBlockStore, PidStoreError};

/// Raw access to the block key, for tests and operator tools only: it bypasses the
/// compare-and-swap, so a broker must never use it.
pub trait BlockKeyAccess: PidBlockStore {
    /// Overwrites the block key unconditionally (durably).
    fn write_raw(&self, value: Vec<u8>) -> BoxFuture<'_, Result<(), PidStoreError>>;
    /// The stored value of the block key, if any.
    fn read_raw(&self) -> BoxFuture<'_, Result<Option<Vec<u8>>, PidStoreError>>;
}
