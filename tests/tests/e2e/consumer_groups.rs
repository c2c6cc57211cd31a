//! Consumer groups through the SDK (issue 26): members of one group split a topic's
//! partitions, read each record once between them as they come and go, and the
//! group's committed offsets end at the log end; `idem group describe` shows it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use idem_client::{
    Admin, GroupConfig, GroupConsumer, OffsetSpec, Producer, ProducerConfig, ProducerRecord,
};
use idem_tests::cli::idem;
use idem_tests::wait::PATIENCE;
use idem_tests::Cluster;
use tokio::time::Instant;

const TOPIC: &str = "events";
const PARTITIONS: i32 = 6;
const PER_PARTITION: usize = 100;
/// Short sessions so a test's rebalances take seconds (heartbeats every third of it).
const COORDINATOR_FLAGS: &[&str] = &["--group-session-timeout-ms", "6000"];

/// Writes records `n` in `from..to` to every partition, `p{p}-{n:04}`.
async fn fill(bootstrap: &str, from: usize, to: usize) {
    let producer = Producer::connect(ProducerConfig::new(bootstrap))
        .await
        .expect("producer connects");
    let mut deliveries = Vec::new();
    for n in from..to {
        for p in 0..PARTITIONS {
            let record = ProducerRecord::new(TOPIC, format!("p{p}-{n:04}")).partition(p);
            deliveries.push(producer.send_record(record).await.expect("send"));
        }
    }
    for d in deliveries {
        d.await.expect("acknowledged");
    }
}

async fn member(bootstrap: &str) -> GroupConsumer {
    let mut config = GroupConfig::new("readers");
    config.consumer.start = OffsetSpec::Earliest;
    config.consumer.max_wait = Duration::from_millis(50);
    GroupConsumer::subscribe(bootstrap, config, &[TOPIC])
        .await
        .expect("subscribes")
}

/// Polls `member` once; records what it read and commits it.
async fn read_once(
    member: &mut GroupConsumer,
    read: &mut BTreeMap<(i32, i64), Vec<String>>,
    name: &str,
) {
    let polled = member.poll(Duration::from_millis(100)).await.expect("poll");
    let mut next = BTreeMap::new();
    for r in &polled.records {
        let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
        read.entry((r.partition, r.offset))
            .or_default()
            .push(format!("{name}:{value}"));
        next.insert((r.topic.clone(), r.partition), r.offset + 1);
    }
    let offsets: Vec<((String, i32), i64)> = next.into_iter().collect();
    if !offsets.is_empty() {
        member.commit_offsets(&offsets).await.expect("commit");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_members_joining_and_leaving_when_they_read_a_topic_then_each_record_is_read_once_and_offsets_end_at_the_log_end(
) {
    let cluster = Cluster::start_with_coordinators(3, 2, &[], COORDINATOR_FLAGS).await;
    cluster.create_topic(TOPIC, PARTITIONS, 3).await;
    let bootstrap = cluster.bootstrap();
    let total = PARTITIONS as usize * PER_PARTITION;

    // Both members join the group of an empty topic and settle at 3 partitions each.
    let mut a = member(&bootstrap).await;
    let mut b = member(&bootstrap).await;
    let mut read: BTreeMap<(i32, i64), Vec<String>> = BTreeMap::new();
    let deadline = Instant::now() + 2 * PATIENCE;
    while (a.assignment().len(), b.assignment().len()) != (3, 3) && Instant::now() < deadline {
        read_once(&mut a, &mut read, "a").await;
        read_once(&mut b, &mut read, "b").await;
        assert!(
            a.assignment().is_disjoint(b.assignment()),
            "a and b own one partition"
        );
    }
    assert_eq!((a.assignment().len(), b.assignment().len()), (3, 3));
    // The first half: both read it, each its own partitions.
    fill(&bootstrap, 0, PER_PARTITION / 2).await;
    while read.len() < total / 2 && Instant::now() < deadline {
        read_once(&mut a, &mut read, "a").await;
        read_once(&mut b, &mut read, "b").await;
        assert!(
            a.assignment().is_disjoint(b.assignment()),
            "a and b own one partition"
        );
    }
    let mut by_member: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for ((p, _), readers) in &read {
        for r in readers {
            by_member
                .entry(r.split(':').next().unwrap_or_default().to_string())
                .or_default()
                .insert(*p);
        }
    }
    assert_eq!(by_member.len(), 2, "both members read: {by_member:?}");
    // b leaves: a gets its partitions (from b's committed offsets) and reads the rest.
    b.close().await.expect("b leaves");
    while a.assignment().len() < PARTITIONS as usize && Instant::now() < deadline {
        read_once(&mut a, &mut read, "a").await;
    }
    assert_eq!(
        a.assignment().len(),
        PARTITIONS as usize,
        "a owns all after b left"
    );
    fill(&bootstrap, PER_PARTITION / 2, PER_PARTITION).await;
    while read.len() < total && Instant::now() < deadline {
        read_once(&mut a, &mut read, "a").await;
    }
    assert_eq!(read.len(), total, "every record read");
    let twice: Vec<_> = read.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(twice.is_empty(), "read twice: {twice:?}");
    for p in 0..PARTITIONS {
        let values: Vec<String> = (0..PER_PARTITION as i64)
            .map(|o| {
                read[&(p, o)][0]
                    .split(':')
                    .nth(1)
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        let expected: Vec<String> = (0..PER_PARTITION).map(|n| format!("p{p}-{n:04}")).collect();
        assert_eq!(values, expected, "partition {p} in order");
    }
    assert_eq!(
        a.assignment().len(),
        PARTITIONS as usize,
        "a owns all after b left"
    );

    let admin = Admin::connect(&bootstrap).await.expect("admin");
    let lags = admin.group_lag("readers").await.expect("group lag");
    assert_eq!(lags.len(), PARTITIONS as usize);
    for l in &lags {
        assert_eq!(
            (l.committed, l.lag),
            (Some(PER_PARTITION as i64), Some(0)),
            "{l:?}"
        );
    }
    let described = admin.describe_group("readers").await.expect("describe");
    assert_eq!(described.members.len(), 1);

    // The operator's view: one row per partition, committed = log end, lag 0, owner a.
    let shown = idem(&bootstrap, &["group", "describe", "readers"]);
    assert!(shown.status.success(), "{shown:?}");
    let stdout = String::from_utf8_lossy(&shown.stdout);
    let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with(TOPIC)).collect();
    assert_eq!(rows.len(), PARTITIONS as usize, "{stdout}");
    for row in rows {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&cells[2..5], ["100", "100", "0"], "{row}");
    }
    // Offsets of a group with a member cannot be reset, nor the group deleted.
    for refused in [
        idem(
            &bootstrap,
            &[
                "group",
                "reset-offsets",
                "readers",
                "--topic",
                TOPIC,
                "--to-earliest",
            ],
        ),
        idem(&bootstrap, &["group", "delete", "readers"]),
    ] {
        assert!(!refused.status.success(), "{refused:?}");
    }
    a.close().await.expect("a leaves");
    let reset = idem(
        &bootstrap,
        &[
            "group",
            "reset-offsets",
            "readers",
            "--topic",
            TOPIC,
            "--to-offset",
            "40",
        ],
    );
    assert!(reset.status.success(), "{reset:?}");
    let lags = admin.group_lag("readers").await.expect("group lag");
    assert!(lags.iter().all(|l| l.committed == Some(40)), "{lags:?}");
    let deleted = idem(&bootstrap, &["group", "delete", "readers"]);
    assert!(deleted.status.success(), "{deleted:?}");
    let gone = admin.describe_group("readers").await;
    assert_eq!(
        gone.err().and_then(|e| e.code()),
        Some(idem_client::ErrorCode::GroupIdNotFound)
    );
}

/// Rebalance safety: 20 joins and leaves, overlapping (each change comes before the
/// group settled from the last). After every answer any member gets, the partitions
/// the live members own (each by its own account) are disjoint; at the end the
/// members left own every partition once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_twenty_joins_and_leaves_then_no_partition_is_ever_owned_by_two_live_members() {
    let cluster =
        Cluster::start_with_coordinators(3, 1, &[], &["--group-session-timeout-ms", "3000"]).await;
    cluster.create_topic(TOPIC, PARTITIONS, 3).await;
    let bootstrap = cluster.bootstrap();
    let mut live: Vec<(usize, GroupConsumer)> = Vec::new();
    let mut next_id = 0;
    let mut checks = 0;
    let mut owners = BTreeSet::new();
    let deadline = Instant::now() + 4 * PATIENCE;
    // Joins and leaves alternate in a fixed pattern: two joins, one leave, so the group
    // grows to 5 and shrinks again; the oldest member leaves first.
    for change in 0..20 {
        let join = live.len() < 2 || (change % 3 != 2 && live.len() < 5);
        if join {
            live.push((next_id, member(&bootstrap).await));
            next_id += 1;
        } else {
            let (_, leaving) = live.remove(0);
            leaving.close().await.expect("leaves");
        }
        // Two rounds of polls: the next change lands mid-rebalance.
        for _ in 0..2 {
            for i in 0..live.len() {
                live[i]
                    .1
                    .poll(Duration::from_millis(20))
                    .await
                    .expect("poll");
                assert_disjoint(&live, &mut owners);
                checks += 1;
            }
        }
    }
    // Settle: every partition owned once by the members left.
    loop {
        for i in 0..live.len() {
            live[i]
                .1
                .poll(Duration::from_millis(20))
                .await
                .expect("poll");
            assert_disjoint(&live, &mut owners);
            checks += 1;
        }
        let owned: usize = live.iter().map(|(_, m)| m.assignment().len()).sum();
        if owned == PARTITIONS as usize || Instant::now() > deadline {
            break;
        }
    }
    let owned: BTreeSet<(String, i32)> = live
        .iter()
        .flat_map(|(_, m)| m.assignment().clone())
        .collect();
    assert_eq!(
        owned.len(),
        PARTITIONS as usize,
        "every partition owned at the end"
    );
    assert!(checks > 100, "{checks} checks");
    // Partitions really moved: each had several owners over the run.
    for p in 0..PARTITIONS {
        let had = owners.iter().filter(|((_, q), _)| *q == p).count();
        assert!(
            had >= 2,
            "partition {p} had {had} owner(s) only: {owners:?}"
        );
    }
}

/// Asserts no partition has two live owners; notes who owned what.
fn assert_disjoint(live: &[(usize, GroupConsumer)], owners: &mut BTreeSet<((String, i32), usize)>) {
    let mut seen: BTreeMap<(String, i32), usize> = BTreeMap::new();
    for (id, m) in live {
        owners.extend(m.assignment().iter().map(|p| (p.clone(), *id)));
        for p in m.assignment() {
            if let Some(other) = seen.insert(p.clone(), *id) {
                panic!("{p:?} owned by member {other} and member {id}");
            }
        }
    }
}
