//! Guarantee: producer-id blocks leased from a real etcd are never handed out twice, by
//! racing clients, racing processes or across an etcd crash, and allocation fails
//! (retriably while etcd is down, fatally when exhausted or corrupt) without writing.
//!
//! Every test starts its own real `etcd` (see `idem_tests::etcd`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_pidstore::contract::{self, assert_disjoint_and_contiguous, BlockKeyAccess};
use idem_pidstore::{
    EtcdPidStore, Observed, PidBlockStore, PidStoreError, ProducerIdBlock, BLOCK_SIZE,
};
use idem_tests::etcd::EtcdServer;

/// How long a call against an etcd that is down or silent may take before the test calls
/// it hung. Every call is bounded by `EtcdPidStore::REQUEST_TIMEOUT` (3 s); ten times that
/// still tells a bounded call from one that waits for etcd to answer, without timing the
/// timeout itself on a loaded machine. (The time a call took is printed.)
const HUNG: Duration = Duration::from_secs(EtcdPidStore::REQUEST_TIMEOUT.as_secs() * 10);

async fn store(etcd: &EtcdServer, prefix: &str) -> EtcdPidStore {
    EtcdPidStore::connect(&etcd.endpoints(), prefix)
        .await
        .expect("connect to etcd")
}

/// The key's value and `mod_revision`, read with a plain etcd client (not the store).
async fn raw_key(etcd: &EtcdServer, key: &str) -> Option<(Vec<u8>, i64)> {
    let mut client = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .expect("raw etcd client");
    let response = client.get(key, None).await.expect("raw get");
    response
        .kvs()
        .first()
        .map(|kv| (kv.value().to_vec(), kv.mod_revision()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_fresh_prefix_per_check_when_running_the_contract_suite_then_etcd_passes_all() {
    let etcd = EtcdServer::start();
    let mut fresh = 0;
    contract::run_all(|| {
        fresh += 1;
        let endpoints = etcd.endpoints();
        let prefix = format!("/contract-{fresh}");
        async move {
            Arc::new(
                EtcdPidStore::connect(&endpoints, &prefix)
                    .await
                    .expect("connect"),
            )
        }
    })
    .await;
}

#[tokio::test]
async fn given_the_default_prefix_when_a_block_is_leased_then_etcd_holds_kafka_json_under_idem_latest_producer_id_block(
) {
    let etcd = EtcdServer::start();
    let store = store(&etcd, EtcdPidStore::DEFAULT_PREFIX).await;
    assert_eq!(store.key(), "/idem/latest_producer_id_block");
    store.next_block(4).await.expect("first block");
    let block = store.next_block(5).await.expect("second block");
    let (value, _) = raw_key(&etcd, "/idem/latest_producer_id_block")
        .await
        .expect("key written");
    assert_eq!(
        String::from_utf8_lossy(&value),
        r#"{"version":1,"broker":5,"block_start":"1000","block_end":"1999"}"#
    );
    assert_eq!(block.block_start, 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_8_clients_when_each_takes_25_blocks_at_once_then_blocks_are_disjoint_contiguous_and_the_key_holds_the_last(
) {
    const CLIENTS: i32 = 8;
    const BLOCKS_EACH: usize = 25;
    let etcd = EtcdServer::start();
    // Baseline on another key: one client alone, no contention.
    let alone = store(&etcd, "/alone").await;
    let started = Instant::now();
    for _ in 0..BLOCKS_EACH {
        alone.next_block(0).await.expect("block");
    }
    let elapsed = started.elapsed();
    println!(
        "1 client took {BLOCKS_EACH} blocks in {elapsed:?}: {:.0} blocks/s",
        BLOCKS_EACH as f64 / elapsed.as_secs_f64()
    );
    let mut stores = Vec::new();
    for _ in 0..CLIENTS {
        stores.push(store(&etcd, "/race8").await);
    }
    let started = Instant::now();
    let tasks: Vec<_> = stores
        .into_iter()
        .zip(0..)
        .map(|(store, owner)| {
            tokio::spawn(async move {
                let mut blocks = Vec::with_capacity(BLOCKS_EACH);
                for _ in 0..BLOCKS_EACH {
                    blocks.push(store.next_block(owner).await.expect("block"));
                }
                blocks
            })
        })
        .collect();
    let mut blocks = Vec::new();
    for task in tasks {
        let taken = task.await.expect("allocator task");
        assert_eq!(taken.len(), BLOCKS_EACH);
        blocks.extend(taken);
    }
    let elapsed = started.elapsed();
    println!(
        "8 clients took {} blocks in {elapsed:?}: {:.0} blocks/s",
        blocks.len(),
        blocks.len() as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(blocks.len(), CLIENTS as usize * BLOCKS_EACH);
    assert_disjoint_and_contiguous(&mut blocks, 0);
    let last = blocks.last().expect("blocks");
    let (value, _) = raw_key(&etcd, "/race8/latest_producer_id_block")
        .await
        .expect("key");
    assert_eq!(value, last.to_json().into_bytes());
}

const CHILD_ENDPOINT_ENV: &str = "IDEM_PIDSTORE_ETCD_CHILD_ENDPOINT";
const CHILD_PREFIX_ENV: &str = "IDEM_PIDSTORE_ETCD_CHILD_PREFIX";
const CHILD_OWNER_ENV: &str = "IDEM_PIDSTORE_ETCD_CHILD_OWNER";
const CHILD_BLOCKS_ENV: &str = "IDEM_PIDSTORE_ETCD_CHILD_BLOCKS";
const READY: &str = "READY";
const BLOCK: &str = "BLOCK ";

/// Not a test on its own: the child process of the multi-process test below. Connects,
/// says READY, waits for a line on stdin (so all children start together), then takes
/// blocks and prints each.
#[test]
fn allocator_child_process() {
    let Ok(endpoint) = std::env::var(CHILD_ENDPOINT_ENV) else {
        return;
    };
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"));
    let prefix = env(CHILD_PREFIX_ENV);
    let owner: i32 = env(CHILD_OWNER_ENV).parse().expect("owner");
    let blocks: usize = env(CHILD_BLOCKS_ENV).parse().expect("block count");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = EtcdPidStore::connect(&[endpoint], &prefix)
            .await
            .expect("connect");
        let mut stdout = std::io::stdout();
        writeln!(stdout, "{READY}").expect("write");
        stdout.flush().expect("flush");
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).expect("read go");
        for _ in 0..blocks {
            let block = store.next_block(owner).await.expect("block");
            writeln!(stdout, "{BLOCK}{}", block.to_json()).expect("write");
        }
        stdout.flush().expect("flush");
    });
}

#[test]
fn given_3_processes_when_each_takes_30_blocks_at_once_then_blocks_are_disjoint_contiguous_and_the_key_holds_the_last(
) {
    const PROCESSES: i32 = 3;
    const BLOCKS_EACH: usize = 30;
    let etcd = EtcdServer::start();
    let prefix = "/race-processes";
    let exe = std::env::current_exe().expect("test binary");
    let mut children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            let mut child = Command::new(&exe)
                .args([
                    "--exact",
                    "allocator_child_process",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENDPOINT_ENV, etcd.endpoint())
                .env(CHILD_PREFIX_ENV, prefix)
                .env(CHILD_OWNER_ENV, (100 + i).to_string())
                .env(CHILD_BLOCKS_ENV, BLOCKS_EACH.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn child");
            let stdout = BufReader::new(child.stdout.take().expect("child stdout"));
            (child, stdout)
        })
        .collect();
    for (_, stdout) in &mut children {
        let mut line = String::new();
        loop {
            line.clear();
            let n = stdout.read_line(&mut line).expect("read child");
            assert!(n > 0, "child exited before it was ready");
            // libtest prints "test allocator_child_process ... " before it on the same line.
            if line.trim_end().ends_with(READY) {
                break;
            }
        }
    }
    let started = Instant::now();
    for (child, _) in &mut children {
        let mut stdin = child.stdin.take().expect("child stdin");
        writeln!(stdin, "go").expect("start child");
    }
    let mut blocks = Vec::new();
    for (mut child, stdout) in children {
        let mut taken = 0;
        for line in stdout.lines() {
            let line = line.expect("read child");
            if let Some((_, json)) = line.split_once(BLOCK) {
                blocks.push(ProducerIdBlock::from_json(json.as_bytes()).expect("child block"));
                taken += 1;
            }
        }
        let status = child.wait().expect("wait child");
        assert!(status.success(), "child failed: {status}");
        assert_eq!(taken, BLOCKS_EACH);
    }
    let elapsed = started.elapsed();
    let interleavings = {
        let mut sorted = blocks.clone();
        sorted.sort_by_key(|b| b.block_start);
        sorted
            .windows(2)
            .filter(|w| w[0].owner != w[1].owner)
            .count()
    };
    println!(
        "3 processes took {} blocks in {elapsed:?}: {:.0} blocks/s; owner changed {interleavings} times along the id space",
        blocks.len(),
        blocks.len() as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(blocks.len(), PROCESSES as usize * BLOCKS_EACH);
    assert_disjoint_and_contiguous(&mut blocks, 0);
    let last = *blocks.last().expect("blocks");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (value, _) = runtime
        .block_on(raw_key(&etcd, "/race-processes/latest_producer_id_block"))
        .expect("key");
    assert_eq!(value, last.to_json().into_bytes());
}

#[tokio::test]
async fn given_a_stale_observation_when_another_store_wins_first_then_the_stale_claim_writes_nothing(
) {
    let etcd = EtcdServer::start();
    let a = store(&etcd, "/stale").await;
    let b = store(&etcd, "/stale").await;
    let first = b.next_block(2).await.expect("first block");

    let stale = a.read_latest().await.expect("A reads");
    assert_eq!(stale.latest(), Some(&first));
    let winner = b.next_block(2).await.expect("B wins the race");
    assert_eq!(winner.block_start, first.block_end + 1);
    let (_, revision_after_b) = raw_key(&etcd, a.key()).await.expect("key");

    let claimed = a.try_claim(1, &stale).await.expect("A's claim is answered");
    assert_eq!(claimed, None, "a stale compare-and-swap succeeded");
    assert_eq!(
        raw_key(&etcd, a.key()).await,
        Some((winner.to_json().into_bytes(), revision_after_b)),
        "the stale claim changed the key"
    );
    // A fresh attempt goes on after the winner's block.
    let next = a.next_block(1).await.expect("A's next block");
    assert_eq!(next.block_start, winner.block_end + 1);
}

#[tokio::test]
async fn given_both_see_no_key_when_one_creates_it_then_the_others_create_fails_and_writes_nothing()
{
    let etcd = EtcdServer::start();
    let a = store(&etcd, "/stale-absent").await;
    let b = store(&etcd, "/stale-absent").await;
    let seen_by_a = a.read_latest().await.expect("A reads");
    let seen_by_b = b.read_latest().await.expect("B reads");
    assert_eq!((seen_by_a, seen_by_b), (Observed::Absent, Observed::Absent));

    let created = b
        .try_claim(2, &seen_by_b)
        .await
        .expect("B's claim is answered")
        .expect("B creates the key");
    assert_eq!(
        (created.block_start, created.block_end),
        (0, BLOCK_SIZE - 1)
    );
    let (_, revision) = raw_key(&etcd, b.key()).await.expect("key created");

    assert_eq!(a.try_claim(1, &seen_by_a).await.expect("answered"), None);
    assert_eq!(
        raw_key(&etcd, a.key()).await,
        Some((created.to_json().into_bytes(), revision)),
        "the second create overwrote the first block"
    );
}

enum Event {
    Block(usize, ProducerIdBlock),
    Failed(usize, Duration),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_allocators_running_when_etcd_is_killed_then_they_fail_retriably_within_seconds_and_after_restart_resume_past_the_last_block(
) {
    const ALLOCATORS: usize = 4;
    /// A failed call must return within this long (the store's request timeout is 3 s).
    const FAIL_WITHIN: Duration = Duration::from_secs(5);
    let mut etcd = EtcdServer::start();
    let stop = Arc::new(AtomicBool::new(false));
    let (events, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for allocator in 0..ALLOCATORS {
        let store = store(&etcd, "/kill").await;
        let (stop, events) = (Arc::clone(&stop), events.clone());
        tasks.push(tokio::spawn(async move {
            let owner = i32::try_from(allocator).expect("owner");
            while !stop.load(Ordering::Relaxed) {
                let call = Instant::now();
                match store.next_block(owner).await {
                    Ok(block) => {
                        let _ = events.send(Event::Block(allocator, block));
                    }
                    Err(error) => {
                        assert!(error.is_retriable(), "etcd down gave {error:?}");
                        assert!(matches!(error, PidStoreError::Unavailable(_)));
                        let _ = events.send(Event::Failed(allocator, call.elapsed()));
                        // Pace the retries of a caller that keeps failing.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }));
    }
    drop(events);

    let mut before_kill = Vec::new();
    let mut after_kill = Vec::new();
    let mut failure_seen_after = [None::<Duration>; ALLOCATORS];
    let mut slowest_failure = Duration::ZERO;

    // Phase 1: allocation runs.
    tokio::time::timeout(Duration::from_secs(10), async {
        while before_kill.len() < 40 {
            match rx.recv().await.expect("allocators alive") {
                Event::Block(_, block) => before_kill.push(block),
                Event::Failed(..) => panic!("allocation failed while etcd was up"),
            }
        }
    })
    .await
    .expect("40 blocks within 10 s while etcd is up");

    // Phase 2: etcd dies; every allocator must see the retriable error, soon.
    tokio::task::block_in_place(|| etcd.kill());
    let killed = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), async {
        while failure_seen_after.iter().any(Option::is_none) {
            match rx.recv().await.expect("allocators alive") {
                // Answered before the kill, reported after it.
                Event::Block(_, block) => after_kill.push(block),
                Event::Failed(allocator, took) => {
                    slowest_failure = slowest_failure.max(took);
                    failure_seen_after[allocator].get_or_insert(killed.elapsed());
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not every allocator failed within 10 s of the kill"));
    let first_failures: Vec<_> = failure_seen_after.iter().flatten().copied().collect();
    println!("after the kill, allocators failed after {first_failures:?}");
    for after in &first_failures {
        assert!(
            *after < FAIL_WITHIN,
            "an allocator failed only after {after:?}"
        );
    }

    // Phase 3: etcd is back on the same data dir; every allocator gets blocks again.
    tokio::task::block_in_place(|| etcd.restart());
    let restarted = Instant::now();
    let mut after_restart: Vec<ProducerIdBlock> = Vec::new();
    let mut resumed = [None::<Duration>; ALLOCATORS];
    tokio::time::timeout(Duration::from_secs(10), async {
        while resumed.iter().any(Option::is_none) {
            match rx.recv().await.expect("allocators alive") {
                Event::Block(allocator, block) => {
                    after_restart.push(block);
                    resumed[allocator].get_or_insert(restarted.elapsed());
                }
                Event::Failed(_, took) => slowest_failure = slowest_failure.max(took),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not every allocator resumed within 10 s of the restart"));
    println!("after the restart, allocators resumed after {resumed:?}");
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("allocator task");
    }
    while let Ok(event) = rx.try_recv() {
        match event {
            Event::Block(_, block) => after_restart.push(block),
            Event::Failed(_, took) => slowest_failure = slowest_failure.max(took),
        }
    }
    println!("slowest failed call took {slowest_failure:?}");
    assert!(
        slowest_failure < FAIL_WITHIN,
        "a call failed only after {slowest_failure:?}"
    );

    // No id twice, and the blocks after the restart lie past everything before.
    let mut all: Vec<_> = before_kill
        .iter()
        .chain(&after_kill)
        .chain(&after_restart)
        .copied()
        .collect();
    all.sort_by_key(|b| b.block_start);
    for pair in all.windows(2) {
        assert!(
            pair[1].block_start > pair[0].block_end,
            "blocks {} and {} overlap",
            pair[0],
            pair[1]
        );
    }
    let last_before = before_kill
        .iter()
        .chain(&after_kill)
        .map(|b| b.block_end)
        .max()
        .expect("blocks before the kill");
    for block in &after_restart {
        assert!(
            block.block_start > last_before,
            "{block} reuses ids from before the kill"
        );
    }
    let last = all.last().expect("blocks");
    let (value, _) = raw_key(&etcd, "/kill/latest_producer_id_block")
        .await
        .expect("key");
    assert_eq!(value, last.to_json().into_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_etcd_is_down_when_a_store_connects_then_calls_fail_retriably_and_work_once_etcd_is_up(
) {
    let mut etcd = EtcdServer::start();
    tokio::task::block_in_place(|| etcd.kill());
    let connected = Instant::now();
    let store = tokio::time::timeout(HUNG, store(&etcd, "/late"))
        .await
        .expect("connect does not wait for etcd");
    let call = Instant::now();
    let error = tokio::time::timeout(HUNG, store.next_block(1))
        .await
        .expect("a call with etcd down does not wait for etcd")
        .expect_err("etcd is down");
    println!(
        "connect took {:?}, a call with etcd down failed after {:?}: {error}",
        call - connected,
        call.elapsed()
    );
    assert!(error.is_retriable(), "{error:?}");

    tokio::task::block_in_place(|| etcd.restart());
    let block = store.next_block(1).await.expect("etcd is up");
    assert_eq!(block.block_start, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_etcd_stops_answering_when_allocating_then_the_call_fails_retriably_instead_of_hanging_and_no_block_written_late_is_reused(
) {
    let mut etcd = EtcdServer::start();
    let store = store(&etcd, "/paused").await;
    let before = store.next_block(1).await.expect("block while etcd answers");

    let observed = store.read_latest().await.expect("read while etcd answers");

    etcd.pause();
    let call = Instant::now();
    let error = tokio::time::timeout(HUNG, store.next_block(1))
        .await
        .expect("next_block against a paused etcd is bounded by the request timeout")
        .expect_err("etcd is paused");
    let took = call.elapsed();
    println!("next_block against a paused etcd failed after {took:?}: {error}");
    assert!(error.is_retriable(), "{error:?}");
    // A claim sent now sits in etcd's socket and may be applied once etcd resumes,
    // after its caller was told Unavailable.
    let call = Instant::now();
    let error = tokio::time::timeout(HUNG, store.try_claim(1, &observed))
        .await
        .expect("try_claim against a paused etcd is bounded by the request timeout")
        .expect_err("etcd is paused");
    let took = call.elapsed();
    println!("try_claim against a paused etcd failed after {took:?}: {error}");
    assert!(error.is_retriable(), "{error:?}");

    etcd.resume();
    let after = store.next_block(1).await.expect("block after etcd resumed");
    let stored = key_history(&etcd, store.key()).await;
    let abandoned = ProducerIdBlock::next_after(Some(&before), 1).expect("next");
    println!(
        "after resuming, the next block is {after}; the abandoned claim {abandoned} was {}",
        if stored[..stored.len().saturating_sub(1)].contains(&abandoned) {
            "applied late"
        } else {
            "dropped"
        }
    );
    // Whatever etcd applied while the caller was told Unavailable, the next block handed
    // out lies past every block the key ever held.
    assert_eq!(stored.last(), Some(&after));
    for block in &stored[..stored.len() - 1] {
        assert!(
            after.block_start > block.block_end,
            "{after} overlaps {block}"
        );
    }
}

/// Every value the key held, oldest first, read revision by revision from etcd's history.
async fn key_history(etcd: &EtcdServer, key: &str) -> Vec<ProducerIdBlock> {
    let mut client = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .expect("raw etcd client");
    let now = client.get(key, None).await.expect("raw get");
    let head = now.header().expect("response header").revision();
    let mut history: Vec<ProducerIdBlock> = Vec::new();
    for revision in 1..=head {
        let options = etcd_client::GetOptions::new().with_revision(revision);
        let response = client
            .get(key, Some(options))
            .await
            .expect("get at revision");
        if let Some(kv) = response.kvs().first() {
            let block = ProducerIdBlock::from_json(kv.value()).expect("stored block");
            if history.last() != Some(&block) {
                history.push(block);
            }
        }
    }
    history
}

#[tokio::test]
async fn given_the_key_near_i64_max_when_allocating_then_exhausted_and_the_key_is_unchanged() {
    let etcd = EtcdServer::start();
    let store = store(&etcd, "/exhausted").await;
    for near_the_end in [
        // Fewer than BLOCK_SIZE ids left.
        ProducerIdBlock {
            owner: 1,
            block_start: i64::MAX - 1500,
            block_end: i64::MAX - 501,
        },
        // The very last block was handed out.
        ProducerIdBlock {
            owner: 1,
            block_start: i64::MAX - BLOCK_SIZE + 1,
            block_end: i64::MAX,
        },
    ] {
        store
            .write_raw(near_the_end.to_json().into_bytes())
            .await
            .expect("plant block");
        let before = raw_key(&etcd, store.key()).await;
        for _ in 0..2 {
            let error = store.next_block(2).await.expect_err("exhausted");
            assert_eq!(error, PidStoreError::Exhausted);
            assert!(!error.is_retriable());
        }
        let observed = store.read_latest().await.expect("read");
        assert_eq!(
            store.try_claim(2, &observed).await,
            Err(PidStoreError::Exhausted)
        );
        assert_eq!(
            raw_key(&etcd, store.key()).await,
            before,
            "an exhausted store wrote"
        );
    }
}

#[tokio::test]
async fn given_a_corrupt_key_when_allocating_then_corrupt_and_the_key_is_unchanged() {
    let etcd = EtcdServer::start();
    let store = store(&etcd, "/corrupt").await;
    for garbage in [
        &b""[..],
        b"not json",
        br#"{"version":1,"broker":1,"block_start":"0"}"#,
        br#"{"version":1,"broker":1,"block_start":0,"block_end":999}"#,
        br#"{"version":2,"broker":1,"block_start":"0","block_end":"999"}"#,
    ] {
        store
            .write_raw(garbage.to_vec())
            .await
            .expect("plant garbage");
        let before = raw_key(&etcd, store.key()).await.expect("planted");
        let error = store.next_block(1).await.expect_err("corrupt");
        assert!(matches!(error, PidStoreError::Corrupt(_)), "{error:?}");
        assert!(!error.is_retriable());
        assert!(matches!(
            store.read_latest().await,
            Err(PidStoreError::Corrupt(_))
        ));
        assert_eq!(
            raw_key(&etcd, store.key()).await,
            Some(before),
            "a corrupt key was overwritten"
        );
    }
}
