//! A member of an inbox group SIGKILLed mid-batch while transfers flow (a crash, not a
//! graceful leave): once the group's session timeout expires, the surviving member is
//! given the dead member's partitions and resumes each from the position the database
//! holds, not from the broker-committed offset (which is behind it); every transfer is
//! applied exactly once. Two ledger processes (`--group`) on one PostgreSQL database.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::task::JoinHandle;

use idem_tests::groups::GroupClient;
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::Cluster;

use super::*;

const GROUP: &str = "ledger";
/// Short, so that the survivor gets the dead member's partitions within seconds (the
/// members heartbeat every third of it).
const SESSION_TIMEOUT_MS: &str = "6000";
/// Applied by the survivor alone before the victim joins: every partition then has a
/// database position.
const BEFORE_JOIN: usize = 120;
/// Produced once the survivor owns the dead member's partitions.
const AFTER_TAKEOVER: usize = 300;
/// A bound on what is produced before the victim dies (about 1,500 are).
const MAX_BEFORE_KILL: usize = 20_000;
const CHUNK: usize = 50;
/// The victim dies in its 3rd batch, after the business writes of the batch's middle
/// record: its first two batches are committed to the database, the third is rolled
/// back with its connection.
const VICTIM_CRASH: &str = "mid-batch:3";
const VICTIM_BATCH: usize = 10;
const SURVIVOR_BATCH: usize = 20;

/// What a ledger printed, line by line, as it printed it.
#[derive(Clone, Default)]
struct Printed(Arc<Mutex<Vec<String>>>);

impl Printed {
    fn lines(&self) -> Vec<String> {
        self.0.lock().expect("printed lines").clone()
    }
}

/// A ledger run as a member of the group until killed (how many transfers there will
/// be is known only once the victim has died); its stdout is collected until it
/// closes (the handle ends then).
fn spawn_member(
    bootstrap: &str,
    url: &str,
    crash: Option<&str>,
    batch: usize,
) -> (Child, Printed, JoinHandle<()>) {
    let mut command = ledger_command(bootstrap, url, None, crash, ACCOUNTS, batch);
    command.args(["--group", GROUP]).stdout(Stdio::piped());
    let mut child = command.spawn().expect("ledger member starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let printed = Printed::default();
    let lines = printed.0.clone();
    let reading = tokio::spawn(async move {
        let mut reader = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            lines.lock().expect("printed lines").push(line);
        }
    });
    (child, printed, reading)
}

/// The partitions of `ledger: resuming TOPIC/P at OFFSET` lines, with their offsets
/// (None: `at the group's start`), in order.
fn resumed(lines: &[String]) -> Vec<(i32, Option<i64>)> {
    lines
        .iter()
        .filter_map(|line| line.strip_prefix("ledger: resuming "))
        .filter_map(|rest| {
            let (place, at) = rest.split_once(" at ")?;
            let partition = place.rsplit_once('/')?.1.parse().ok()?;
            Some((partition, at.parse().ok()))
        })
        .collect()
}

/// The partitions a member owned at the end of `lines`: assigned, minus those revoked
/// or lost since.
fn owned(lines: &[String]) -> BTreeSet<i32> {
    let partition = |place: &str| place.rsplit_once('/').and_then(|(_, p)| p.parse().ok());
    let mut owned = BTreeSet::new();
    for line in lines {
        if let Some(rest) = line.strip_prefix("ledger: resuming ") {
            owned.extend(rest.split_once(" at ").and_then(|(p, _)| partition(p)));
        } else if let Some(place) = line
            .strip_prefix("ledger: revoked ")
            .or_else(|| line.strip_prefix("ledger: lost "))
        {
            if let Some(p) = partition(place) {
                owned.remove(&p);
            }
        }
    }
    owned
}

async fn recorded(inbox: &Inbox) -> usize {
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM transfers_applied")
        .fetch_one(inbox.pool())
        .await
        .expect("count");
    n as usize
}

/// Produces transfers `first..` a chunk at a time, at most three chunks ahead of what
/// the ledgers applied (so transfers still flow whenever the victim dies, however
/// long it takes to start), until `stop` or `up_to`; returns the next transfer number.
async fn produce_paced(
    bootstrap: String,
    inbox: Inbox,
    first: usize,
    up_to: usize,
    stop: Arc<AtomicBool>,
) -> usize {
    let mut next = first;
    while !stop.load(Ordering::Relaxed) && next < up_to {
        let behind = next.saturating_sub(3 * CHUNK);
        wait_until(PATIENCE, "the ledgers keep up", || {
            let inbox = inbox.clone();
            async move {
                let n = recorded(&inbox).await;
                seen_if(n, n >= behind)
            }
        })
        .await;
        let n = CHUNK.min(up_to - next);
        produce(&bootstrap, &transfers(next, n)).await;
        next += n;
    }
    next
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_inbox_members_when_one_is_killed_mid_batch_then_the_survivor_resumes_its_partitions_from_the_database(
) {
    let started = std::time::Instant::now();
    let cluster = Cluster::start_with_coordinators(
        1,
        1,
        &[],
        &["--group-session-timeout-ms", SESSION_TIMEOUT_MS],
    )
    .await;
    cluster.create_topic(TOPIC, PARTITIONS, 1).await;
    let bootstrap = cluster.bootstrap();
    let db = Database::postgres();
    let url = db.url().to_string();

    // The survivor alone (its tables made, every partition assigned to it) applies a
    // first lot: every partition gets a database position.
    let (mut survivor, survivor_out, _) = spawn_member(&bootstrap, &url, None, SURVIVOR_BATCH);
    wait_until(PATIENCE, "the survivor owns every partition", || {
        let lines = survivor_out.lines();
        async move { seen_if(lines.clone(), owned(&lines).len() == PARTITIONS as usize) }
    })
    .await;
    let inbox = Inbox::connect(&url, "ledger")
        .await
        .expect("inbox connects");
    produce(&bootstrap, &transfers(0, BEFORE_JOIN)).await;
    wait_until(PATIENCE, "the survivor applies the first lot", || {
        let inbox = inbox.clone();
        async move {
            let n = recorded(&inbox).await;
            seen_if(n, n == BEFORE_JOIN)
        }
    })
    .await;

    // The victim joins (partitions move to it) while transfers flow, and is SIGKILLed
    // in its third batch.
    let stop = Arc::new(AtomicBool::new(false));
    let producing = tokio::spawn(produce_paced(
        bootstrap.clone(),
        inbox.clone(),
        BEFORE_JOIN,
        MAX_BEFORE_KILL,
        stop.clone(),
    ));
    let (victim, victim_out, victim_reading) =
        spawn_member(&bootstrap, &url, Some(VICTIM_CRASH), VICTIM_BATCH);
    let (status, stderr) = wait_exit(victim, PATIENCE, "the victim's crash").await;
    // What the database and the broker hold for the dead member's partitions, read
    // before anyone else may own them (its session has not expired yet).
    let at_kill = inbox.all_positions().await.expect("positions");
    let committed = GroupClient::new(&bootstrap, GROUP)
        .committed(TOPIC, PARTITIONS)
        .await;
    let survivor_lines_at_kill = survivor_out.lines().len();
    stop.store(true, Ordering::Relaxed);
    assert_eq!(
        status.signal(),
        Some(9),
        "the victim dies by SIGKILL mid-batch: {status}, {stderr}"
    );
    victim_reading.await.expect("the victim's output is read");
    let victim_lines = victim_out.lines();
    let orphaned = owned(&victim_lines);
    assert!(
        !orphaned.is_empty() && orphaned.len() < PARTITIONS as usize,
        "the victim owned some of the partitions when it died: {victim_lines:?}"
    );
    let db_position = |p: i32| at_kill.get(&(TOPIC.to_string(), p)).copied();
    // Why resuming from broker offsets would fail this test: the victim committed its
    // first two batches to the database and died before committing anything to the
    // group (the ledger commits there for lag monitoring only, every 10th batch), so
    // the group's offsets of its partitions are at most where the survivor stored
    // them before the victim joined, behind the database. A survivor starting there
    // resumes at an offset other than the database's (asserted equal below) and reads
    // again records the victim applied; the inbox's keys skip them, so the end state
    // alone would not tell, but the ledger prints "already processed" (asserted absent
    // below). A ledger made to take the group's offsets instead failed exactly there,
    // with 20-record batches wholly "already processed"; had the victim done so too,
    // its crash batch would have been skipped records and it would not have died.
    let behind: Vec<(i32, i64, Option<i64>)> = orphaned
        .iter()
        .map(|&p| (p, committed[p as usize], db_position(p)))
        .filter(|(_, committed, db)| db.is_some_and(|db| *committed < db))
        .collect();
    assert!(
        !behind.is_empty(),
        "the victim applied records whose offsets the group never got: committed \
         {committed:?}, database {at_kill:?}"
    );

    // The survivor is given the dead member's partitions once its session expires, and
    // resumes each at the database position.
    let (taken_over, took) = wait_until(PATIENCE, "the survivor takes the partitions over", || {
        let lines = survivor_out.lines();
        let orphaned = orphaned.clone();
        async move {
            let after_kill = resumed(&lines[survivor_lines_at_kill..]);
            let taken: BTreeSet<i32> = after_kill.iter().map(|(p, _)| *p).collect();
            seen_if(after_kill, orphaned.is_subset(&taken))
        }
    })
    .await;
    for &p in &orphaned {
        let at: Vec<Option<i64>> = taken_over
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|(_, at)| *at)
            .collect();
        assert_eq!(
            at,
            vec![db_position(p)],
            "partition {p}: resumed at the database position (the group committed {})",
            committed[p as usize]
        );
    }

    // More transfers, across every partition, for the survivor alone.
    let next = producing.await.expect("transfers produced");
    assert!(
        next < MAX_BEFORE_KILL,
        "the victim died while transfers flowed"
    );
    produce(&bootstrap, &transfers(next, AFTER_TAKEOVER)).await;
    let total = next + AFTER_TAKEOVER;
    wait_until(PATIENCE, "the survivor applies every transfer", || {
        let inbox = inbox.clone();
        async move {
            let n = recorded(&inbox).await;
            seen_if(n, n >= total)
        }
    })
    .await;
    // Done: everything it did is in the database (it is killed rather than told to
    // stop, which the ledger has no way to be).
    survivor.start_kill().expect("the survivor is stopped");
    survivor.wait().await.expect("the survivor ends");
    assert_applied_once(&url, &bootstrap, (total as i64, 0), ACCOUNTS).await;

    // The survivor applied records of the dead member's partitions after the kill.
    let mut applied_after_kill = BTreeMap::new();
    for &p in &orphaned {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM transfers_applied WHERE partition_id = $1 AND record_offset >= $2",
        )
        .bind(i64::from(p))
        .bind(db_position(p).unwrap_or(0))
        .fetch_one(inbox.pool())
        .await
        .expect("count");
        applied_after_kill.insert(p, n);
    }
    assert!(
        applied_after_kill.values().all(|n| *n > 0),
        "the survivor applied records of every partition it took over: {applied_after_kill:?}"
    );
    let survivor_lines = survivor_out.lines();
    for (who, lines) in [("victim", &victim_lines), ("survivor", &survivor_lines)] {
        let again: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("already processed"))
            .collect();
        assert!(
            again.is_empty(),
            "the {who} read no record the database had: {again:?}"
        );
    }
    println!(
        "killed member: partitions {orphaned:?} taken over {took:?} after the kill, group \
         offsets {committed:?} behind the database's {behind:?}; {total} transfers in {:?}",
        started.elapsed()
    );
}
