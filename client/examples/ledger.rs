//! A ledger fed by a topic of money transfers, applied to an `accounts` table exactly
//! once through the database Inbox (feature `inbox`), in PostgreSQL or SQLite by URL.
//!
//! ```text
//! cargo run -p idem-client --features inbox --example ledger -- \
//!     BOOTSTRAP DATABASE_URL TOPIC [--accounts N] [--initial-balance B] \
//!     [--batch-size K] [--expect T] [--group G [--commit-every N]]
//!
//! # e.g. against `idem dev` and a SQLite file:
//! idem topic create transfers --partitions 6
//! idem produce transfers <<< 't-1,0,1,25'
//! cargo run -p idem-client --features inbox --example ledger -- \
//!     127.0.0.1:9092 sqlite:///tmp/ledger.db transfers --expect 1
//! ```
//!
//! Each record's value is `id,from,to,amount` (text; accounts are numbers below
//! `--accounts`, default 100, each opened with `--initial-balance`, default 1000). A
//! transfer moves `amount` from one balance to the other and is recorded in
//! `transfers_applied` (keyed by its id) in the same transaction as the inbox's key and
//! position: after any crash, each transfer is applied once and the sum of balances
//! never changes. A record that is not a transfer (no value, bad fields, an unknown
//! account) goes to `transfers_rejected`, also exactly once, and does not stop the
//! ledger. Producers set the transfer id as the idempotency key
//! (`ProducerRecord::idempotency_key`), so a transfer produced twice is applied once.
//!
//! Reads every partition of TOPIC from the positions the database holds (from the log
//! start the first time). Runs until stopped, or with `--expect T` until the database
//! holds T transfers (applied plus rejected).
//!
//! With `--group G`, runs as a member of consumer group G instead: several ledgers on
//! one PostgreSQL database share the partitions, and each partition the group assigns
//! is resumed from the position the database holds (`Inbox::seek_assigned`), never
//! from the group's committed offset. Every N batches (`--commit-every`, default 10)
//! the database positions of the owned partitions are committed to the group too, for
//! lag monitoring only (`idem group describe`); a failed commit is reported and
//! ignored. Prints `ledger: resuming TOPIC/P at OFFSET` (or `at the group's start`)
//! for each assigned partition, `ledger: revoked TOPIC/P` and `ledger: lost TOPIC/P`,
//! and leaves the group when done.
//!
//! Crash injection for the fault tests: `LEDGER_CRASH=POINT:K` kills this process
//! (SIGKILL) in its K-th batch (1-based, counted from its start): `mid-batch` after the
//! business writes of the batch's middle record, `before-commit` after those of its last
//! record (all written, nothing committed), `after-commit` once the batch committed. A
//! crash record the inbox skips (processed before) is passed, not crashed at.

use std::time::Duration;

use idem_client::inbox::sqlx;
use idem_client::inbox::{Inbox, InboxError, InboxTx};
use idem_client::{
    Admin, Consumer, ConsumerConfig, ConsumerRecord, GroupConfig, GroupConsumer, GroupEvent,
    OffsetSpec,
};

#[derive(Debug)]
struct Args {
    bootstrap: String,
    database_url: String,
    topic: String,
    accounts: i64,
    initial_balance: i64,
    batch_size: usize,
    expect: Option<i64>,
    group: Option<String>,
    commit_every: u64,
}

/// Where the ledger's records come from: every partition of the topic, assigned by
/// hand, or the partitions a consumer group gives this member.
enum Source {
    // Boxed: both are a few hundred bytes, and differ by a couple hundred.
    Assigned(Box<Consumer>),
    Group(Box<GroupConsumer>),
}

impl Source {
    /// The next records; for a group member, first seeks each partition the group
    /// assigns to its database position.
    async fn poll(&mut self, inbox: &Inbox) -> Result<Vec<ConsumerRecord>, InboxError> {
        let wait = Duration::from_millis(500);
        match self {
            Source::Assigned(consumer) => Ok(consumer.poll(wait).await?),
            Source::Group(group) => {
                let polled = group.poll(wait).await?;
                let resumed = inbox.seek_assigned(group, &polled.events).await?;
                report_events(&polled.events, &resumed);
                Ok(polled.records)
            }
        }
    }

    /// A group member commits the database positions of what it owns to the group,
    /// for lag monitoring only: nothing reads them back, so a failure (a rebalance
    /// under way) is reported, not fatal.
    async fn commit_for_lag(&self, inbox: &Inbox) -> Result<(), InboxError> {
        let Source::Group(group) = self else {
            return Ok(());
        };
        let owned: Vec<_> = group.assignment().iter().cloned().collect();
        let positions: Vec<_> = inbox.positions(&owned).await?.into_iter().collect();
        if let Err(e) = group.commit_offsets(&positions).await {
            eprintln!("ledger: lag commit failed (ignored): {e}");
        }
        Ok(())
    }

    async fn close(self) -> Result<(), InboxError> {
        if let Source::Group(group) = self {
            group.close().await?;
        }
        Ok(())
    }
}

/// One line per partition that moved, for operators (and the rebalance tests).
fn report_events(events: &[GroupEvent], resumed: &std::collections::BTreeMap<(String, i32), i64>) {
    for event in events {
        match event {
            GroupEvent::Assigned(partitions) => {
                for tp @ (topic, partition) in partitions {
                    match resumed.get(tp) {
                        Some(offset) => {
                            println!("ledger: resuming {topic}/{partition} at {offset}")
                        }
                        None => {
                            println!("ledger: resuming {topic}/{partition} at the group's start")
                        }
                    }
                }
            }
            GroupEvent::Revoked(partitions) => {
                for (topic, partition) in partitions {
                    println!("ledger: revoked {topic}/{partition}");
                }
            }
            GroupEvent::Lost(partitions) => {
                for (topic, partition) in partitions {
                    println!("ledger: lost {topic}/{partition}");
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CrashPoint {
    MidBatch,
    BeforeCommit,
    AfterCommit,
}

#[derive(Debug, Clone, Copy)]
struct Crash {
    point: CrashPoint,
    batch: u64,
}

/// One transfer, parsed from `id,from,to,amount`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Transfer {
    id: String,
    from: i64,
    to: i64,
    amount: i64,
}

#[tokio::main]
async fn main() {
    let args = match parse_args(std::env::args().skip(1).collect()) {
        Ok(args) => args,
        Err(usage) => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let crash = match std::env::var("LEDGER_CRASH").ok().map(|s| parse_crash(&s)) {
        None => None,
        Some(Ok(crash)) => Some(crash),
        Some(Err(e)) => {
            eprintln!("LEDGER_CRASH: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args, crash).await {
        eprintln!("ledger: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args, crash: Option<Crash>) -> Result<(), InboxError> {
    let inbox = Inbox::connect(&args.database_url, "ledger").await?;
    inbox.migrate().await?;
    open_accounts(&inbox, args.accounts, args.initial_balance).await?;

    let config = ConsumerConfig {
        start: OffsetSpec::Earliest,
        max_wait: Duration::from_millis(200),
        ..ConsumerConfig::default()
    };
    let mut source = match &args.group {
        Some(group_id) => {
            let mut group = GroupConfig::new(group_id.clone());
            group.consumer = config;
            let member = GroupConsumer::subscribe(&args.bootstrap, group, &[&args.topic]).await?;
            Source::Group(Box::new(member))
        }
        None => {
            let admin = Admin::connect(&args.bootstrap).await?;
            let partitions = admin.connection().partition_count(&args.topic).await?;
            let mut consumer = Consumer::connect(&args.bootstrap, config).await?;
            consumer.assign((0..partitions).map(|p| (args.topic.clone(), p)).collect());
            let resumed = inbox.seek_consumer(&mut consumer).await?;
            println!("ledger: resuming {} partitions at {resumed:?}", partitions);
            Source::Assigned(Box::new(consumer))
        }
    };

    let mut batch_number = 0u64;
    let mut pending: Vec<ConsumerRecord> = Vec::new();
    loop {
        if let Some(expect) = args.expect {
            if ledger_rows(&inbox).await? >= expect {
                println!("ledger: {expect} transfers recorded, done");
                return source.close().await;
            }
        }
        if pending.is_empty() {
            pending = source.poll(&inbox).await?;
        }
        if pending.is_empty() {
            continue;
        }
        let take = pending.len().min(args.batch_size);
        let batch: Vec<ConsumerRecord> = pending.drain(..take).collect();
        batch_number += 1;
        let crash_here = crash.filter(|c| c.batch == batch_number).map(|c| c.point);
        // The crash record, by its place in the log (the closure runs only for records
        // the inbox applies, so counting its calls would miss it).
        let crash_at = match crash_here {
            Some(CrashPoint::MidBatch) => batch.get(batch.len() / 2),
            Some(CrashPoint::BeforeCommit) => batch.last(),
            _ => None,
        }
        .map(|r| (r.partition, r.offset));
        let accounts = args.accounts;
        let outcome = inbox
            .process_batch(&batch, |tx: &mut InboxTx, record: &ConsumerRecord| {
                Box::pin(async move {
                    apply(tx, record, accounts).await?;
                    if crash_at == Some((record.partition, record.offset)) {
                        die();
                    }
                    Ok(())
                })
            })
            .await?;
        if crash_here == Some(CrashPoint::AfterCommit) {
            die();
        }
        if batch_number.is_multiple_of(args.commit_every) {
            source.commit_for_lag(&inbox).await?;
        }
        if outcome.skipped() > 0 {
            println!(
                "ledger: batch {batch_number}: {} applied, {} already processed",
                outcome.applied(),
                outcome.skipped()
            );
        }
    }
}

/// The business write of one record, on the inbox's transaction.
async fn apply(tx: &mut InboxTx, record: &ConsumerRecord, accounts: i64) -> Result<(), InboxError> {
    let transfer = match parse_transfer(record.value.as_deref(), accounts) {
        Ok(transfer) => transfer,
        Err(reason) => {
            sqlx::query(
                "INSERT INTO transfers_rejected (topic, partition_id, record_offset, reason) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(record.topic.as_str())
            .bind(i64::from(record.partition))
            .bind(record.offset)
            .bind(reason)
            .execute(&mut **tx)
            .await?;
            return Ok(());
        }
    };
    for (account, delta) in [
        (transfer.from, -transfer.amount),
        (transfer.to, transfer.amount),
    ] {
        sqlx::query("UPDATE accounts SET balance = balance + $1 WHERE id = $2")
            .bind(delta)
            .bind(account)
            .execute(&mut **tx)
            .await?;
    }
    // Keyed by the transfer id: were a transfer ever applied twice, this insert would
    // fail and roll the batch back rather than move money twice.
    sqlx::query(
        "INSERT INTO transfers_applied (id, from_account, to_account, amount, topic, partition_id, record_offset) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(transfer.id.as_str())
    .bind(transfer.from)
    .bind(transfer.to)
    .bind(transfer.amount)
    .bind(record.topic.as_str())
    .bind(i64::from(record.partition))
    .bind(record.offset)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// `id,from,to,amount` with accounts below `accounts` and a positive amount.
fn parse_transfer(value: Option<&[u8]>, accounts: i64) -> Result<Transfer, String> {
    let value = value.ok_or("a record without a value")?;
    let text = std::str::from_utf8(value).map_err(|_| "a value that is not UTF-8")?;
    let fields: Vec<&str> = text.trim().split(',').collect();
    let [id, from, to, amount] = fields.as_slice() else {
        return Err(format!("{text:?} is not id,from,to,amount"));
    };
    let number = |s: &str| s.trim().parse::<i64>().map_err(|e| format!("{s:?}: {e}"));
    let transfer = Transfer {
        id: id.trim().to_string(),
        from: number(from)?,
        to: number(to)?,
        amount: number(amount)?,
    };
    if transfer.id.is_empty() || transfer.amount <= 0 {
        return Err(format!("{text:?}: an id and a positive amount are needed"));
    }
    for account in [transfer.from, transfer.to] {
        if !(0..accounts).contains(&account) {
            return Err(format!("{text:?}: no account {account}"));
        }
    }
    Ok(transfer)
}

async fn open_accounts(inbox: &Inbox, accounts: i64, initial: i64) -> Result<(), InboxError> {
    let mut tx = inbox.pool().begin().await?;
    for statement in [
        "CREATE TABLE IF NOT EXISTS accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS transfers_applied (id TEXT PRIMARY KEY, \
         from_account BIGINT NOT NULL, to_account BIGINT NOT NULL, amount BIGINT NOT NULL, \
         topic TEXT NOT NULL, partition_id BIGINT NOT NULL, record_offset BIGINT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS transfers_rejected (topic TEXT NOT NULL, \
         partition_id BIGINT NOT NULL, record_offset BIGINT NOT NULL, reason TEXT NOT NULL, \
         PRIMARY KEY (topic, partition_id, record_offset))",
    ] {
        sqlx::query(statement).execute(&mut *tx).await?;
    }
    for id in 0..accounts {
        sqlx::query(
            "INSERT INTO accounts (id, balance) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(initial)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Transfers recorded so far, applied or rejected.
async fn ledger_rows(inbox: &Inbox) -> Result<i64, InboxError> {
    Ok(sqlx::query_scalar(
        "SELECT (SELECT COUNT(*) FROM transfers_applied) + (SELECT COUNT(*) FROM transfers_rejected)",
    )
    .fetch_one(inbox.pool())
    .await?)
}

/// SIGKILL to itself: no destructor, no flush, no goodbye to the database (its open
/// transaction is rolled back when the connection drops), as in a real crash.
fn die() -> ! {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &std::process::id().to_string()])
        .status();
    std::process::abort()
}

fn parse_crash(spec: &str) -> Result<Crash, String> {
    let (point, batch) = spec
        .split_once(':')
        .ok_or_else(|| format!("{spec:?}: expected POINT:BATCH"))?;
    let point = match point {
        "mid-batch" => CrashPoint::MidBatch,
        "before-commit" => CrashPoint::BeforeCommit,
        "after-commit" => CrashPoint::AfterCommit,
        other => return Err(format!("unknown crash point {other:?}")),
    };
    let batch = batch
        .parse::<u64>()
        .map_err(|e| format!("batch {batch:?}: {e}"))?;
    Ok(Crash { point, batch })
}

fn parse_args(raw: Vec<String>) -> Result<Args, String> {
    let usage = "usage: ledger BOOTSTRAP DATABASE_URL TOPIC [--accounts N] \
                 [--initial-balance B] [--batch-size K] [--expect T] \
                 [--group G [--commit-every N]]";
    let mut positional = Vec::new();
    let mut args = Args {
        bootstrap: String::new(),
        database_url: String::new(),
        topic: String::new(),
        accounts: 100,
        initial_balance: 1000,
        batch_size: 100,
        expect: None,
        group: None,
        commit_every: 10,
    };
    let mut it = raw.into_iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| -> Result<i64, String> {
            let v = it
                .next()
                .ok_or_else(|| format!("{name} needs a value; {usage}"))?;
            v.parse::<i64>().map_err(|e| format!("{name} {v:?}: {e}"))
        };
        match arg.as_str() {
            "--accounts" => args.accounts = value("--accounts")?,
            "--initial-balance" => args.initial_balance = value("--initial-balance")?,
            "--batch-size" => args.batch_size = value("--batch-size")?.max(1) as usize,
            "--expect" => args.expect = Some(value("--expect")?),
            "--commit-every" => args.commit_every = value("--commit-every")?.max(1) as u64,
            "--group" => {
                args.group = Some(
                    it.next()
                        .ok_or_else(|| format!("--group needs a value; {usage}"))?,
                )
            }
            "-h" | "--help" => return Err(usage.to_string()),
            _ => positional.push(arg),
        }
    }
    let [bootstrap, database_url, topic] =
        <[String; 3]>::try_from(positional).map_err(|_| usage.to_string())?;
    args.bootstrap = bootstrap;
    args.database_url = database_url;
    args.topic = topic;
    Ok(args)
}
