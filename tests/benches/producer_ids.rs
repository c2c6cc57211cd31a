//! Benchmark: producer-id allocation against a real etcd.
//! - InitProducerId throughput and latency percentiles from one broker with the etcd
//!   backend, with and without background prefetch of the next block;
//! - blocks/s leased straight from etcd by 1 process, then by 3 processes contending
//!   for the same key (compare-and-swap retries).
//!
//! Run: `cargo build --release --bins && cargo bench -p idem-tests --bench producer_ids`
//! Figures go to docs/benchmarks.md as ratios measured in one run.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_pidstore::{EtcdPidStore, PidBlockStore};
use idem_proto::v1::InitProducerIdRequest;
use idem_tests::etcd::EtcdServer;
use idem_tests::{raw, BrokerProcess};

const CLIENTS: usize = 8;
const CALLS_PER_CLIENT: usize = 2_500;
const BLOCKS_PER_PROCESS: usize = 200;
const CHILD_ENV: &str = "IDEM_BENCH_ALLOCATOR_CHILD";

#[tokio::main]
async fn main() {
    if let Ok(endpoint) = std::env::var(CHILD_ENV) {
        allocate_blocks(&endpoint).await;
        return;
    }
    // `cargo bench` passes `--bench`; nothing else is expected.
    let etcd = EtcdServer::start();
    println!(
        "InitProducerId, 1 broker, etcd backend, {CLIENTS} clients x {CALLS_PER_CLIENT} calls"
    );
    for prefetch in [true, false] {
        let broker = BrokerProcess::start_with(&[
            "--pid-store",
            "etcd",
            "--etcd",
            &etcd.endpoint(),
            "--pid-prefetch",
            &prefetch.to_string(),
        ]);
        let (rate, latencies) = init_producer_ids(&broker.bootstrap()).await;
        println!(
            "  prefetch={prefetch:<5}  {rate:>9.0} ids/s  p50 {:>7.3} ms  p99 {:>7.3} ms  p99.9 {:>7.3} ms  max {:>7.3} ms",
            ms(percentile(&latencies, 50.0)),
            ms(percentile(&latencies, 99.0)),
            ms(percentile(&latencies, 99.9)),
            ms(*latencies.last().unwrap_or(&Duration::ZERO)),
        );
    }
    println!("Blocks leased from etcd ({BLOCKS_PER_PROCESS} per process)");
    for processes in [1, 3] {
        let started = Instant::now();
        let children: Vec<_> = (0..processes)
            .map(|_| {
                Command::new(std::env::current_exe().expect("bench executable"))
                    .env(CHILD_ENV, etcd.endpoint())
                    .spawn()
                    .expect("spawn allocator process")
            })
            .collect();
        for mut child in children {
            assert!(child.wait().expect("allocator process").success());
        }
        let elapsed = started.elapsed();
        let blocks = processes * BLOCKS_PER_PROCESS;
        println!(
            "  {processes} process(es): {blocks} blocks in {:.2} s = {:.0} blocks/s",
            elapsed.as_secs_f64(),
            blocks as f64 / elapsed.as_secs_f64()
        );
    }
}

async fn init_producer_ids(bootstrap: &str) -> (f64, Vec<Duration>) {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let bootstrap = bootstrap.to_string();
        tasks.push(tokio::spawn(async move {
            let mut client = raw::connect(&bootstrap).await;
            let mut latencies = Vec::with_capacity(CALLS_PER_CLIENT);
            for _ in 0..CALLS_PER_CLIENT {
                let sent = Instant::now();
                let answer = client
                    .init_producer_id(InitProducerIdRequest::default())
                    .await
                    .expect("InitProducerId")
                    .into_inner();
                assert_eq!(answer.error_code, 0, "{}", answer.error_message);
                latencies.push(sent.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("client task"));
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort();
    (rate, latencies)
}

async fn allocate_blocks(endpoint: &str) {
    let store = Arc::new(
        EtcdPidStore::connect(&[endpoint.to_string()], EtcdPidStore::DEFAULT_PREFIX)
            .await
            .expect("etcd"),
    );
    for _ in 0..BLOCKS_PER_PROCESS {
        store
            .next_block(std::process::id() as i32)
            .await
            .expect("block");
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
