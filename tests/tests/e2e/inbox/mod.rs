//! The database Inbox: records applied to PostgreSQL and SQLite exactly once, across
//! crashes of the consuming process and upstream duplicates, with positions kept in the
//! database (docs/inbox.md). Real broker processes, a real throwaway PostgreSQL server,
//! real SQLite files, and the `ledger` example as the consuming process.

mod bad_input;
mod faults;
mod group;
mod killed_member;
mod ledger;
mod rebalance;
mod retention;
mod upstream_duplicates;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};

use idem_client::inbox::sqlx;
use idem_client::inbox::Inbox;
use idem_client::{
    Admin, Delivery, Isolation, OffsetSpec, Producer, ProducerConfig, ProducerRecord,
};
use idem_tests::postgres::PostgresServer;
use idem_tests::BrokerProcess;

pub const TOPIC: &str = "transfers";
pub const PARTITIONS: i32 = 6;
pub const ACCOUNTS: i64 = 20;
pub const INITIAL_BALANCE: i64 = 1000;

/// Where a test's ledger lives: a database of a throwaway PostgreSQL server, or a
/// SQLite file in a temporary dir.
pub enum Database {
    /// The server lives (and is stopped on drop) with the database.
    Postgres {
        _server: PostgresServer,
        url: String,
    },
    /// The dir holding the file is removed on drop.
    Sqlite {
        _dir: tempfile::TempDir,
        url: String,
    },
}

impl Database {
    pub fn postgres() -> Database {
        let server = PostgresServer::start();
        let url = server.create_database("ledger");
        Database::Postgres {
            _server: server,
            url,
        }
    }

    pub fn sqlite() -> Database {
        let dir = tempfile::tempdir().expect("temp dir for sqlite");
        let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
        Database::Sqlite { _dir: dir, url }
    }

    pub fn url(&self) -> &str {
        match self {
            Database::Postgres { url, .. } | Database::Sqlite { url, .. } => url,
        }
    }
}

/// A broker with the transfers topic.
pub async fn broker() -> BrokerProcess {
    let broker = BrokerProcess::start();
    Admin::connect(&broker.bootstrap())
        .await
        .expect("admin connects")
        .create_topic(TOPIC, PARTITIONS, 1)
        .await
        .expect("topic created");
    broker
}

/// The `n` transfers `first..first+n` as `(id, value)`: amounts and accounts vary so a
/// transfer applied twice or lost changes balances.
pub fn transfers(first: usize, n: usize) -> Vec<(String, String)> {
    transfers_among(first, n, ACCOUNTS)
}

/// [`transfers`] between `accounts` accounts.
pub fn transfers_among(first: usize, n: usize, accounts: i64) -> Vec<(String, String)> {
    (first..first + n)
        .map(|i| {
            let id = format!("t-{i:06}");
            let from = (i as i64 * 7) % accounts;
            let to = (i as i64 * 7 + 1 + (i as i64 % 5)) % accounts;
            let amount = 1 + (i as i64 % 97);
            let value = format!("{id},{from},{to},{amount}");
            (id, value)
        })
        .collect()
}

/// Sends each transfer with its id as the idempotency key (keyed by id, so spread over
/// the partitions) through an exactly-once producer; returns once all are acknowledged.
pub async fn produce(bootstrap: &str, transfers: &[(String, String)]) {
    let producer =
        Producer::connect(ProducerConfig::new(bootstrap).with_delivery(Delivery::ExactlyOnce))
            .await
            .expect("producer connects");
    let mut pending = Vec::new();
    for (id, value) in transfers {
        let record = ProducerRecord::new(TOPIC, value.clone())
            .key(id.clone())
            .idempotency_key(id.clone());
        pending.push(producer.send_record(record).await.expect("send"));
    }
    for delivery in pending {
        delivery.await.expect("acknowledged");
    }
    producer.close().await;
}

/// The `ledger` example binary (built by `cargo build --workspace --examples`).
pub fn ledger_binary() -> PathBuf {
    let path = idem_tests::binaries::bin_dir()
        .join("examples")
        .join("ledger");
    assert!(
        path.exists(),
        "{} not found: run `cargo build --workspace --bins --examples` first",
        path.display()
    );
    path
}

/// Starts the ledger example against `url`; `crash` is its `LEDGER_CRASH`.
pub fn spawn_ledger(bootstrap: &str, url: &str, expect: usize, crash: Option<&str>) -> Child {
    spawn_ledger_with(bootstrap, url, expect, crash, ACCOUNTS, 20)
}

/// [`spawn_ledger`] with `accounts` accounts and batches of up to `batch_size` records.
pub fn spawn_ledger_with(
    bootstrap: &str,
    url: &str,
    expect: usize,
    crash: Option<&str>,
    accounts: i64,
    batch_size: usize,
) -> Child {
    ledger_command(bootstrap, url, Some(expect), crash, accounts, batch_size)
        .spawn()
        .expect("ledger example starts")
}

/// The command [`spawn_ledger_with`] runs, for a test to add to (stdout goes nowhere,
/// stderr to a pipe; the process is killed when its `Child` is dropped); without
/// `expect`, the ledger runs until killed.
pub fn ledger_command(
    bootstrap: &str,
    url: &str,
    expect: Option<usize>,
    crash: Option<&str>,
    accounts: i64,
    batch_size: usize,
) -> Command {
    let mut command = Command::new(ledger_binary());
    command
        .args([bootstrap, url, TOPIC])
        .args(["--accounts", &accounts.to_string()])
        .args(["--initial-balance", &INITIAL_BALANCE.to_string()])
        .args(["--batch-size", &batch_size.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(expect) = expect {
        command.args(["--expect", &expect.to_string()]);
    }
    if let Some(crash) = crash {
        command.env("LEDGER_CRASH", crash);
    }
    command
}

/// Waits for `child` to end within `within` (killed, and the test failed, if not);
/// returns its status and what it wrote to stderr.
pub async fn wait_exit(child: Child, within: Duration, what: &str) -> (ExitStatus, String) {
    match tokio::time::timeout(within, child.wait_with_output()).await {
        Ok(output) => {
            let output = output.expect("ledger output");
            (
                output.status,
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        }
        // Dropping the timed-out future drops the child, which kill_on_drop kills.
        Err(_) => panic!("{what}: the ledger did not end within {within:?}"),
    }
}

/// What a user checks in the ledger database.
#[derive(Debug, PartialEq, Eq)]
pub struct LedgerState {
    pub applied: i64,
    pub distinct_applied: i64,
    pub rejected: i64,
    pub balance_sum: i64,
    pub positions: BTreeMap<(String, i32), i64>,
}

pub async fn ledger_state(url: &str) -> LedgerState {
    let inbox = Inbox::connect(url, "ledger").await.expect("inbox connects");
    let count = |sql: &'static str| {
        let pool = inbox.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"))
        }
    };
    LedgerState {
        applied: count("SELECT COUNT(*) FROM transfers_applied").await,
        distinct_applied: count("SELECT COUNT(DISTINCT id) FROM transfers_applied").await,
        rejected: count("SELECT COUNT(*) FROM transfers_rejected").await,
        balance_sum: count("SELECT CAST(SUM(balance) AS BIGINT) FROM accounts").await,
        positions: inbox.all_positions().await.expect("positions"),
    }
}

/// What a user checks after the ledger ran: `applied` transfers, each once, `rejected`
/// records set aside, the money of `accounts` accounts conserved, and the stored
/// positions at the log ends.
pub async fn assert_applied_once(
    url: &str,
    bootstrap: &str,
    (applied, rejected): (i64, i64),
    accounts: i64,
) {
    let state = ledger_state(url).await;
    assert_eq!(state.applied, applied, "every transfer applied");
    assert_eq!(state.distinct_applied, state.applied, "none applied twice");
    assert_eq!(state.rejected, rejected, "records set aside");
    assert_eq!(
        state.balance_sum,
        accounts * INITIAL_BALANCE,
        "money is conserved"
    );
    assert_eq!(
        state.positions,
        log_ends(bootstrap).await,
        "positions are the log ends"
    );
}

/// The log end of every partition of the transfers topic.
pub async fn log_ends(bootstrap: &str) -> BTreeMap<(String, i32), i64> {
    let admin = Admin::connect(bootstrap).await.expect("admin connects");
    let mut ends = BTreeMap::new();
    for p in 0..PARTITIONS {
        let end = admin
            .list_offsets(TOPIC, p, OffsetSpec::Latest, Isolation::ReadCommitted)
            .await
            .expect("log end");
        if end > 0 {
            ends.insert((TOPIC.to_string(), p), end);
        }
    }
    ends
}
