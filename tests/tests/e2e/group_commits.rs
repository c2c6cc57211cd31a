//! A group consumer's commits through the SDK (issue 26): asynchronous commits land in
//! the order they were asked for, and auto-commit commits what was returned — every
//! interval, before a revocation is acknowledged, and on close — so the group's next
//! member resumes right after the records already returned. A consumer with
//! auto-commit on refuses to feed a transaction. The CLI's group consumer commits past
//! transaction markers, so a group that read everything shows no lag.

use std::collections::BTreeMap;
use std::time::Duration;

use idem_client::{
    Admin, ClientError, GroupConfig, GroupConsumer, OffsetSpec, Producer, ProducerConfig,
    ProducerRecord,
};
use idem_tests::cli::idem;
use idem_tests::groups::GroupClient;
use idem_tests::wait::PATIENCE;
use idem_tests::Cluster;
use tokio::time::Instant;

const TOPIC: &str = "events";
/// Short sessions so a rebalance takes seconds (heartbeats every third of it).
const COORDINATOR_FLAGS: &[&str] = &["--group-session-timeout-ms", "3000"];

/// Writes `count` records to each of `partitions` partitions.
async fn fill(bootstrap: &str, partitions: i32, count: usize) {
    let producer = Producer::connect(ProducerConfig::new(bootstrap))
        .await
        .expect("producer connects");
    let mut deliveries = Vec::new();
    for n in 0..count {
        for p in 0..partitions {
            let record = ProducerRecord::new(TOPIC, format!("p{p}-{n}")).partition(p);
            deliveries.push(producer.send_record(record).await.expect("send"));
        }
    }
    for d in deliveries {
        d.await.expect("acknowledged");
    }
}

async fn member(bootstrap: &str, group: &str, auto_commit: Option<Duration>) -> GroupConsumer {
    let mut config = GroupConfig::new(group);
    config.consumer.start = OffsetSpec::Earliest;
    config.consumer.max_wait = Duration::from_millis(50);
    config.auto_commit_interval = auto_commit;
    GroupConsumer::subscribe(bootstrap, config, &[TOPIC])
        .await
        .expect("subscribes")
}

/// What a member has returned: the first and the next offset per partition.
#[derive(Debug, Default)]
struct Read {
    first: BTreeMap<i32, i64>,
    next: BTreeMap<i32, i64>,
}

impl Read {
    async fn poll(&mut self, member: &mut GroupConsumer) {
        let polled = member.poll(Duration::from_millis(100)).await.expect("poll");
        for r in polled.records {
            self.first.entry(r.partition).or_insert(r.offset);
            self.next.insert(r.partition, r.offset + 1);
        }
    }
}

/// Polls `member` until `done(read)` or the deadline; returns whether it held.
async fn poll_until(
    member: &mut GroupConsumer,
    read: &mut Read,
    done: impl Fn(&Read, &GroupConsumer) -> bool,
) -> bool {
    let deadline = Instant::now() + PATIENCE;
    while !done(read, member) && Instant::now() < deadline {
        read.poll(member).await;
    }
    done(read, member)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_commit_async_twice_then_a_commit_when_they_land_then_the_committed_offset_is_the_last(
) {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], COORDINATOR_FLAGS).await;
    cluster.create_topic(TOPIC, 1, 3).await;
    let bootstrap = cluster.bootstrap();
    let group = GroupClient::new(&bootstrap, "ordered");
    let mut m = member(&bootstrap, "ordered", None).await;
    let mut read = Read::default();
    let mut handles = Vec::new();
    for until in [10, 20, 30] {
        fill(&bootstrap, 1, 10).await;
        assert!(
            poll_until(&mut m, &mut read, |r, _| r.next.get(&0) == Some(&until)).await,
            "read up to {until}: {read:?}"
        );
        if until < 30 {
            handles.push(m.commit_async());
        }
    }
    // Neither asynchronous commit is awaited before the synchronous one.
    m.commit().await.expect("commit");
    assert_eq!(group.committed(TOPIC, 1).await, [30]);
    for h in handles {
        h.await.expect("an asynchronous commit succeeded");
    }
    assert_eq!(
        group.committed(TOPIC, 1).await,
        [30],
        "nothing older landed after"
    );
    m.close().await.expect("leaves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_auto_commit_when_a_member_polls_then_the_positions_it_returned_are_committed_within_the_interval(
) {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], COORDINATOR_FLAGS).await;
    cluster.create_topic(TOPIC, 2, 3).await;
    let bootstrap = cluster.bootstrap();
    fill(&bootstrap, 2, 20).await;
    let group = GroupClient::new(&bootstrap, "ticking");
    let mut m = member(&bootstrap, "ticking", Some(Duration::from_millis(200))).await;
    let mut read = Read::default();
    assert!(
        poll_until(&mut m, &mut read, |r, _| r.next.values().sum::<i64>() == 40).await,
        "read everything: {read:?}"
    );
    // Nothing else to read; the interval's commits go out from poll.
    let deadline = Instant::now() + PATIENCE;
    let mut committed = group.committed(TOPIC, 2).await;
    while committed != [20, 20] && Instant::now() < deadline {
        read.poll(&mut m).await;
        committed = group.committed(TOPIC, 2).await;
    }
    assert_eq!(committed, [20, 20]);

    // It cannot also feed a transaction.
    match m.group_metadata() {
        Err(ClientError::InvalidConfig(message)) => {
            assert!(message.contains("auto-commit"), "{message}")
        }
        other => panic!("group_metadata with auto-commit on: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_auto_commit_when_partitions_are_revoked_or_the_member_closes_then_the_next_owner_resumes_right_after_what_was_returned(
) {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], COORDINATOR_FLAGS).await;
    cluster.create_topic(TOPIC, 2, 3).await;
    let bootstrap = cluster.bootstrap();
    fill(&bootstrap, 2, 20).await;
    let group = GroupClient::new(&bootstrap, "handover");
    // An interval no test outlives: only the revocation and the close commit.
    let mut a = member(&bootstrap, "handover", Some(Duration::from_secs(3600))).await;
    let mut read_a = Read::default();
    assert!(
        poll_until(&mut a, &mut read_a, |r, _| r.next.values().sum::<i64>()
            == 40)
        .await,
        "a read everything: {read_a:?}"
    );
    assert_eq!(group.committed(TOPIC, 2).await, [-1, -1], "nothing yet");

    // b joins: a's revoked partition is committed before a releases it, so b starts
    // right after what a returned.
    let mut b = member(&bootstrap, "handover", None).await;
    let mut read_b = Read::default();
    let deadline = Instant::now() + PATIENCE;
    while (a.assignment().len(), b.assignment().len()) != (1, 1) && Instant::now() < deadline {
        read_a.poll(&mut a).await;
        read_b.poll(&mut b).await;
    }
    let (_, moved) = b.assignment().iter().next().cloned().expect("b owns one");
    assert_eq!(b.position(TOPIC, moved).await.expect("position"), 20);
    let mut committed = group.committed(TOPIC, 2).await;
    assert_eq!(committed[moved as usize], 20);

    // a reads 5 more of its partition and closes: b takes it over right after them.
    let (_, kept) = a.assignment().iter().next().cloned().expect("a owns one");
    fill(&bootstrap, 2, 5).await;
    assert!(
        poll_until(&mut a, &mut read_a, |r, _| r.next.get(&kept) == Some(&25)).await,
        "a read its 5: {read_a:?}"
    );
    a.close().await.expect("a closes");
    committed = group.committed(TOPIC, 2).await;
    assert_eq!(committed[kept as usize], 25);
    assert!(
        poll_until(&mut b, &mut read_b, |_, b| b.assignment().len() == 2).await,
        "b owns both partitions"
    );
    assert_eq!(b.position(TOPIC, kept).await.expect("position"), 25);
    fill(&bootstrap, 2, 5).await;
    assert!(
        poll_until(&mut b, &mut read_b, |r, _| r.first.len() == 2).await,
        "b reads both partitions: {read_b:?}"
    );
    // b resumes on each partition exactly where a stopped: nothing is read twice.
    assert_eq!(read_b.first, BTreeMap::from([(moved, 20), (kept, 25)]));
    b.close().await.expect("b closes");
}

/// `idem consume --group` commits what it printed as it goes (now through the SDK's
/// commit queue), with the assignor it is told to ask for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_cli_consuming_in_a_group_with_range_then_a_second_run_resumes_after_what_the_first_printed(
) {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], COORDINATOR_FLAGS).await;
    cluster.create_topic(TOPIC, 2, 3).await;
    let bootstrap = cluster.bootstrap();
    fill(&bootstrap, 2, 5).await;
    let run = |max: &str, assignor: &str| {
        let args = [
            "consume",
            TOPIC,
            "--group",
            "cli",
            "--assignor",
            assignor,
            "--from-beginning",
            "--max-messages",
            max,
            "--timeout-ms",
            "10000",
        ];
        idem(&bootstrap, &args)
    };
    let mut printed = Vec::new();
    for max in ["4", "6"] {
        let out = run(max, "range");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(
            lines.len(),
            max.parse::<usize>().expect("a count"),
            "{lines:?}"
        );
        printed.extend(lines);
    }
    printed.sort();
    let mut all: Vec<String> = (0..5)
        .flat_map(|n| (0..2).map(move |p| format!("p{p}-{n}")))
        .collect();
    all.sort();
    assert_eq!(printed, all, "each record printed once over the two runs");

    let refused = run("1", "sticky");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("UnsupportedAssignor"), "{stderr}");
}

/// `idem consume --group` over a transactional topic commits its positions, which lie
/// past the commit markers: once it has read everything the group's lag is 0 on every
/// partition (committing the last record's offset + 1 would leave it at 1 per marker
/// forever, which is what an operator's lag alert would see).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_cli_reading_a_transactional_topic_in_a_group_then_its_lag_ends_at_zero() {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], COORDINATOR_FLAGS).await;
    cluster.create_topic(TOPIC, 2, 3).await;
    let bootstrap = cluster.bootstrap();
    let producer = idem_tests::txn::producer(&bootstrap, "lag-txn").await;
    for round in 0..3 {
        producer.begin().expect("begin");
        for p in 0..2 {
            producer
                .send(ProducerRecord::new(TOPIC, format!("t{round}-p{p}")).partition(p))
                .await
                .expect("send")
                .await
                .expect("acked");
        }
        producer.commit().await.expect("commit");
    }
    idem_tests::txn::wait_until_stable(&bootstrap, TOPIC, &[0, 1]).await;
    let out = idem(
        &bootstrap,
        &[
            "consume",
            TOPIC,
            "--group",
            "lagless",
            "--from-beginning",
            "--timeout-ms",
            "3000",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 6);
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    let lag = admin.group_lag("lagless").await.expect("group lag");
    assert_eq!(lag.len(), 2, "{lag:?}");
    for row in &lag {
        // 3 records and at least 3 commit markers per partition.
        assert!(row.log_end >= 6, "{row:?}");
        assert_eq!(
            (row.committed, row.lag),
            (Some(row.log_end), Some(0)),
            "{row:?}"
        );
    }
}
