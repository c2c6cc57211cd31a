//! The embedded backend, for `idem dev` and single-node use: the latest block lives under
//! one key of a sled database, advanced by compare-and-swap and flushed to disk before a
//! block is handed out, so neither a concurrent allocator nor a crash can repeat an id.

use std::path::Path;

use crate::block_key_access::BlockKeyAccess;
use crate::{BoxFuture, PidBlockStore, PidStoreError, ProducerIdBlock};

/// The key of the latest leased block, as Kafka's znode `/latest_producer_id_block`.
pub const BLOCK_KEY: &str = "latest_producer_id_block";

/// A [`PidBlockStore`] on a sled database. Cheap to clone; clones share the database.
#[derive(Debug, Clone)]
pub struct SledPidStore {
    db: sled::Db,
    key: Vec<u8>,
}

impl SledPidStore {
    /// Opens (or creates) a sled database at `path` holding only producer-id blocks.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, PidStoreError> {
        let db = sled::open(path.as_ref()).map_err(storage)?;
        Ok(Self::new(db, ""))
    }

    /// Uses an already open database; the block key is `{key_prefix}latest_producer_id_block`,
    /// so several independent id spaces (or other data) can share one database.
    pub fn new(db: sled::Db, key_prefix: &str) -> Self {
        SledPidStore {
            db,
            key: format!("{key_prefix}{BLOCK_KEY}").into_bytes(),
        }
    }

    /// The full key of the latest block.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Read, compute, compare-and-swap, flush; again on a lost race. Blocking.
    fn allocate(db: &sled::Db, key: &[u8], owner: i32) -> Result<ProducerIdBlock, PidStoreError> {
        loop {
            let current = db.get(key).map_err(storage)?;
            let latest = current
                .as_deref()
                .map(ProducerIdBlock::from_json)
                .transpose()?;
            let next = ProducerIdBlock::next_after(latest.as_ref(), owner)?;
            let swapped = db
                .compare_and_swap(key, current.as_deref(), Some(next.to_json().into_bytes()))
                .map_err(storage)?;
            match swapped {
                Ok(()) => {
                    // Durable before it is used: after a crash the key is at least this block.
                    db.flush().map_err(storage)?;
                    return Ok(next);
                }
                Err(_) => {
                    tracing::debug!(owner, "lost the race for a producer id block; retrying");
                }
            }
        }
    }
}

impl PidBlockStore for SledPidStore {
    fn next_block(&self, owner: i32) -> BoxFuture<'_, Result<ProducerIdBlock, PidStoreError>> {
        let db = self.db.clone();
        let key = self.key.clone();
        Box::pin(async move {
            let block = tokio::task::spawn_blocking(move || Self::allocate(&db, &key, owner))
                .await
                .map_err(|e| PidStoreError::Storage(format!("allocation task failed: {e}")))??;
            tracing::info!(
                owner,
                block_start = block.block_start,
                block_end = block.block_end,
                "leased producer id block"
            );
            Ok(block)
        })
    }
}

impl BlockKeyAccess for SledPidStore {
    fn write_raw(&self, value: Vec<u8>) -> BoxFuture<'_, Result<(), PidStoreError>> {
        Box::pin(async move {
            self.db.insert(&self.key, value).map_err(storage)?;
            self.db.flush_async().await.map_err(storage)?;
            Ok(())
        })
    }

    fn read_raw(&self) -> BoxFuture<'_, Result<Option<Vec<u8>>, PidStoreError>> {
        Box::pin(async move { Ok(self.db.get(&self.key).map_err(storage)?.map(|v| v.to_vec())) })
    }
}

fn storage(e: sled::Error) -> PidStoreError {
    PidStoreError::Storage(e.to_string())
}
