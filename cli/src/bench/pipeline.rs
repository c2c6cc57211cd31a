//! `idem bench pipeline`: one consume-transform-produce stage, exactly once (a
//! `GroupConsumer` reading the input read_committed, a `TransactionalProducer` writing
//! each value to the same partition of the output and committing the input offsets in
//! the same transaction every `--commit-interval-ms`), measured in one run beside the
//! transactional produce mode it is built on:
//!
//! 1. transactional produce-only throughput: the input is written as fast as
//!    acknowledgements allow, committing every commit interval;
//! 2. the stage's throughput over that input as a backlog, verified by reading the
//!    output back (every acknowledged input once, in order per partition);
//! 3. end-to-end latency at a fixed input rate (`--rate`, default half the stage's
//!    throughput): from the input's send to the output's visibility to a read_committed
//!    reader (the stage copies the value, whose stamp carries the send time).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use idem_client::{
    Consumer, ConsumerConfig, GroupConfig, GroupConsumer, Isolation, OffsetSpec, ProducerRecord,
    TransactionalConfig, TransactionalProducer,
};
use tokio::sync::Notify;

use super::args::{Amount, LoadArgs};
use super::latency::{Latencies, Percentiles};
use super::load::{Driver, Plan, Sent, Until};
use super::modes::Mode;
use super::payload::{self, Stamp};
use super::progress::{self, Progress};
use super::target::{Target, TargetTls};
use super::topic;
use super::verify::Checker;
use crate::access::Access;

/// How long the output may go without a new record before the read-back stops.
const STALL: Duration = Duration::from_secs(15);

#[derive(Debug, clap::Args)]
pub struct PipelineArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// How often the stage commits (output records and input offsets together).
    #[arg(long, default_value_t = 100)]
    pub commit_interval_ms: u64,
    /// Input records per second for the latency phase (default: half the stage's
    /// measured throughput).
    #[arg(long)]
    pub rate: Option<f64>,
}

#[derive(Debug, serde::Serialize)]
struct PipelineReport {
    commit_interval_ms: u64,
    /// Transactional produce-only throughput (records/s).
    produce_txn_rate: f64,
    /// The stage's throughput over the same records as a backlog (records/s).
    pipeline_rate: f64,
    ratio: f64,
    records: u64,
    latency_rate: f64,
    latency_count: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    lost: u64,
    duplicates: u64,
    verified: bool,
}

pub async fn run(bootstrap: &str, args: PipelineArgs) -> anyhow::Result<()> {
    args.load.validate()?;
    anyhow::ensure!(
        args.commit_interval_ms > 0,
        "--commit-interval-ms must be positive"
    );
    let target = Target::open(
        &args.load,
        bootstrap,
        false,
        TargetTls::AsGiven(&Access::default()),
    )
    .await?;
    let result = measure(&target.bootstrap, &args).await;
    target.close().await;
    let report = result?;
    if args.load.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    anyhow::ensure!(report.verified, "the output did not match the input");
    Ok(())
}

async fn measure(bootstrap: &str, args: &PipelineArgs) -> anyhow::Result<PipelineReport> {
    let load = &args.load;
    let commit_every = Duration::from_millis(args.commit_interval_ms);

    // 1. Transactional produce-only, into the stage's future input.
    let input = topic::create_for_run(bootstrap, &Access::default(), load, "pipeline-in").await?;
    let (sent, produce_elapsed) = produce(bootstrap, load, &input, None, commit_every).await?;
    let records = sent.acked.len();
    let produce_txn_rate = records as f64 / produce_elapsed.as_secs_f64();

    // 2. The stage over that backlog.
    let output = topic::create_for_run(bootstrap, &Access::default(), load, "pipeline-out").await?;
    let stage = Stage::start(bootstrap, &input, &output, load.partitions, commit_every).await?;
    let started = Instant::now();
    stage.wait_for(records).await?;
    let pipeline_elapsed = started.elapsed();
    stage.stop().await?;
    let pipeline_rate = records as f64 / pipeline_elapsed.as_secs_f64();
    let (stamps, _, stalled) = read_back(
        bootstrap,
        &output,
        load.partitions,
        &AtomicU64::new(records),
        None,
    )
    .await?;
    let mut checker = Checker::new(std::slice::from_ref(&sent));
    for (partition, stamp) in stamps {
        checker.record_stamp(partition, stamp);
    }
    let check = checker.finish(stalled);

    // 3. Latency at a fixed rate, through a fresh pair of topics.
    let rate = args.rate.unwrap_or(pipeline_rate / 2.0).max(1.0);
    let input2 =
        topic::create_for_run(bootstrap, &Access::default(), load, "pipeline-lat-in").await?;
    let output2 =
        topic::create_for_run(bootstrap, &Access::default(), load, "pipeline-lat-out").await?;
    let stage = Stage::start(bootstrap, &input2, &output2, load.partitions, commit_every).await?;
    let start = Instant::now();
    let producing = produce_at(bootstrap, load, &input2, rate, commit_every, start);
    // Read while it is produced; how much to expect is known once production ends.
    let expected = AtomicU64::new(u64::MAX);
    let produced = async {
        let result = producing.await;
        if let Ok((sent, _)) = &result {
            expected.store(sent.acked.len(), Ordering::Relaxed);
        }
        result
    };
    let reading = read_back(bootstrap, &output2, load.partitions, &expected, Some(start));
    let (sent2, reader) = tokio::join!(produced, reading);
    sent2?;
    let (_, latencies, stalled) = reader?;
    anyhow::ensure!(
        !stalled,
        "the latency phase's output stalled before every input came through"
    );
    stage.stop().await?;
    let Percentiles {
        p50_ms,
        p99_ms,
        max_ms,
        ..
    } = latencies.percentiles();
    Ok(PipelineReport {
        commit_interval_ms: args.commit_interval_ms,
        produce_txn_rate,
        pipeline_rate,
        ratio: pipeline_rate / produce_txn_rate,
        records,
        latency_rate: rate,
        latency_count: latencies.count(),
        p50_ms,
        p99_ms,
        max_ms,
        lost: check.lost,
        duplicates: check.duplicates,
        verified: check.passed(Mode::Transactional, records) && check.duplicates == 0,
    })
}

/// Writes the load's amount of stamped records to `topic` with the transactional
/// mode (at `rate` if given); what was acknowledged and how long it took.
async fn produce(
    bootstrap: &str,
    load: &LoadArgs,
    topic: &str,
    rate: Option<f64>,
    commit_every: Duration,
) -> anyhow::Result<(Sent, Duration)> {
    let driver = Driver::connect(
        Mode::Transactional,
        bootstrap,
        &Access::default(),
        load,
        &format!("{topic}-0"),
    )
    .await?;
    let progress = Progress::start(
        "pipeline input",
        load.amount(),
        progress::visible(load.json),
    );
    let start = Instant::now();
    let plan = Plan {
        topic: topic.to_string(),
        record_size: load.record_size,
        until: match load.amount() {
            Amount::Duration(d) => Until::Deadline(start + d),
            Amount::Records(n) => Until::Records(n),
        },
        rate,
        txn_every: commit_every,
        txn_pipelined: false,
        start,
    };
    let sent = driver.run(0, plan, progress.counter()).await?;
    let elapsed = start.elapsed();
    progress.finish().await;
    Ok((sent, elapsed))
}

/// The latency phase's input: the load's amount at `rate`, stamped from `start`.
async fn produce_at(
    bootstrap: &str,
    load: &LoadArgs,
    topic: &str,
    rate: f64,
    commit_every: Duration,
    start: Instant,
) -> anyhow::Result<(Sent, Duration)> {
    let driver = Driver::connect(
        Mode::ExactlyOnce,
        bootstrap,
        &Access::default(),
        load,
        &format!("{topic}-0"),
    )
    .await?;
    let progress = Progress::start(
        "pipeline latency",
        load.amount(),
        progress::visible(load.json),
    );
    let plan = Plan {
        topic: topic.to_string(),
        record_size: load.record_size,
        until: match load.amount() {
            Amount::Duration(d) => Until::Deadline(start + d),
            Amount::Records(n) => Until::Records(n),
        },
        rate: Some(rate),
        txn_every: commit_every,
        txn_pipelined: false,
        start,
    };
    let sent = driver.run(0, plan, progress.counter()).await?;
    progress.finish().await;
    Ok((sent, start.elapsed()))
}

/// Reads `output` read_committed from the start until `expected` records came (it may
/// be set while reading; `u64::MAX` until known), or until nothing came for [`STALL`];
/// each record's partition and stamp, latencies from `start` when given, and whether
/// it stalled.
async fn read_back(
    bootstrap: &str,
    output: &str,
    partitions: i32,
    expected: &AtomicU64,
    start: Option<Instant>,
) -> anyhow::Result<(Vec<(i32, Option<Stamp>)>, Latencies, bool)> {
    let mut consumer = Consumer::connect(
        bootstrap,
        ConsumerConfig {
            isolation: Isolation::ReadCommitted,
            start: OffsetSpec::Earliest,
            ..ConsumerConfig::default()
        },
    )
    .await?;
    consumer.assign((0..partitions).map(|p| (output.to_string(), p)).collect());
    let mut stamps = Vec::new();
    let mut latencies = Latencies::new();
    let mut last = Instant::now();
    let short = |n: usize| (n as u64) < expected.load(Ordering::Relaxed);
    while short(stamps.len()) && last.elapsed() < STALL {
        let records = consumer.poll(Duration::from_millis(100)).await?;
        if !records.is_empty() {
            last = Instant::now();
        }
        for record in records {
            let stamp = record.value.as_deref().and_then(payload::decode);
            if let (Some(start), Some(stamp)) = (start, stamp) {
                latencies.record(
                    start
                        .elapsed()
                        .saturating_sub(Duration::from_nanos(stamp.sent_nanos)),
                );
            }
            stamps.push((record.partition, stamp));
        }
    }
    let stalled = short(stamps.len());
    Ok((stamps, latencies, stalled))
}

/// How the stage tells the bench what it committed.
struct Progressed {
    committed: Arc<AtomicU64>,
    notify: Arc<Notify>,
}

/// The stage running in this process until stopped.
struct Stage {
    stop: Arc<AtomicBool>,
    committed: Arc<AtomicU64>,
    /// Notified after each commit.
    progressed: Arc<Notify>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Stage {
    /// Starts the stage and returns once its member owns all `partitions` of `input`, so
    /// the group's join is not measured.
    async fn start(
        bootstrap: &str,
        input: &str,
        output: &str,
        partitions: i32,
        commit_every: Duration,
    ) -> anyhow::Result<Stage> {
        let stop = Arc::new(AtomicBool::new(false));
        let committed = Arc::new(AtomicU64::new(0));
        let progressed = Arc::new(Notify::new());
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(transform(
            bootstrap.to_string(),
            input.to_string(),
            output.to_string(),
            (partitions, ready_tx),
            commit_every,
            stop.clone(),
            Progressed {
                committed: committed.clone(),
                notify: progressed.clone(),
            },
        ));
        let stage = Stage {
            stop,
            committed,
            progressed,
            task,
        };
        if ready.await.is_err() {
            // The stage ended before it owned its partitions: report why.
            stage.stop().await?;
            anyhow::bail!("the stage stopped before it was assigned its partitions");
        }
        Ok(stage)
    }

    /// Waits until `records` input records have their output and offsets committed;
    /// fails if the stage stopped on its own.
    async fn wait_for(&self, records: u64) -> anyhow::Result<()> {
        loop {
            let notified = self.progressed.notified();
            if self.committed.load(Ordering::Relaxed) >= records {
                return Ok(());
            }
            anyhow::ensure!(!self.task.is_finished(), "the stage stopped early");
            // Also wakes now and then to see a stage that failed without committing.
            let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
        }
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.context("the stage task")?
    }
}

/// The stage: one group member and one transactional producer; a transaction spans
/// the polls of one commit interval.
async fn transform(
    bootstrap: String,
    input: String,
    output: String,
    (partitions, ready): (i32, tokio::sync::oneshot::Sender<()>),
    commit_every: Duration,
    stop: Arc<AtomicBool>,
    progressed: Progressed,
) -> anyhow::Result<()> {
    let mut config = GroupConfig::new(format!("{input}-stage"));
    config.consumer.start = OffsetSpec::Earliest;
    config.consumer.max_wait = Duration::from_millis(10);
    let mut consumer = GroupConsumer::subscribe(&bootstrap, config, &[input.as_str()]).await?;
    let producer = TransactionalProducer::connect(TransactionalConfig::new(
        bootstrap.as_str(),
        format!("{input}-stage"),
    ))
    .await?;
    producer.init_transactions().await?;
    // Nothing is produced yet: the polls only heartbeat until every partition is ours.
    while consumer.assignment().len() < partitions as usize {
        consumer.poll(Duration::from_millis(100)).await?;
    }
    let _ = ready.send(());
    while !stop.load(Ordering::Relaxed) {
        // A transaction opens with its first record and commits one interval later.
        let mut began: Option<Instant> = None;
        let mut next: std::collections::BTreeMap<(String, i32), i64> = Default::default();
        let mut deliveries = Vec::new();
        while began.is_none_or(|b| b.elapsed() < commit_every) && !stop.load(Ordering::Relaxed) {
            let left = began.map_or(commit_every, |b| commit_every.saturating_sub(b.elapsed()));
            let polled = consumer.poll(left).await?;
            for record in polled.records {
                if began.is_none() {
                    producer.begin()?;
                    began = Some(Instant::now());
                }
                let value = record.value.clone().unwrap_or_default();
                let out = ProducerRecord::new(output.as_str(), value).partition(record.partition);
                deliveries.push(producer.send(out).await?);
                next.insert((record.topic, record.partition), record.offset + 1);
            }
        }
        if began.is_none() {
            continue;
        }
        let count = deliveries.len() as u64;
        for d in deliveries {
            d.await?;
        }
        let offsets: Vec<((String, i32), i64)> = next.into_iter().collect();
        producer
            .send_offsets_to_transaction(&offsets, &consumer.group_metadata()?)
            .await?;
        producer.commit().await?;
        progressed.committed.fetch_add(count, Ordering::Relaxed);
        progressed.notify.notify_waiters();
    }
    consumer.close().await?;
    producer.close().await;
    Ok(())
}

fn print_table(r: &PipelineReport) {
    println!(
        "idem bench pipeline: consume-transform-produce, commit every {} ms",
        r.commit_interval_ms
    );
    println!(
        "{:>14} {:>14} {:>7} {:>9}   latency at {:.0}/s: {:>8} {:>8} {:>8}  verified",
        "txn produce/s",
        "pipeline/s",
        "ratio",
        "records",
        r.latency_rate,
        "p50 ms",
        "p99 ms",
        "max ms"
    );
    let verdict = if r.verified {
        "yes".to_string()
    } else {
        format!("NO (lost {}, duplicates {})", r.lost, r.duplicates)
    };
    println!(
        "{:>14.0} {:>14.0} {:>7.2} {:>9}   {:>21} {:>8.1} {:>8.1} {:>8.1}  {verdict}",
        r.produce_txn_rate, r.pipeline_rate, r.ratio, r.records, "", r.p50_ms, r.p99_ms, r.max_ms
    );
}
