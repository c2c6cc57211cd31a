//! Partitions moving between two inbox consumers of one group while transfers flow: a
//! second member joins late (it takes partitions from the first), then the first
//! leaves (the second takes the rest). Each new owner resumes a partition from the
//! position the database holds: it reads nothing applied before and skips nothing, so
//! every transfer is applied exactly once, on PostgreSQL.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_client::inbox::{Inbox, InboxTx, Outcome};
use idem_client::{ConsumerRecord, GroupConfig, GroupConsumer, GroupEvent, OffsetSpec};
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::Cluster;

use super::*;

/// Transfers are produced in chunks until the test has seen the partitions move, up
/// to this many.
const MAX_TRANSFERS: usize = 10_000;
const CHUNK: usize = 50;
const GROUP: &str = "ledger";

/// What one member did.
#[derive(Debug, Default)]
struct Report {
    /// Every database position a newly assigned partition was sought to.
    resumed: Vec<(TopicPartitionKey, i64)>,
    /// The first offset read of each partition after each assignment of it.
    first_read: Vec<(TopicPartitionKey, i64)>,
    /// Outcomes other than `Applied`: records read that had been processed before.
    not_applied: Vec<(TopicPartitionKey, i64, Outcome)>,
    applied: usize,
}

type TopicPartitionKey = (String, i32);

/// A group member applying transfers through its own Inbox into `effects` (one row per
/// application, by transfer id and member) until `stop` is set; then it leaves.
async fn member(
    bootstrap: String,
    url: String,
    name: &'static str,
    stop: Arc<AtomicBool>,
) -> Report {
    let inbox = Inbox::connect(&url, GROUP).await.expect("inbox connects");
    let mut config = GroupConfig::new(GROUP);
    config.consumer.start = OffsetSpec::Earliest;
    config.consumer.max_wait = Duration::from_millis(50);
    let mut group = GroupConsumer::subscribe(&bootstrap, config, &[TOPIC])
        .await
        .expect("subscribes");
    let mut report = Report::default();
    let mut awaiting_first: BTreeMap<TopicPartitionKey, ()> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        let polled = group.poll(Duration::from_millis(100)).await.expect("poll");
        for event in &polled.events {
            if let GroupEvent::Assigned(partitions) = event {
                awaiting_first.extend(partitions.iter().map(|p| (p.clone(), ())));
            }
        }
        let resumed = inbox
            .seek_assigned(&mut group, &polled.events)
            .await
            .expect("seek to the database positions");
        report.resumed.extend(resumed);
        for r in &polled.records {
            let place = (r.topic.clone(), r.partition);
            if awaiting_first.remove(&place).is_some() {
                report.first_read.push((place, r.offset));
            }
        }
        let outcome = inbox
            .process_batch(&polled.records, |tx: &mut InboxTx, r: &ConsumerRecord| {
                Box::pin(async move {
                    let value = r.value.as_deref().unwrap_or_default();
                    let id = String::from_utf8_lossy(value)
                        .split(',')
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    sqlx::query("INSERT INTO effects (id, member) VALUES ($1, $2)")
                        .bind(id)
                        .bind(name)
                        .execute(&mut **tx)
                        .await?;
                    Ok(())
                })
            })
            .await
            .expect("processed");
        for (r, o) in polled.records.iter().zip(&outcome.outcomes) {
            if *o != Outcome::Applied {
                report
                    .not_applied
                    .push(((r.topic.clone(), r.partition), r.offset, *o));
            }
        }
        report.applied += outcome.applied();
    }
    group.close().await.expect("leaves the group");
    report
}

/// Transfers applied by member `name`, or by either.
async fn applied_by(url: &str, name: Option<&str>) -> i64 {
    let inbox = Inbox::connect(url, GROUP).await.expect("inbox connects");
    let count = match name {
        Some(name) => {
            sqlx::query_scalar("SELECT COUNT(*) FROM effects WHERE member = $1")
                .bind(name)
                .fetch_one(inbox.pool())
                .await
        }
        None => {
            sqlx::query_scalar("SELECT COUNT(*) FROM effects")
                .fetch_one(inbox.pool())
                .await
        }
    };
    count.expect("count")
}

/// Waits until member `name` (or either) has applied at least `n` transfers.
async fn wait_applied(url: &str, name: Option<&str>, n: i64) {
    let what = format!("member {name:?} applies {n} transfers");
    wait_until(PATIENCE, &what, || {
        let url = url.to_string();
        async move {
            let applied = applied_by(&url, name).await;
            seen_if(applied, applied >= n)
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_inbox_members_when_partitions_move_between_them_then_each_new_owner_resumes_from_the_database(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, PARTITIONS, 1).await;
    let bootstrap = cluster.bootstrap();
    let db = Database::postgres();
    let url = db.url().to_string();
    let inbox = Inbox::connect(&url, GROUP).await.expect("inbox connects");
    inbox.migrate().await.expect("migrates");
    sqlx::query("CREATE TABLE effects (id TEXT NOT NULL, member TEXT NOT NULL)")
        .execute(inbox.pool())
        .await
        .expect("business table");

    // Transfers flow, a chunk at a time, until the partitions have moved twice.
    let stop_producing = Arc::new(AtomicBool::new(false));
    let producing = tokio::spawn({
        let bootstrap = bootstrap.clone();
        let url = url.clone();
        let stop = stop_producing.clone();
        async move {
            let mut sent = Vec::new();
            while !stop.load(Ordering::Relaxed) && sent.len() < MAX_TRANSFERS {
                // At most two chunks ahead of the members, so transfers still flow
                // whenever partitions move, however long the moves take.
                let behind = sent.len().saturating_sub(2 * CHUNK) as i64;
                wait_applied(&url, None, behind).await;
                let chunk = transfers(sent.len(), CHUNK);
                produce(&bootstrap, &chunk).await;
                sent.extend(chunk);
            }
            sent
        }
    });

    let stop_a = Arc::new(AtomicBool::new(false));
    let stop_b = Arc::new(AtomicBool::new(false));
    let a = tokio::spawn(member(bootstrap.clone(), url.clone(), "a", stop_a.clone()));
    wait_applied(&url, Some("a"), 1).await;
    // A second member joins late: some partitions move to it.
    let b = tokio::spawn(member(bootstrap.clone(), url.clone(), "b", stop_b.clone()));
    wait_applied(&url, Some("b"), 1).await;
    // The first leaves while transfers still flow: the rest move to the second.
    stop_a.store(true, Ordering::Relaxed);
    let report_a = a.await.expect("member a");
    let by_b = applied_by(&url, Some("b")).await;
    wait_applied(&url, Some("b"), by_b + 3 * CHUNK as i64).await;
    stop_producing.store(true, Ordering::Relaxed);
    let sent = producing.await.expect("transfers produced");
    assert!(
        sent.len() < MAX_TRANSFERS,
        "transfers flowed until the partitions had moved twice"
    );
    let ends = log_ends(&bootstrap).await;
    wait_until(PATIENCE, "the positions reach the log ends", || {
        let inbox = inbox.clone();
        let ends = ends.clone();
        async move {
            let positions = inbox.all_positions().await.expect("positions");
            let reached = positions == ends;
            seen_if(positions, reached)
        }
    })
    .await;
    stop_b.store(true, Ordering::Relaxed);
    let report_b = b.await.expect("member b");

    // Each new owner resumed where the database said, and read from there.
    assert!(
        report_b.resumed.len() >= PARTITIONS as usize,
        "the second member resumed every partition from the database, some at its join and \
         the rest when the first left: {:?}",
        report_b.resumed
    );
    for report in [&report_a, &report_b] {
        for (place, first) in &report.first_read {
            let sought: Vec<i64> = report
                .resumed
                .iter()
                .filter(|(p, _)| p == place)
                .map(|(_, o)| *o)
                .collect();
            assert!(
                sought.is_empty() || sought.contains(first),
                "{place:?}: first read at {first}, sought to {sought:?}"
            );
        }
        assert!(
            report.not_applied.is_empty(),
            "no record processed before is read again: {:?}",
            report.not_applied
        );
    }
    assert_eq!(
        report_a.applied + report_b.applied,
        sent.len(),
        "the two members applied every transfer between them"
    );
    let counts: Vec<(String, i64)> =
        sqlx::query_as("SELECT id, COUNT(*) FROM effects GROUP BY id ORDER BY id")
            .fetch_all(inbox.pool())
            .await
            .expect("effects");
    let expected: Vec<(String, i64)> = sent.iter().map(|(id, _)| (id.clone(), 1)).collect();
    assert_eq!(
        counts, expected,
        "every transfer applied once, none skipped"
    );
    assert_eq!(
        inbox.all_positions().await.expect("positions"),
        ends,
        "positions are the log ends"
    );
}
