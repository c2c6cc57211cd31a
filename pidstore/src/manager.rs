//! Hands out single producer ids from leased blocks. A new manager (a new process) always
//! leases a fresh block, so ids of a block leased before a restart are never reused; when
//! 90% of the current block is used the next block is leased in the background, so callers
//! rarely wait on the store.

use std::sync::Arc;

use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::{PidBlockStore, PidStoreError, ProducerIdBlock};

/// Share of the current block after which the next block is prefetched, in tenths.
const PREFETCH_AT_TENTHS: i128 = 9;

/// Allocates producer ids for one broker (`owner`). Safe to share between tasks.
pub struct ProducerIdManager {
    store: Arc<dyn PidBlockStore>,
    owner: i32,
    /// Lease the next block in the background at 90% of the current one.
    prefetch: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    current: Option<ProducerIdBlock>,
    /// The next id of `current` to hand out; `None` once the block is used up.
    next_id: Option<i64>,
    /// The next block, being leased in the background.
    prefetch: Option<JoinHandle<Result<ProducerIdBlock, PidStoreError>>>,
}

impl State {
    fn take_id(&mut self) -> Option<i64> {
        let block = self.current?;
        let id = self.next_id?;
        self.next_id = id.checked_add(1).filter(|next| *next <= block.block_end);
        Some(id)
    }

    fn wants_prefetch(&self) -> bool {
        let Some(block) = self.current else {
            return false;
        };
        if self.prefetch.is_some() {
            return false;
        }
        let next = self
            .next_id
            .map_or(i128::from(block.block_end) + 1, i128::from);
        let used = next - i128::from(block.block_start);
        let len = i128::from(block.block_end) - i128::from(block.block_start) + 1;
        used * 10 >= len * PREFETCH_AT_TENTHS
    }

    /// Makes `block` current, refusing a block that does not lie after the previous one
    /// (a store handing out overlapping blocks would repeat ids).
    fn install(&mut self, block: ProducerIdBlock) -> Result<(), PidStoreError> {
        if block.is_empty() {
            return Err(PidStoreError::Corrupt(format!(
                "store handed out an empty block {block}"
            )));
        }
        if let Some(previous) = self.current {
            if block.block_start <= previous.block_end {
                return Err(PidStoreError::Corrupt(format!(
                    "store handed out block {block}, not after the previous block {previous}"
                )));
            }
        }
        self.current = Some(block);
        self.next_id = Some(block.block_start);
        Ok(())
    }
}

impl ProducerIdManager {
    /// A manager that leases blocks for broker `owner`. Leases nothing until the first id
    /// is asked for.
    pub fn new(store: Arc<dyn PidBlockStore>, owner: i32) -> Self {
        ProducerIdManager {
            store,
            owner,
            prefetch: true,
            state: Mutex::new(State::default()),
        }
    }

    /// The same manager with background prefetch on or off. Off, the caller that finds
    /// the block used up waits for the store (measured in docs/benchmarks.md).
    pub fn with_prefetch(mut self, prefetch: bool) -> Self {
        self.prefetch = prefetch;
        self
    }

    pub fn owner(&self) -> i32 {
        self.owner
    }

    /// A producer id never handed out before by any manager on the same store. Must run
    /// inside a tokio runtime (the prefetch is a spawned task).
    pub async fn next_producer_id(&self) -> Result<i64, PidStoreError> {
        let mut state = self.state.lock().await;
        let id = match state.take_id() {
            Some(id) => id,
            None => {
                let block = self.lease_block(&mut state).await?;
                state.install(block)?;
                state
                    .take_id()
                    .ok_or_else(|| PidStoreError::Corrupt(format!("empty block {block}")))?
            }
        };
        if self.prefetch && state.wants_prefetch() {
            let store = Arc::clone(&self.store);
            let owner = self.owner;
            tracing::debug!(owner, "prefetching the next producer id block");
            state.prefetch = Some(tokio::spawn(async move { store.next_block(owner).await }));
        }
        Ok(id)
    }

    /// The prefetched block if there is a good one, else a block leased now.
    async fn lease_block(&self, state: &mut State) -> Result<ProducerIdBlock, PidStoreError> {
        if let Some(prefetch) = state.prefetch.as_mut() {
            // Awaited by reference: if this call is cancelled the prefetch stays for the next.
            let result = prefetch.await;
            state.prefetch = None;
            match result {
                Ok(Ok(block)) => return Ok(block),
                Ok(Err(error)) => {
                    tracing::warn!(owner = self.owner, %error, "prefetching a producer id block failed; leasing again");
                }
                Err(error) => {
                    tracing::warn!(owner = self.owner, %error, "prefetch task died; leasing again");
                }
            }
        }
        self.store.next_block(self.owner).await
    }
}

impl std::fmt::Debug for ProducerIdManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProducerIdManager")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex as StdMutex;

    use super::*;
    use crate::BoxFuture;

    /// An in-memory store that can be told to fail, counting its calls.
    #[derive(Default)]
    struct MemoryStore {
        latest: StdMutex<Option<ProducerIdBlock>>,
        failures: StdMutex<Vec<PidStoreError>>,
        calls: AtomicUsize,
    }

    impl PidBlockStore for MemoryStore {
        fn next_block(&self, owner: i32) -> BoxFuture<'_, Result<ProducerIdBlock, PidStoreError>> {
            Box::pin(async move {
                self.calls.fetch_add(1, Ordering::SeqCst);
                if let Some(error) = self.failures.lock().expect("lock").pop() {
                    return Err(error);
                }
                let mut latest = self.latest.lock().expect("lock");
                let next = ProducerIdBlock::next_after(latest.as_ref(), owner)?;
                *latest = Some(next);
                Ok(next)
            })
        }
    }

    #[tokio::test]
    async fn given_a_fresh_store_then_ids_start_at_zero_and_are_consecutive() {
        let manager = ProducerIdManager::new(Arc::new(MemoryStore::default()), 1);
        for expected in 0..10 {
            assert_eq!(manager.next_producer_id().await, Ok(expected));
        }
    }

    #[tokio::test]
    async fn given_90_percent_of_a_block_used_then_the_next_block_is_prefetched() {
        let store = Arc::new(MemoryStore::default());
        let manager = ProducerIdManager::new(store.clone(), 1);
        for _ in 0..899 {
            manager.next_producer_id().await.expect("id");
        }
        assert_eq!(store.calls.load(Ordering::SeqCst), 1);
        manager.next_producer_id().await.expect("id"); // the 900th
        tokio::task::yield_now().await;
        let prefetch = manager.state.lock().await.prefetch.is_some();
        assert!(prefetch);
        for _ in 900..1000 {
            manager.next_producer_id().await.expect("id");
        }
        assert_eq!(manager.next_producer_id().await, Ok(1000));
        assert_eq!(store.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn given_a_failed_prefetch_then_the_block_is_leased_again_on_demand() {
        let store = Arc::new(MemoryStore::default());
        let manager = ProducerIdManager::new(store.clone(), 1);
        for _ in 0..899 {
            manager.next_producer_id().await.expect("id");
        }
        store
            .failures
            .lock()
            .expect("lock")
            .push(PidStoreError::Unavailable("down".into()));
        for _ in 899..1000 {
            manager.next_producer_id().await.expect("id");
        }
        assert_eq!(manager.next_producer_id().await, Ok(1000));
        assert_eq!(store.calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn given_the_store_is_unavailable_then_the_error_is_retriable_and_a_retry_succeeds() {
        let store = Arc::new(MemoryStore::default());
        store
            .failures
            .lock()
            .expect("lock")
            .push(PidStoreError::Unavailable("down".into()));
        let manager = ProducerIdManager::new(store, 1);
        let error = manager.next_producer_id().await.expect_err("unavailable");
        assert!(error.is_retriable());
        assert_eq!(manager.next_producer_id().await, Ok(0));
    }

    #[tokio::test]
    async fn given_the_last_block_is_used_up_then_exhausted_and_no_id_repeats() {
        let store = Arc::new(MemoryStore::default());
        *store.latest.lock().expect("lock") = Some(ProducerIdBlock {
            owner: 0,
            block_start: i64::MAX - 1999,
            block_end: i64::MAX - 1000,
        });
        let manager = ProducerIdManager::new(store, 1);
        let mut seen = HashSet::new();
        for _ in 0..1000 {
            let id = manager.next_producer_id().await.expect("id");
            assert!(seen.insert(id));
        }
        assert!(seen.contains(&i64::MAX));
        for _ in 0..3 {
            let error = manager.next_producer_id().await.expect_err("exhausted");
            assert_eq!(error, PidStoreError::Exhausted);
            assert!(!error.is_retriable());
        }
    }

    /// A store that hands out the same block every time, as a broken backend would.
    struct RepeatingStore;

    impl PidBlockStore for RepeatingStore {
        fn next_block(&self, owner: i32) -> BoxFuture<'_, Result<ProducerIdBlock, PidStoreError>> {
            Box::pin(async move { Ok(ProducerIdBlock::first(owner)) })
        }
    }

    #[tokio::test]
    async fn given_a_store_repeating_a_block_then_the_manager_refuses_it() {
        let manager = ProducerIdManager::new(Arc::new(RepeatingStore), 1);
        for _ in 0..1000 {
            manager.next_producer_id().await.expect("id");
        }
        assert!(matches!(
            manager.next_producer_id().await,
            Err(PidStoreError::Corrupt(_))
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn given_concurrent_callers_then_every_id_is_unique() {
        let manager = Arc::new(ProducerIdManager::new(Arc::new(MemoryStore::default()), 1));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let manager = Arc::clone(&manager);
                tokio::spawn(async move {
                    let mut ids = Vec::new();
                    for _ in 0..500 {
                        ids.push(manager.next_producer_id().await.expect("id"));
                    }
                    ids
                })
            })
            .collect();
        let mut all = HashSet::new();
        for task in tasks {
            for id in task.await.expect("task") {
                assert!(all.insert(id), "id {id} handed out twice");
            }
        }
        assert_eq!(all.len(), 4000);
    }
}
