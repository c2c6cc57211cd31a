//! Benchmark: `__transaction_state` under compaction, and a coordinator takeover after
//! a long history of transactions.
//!
//! Real etcd, 3 brokers, 2 coordinators (the e2e harness's `Cluster`: 4 log partitions,
//! 2-second coordinator leases). `__transaction_state` gets small segments (so the
//! cleaner has sealed segments to work on) and, while the workload runs, a compaction
//! lag no record reaches, so the "before" size is the uncleaned history. Then:
//! 1. IDS transactional ids x TXNS committed transactions of one small record each,
//!    CONCURRENCY producers at a time (transactions/s);
//! 2. `__transaction_state`'s bytes on one broker's disk, before and after the cleaner
//!    ran (the lag set to 0; awaited by polling the size until it holds still);
//! 3. takeover after SIGKILL of a coordinator, then after a graceful stop (SIGTERM,
//!    which releases its claims at once): each slice's load time as the new owner's
//!    loader reports it ("transaction log partition loaded", `elapsed_ms`), and, end to
//!    end, from the kill or stop until an InitProducerId for one of the ids in a slice
//!    that moved succeeds.
//!
//! Run (release binaries: the honest figure):
//! `cargo build --release --bins && cargo bench -p idem-tests --bench txn_log_takeover`
//! Settings (environment): IDEM_BENCH_TXN_IDS (1000), IDEM_BENCH_TXNS_PER_ID (100),
//! IDEM_BENCH_CONCURRENCY (50), IDEM_BENCH_SEGMENT_BYTES (65536); IDEM_BENCH_QUICK=1 for
//! 100 x 10. Figures go to docs/benchmarks.md.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_client::{Admin, AlterConfigOp, Isolation, OffsetSpec, ProducerRecord};
use idem_proto::txn::{txn_log_partition, TXN_LOG_TOPIC};
use idem_proto::ErrorCode;
use idem_tests::cluster::TXN_LOG_PARTITIONS;
use idem_tests::txn;
use idem_tests::Cluster;

const TOPIC: &str = "bench";
const TOPIC_PARTITIONS: i32 = 6;
/// How often the brokers' cleaner (and retention) looks at each partition.
const CHECK_INTERVAL_MS: u64 = 500;
/// The cleaner is taken as done once the log's size held still this long (several
/// check intervals, each of which would have cleaned what was left).
const SETTLED: Duration = Duration::from_millis(8 * CHECK_INTERVAL_MS);
const POLL: Duration = Duration::from_millis(100);
/// The longest any phase is waited for before the bench gives up.
const PATIENCE: Duration = Duration::from_secs(600);

struct Settings {
    ids: usize,
    txns_per_id: usize,
    concurrency: usize,
    segment_bytes: u64,
}

impl Settings {
    fn from_env() -> Settings {
        let quick = std::env::var("IDEM_BENCH_QUICK").is_ok_and(|v| v == "1");
        let number = |name: &str, default: u64| -> u64 {
            std::env::var(name)
                .ok()
                .map(|v| {
                    v.parse()
                        .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
                })
                .unwrap_or(default)
        };
        Settings {
            ids: number("IDEM_BENCH_TXN_IDS", if quick { 100 } else { 1000 }) as usize,
            txns_per_id: number("IDEM_BENCH_TXNS_PER_ID", if quick { 10 } else { 100 }) as usize,
            concurrency: number("IDEM_BENCH_CONCURRENCY", 50) as usize,
            segment_bytes: number("IDEM_BENCH_SEGMENT_BYTES", 64 * 1024),
        }
    }
}

fn transactional_id(i: usize) -> String {
    format!("bench-txn-{i}")
}

fn main() {
    let settings = Settings::from_env();
    // The loader's report is an INFO event; everything else stays at the default level.
    if std::env::var_os("IDEM_LOG").is_none() {
        std::env::set_var("IDEM_LOG", "warn,idem_coordinator::log::loader=info");
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(run(settings));
}

async fn run(settings: Settings) {
    let check = CHECK_INTERVAL_MS.to_string();
    let mut cluster =
        Cluster::start_with_coordinators(3, 2, &["--log-retention-check-interval-ms", &check], &[])
            .await;
    let bootstrap = cluster.bootstrap();
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    set_config(
        &admin,
        &[
            ("segment.bytes", settings.segment_bytes.to_string()),
            // No record is old enough to clean while the workload runs.
            ("min.compaction.lag.ms", i64::MAX.to_string()),
        ],
    )
    .await;
    cluster.create_topic(TOPIC, TOPIC_PARTITIONS, 3).await;
    println!(
        "__transaction_state: {TXN_LOG_PARTITIONS} partitions, RF 3, segment.bytes {}; \
         {} ids x {} transactions, {} producers at a time",
        settings.segment_bytes, settings.ids, settings.txns_per_id, settings.concurrency
    );

    let started = Instant::now();
    let committed = workload(&bootstrap, &settings).await;
    let elapsed = started.elapsed();
    println!(
        "workload: {committed} transactions in {:.1} s = {:.0} transactions/s",
        elapsed.as_secs_f64(),
        committed as f64 / elapsed.as_secs_f64()
    );

    let broker_dir = cluster.broker(1).data_dir().to_path_buf();
    let records = log_end_offsets(&admin).await;
    let before = txn_log_size(&broker_dir);
    println!(
        "__transaction_state on broker 1, before cleaning: {} bytes ({} in {} .log files), {records} offsets",
        before.bytes, before.log_bytes, before.segments
    );
    set_config(&admin, &[("min.compaction.lag.ms", "0".to_string())]).await;
    let cleaning = Instant::now();
    let after = settled_size(&broker_dir, before.bytes).await;
    println!(
        "__transaction_state on broker 1, after cleaning: {} bytes ({} in {} .log files; {:.1}% of before; \
         {:.1} .log bytes per offset ever written; settled {:.1} s after the lag was lifted)",
        after.bytes,
        after.log_bytes,
        after.segments,
        100.0 * after.bytes as f64 / before.bytes.max(1) as f64,
        after.log_bytes as f64 / records.max(1) as f64,
        cleaning.elapsed().saturating_sub(SETTLED).as_secs_f64()
    );

    let killed = takeover(&mut cluster, &bootstrap, &settings, Stop::Kill).await;
    // The killed coordinator comes back (owning nothing: the survivor holds every
    // slice), and then the survivor stops gracefully, handing every slice over.
    let stopped = takeover(&mut cluster, &bootstrap, &settings, Stop::Graceful).await;
    println!();
    println!("| takeover | slices moved | load per slice (ms) | records read per slice | bytes read per slice | kill/stop -> InitProducerId ok |");
    println!("|---|---|---|---|---|---|");
    for (name, report) in [("SIGKILL", killed), ("graceful stop", stopped)] {
        println!(
            "| {name} | {} | {} | {} | {} | {:.0} ms |",
            report.loads.len(),
            join(report.loads.iter().map(|l| l.elapsed_ms)),
            join(report.loads.iter().map(|l| l.records_read)),
            join(report.loads.iter().map(|l| l.bytes_read)),
            report.end_to_end.as_secs_f64() * 1000.0
        );
    }
}

fn join(values: impl Iterator<Item = u64>) -> String {
    values.map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
}

async fn set_config(admin: &Admin, entries: &[(&str, String)]) {
    let ops: Vec<AlterConfigOp> = entries
        .iter()
        .map(|(k, v)| AlterConfigOp::set(k, v))
        .collect();
    admin
        .alter_configs(TXN_LOG_TOPIC, &ops, false)
        .await
        .expect("alter __transaction_state's config");
}

/// Runs every id's transactions, `concurrency` ids at a time; returns how many
/// committed.
async fn workload(bootstrap: &str, settings: &Settings) -> usize {
    let next = Arc::new(AtomicUsize::new(0));
    let committed = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..settings.concurrency {
        let next = next.clone();
        let committed = committed.clone();
        let bootstrap = bootstrap.to_string();
        let (ids, txns) = (settings.ids, settings.txns_per_id);
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= ids {
                    return;
                }
                let producer = txn::producer(&bootstrap, &transactional_id(i)).await;
                let partition = (i as i32) % TOPIC_PARTITIONS;
                for t in 0..txns {
                    producer.begin().expect("begin");
                    producer
                        .send(ProducerRecord::new(TOPIC, format!("{i}-{t}")).partition(partition))
                        .await
                        .expect("send")
                        .await
                        .expect("acked");
                    producer.commit().await.expect("commit");
                    committed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    committed.load(Ordering::Relaxed)
}

/// The sum of `__transaction_state`'s log end offsets.
async fn log_end_offsets(admin: &Admin) -> i64 {
    let mut sum = 0;
    for p in 0..TXN_LOG_PARTITIONS {
        sum += admin
            .list_offsets(
                TXN_LOG_TOPIC,
                p,
                OffsetSpec::Latest,
                Isolation::ReadUncommitted,
            )
            .await
            .expect("log end offset");
    }
    sum
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DiskSize {
    /// Every file of every partition directory (segments, indexes, snapshots).
    bytes: u64,
    /// The segments' `.log` files alone.
    log_bytes: u64,
    segments: usize,
}

/// `__transaction_state`'s partition directories in a broker's data dir, summed.
fn txn_log_size(data_dir: &Path) -> DiskSize {
    let mut size = DiskSize {
        bytes: 0,
        log_bytes: 0,
        segments: 0,
    };
    let prefix = format!("{TXN_LOG_TOPIC}-");
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return size;
    };
    for dir in entries.filter_map(Result::ok) {
        if !dir.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let Ok(files) = std::fs::read_dir(dir.path()) else {
            continue;
        };
        for file in files.filter_map(Result::ok) {
            let name = file.file_name().to_string_lossy().into_owned();
            // A segment being cleaned is written aside; it is counted once renamed.
            if name.ends_with(".cleaned") {
                continue;
            }
            let len = file.metadata().map_or(0, |m| m.len());
            size.bytes += len;
            if name.ends_with(".log") {
                size.log_bytes += len;
                size.segments += 1;
            }
        }
    }
    size
}

/// Polls the size until it dropped below `before` and then held still for [`SETTLED`].
async fn settled_size(data_dir: &Path, before: u64) -> DiskSize {
    let started = Instant::now();
    let mut last = txn_log_size(data_dir);
    let mut since = Instant::now();
    loop {
        assert!(
            started.elapsed() < PATIENCE,
            "the cleaner did not settle within {PATIENCE:?} (size {last:?})"
        );
        tokio::time::sleep(POLL).await;
        let now = txn_log_size(data_dir);
        if now != last {
            last = now;
            since = Instant::now();
        } else if now.bytes < before && since.elapsed() >= SETTLED {
            return now;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Kill,
    Graceful,
}

/// What the loader reported for one slice.
#[derive(Debug, Clone, Copy, Default)]
struct Load {
    elapsed_ms: u64,
    records_read: u64,
    bytes_read: u64,
}

struct Takeover {
    loads: Vec<Load>,
    end_to_end: Duration,
}

/// Stops (`Stop::Kill`: SIGKILL) the coordinator owning the most slices, or (graceful)
/// the one owning them all, and measures how its slices come back.
async fn takeover(
    cluster: &mut Cluster,
    bootstrap: &str,
    settings: &Settings,
    how: Stop,
) -> Takeover {
    let mut owned = Vec::new();
    for id in cluster.coordinator_ids() {
        let address = cluster.coordinator(id).bootstrap();
        owned.push((
            id,
            txn::owned_partitions(&address).await.unwrap_or_default(),
        ));
    }
    let (victim, slices) = owned
        .iter()
        .max_by_key(|(_, slices)| slices.len())
        .cloned()
        .expect("two coordinators");
    let survivor = cluster
        .coordinator_ids()
        .into_iter()
        .find(|id| *id != victim)
        .expect("a survivor");
    let probe = (0..settings.ids)
        .map(transactional_id)
        .find(|id| slices.contains(&txn_log_partition(id, TXN_LOG_PARTITIONS)))
        .expect("an id in a slice of the victim");
    let log_before = cluster.coordinator(survivor).log().len();
    let stopped_at = Instant::now();
    match how {
        Stop::Kill => cluster.kill_coordinator(victim),
        Stop::Graceful => cluster.stop_coordinator(victim),
    }
    let end_to_end = init_producer_id_ok(bootstrap, &probe, stopped_at).await;
    cluster.wait_for_coordinators().await;
    let log = cluster.coordinator(survivor).log();
    let loads: Vec<Load> = log[log_before..]
        .lines()
        .filter(|line| line.contains("transaction log partition loaded"))
        .map(parse_load)
        .collect();
    println!(
        "{how:?} of coordinator {victim} (slices {slices:?}): coordinator {survivor} loaded {} slices; \
         InitProducerId({probe}) ok after {:.0} ms",
        loads.len(),
        end_to_end.as_secs_f64() * 1000.0
    );
    cluster.restart_coordinator(victim);
    // Up and serving (owning nothing yet) before anything else is stopped.
    let address = cluster.coordinator(victim).bootstrap();
    let started = Instant::now();
    while txn::owned_partitions(&address).await.is_err() {
        assert!(
            started.elapsed() < PATIENCE,
            "coordinator {victim} did not come back"
        );
        tokio::time::sleep(POLL).await;
    }
    Takeover { loads, end_to_end }
}

/// Asks, again and again, for a producer id for `transactional_id` (FindCoordinator,
/// then InitProducerId at the owner) until one is handed out; the time since `since`.
async fn init_producer_id_ok(bootstrap: &str, transactional_id: &str, since: Instant) -> Duration {
    loop {
        assert!(
            since.elapsed() < PATIENCE,
            "no InitProducerId for {transactional_id} succeeded within {PATIENCE:?}"
        );
        let owner = txn::find_coordinator(bootstrap, transactional_id).await;
        if let Ok(mut client) = txn::coordinator_client(&owner.address).await {
            let answer = client
                .init_producer_id(idem_proto::v1::TxnInitProducerIdRequest {
                    transactional_id: transactional_id.into(),
                    transaction_timeout_ms: 60_000,
                    producer_id: None,
                    producer_epoch: 0,
                })
                .await;
            if answer.is_ok_and(|a| a.into_inner().error_code() == ErrorCode::None) {
                return since.elapsed();
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The fields of one "transaction log partition loaded" line (ANSI colours stripped).
fn parse_load(line: &str) -> Load {
    let plain = strip_ansi(line);
    let field = |name: &str| -> u64 {
        plain
            .split_whitespace()
            .find_map(|token| token.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Load {
        elapsed_ms: field("elapsed_ms"),
        records_read: field("records_read"),
        bytes_read: field("bytes_read"),
    }
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ ... letter
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
