//! The ledger at scale under faults: 20,000 transfers across 100 accounts on 6
//! partitions of a real cluster, produced while the consuming ledger is SIGKILLed at
//! every injected point (before the database commit, after it, mid-batch) again and
//! again, and while PostgreSQL itself crashes (`pg_ctl stop -m immediate`) and comes
//! back. Each transfer is applied exactly once, and every balance is the one the input
//! implies.
//!
//! What a user can expect when the database crashes under the ledger: the ledger exits
//! with status 1 and a message naming the inbox database (nothing half-applied: the open
//! transaction is lost with the server), and its supervisor restarts it once the
//! database is back; it resumes from the positions the database kept.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use idem_tests::postgres::PostgresServer;
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::Cluster;

use super::*;

const TRANSFERS: usize = 20_000;
const SCALE_ACCOUNTS: i64 = 100;
/// Produced in chunks, so transfers keep arriving while ledgers are killed.
const CHUNK: usize = 2_500;
const BATCH: usize = 200;
/// Each run is killed in its given batch, at the given point; the database crashes
/// after the first half of them.
const CRASHES: &[&str] = &[
    "before-commit:2",
    "after-commit:3",
    "mid-batch:2",
    "before-commit:1",
    "mid-batch:4",
    "after-commit:1",
    "before-commit:3",
    "mid-batch:1",
];

/// Each account's balance once every transfer of `sent` is applied once.
fn expected_balances(sent: &[(String, String)]) -> BTreeMap<i64, i64> {
    let mut balances: BTreeMap<i64, i64> =
        (0..SCALE_ACCOUNTS).map(|a| (a, INITIAL_BALANCE)).collect();
    for (_, value) in sent {
        let fields: Vec<i64> = value
            .split(',')
            .skip(1)
            .map(|f| f.parse().expect("a number"))
            .collect();
        let [from, to, amount] = fields[..] else {
            panic!("{value} is not a transfer");
        };
        *balances.get_mut(&from).expect("account") -= amount;
        *balances.get_mut(&to).expect("account") += amount;
    }
    balances
}

async fn balances(url: &str) -> BTreeMap<i64, i64> {
    let inbox = Inbox::connect(url, "ledger").await.expect("inbox connects");
    let rows: Vec<(i64, i64)> = sqlx::query_as("SELECT id, balance FROM accounts")
        .fetch_all(inbox.pool())
        .await
        .expect("balances");
    rows.into_iter().collect()
}

async fn applied(url: &str) -> i64 {
    let inbox = Inbox::connect(url, "ledger").await.expect("inbox connects");
    sqlx::query_scalar("SELECT COUNT(*) FROM transfers_applied")
        .fetch_one(inbox.pool())
        .await
        .expect("count")
}

fn spawn(bootstrap: &str, url: &str, crash: Option<&str>) -> tokio::process::Child {
    spawn_ledger_with(bootstrap, url, TRANSFERS, crash, SCALE_ACCOUNTS, BATCH)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_20000_transfers_when_the_ledger_and_postgres_crash_again_and_again_then_each_is_applied_once(
) {
    let started = Instant::now();
    let cluster = Cluster::start_with_coordinators(2, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, PARTITIONS, 2).await;
    let bootstrap = cluster.bootstrap();
    let mut server = PostgresServer::start();
    let url = server.create_database("ledger");

    let sent = transfers_among(0, TRANSFERS, SCALE_ACCOUNTS);
    let producing = tokio::spawn({
        let bootstrap = bootstrap.clone();
        let sent = sent.clone();
        async move {
            for chunk in sent.chunks(CHUNK) {
                produce(&bootstrap, chunk).await;
            }
        }
    });

    for (i, crash) in CRASHES.iter().enumerate() {
        if i == CRASHES.len() / 2 {
            // The database crashes under a running ledger, which exits with a clear
            // error; its supervisor (this test) starts it again once the server is back.
            let before = applied(&url).await;
            let run = spawn(&bootstrap, &url, None);
            wait_until(PATIENCE, "the ledger applies transfers", || {
                let url = url.clone();
                async move {
                    let now = applied(&url).await;
                    seen_if(now, now > before)
                }
            })
            .await;
            tokio::task::block_in_place(|| server.stop_immediate());
            let (status, stderr) = wait_exit(run, PATIENCE, "the database crash").await;
            assert_eq!(
                status.code(),
                Some(1),
                "the ledger exits with an error when its database crashes: {status}, {stderr}"
            );
            assert!(
                stderr.contains("inbox database"),
                "the error names the database: {stderr}"
            );
            tokio::task::block_in_place(|| server.start_again());
        }
        let run = spawn(&bootstrap, &url, Some(crash));
        let (status, stderr) = wait_exit(run, PATIENCE, crash).await;
        assert_eq!(
            status.signal(),
            Some(9),
            "run {crash} dies by SIGKILL at its crash point: {status}, {stderr}"
        );
    }
    let killed = applied(&url).await;
    assert!(
        killed < TRANSFERS as i64,
        "the killed runs left work to do ({killed} of {TRANSFERS} applied)"
    );

    let last = spawn(&bootstrap, &url, None);
    let (status, stderr) = wait_exit(
        last,
        Duration::from_secs(90),
        "the last run (transfers lost if it never ends)",
    )
    .await;
    assert!(status.success(), "the last run finishes: {stderr}");
    producing.await.expect("every transfer produced");

    assert_applied_once(&url, &bootstrap, (TRANSFERS as i64, 0), SCALE_ACCOUNTS).await;
    assert_eq!(
        balances(&url).await,
        expected_balances(&sent),
        "every balance is the one the transfers imply"
    );
    println!("20,000 transfers under faults: {:?}", started.elapsed());
}
