//! The ledger example applies every transfer exactly once: on a clean run, and when its
//! process is SIGKILLed mid-batch, before the database commit and after it, again and
//! again, on PostgreSQL and on SQLite.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use idem_client::ProducerRecord;

use super::*;

const RUN_LIMIT: Duration = Duration::from_secs(30);

async fn clean_run(db: Database) {
    let broker = broker().await;
    let bootstrap = broker.bootstrap();
    let sent = transfers(0, 300);
    produce(&bootstrap, &sent).await;
    // Not transfers: a record without a value and one that does not parse.
    let producer = idem_client::Producer::connect(idem_client::ProducerConfig::new(&bootstrap))
        .await
        .expect("producer connects");
    for record in [
        ProducerRecord::tombstone(TOPIC, "t-x").partition(0),
        ProducerRecord::new(TOPIC, "not a transfer").partition(1),
    ] {
        producer
            .send_record(record)
            .await
            .expect("send")
            .await
            .expect("acknowledged");
    }
    producer.close().await;

    let run = spawn_ledger(&bootstrap, db.url(), sent.len() + 2, None);
    let (status, stderr) = wait_exit(run, RUN_LIMIT, "clean run").await;
    assert!(
        status.success(),
        "the ledger ends once all is applied: {stderr}"
    );

    // The tombstone and the garbage are rejected, once each.
    assert_applied_once(db.url(), &bootstrap, (sent.len() as i64, 2), ACCOUNTS).await;
}

#[tokio::test]
async fn given_transfers_on_six_partitions_when_the_ledger_runs_on_postgres_then_each_is_applied_once(
) {
    clean_run(Database::postgres()).await;
}

#[tokio::test]
async fn given_transfers_on_six_partitions_when_the_ledger_runs_on_sqlite_then_each_is_applied_once(
) {
    clean_run(Database::sqlite()).await;
}

/// Each run is killed in its given batch (batches of 20), at the given point.
const CRASHES: &[&str] = &[
    "before-commit:1",
    "mid-batch:2",
    "after-commit:1",
    "before-commit:3",
    "after-commit:2",
    "mid-batch:1",
];

async fn killed_and_restarted(db: Database) {
    let broker = broker().await;
    let bootstrap = broker.bootstrap();
    let first = transfers(0, 300);
    let second = transfers(300, 300);
    let total = first.len() + second.len();
    produce(&bootstrap, &first).await;
    for (i, crash) in CRASHES.iter().enumerate() {
        if i == CRASHES.len() / 2 {
            // Mid-stream: more transfers arrive between crashes.
            produce(&bootstrap, &second).await;
        }
        let run = spawn_ledger(&bootstrap, db.url(), total, Some(crash));
        let (status, stderr) = wait_exit(run, RUN_LIMIT, crash).await;
        assert_eq!(
            status.signal(),
            Some(9),
            "run {crash} dies by SIGKILL at its crash point: {status}, {stderr}"
        );
    }
    let killed = ledger_state(db.url()).await;
    assert!(
        killed.applied < total as i64,
        "the killed runs left work to do ({} of {total} applied)",
        killed.applied
    );

    let last = spawn_ledger(&bootstrap, db.url(), total, None);
    let (status, stderr) = wait_exit(last, RUN_LIMIT, "the run after the crashes").await;
    assert!(status.success(), "the last run finishes: {stderr}");

    assert_applied_once(db.url(), &bootstrap, (total as i64, 0), ACCOUNTS).await;
}

#[tokio::test]
async fn given_the_ledger_killed_at_each_crash_point_when_restarted_on_postgres_then_each_transfer_is_applied_once(
) {
    killed_and_restarted(Database::postgres()).await;
}

#[tokio::test]
async fn given_the_ledger_killed_at_each_crash_point_when_restarted_on_sqlite_then_each_transfer_is_applied_once(
) {
    killed_and_restarted(Database::sqlite()).await;
}
