//! `idem bench produce`: each mode in turn writes to a fresh topic for the same time
//! (or the same number of records) with the same producers, then the topic is read
//! back and checked; one row per mode. `--null` measures the transport limit instead:
//! an embedded broker that validates and discards every batch.

use crate::access::Access;
use std::time::Instant;

use anyhow::Context;

use super::args::{parse_modes, Amount, LoadArgs, ModeList};
use super::latency::Latencies;
use super::load::{Driver, Plan, Sent, Until};
use super::memory::BrokerProcess;
use super::modes::Mode;
use super::progress::{self, Progress};
use super::report::{self, Measured, ModeReport};
use super::target::{Target, TargetTls};
use super::targets;
use super::topic;
use super::verify::{self, ReadBack};

/// The producer path `--null` runs when no mode is named: no producer id needed.
const NULL_DEFAULT: Mode = Mode::AtLeastOnceUnordered;

#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// Concurrent producers, each with its own connection.
    #[arg(long, default_value_t = 1)]
    pub producers: u32,
    /// Comma list of modes, or `all`: at-most-once, at-least-once,
    /// at-least-once-unordered, exactly-once, transactional. Default exactly-once.
    #[arg(long, value_parser = parse_modes)]
    pub modes: Option<ModeList>,
    /// Total records per second across producers (default: as fast as acks allow), e.g.
    /// half the peak rate to measure latency under moderate load.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Transport limit: needs `--embedded`, whose broker then runs with --null-produce
    /// (decodes each batch and discards it). Nothing is verified.
    #[arg(long)]
    pub null: bool,
    /// With `--embedded`: also measure the transport limit in the same run, against a
    /// second in-process broker with --null-produce (the `null/...` row).
    #[arg(long, requires = "embedded", conflicts_with = "null")]
    pub with_null: bool,
    /// With `--embedded`: run every mode twice per round, in plaintext and (the `tls/...`
    /// row, right after) over mutual TLS against an embedded broker and coordinator
    /// started with certificates made for the run: what TLS costs, on one machine in one
    /// run.
    #[arg(long, requires = "embedded", conflicts_with = "null")]
    pub compare_tls: bool,
    /// Run the whole list of modes this many times, interleaved, and report each mode's
    /// median round: on a shared machine one round's noise can move a ratio by 10%.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// Report the memory of this broker process (a broker on this machine); with
    /// `--embedded` the bench's own process, which holds the broker, is measured.
    #[arg(long, conflicts_with = "embedded")]
    pub broker_pid: Option<u32>,
}

impl ProduceArgs {
    fn modes(&self) -> anyhow::Result<Vec<Mode>> {
        self.load.validate()?;
        anyhow::ensure!(self.producers >= 1, "--producers must be at least 1");
        anyhow::ensure!(
            self.rate.is_none_or(|r| r.is_finite() && r > 0.0),
            "--rate must be a positive number of records per second"
        );
        if !self.null {
            return Ok(self.modes.clone().map_or(vec![Mode::ExactlyOnce], |m| m.0));
        }
        anyhow::ensure!(
            self.load.embedded,
            "--null needs --embedded: it starts its own in-process broker with --null-produce, which discards every record (a real cluster is never put in that mode)"
        );
        let modes = self.modes.clone().map_or(vec![NULL_DEFAULT], |m| m.0);
        anyhow::ensure!(
            !modes.contains(&Mode::Transactional),
            "--null cannot run the transactional mode: the coordinator's own transaction log would be discarded too"
        );
        Ok(modes)
    }
}

pub async fn run(bootstrap: &str, access: &Access, args: ProduceArgs) -> anyhow::Result<()> {
    let modes = args.modes()?;
    let mut rows = report::median_of_rounds(run_modes(bootstrap, access, &args, &modes).await?);
    report::add_ratios(&mut rows);
    let checks = targets::check(&rows);
    if args.load.json {
        println!("{}", report::json(&rows, &checks)?);
    } else {
        print!("{}{}", report::table(&rows), targets::table(&checks));
    }
    Ok(())
}

/// Runs every mode (and the null row) `--rounds` times. An embedded target is started
/// afresh for each run and removed after it: data left by earlier runs (gigabytes after
/// a few rounds) made later runs pay for page-cache writeback or memory pressure, and
/// rounds of the same mode differed by 3x.
async fn run_modes(
    bootstrap: &str,
    access: &Access,
    args: &ProduceArgs,
    modes: &[Mode],
) -> anyhow::Result<Vec<ModeReport>> {
    // (mode, null produce, over generated TLS)
    let mut runs: Vec<(Mode, bool, bool)> = Vec::new();
    for mode in modes {
        runs.push((*mode, args.null, false));
        if args.compare_tls {
            runs.push((*mode, false, true));
        }
    }
    if args.with_null {
        runs.push((NULL_DEFAULT, true, false));
    }
    let shared = if args.load.embedded {
        None
    } else {
        Some(Target::open(&args.load, bootstrap, false, TargetTls::AsGiven(access)).await?)
    };
    if !args.load.json {
        let amount = match args.load.amount() {
            Amount::Duration(d) => format!("{:.1}s per mode", d.as_secs_f64()),
            Amount::Records(n) => format!("{n} records per mode"),
        };
        let target = shared.as_ref().map_or_else(
            || "embedded idem dev, a fresh one (and data dir) per run".to_string(),
            Target::describe,
        );
        println!(
            "idem bench produce: {} producer(s), {}-byte records, {} partition(s), replication factor {}, {amount}{}; {target}",
            args.producers,
            args.load.record_size,
            args.load.partitions,
            args.load.replication_factor,
            args.rate.map_or(String::new(), |r| format!(", {r:.0} records/s")),
        );
        if args.rounds > 1 {
            println!(
                "{} rounds of every mode, interleaved; each row is the mode's median round",
                args.rounds
            );
        }
    }
    let mut rows = Vec::with_capacity(runs.len() * args.rounds as usize);
    let mut failure = None;
    'rounds: for _ in 0..args.rounds {
        for (mode, null, over_tls) in &runs {
            let result = match &shared {
                Some(target) => run_mode(target, args, *mode, *null).await,
                None => {
                    let target_tls = if *over_tls {
                        TargetTls::Generated
                    } else {
                        TargetTls::AsGiven(&Access::default())
                    };
                    let target = Target::open(&args.load, bootstrap, *null, target_tls).await?;
                    let result = run_mode(&target, args, *mode, *null).await;
                    target.close().await;
                    result
                }
            };
            match result {
                Ok(row) => rows.push(row),
                Err(e) => {
                    failure = Some(e);
                    break 'rounds;
                }
            }
        }
    }
    if let Some(target) = shared {
        target.close().await;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(rows),
    }
}

async fn run_mode(
    target: &Target,
    args: &ProduceArgs,
    mode: Mode,
    null: bool,
) -> anyhow::Result<ModeReport> {
    let load = &args.load;
    let label = match (null, target.access.tls.is_some() && load.embedded) {
        (true, _) => format!("null/{mode}"),
        (false, true) => format!("tls/{mode}"),
        (false, false) => mode.name().to_string(),
    };
    let broker = match (load.embedded, args.broker_pid) {
        (true, _) => Some(BrokerProcess::InProcess),
        (false, pid) => pid.map(BrokerProcess::Pid),
    };
    let memory = broker.and_then(BrokerProcess::start);
    let topic = topic::create_for_run(&target.bootstrap, &target.access, load, mode.name()).await?;
    let mut drivers = Vec::with_capacity(args.producers as usize);
    for index in 0..args.producers {
        let transactional_id = format!("{topic}-{index}");
        drivers.push(
            Driver::connect(
                mode,
                &target.bootstrap,
                &target.access,
                load,
                &transactional_id,
            )
            .await?,
        );
    }
    let visible = progress::visible(load.json);
    let amount = load.amount();
    let progress = Progress::start(&label, amount, visible);
    let start = Instant::now();
    let tasks: Vec<_> = drivers
        .into_iter()
        .zip(0u32..)
        .map(|(driver, index)| {
            let plan = Plan {
                topic: topic.clone(),
                record_size: load.record_size,
                until: match amount {
                    Amount::Duration(d) => Until::Deadline(start + d),
                    Amount::Records(n) => Until::Records(share(n, args.producers, index)),
                },
                rate: args.rate.map(|r| r / f64::from(args.producers)),
                txn_every: std::time::Duration::from_millis(load.txn_ms),
                txn_pipelined: load.txn_pipelined,
                start,
            };
            tokio::spawn(driver.run(index, plan, progress.counter()))
        })
        .collect();
    let mut sent = Vec::with_capacity(tasks.len());
    for task in tasks {
        sent.push(task.await.context("a bench producer task failed")??);
    }
    let elapsed = start.elapsed();
    progress.finish().await;
    let measured = measure(&sent, load.record_size, elapsed);
    let check = if null {
        None
    } else {
        let read = verify::verify(ReadBack {
            bootstrap: &target.bootstrap,
            access: &target.access,
            topic: &topic,
            partitions: load.partitions,
            sent: &sent,
            label: format!("verify {label}"),
            progress_visible: visible,
        })
        .await?;
        Some((read, read.verification.passed(mode, measured.acked)))
    };
    let mut row = ModeReport::new(label, measured, check);
    row.broker_memory = memory.and_then(|m| m.finish());
    Ok(row)
}

/// Producer `index`'s part of `total` records.
fn share(total: u64, producers: u32, index: u32) -> u64 {
    let producers = u64::from(producers.max(1));
    total / producers + u64::from(u64::from(index) < total % producers)
}

fn measure(sent: &[Sent], record_size: usize, elapsed: std::time::Duration) -> Measured {
    let mut latencies = Latencies::new();
    for s in sent {
        latencies.merge(&s.latencies);
        if let Some(failure) = &s.first_failure {
            tracing::warn!(producer = s.producer, failed = s.failed, first_error = %failure, "records failed");
        }
    }
    Measured {
        acked: sent.iter().map(|s| s.acked.len()).sum(),
        sent: sent.iter().map(|s| s.sent).sum(),
        failed: sent.iter().map(|s| s.failed).sum(),
        aborted_transactions: sent.iter().map(|s| s.aborted_txns).sum(),
        record_size,
        elapsed,
        latency: latencies.percentiles(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_total() {
        for (total, producers) in [(10, 3), (2, 5), (3000, 1)] {
            let sum: u64 = (0..producers).map(|i| share(total, producers, i)).sum();
            assert_eq!(sum, total);
        }
        assert_eq!(share(10, 3, 0), 4);
        assert_eq!(share(10, 3, 2), 3);
    }
}
