//! `idem bench e2e`: end-to-end latency, from the moment a producer sends a record to
//! the moment a read_committed consumer in the same process has it. The producer sends
//! at a fixed rate; each value carries its send time as nanoseconds since an `Instant`
//! both sides share, so no clocks are compared. Transactional records become visible at
//! commit, so their latency includes the wait for it.

use std::time::{Duration, Instant};

use anyhow::Context;
use idem_client::{Consumer, ConsumerConfig, Isolation, OffsetSpec};

use super::args::{Amount, LoadArgs};
use super::latency::{Latencies, Percentiles};
use super::load::{Driver, Plan, Sent, Until};
use super::modes::Mode;
use super::payload::{self, Stamp};
use super::progress::{self, Progress};
use super::target::{Target, TargetTls};
use super::topic;
use super::verify::{Checker, Verification};
use crate::access::Access;

/// After the producer finished, how long the consumer may go without a record before
/// it stops waiting for the rest.
const STALL: Duration = Duration::from_secs(15);

#[derive(Debug, clap::Args)]
pub struct E2eArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// The producer's mode: exactly-once or transactional (any mode runs).
    #[arg(long, default_value = "exactly-once")]
    pub mode: Mode,
    /// Records per second the producer sends.
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
}

#[derive(Debug, serde::Serialize)]
struct E2eReport {
    mode: String,
    /// Records read (each one a latency sample).
    count: u64,
    sent: u64,
    acked: u64,
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
    duplicates: u64,
    lost: u64,
    verified: bool,
    check: Verification,
}

pub async fn run(bootstrap: &str, args: E2eArgs) -> anyhow::Result<()> {
    args.load.validate()?;
    anyhow::ensure!(
        args.rate.is_finite() && args.rate > 0.0,
        "--rate must be a positive number of records per second"
    );
    let target = Target::open(
        &args.load,
        bootstrap,
        false,
        TargetTls::AsGiven(&Access::default()),
    )
    .await?;
    let result = measure(&target, &args).await;
    target.close().await;
    let report = result?;
    if args.load.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

async fn measure(target: &Target, args: &E2eArgs) -> anyhow::Result<E2eReport> {
    let load = &args.load;
    let topic = topic::create_for_run(
        &target.bootstrap,
        &target.access,
        load,
        &format!("e2e-{}", args.mode),
    )
    .await?;
    let driver = Driver::connect(
        args.mode,
        &target.bootstrap,
        &target.access,
        load,
        &format!("{topic}-0"),
    )
    .await?;
    let mut consumer = Consumer::connect(
        &target.bootstrap,
        ConsumerConfig {
            isolation: Isolation::ReadCommitted,
            start: OffsetSpec::Earliest,
            ..ConsumerConfig::default()
        },
    )
    .await
    .with_context(|| format!("connecting a consumer to {}", target.bootstrap))?;
    consumer.assign((0..load.partitions).map(|p| (topic.clone(), p)).collect());
    for p in 0..load.partitions {
        consumer.seek_to_beginning(&topic, p)?;
        // Look the position up now, not on the first poll, so it is off the clock.
        consumer.position(&topic, p).await?;
    }
    let amount = load.amount();
    let progress = Progress::start(
        &format!("e2e {}", args.mode),
        amount,
        progress::visible(load.json),
    );
    let start = Instant::now();
    let plan = Plan {
        topic: topic.clone(),
        record_size: load.record_size,
        until: match amount {
            Amount::Duration(d) => Until::Deadline(start + d),
            Amount::Records(n) => Until::Records(n),
        },
        rate: Some(args.rate),
        txn_every: Duration::from_millis(load.txn_ms),
        txn_pipelined: load.txn_pipelined,
        start,
    };
    let mut producer = tokio::spawn(driver.run(0, plan, progress.counter()));
    let mut latencies = Latencies::new();
    let mut reads: Vec<(i32, Option<Stamp>)> = Vec::new();
    let mut sent: Option<Sent> = None;
    let mut last_read = Instant::now();
    loop {
        let records = tokio::select! {
            records = consumer.poll(Duration::from_millis(100)) => records.with_context(|| format!("reading {topic}"))?,
            finished = &mut producer, if sent.is_none() => {
                sent = Some(finished.context("the producer task failed")??);
                last_read = Instant::now();
                continue;
            }
        };
        let now = start.elapsed();
        if !records.is_empty() {
            last_read = Instant::now();
        }
        for record in records {
            let stamp = record.value.as_deref().and_then(payload::decode);
            if let Some(stamp) = stamp {
                latencies.record(now.saturating_sub(Duration::from_nanos(stamp.sent_nanos)));
            }
            reads.push((record.partition, stamp));
        }
        if let Some(sent) = &sent {
            if reads.len() as u64 >= sent.acked.len() || last_read.elapsed() >= STALL {
                break;
            }
        }
    }
    progress.finish().await;
    let sent = sent.context("the producer never finished")?;
    let mut checker = Checker::new(std::slice::from_ref(&sent));
    for (partition, stamp) in reads {
        checker.record_stamp(partition, stamp);
    }
    let check = checker.finish(last_read.elapsed() >= STALL);
    let acked = sent.acked.len();
    let verified = check.passed(args.mode, acked) && check.duplicates == 0;
    let Percentiles {
        p50_ms,
        p99_ms,
        p999_ms,
        max_ms,
    } = latencies.percentiles();
    Ok(E2eReport {
        mode: args.mode.to_string(),
        count: latencies.count(),
        sent: sent.sent,
        acked,
        rate: args.rate,
        p50_ms,
        p99_ms,
        p999_ms,
        max_ms,
        duplicates: check.duplicates,
        lost: check.lost,
        verified,
        check,
    })
}

fn print_table(r: &E2eReport) {
    println!(
        "idem bench e2e: {} producer at {:.0} records/s -> read_committed consumer",
        r.mode, r.rate
    );
    println!(
        "{:>9} {:>9} {:>9} {:>9} {:>9}  verified",
        "count", "p50 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    let verdict = if r.verified {
        "yes".to_string()
    } else {
        format!(
            "NO (acked {}, lost {}, duplicates {})",
            r.acked, r.lost, r.duplicates
        )
    };
    println!(
        "{:>9} {:>9.2} {:>9.2} {:>9.2} {:>9.2}  {verdict}",
        r.count, r.p50_ms, r.p99_ms, r.p999_ms, r.max_ms
    );
}
