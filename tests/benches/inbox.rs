//! Benchmark: the database Inbox against a plain at-least-once loop (issue 27).
//!
//! Records/s applied into a database, batch by batch, two ways, on the same server and
//! the same records, in the same run:
//! - `inbox`: `Inbox::process_batch` (the key of every record, the business insert,
//!   the partitions' next positions, one transaction per batch);
//! - `plain`: the same business inserts, one transaction per batch, with no
//!   deduplication and no positions (what an at-least-once consumer that commits its
//!   broker offsets afterwards does).
//!
//! The records are built in memory as a consumer would return them (6 partitions,
//! consecutive offsets, a ~100-byte value and a business idempotency key header): no
//! broker, since the point is the database cost of the inbox, and a broker's fetch
//! would add the same cost to both modes and its noise to both. Each inbox round gets
//! fresh offsets and keys (nothing is skipped as behind or duplicate); the plain round
//! beside it inserts the very same records. Modes alternate round by round.
//!
//! The business write is one `INSERT` per record into a table without indexes (the
//! cheapest business write, so the inbox's share is the largest it would be). The
//! PostgreSQL server is the test harness's throwaway one (`fsync=off`): a commit costs
//! both modes the same once per batch, so durable commits would only shrink the gap.
//!
//! Run: `cargo bench -p idem-tests --bench inbox`
//! Settings (environment): IDEM_BENCH_RECORDS per round (20000), IDEM_BENCH_ROUNDS per
//! mode and batch size (5), IDEM_BENCH_SQLITE=0 to skip SQLite. Figures go to
//! docs/benchmarks.md as ratios measured in one run.

use std::time::Instant;

use bytes::Bytes;
use idem_client::inbox::sqlx;
use idem_client::inbox::{Inbox, InboxTx, IDEMPOTENCY_KEY_HEADER};
use idem_client::ConsumerRecord;
use idem_tests::postgres::PostgresServer;

const TOPIC: &str = "bench";
const PARTITIONS: i32 = 6;
const BATCH_SIZES: [usize; 2] = [100, 1_000];
const BUSINESS_TABLE: &str = "CREATE TABLE bench_events (\
     topic TEXT NOT NULL, partition_id BIGINT NOT NULL, record_offset BIGINT NOT NULL, \
     body TEXT)";
const BUSINESS_INSERT: &str =
    "INSERT INTO bench_events (topic, partition_id, record_offset, body) \
     VALUES ($1, $2, $3, $4)";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Inbox,
    Plain,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Inbox => "inbox",
            Mode::Plain => "plain",
        }
    }
}

struct Settings {
    records: usize,
    rounds: usize,
    sqlite: bool,
}

impl Settings {
    fn from_env() -> Settings {
        let number = |name: &str, default: usize| -> usize {
            std::env::var(name)
                .ok()
                .map(|v| {
                    v.parse()
                        .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
                })
                .unwrap_or(default)
        };
        Settings {
            records: number("IDEM_BENCH_RECORDS", 20_000),
            rounds: number("IDEM_BENCH_ROUNDS", 5),
            sqlite: std::env::var("IDEM_BENCH_SQLITE").map_or(true, |v| v != "0"),
        }
    }
}

/// Builds `count` records as a consumer would return them, the `round`th set: offsets
/// and keys continue from earlier rounds so the inbox applies every one.
fn records(round: usize, count: usize) -> Vec<ConsumerRecord> {
    let per_partition = count.div_ceil(PARTITIONS as usize);
    (0..count)
        .map(|i| {
            let partition = (i % PARTITIONS as usize) as i32;
            let offset = (round * per_partition + i / PARTITIONS as usize) as i64;
            let id = round * count + i;
            ConsumerRecord {
                topic: TOPIC.to_string(),
                partition,
                offset,
                key: Some(Bytes::from(format!("account-{}", id % 100))),
                value: Some(Bytes::from(format!(
                    "{id},account-{},account-{},{:>64}",
                    id % 100,
                    (id + 1) % 100,
                    id % 1_000
                ))),
                headers: vec![(
                    IDEMPOTENCY_KEY_HEADER.to_string(),
                    Bytes::from(format!("transfer-{id}")),
                )],
                timestamp_ms: 0,
            }
        })
        .collect()
}

fn body(record: &ConsumerRecord) -> String {
    record
        .value
        .as_ref()
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default()
}

async fn business_insert(tx: &mut InboxTx, record: &ConsumerRecord) -> Result<(), sqlx::Error> {
    sqlx::query(BUSINESS_INSERT)
        .bind(record.topic.as_str())
        .bind(i64::from(record.partition))
        .bind(record.offset)
        .bind(body(record))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Applies `records` in batches of `batch`; returns records/s.
async fn run_round(inbox: &Inbox, mode: Mode, records: &[ConsumerRecord], batch: usize) -> f64 {
    let started = Instant::now();
    for chunk in records.chunks(batch) {
        match mode {
            Mode::Inbox => {
                let outcome = inbox
                    .process_batch(chunk, |tx: &mut InboxTx, record: &ConsumerRecord| {
                        Box::pin(async move {
                            business_insert(tx, record).await?;
                            Ok(())
                        })
                    })
                    .await
                    .expect("inbox batch");
                assert_eq!(outcome.applied(), chunk.len(), "every record is new");
            }
            Mode::Plain => {
                let mut tx: InboxTx = inbox.pool().begin().await.expect("begin");
                for record in chunk {
                    business_insert(&mut tx, record)
                        .await
                        .expect("business insert");
                }
                tx.commit().await.expect("commit");
            }
        }
    }
    records.len() as f64 / started.elapsed().as_secs_f64()
}

fn mean_and_spread(rates: &[f64]) -> (f64, f64, f64) {
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let min = rates.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = rates.iter().cloned().fold(0.0, f64::max);
    (mean, min, max)
}

async fn bench_backend(label: &str, url: &str, settings: &Settings) {
    let inbox = Inbox::connect(url, "bench").await.expect("connect");
    inbox.migrate().await.expect("migrate");
    sqlx::query(BUSINESS_TABLE)
        .execute(inbox.pool())
        .await
        .expect("business table");
    println!(
        "{label}: {} records per round, {} rounds per mode and batch size, modes alternating",
        settings.records, settings.rounds
    );
    let mut round = 0;
    // One warm-up round each, not counted (connections, prepared statements, caches).
    for mode in [Mode::Inbox, Mode::Plain] {
        let warm = records(round, 2_000);
        run_round(&inbox, mode, &warm, 100).await;
    }
    round += 1;
    for batch in BATCH_SIZES {
        let mut rates = [Vec::new(), Vec::new()];
        for r in 0..settings.rounds {
            let set = records(round, settings.records);
            round += 1;
            // Alternate which mode goes first, so neither always runs on a warmer table.
            let order = if r % 2 == 0 {
                [Mode::Inbox, Mode::Plain]
            } else {
                [Mode::Plain, Mode::Inbox]
            };
            for mode in order {
                let rate = run_round(&inbox, mode, &set, batch).await;
                rates[(mode == Mode::Plain) as usize].push(rate);
            }
        }
        for (i, mode) in [Mode::Inbox, Mode::Plain].into_iter().enumerate() {
            let (mean, min, max) = mean_and_spread(&rates[i]);
            let each: Vec<String> = rates[i].iter().map(|r| format!("{r:.0}")).collect();
            println!(
                "  batch {batch:>5}  {:<5}  mean {mean:>8.0} rec/s  min {min:>8.0}  max {max:>8.0}  n={}  [{}]",
                mode.name(),
                rates[i].len(),
                each.join(" ")
            );
        }
        let ratios: Vec<f64> = rates[0]
            .iter()
            .zip(&rates[1])
            .map(|(inbox, plain)| inbox / plain)
            .collect();
        let (mean, min, max) = mean_and_spread(&ratios);
        println!(
            "  batch {batch:>5}  ratio inbox/plain  mean {mean:.3}  min {min:.3}  max {max:.3}  (goal >= 0.8 at 1000)"
        );
    }
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; nothing else is expected.
    let settings = Settings::from_env();
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average before: {}", load.trim());
    }
    let server = PostgresServer::start();
    let url = server.create_database("inbox_bench");
    bench_backend("PostgreSQL", &url, &settings).await;
    if settings.sqlite {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
        bench_backend("SQLite", &url, &settings).await;
    }
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average after: {}", load.trim());
    }
}
