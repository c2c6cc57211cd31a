//! The `PidBlockStore` contract against the embedded sled backend, plus what only a local
//! database can show: ids stay unique across reopening and across a crashed process.

use std::io::Write;
use std::process::Command;
use std::sync::Arc;

use idem_pidstore::contract::{self, BlockKeyAccess};
use idem_pidstore::{PidBlockStore, ProducerIdBlock, ProducerIdManager, SledPidStore};
use tempfile::TempDir;

/// A fresh store in its own temporary directory (kept alive by the returned guard).
fn fresh() -> (TempDir, Arc<SledPidStore>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SledPidStore::open(dir.path().join("pids")).expect("open sled");
    (dir, Arc::new(store))
}

#[tokio::test]
async fn contract_first_block_starts_at_zero() {
    let (_dir, store) = fresh();
    contract::first_block_starts_at_zero(store).await;
}

#[tokio::test]
async fn contract_blocks_are_contiguous_and_disjoint() {
    let (_dir, store) = fresh();
    contract::blocks_are_contiguous_and_disjoint(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contract_concurrent_allocators_never_overlap() {
    let (_dir, store) = fresh();
    contract::concurrent_allocators_never_overlap(store, 8).await;
}

#[tokio::test]
async fn contract_block_key_holds_kafka_json() {
    let (_dir, store) = fresh();
    contract::block_key_holds_kafka_json(store).await;
}

#[tokio::test]
async fn contract_exhausted_store_fails_and_writes_nothing() {
    let (_dir, store) = fresh();
    contract::exhausted_store_fails_and_writes_nothing(store).await;
}

#[tokio::test]
async fn contract_corrupt_block_key_fails_and_is_left_alone() {
    let (_dir, store) = fresh();
    contract::corrupt_block_key_fails_and_is_left_alone(store).await;
}

#[tokio::test]
async fn contract_manager_hands_out_unique_ids_across_blocks() {
    let (_dir, store) = fresh();
    contract::manager_hands_out_unique_ids_across_blocks(store, 2500).await;
}

#[tokio::test]
async fn contract_new_manager_never_repeats_an_id() {
    let (_dir, store) = fresh();
    contract::new_manager_never_repeats_an_id(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contract_concurrent_managers_never_repeat_an_id() {
    let (_dir, store) = fresh();
    contract::concurrent_managers_never_repeat_an_id(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_run_all_passes() {
    let mut dirs = Vec::new();
    contract::run_all(|| {
        let (dir, store) = fresh();
        dirs.push(dir);
        async move { store }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_two_handles_on_one_db_when_racing_then_blocks_never_overlap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path().join("shared")).expect("open sled");
    let a = Arc::new(SledPidStore::new(db.clone(), "/idem/"));
    let b = Arc::new(SledPidStore::new(db, "/idem/"));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store: Arc<dyn PidBlockStore> = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                let mut blocks = Vec::new();
                for _ in 0..5 {
                    blocks.push(store.next_block(i).await.expect("block"));
                }
                blocks
            })
        })
        .collect();
    let mut blocks = Vec::new();
    for task in tasks {
        blocks.extend(task.await.expect("task"));
    }
    blocks.sort_by_key(|b| b.block_start);
    assert_eq!(blocks[0].block_start, 0);
    for pair in blocks.windows(2) {
        assert_eq!(pair[1].block_start, pair[0].block_end + 1);
    }
}

#[tokio::test]
async fn given_two_key_prefixes_on_one_db_then_their_id_spaces_are_independent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path().join("shared")).expect("open sled");
    let a = SledPidStore::new(db.clone(), "a/");
    let b = SledPidStore::new(db, "b/");
    assert_eq!(a.key(), b"a/latest_producer_id_block");
    assert_eq!(a.next_block(1).await.expect("a").block_start, 0);
    assert_eq!(a.next_block(1).await.expect("a").block_start, 1000);
    assert_eq!(b.next_block(1).await.expect("b").block_start, 0);
}

#[tokio::test]
async fn given_blocks_handed_out_when_the_db_is_reopened_then_the_next_block_follows_the_last() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pids");
    let last = {
        let store = SledPidStore::open(&path).expect("open");
        store.next_block(1).await.expect("block");
        store.next_block(1).await.expect("block")
    };
    let reopened = SledPidStore::open(&path).expect("reopen");
    let next = reopened.next_block(2).await.expect("block");
    assert_eq!(next.block_start, last.block_end + 1);
    assert_eq!(
        reopened.read_raw().await.expect("read"),
        Some(next.to_json().into_bytes())
    );
}

#[tokio::test]
async fn given_a_manager_used_ids_when_the_db_is_reopened_then_a_new_manager_repeats_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pids");
    let mut seen = std::collections::HashSet::new();
    for _restart in 0..3 {
        let store: Arc<dyn PidBlockStore> = Arc::new(open_when_released(&path).await);
        let manager = ProducerIdManager::new(store, 1);
        for _ in 0..950 {
            let id = manager.next_producer_id().await.expect("id");
            assert!(seen.insert(id), "id {id} repeated after reopening");
        }
    }
}

/// Opens the database once the previous handle is gone: a prefetch task of a dropped
/// manager may still hold it for a moment, as a dying process would.
async fn open_when_released(path: &std::path::Path) -> SledPidStore {
    for _ in 0..100 {
        if let Ok(store) = SledPidStore::open(path) {
            return store;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    SledPidStore::open(path).expect("open")
}

const CRASH_DIR_ENV: &str = "IDEM_PIDSTORE_CRASH_CHILD_DIR";
const LEASED: &str = "LEASED ";

/// Not a test on its own: the child process of the crash test below. Leases a block, says
/// which, and aborts without running any destructor (no sled flush on drop, no background
/// flush either).
#[test]
fn crash_child_leases_a_block_then_aborts() {
    let Ok(dir) = std::env::var(CRASH_DIR_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let block = runtime.block_on(async {
        // No background flushing: only the store's own flush can make the lease durable.
        let db = sled::Config::new()
            .path(&dir)
            .flush_every_ms(None)
            .open()
            .expect("open");
        let store = SledPidStore::new(db, "");
        store.next_block(9).await.expect("block")
    });
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{LEASED}{}", block.to_json()).expect("write");
    stdout.flush().expect("flush");
    std::process::abort();
}

#[tokio::test]
async fn given_a_process_aborts_right_after_leasing_then_the_reopened_store_never_repeats_its_block(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pids");
    {
        let store = SledPidStore::open(&path).expect("open");
        store.next_block(1).await.expect("block");
    }
    let output = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "crash_child_leases_a_block_then_aborts",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_DIR_ENV, &path)
        .output()
        .expect("run child");
    assert!(!output.status.success(), "the child was meant to abort");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once(LEASED).map(|(_, json)| json))
        .unwrap_or_else(|| panic!("child leased nothing: {stdout}"));
    let crashed = ProducerIdBlock::from_json(line.as_bytes()).expect("child's block");
    assert_eq!(crashed.block_start, 1000);

    let store = SledPidStore::open(&path).expect("reopen after crash");
    let next = store.next_block(1).await.expect("block");
    assert_eq!(next.block_start, crashed.block_end + 1);
}
