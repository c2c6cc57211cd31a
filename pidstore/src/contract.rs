//! The contract every [`PidBlockStore`] backend must pass, written once and run against
//! each backend: sled in `pidstore/tests/sled_contract.rs`, etcd in
//! `tests/tests/pidstore_etcd.rs` against a real etcd. Each function panics on a
//! violation and expects a fresh store: one whose block key was never written.
//!
//! Tests that need to plant a value under the block key (ids near `i64::MAX`, a corrupt
//! value) take a store that also implements [`BlockKeyAccess`]; [`run_all`] runs the whole
//! suite with fresh stores from a factory.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use crate::{PidBlockStore, PidStoreError, ProducerIdBlock, ProducerIdManager, BLOCK_SIZE};

pub use crate::block_key_access::BlockKeyAccess;

/// Runs every contract test, each with a fresh store from `fresh_store`.
pub async fn run_all<S, F, Fut>(mut fresh_store: F)
where
    S: BlockKeyAccess + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = Arc<S>>,
{
    first_block_starts_at_zero(fresh_store().await).await;
    blocks_are_contiguous_and_disjoint(fresh_store().await).await;
    concurrent_allocators_never_overlap(fresh_store().await, 8).await;
    block_key_holds_kafka_json(fresh_store().await).await;
    exhausted_store_fails_and_writes_nothing(fresh_store().await).await;
    corrupt_block_key_fails_and_is_left_alone(fresh_store().await).await;
    manager_hands_out_unique_ids_across_blocks(fresh_store().await, 2500).await;
    new_manager_never_repeats_an_id(fresh_store().await).await;
    concurrent_managers_never_repeat_an_id(fresh_store().await).await;
}

fn assert_full_block(block: &ProducerIdBlock, owner: i32) {
    assert_eq!(
        block.owner, owner,
        "block {block} recorded for the wrong broker"
    );
    assert_eq!(
        block.block_end - block.block_start + 1,
        BLOCK_SIZE,
        "block {block} does not hold {BLOCK_SIZE} ids"
    );
}

/// A store never written hands out `[0, 999]` first.
pub async fn first_block_starts_at_zero(store: Arc<dyn PidBlockStore>) {
    let block = store.next_block(3).await.expect("first block");
    assert_eq!((block.block_start, block.block_end), (0, BLOCK_SIZE - 1));
    assert_full_block(&block, 3);
}

/// Sequential leases follow one another without gap or overlap, whatever the owner.
pub async fn blocks_are_contiguous_and_disjoint(store: Arc<dyn PidBlockStore>) {
    let mut previous = store.next_block(0).await.expect("block");
    assert_full_block(&previous, 0);
    for owner in 1..10 {
        let block = store.next_block(owner).await.expect("block");
        assert_full_block(&block, owner);
        assert_eq!(
            block.block_start,
            previous.block_end + 1,
            "block {block} does not follow {previous}"
        );
        previous = block;
    }
}

/// `tasks` allocators racing on one store get disjoint blocks that together are contiguous.
pub async fn concurrent_allocators_never_overlap(store: Arc<dyn PidBlockStore>, tasks: usize) {
    const BLOCKS_PER_TASK: usize = 5;
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let mut blocks = Vec::with_capacity(BLOCKS_PER_TASK);
                for _ in 0..BLOCKS_PER_TASK {
                    let owner = i32::try_from(task).unwrap_or(i32::MAX);
                    blocks.push(store.next_block(owner).await.expect("block"));
                }
                blocks
            })
        })
        .collect();
    let mut blocks = Vec::new();
    for handle in handles {
        blocks.extend(handle.await.expect("allocator task"));
    }
    assert_eq!(blocks.len(), tasks * BLOCKS_PER_TASK);
    assert_disjoint_and_contiguous(&mut blocks, 0);
}

/// Asserts that `blocks` (in any order) are full blocks, disjoint and contiguous,
/// starting at `first_start`: no id lost, none handed out twice.
pub fn assert_disjoint_and_contiguous(blocks: &mut [ProducerIdBlock], first_start: i64) {
    blocks.sort_by_key(|b| b.block_start);
    assert_eq!(
        blocks.first().map(|b| b.block_start),
        Some(first_start),
        "first block"
    );
    for block in blocks.iter() {
        assert_eq!(
            block.block_end - block.block_start + 1,
            BLOCK_SIZE,
            "{block}"
        );
    }
    for pair in blocks.windows(2) {
        assert_eq!(
            pair[1].block_start,
            pair[0].block_end + 1,
            "blocks {} and {} overlap or leave a gap",
            pair[0],
            pair[1]
        );
    }
}

/// The stored value is Kafka's JSON for the last block handed out.
pub async fn block_key_holds_kafka_json<S: BlockKeyAccess>(store: Arc<S>) {
    assert_eq!(store.read_raw().await.expect("read"), None);
    let block = store.next_block(7).await.expect("block");
    let raw = store.read_raw().await.expect("read").expect("key written");
    assert_eq!(
        String::from_utf8_lossy(&raw),
        format!(
            r#"{{"version":1,"broker":7,"block_start":"{}","block_end":"{}"}}"#,
            block.block_start, block.block_end
        )
    );
}

/// Near `i64::MAX` the last whole block is handed out, then `Exhausted`, every time, and
/// the key keeps the last block: nothing wraps around to ids already used.
pub async fn exhausted_store_fails_and_writes_nothing<S: BlockKeyAccess>(store: Arc<S>) {
    let before_last = ProducerIdBlock {
        owner: 1,
        block_start: i64::MAX - 2 * BLOCK_SIZE + 1,
        block_end: i64::MAX - BLOCK_SIZE,
    };
    store
        .write_raw(before_last.to_json().into_bytes())
        .await
        .expect("plant block");
    let last = store.next_block(2).await.expect("the last block");
    assert_eq!(
        (last.block_start, last.block_end),
        (i64::MAX - BLOCK_SIZE + 1, i64::MAX)
    );
    for _ in 0..3 {
        let error = store.next_block(2).await.expect_err("exhausted");
        assert_eq!(error, PidStoreError::Exhausted);
        assert!(!error.is_retriable());
        let raw = store.read_raw().await.expect("read").expect("key present");
        assert_eq!(raw, last.to_json().into_bytes(), "an exhausted store wrote");
    }
}

/// A value that is not a block is `Corrupt` (fatal) and is not overwritten.
pub async fn corrupt_block_key_fails_and_is_left_alone<S: BlockKeyAccess>(store: Arc<S>) {
    for garbage in [
        &b"not json"[..],
        br#"{"version":1,"broker":1,"block_start":"10","block_end":"5"}"#,
        br#"{"version":9,"broker":1,"block_start":"0","block_end":"999"}"#,
    ] {
        store
            .write_raw(garbage.to_vec())
            .await
            .expect("plant garbage");
        let error = store.next_block(1).await.expect_err("corrupt");
        assert!(matches!(error, PidStoreError::Corrupt(_)), "{error:?}");
        assert!(!error.is_retriable());
        assert_eq!(
            store.read_raw().await.expect("read").as_deref(),
            Some(garbage),
            "a corrupt key was overwritten"
        );
    }
}

/// One manager hands out `count` distinct ids spanning several blocks.
pub async fn manager_hands_out_unique_ids_across_blocks(
    store: Arc<dyn PidBlockStore>,
    count: usize,
) {
    let manager = ProducerIdManager::new(store, 1);
    let mut ids = HashSet::with_capacity(count);
    for _ in 0..count {
        let id = manager.next_producer_id().await.expect("id");
        assert!(ids.insert(id), "id {id} handed out twice");
    }
    let blocks: HashSet<i64> = ids.iter().map(|id| id / BLOCK_SIZE).collect();
    let min_blocks = count.div_ceil(BLOCK_SIZE as usize);
    assert!(
        blocks.len() >= min_blocks,
        "{count} ids came from {} blocks",
        blocks.len()
    );
}

/// A manager started after another (a restarted broker) never repeats the first one's ids,
/// even those of its unfinished block.
pub async fn new_manager_never_repeats_an_id(store: Arc<dyn PidBlockStore>) {
    let mut ids = HashSet::new();
    for generation in 0..3 {
        let manager = ProducerIdManager::new(Arc::clone(&store), 1);
        for _ in 0..(BLOCK_SIZE + BLOCK_SIZE / 2) {
            let id = manager.next_producer_id().await.expect("id");
            assert!(ids.insert(id), "generation {generation} repeated id {id}");
        }
    }
}

/// Managers of different brokers sharing a store, used from many tasks at once, never
/// hand out the same id.
pub async fn concurrent_managers_never_repeat_an_id(store: Arc<dyn PidBlockStore>) {
    let managers: Vec<_> = (0..3)
        .map(|owner| Arc::new(ProducerIdManager::new(Arc::clone(&store), owner)))
        .collect();
    let handles: Vec<_> = (0..12)
        .map(|task| {
            let manager = Arc::clone(&managers[task % managers.len()]);
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..700 {
                    ids.push(manager.next_producer_id().await.expect("id"));
                }
                ids
            })
        })
        .collect();
    let mut all = HashSet::new();
    for handle in handles {
        for id in handle.await.expect("task") {
            assert!(all.insert(id), "id {id} handed out twice");
        }
    }
}
