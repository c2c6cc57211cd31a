//! The contract of a producer-id block store: hand each caller a block of ids that no other
//! caller, in this process or any other, ever got or will get, and make the hand-out
//! durable before returning it, so a crash never lets an id be handed out twice.

use std::future::Future;
use std::pin::Pin;

use crate::{PidStoreError, ProducerIdBlock};

/// A boxed, `Send` future, so the trait stays usable as `Arc<dyn PidBlockStore>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Leases producer-id blocks by compare-and-swap on one key (Kafka's
/// `/latest_producer_id_block`): read the latest block and its version, write the next
/// block only if the version is unchanged, retry on a lost race.
pub trait PidBlockStore: Send + Sync {
    /// The next unused block, recorded as leased to `owner`. Contiguous with and after every
    /// block handed out before, by any store on the same backing key.
    fn next_block(&self, owner: i32) -> BoxFuture<'_, Result<ProducerIdBlock, PidStoreError>>;
}
