//! Kafka consumer groups work unchanged against idem (issue 30): confluent-kafka
//! consumers with `group.protocol=consumer` (KIP-848) join a group through a broker's
//! Kafka listener, which proxies ConsumerGroupHeartbeat, OffsetCommit and OffsetFetch to
//! idem's group coordinator. Together the members read every record once, a partition
//! belongs to one member at a time, commits land, and a member that leaves or dies
//! hands its partitions on at the committed offsets.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use idem_tests::kafka_clients::python;
use idem_tests::kafka_groups::{Events, GroupConsumer};
use idem_tests::Cluster;
use serde_json::Value;

const KAFKA_LISTEN: [&str; 2] = ["--kafka-listen", "127.0.0.1:0"];

/// A short session, so a killed member's partitions move within a test's patience.
const SHORT_SESSION: [&str; 2] = ["--group-session-timeout-ms", "6000"];

/// How long a group of consumers may take to read what a test produced.
const READ_PATIENCE: Duration = Duration::from_secs(90);

/// Produces `count` records (from `start`) to each of `partitions` partitions.
async fn produce(kafka: &str, topic: &str, partitions: i32, count: usize, start: usize) {
    let produced = python(
        "group_produce.py",
        &[
            kafka,
            topic,
            &partitions.to_string(),
            &count.to_string(),
            &start.to_string(),
        ],
    )
    .await;
    assert_eq!(
        produced["delivered"],
        Value::from(count * partitions as usize),
        "{produced}"
    );
}

/// Every value `partition-i` for i in `range`, of every partition.
fn expected(partitions: i32, range: std::ops::Range<usize>) -> BTreeSet<String> {
    (0..partitions)
        .flat_map(|p| range.clone().map(move |i| format!("{p}-{i}")))
        .collect()
}

/// The values received by all `members`, with how often each was received.
fn tally<'a>(members: impl IntoIterator<Item = &'a Events>) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for events in members {
        for (_, _, value) in events.received() {
            *seen.entry(value).or_insert(0) += 1;
        }
    }
    seen
}

/// The committed offsets of `group` for `partitions` partitions of `topic`, as
/// confluent-kafka's committed() (OffsetFetch) reads them.
async fn committed(kafka: &str, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    let found = python(
        "group_committed.py",
        &[kafka, group, topic, &partitions.to_string()],
    )
    .await;
    found["offsets"]
        .as_array()
        .unwrap_or_else(|| panic!("committed offsets: {found}"))
        .iter()
        .map(|o| o.as_i64().expect("an offset"))
        .collect()
}

/// Waits until `members` together received every one of `want`.
async fn read_all(members: &mut [&mut GroupConsumer], want: &BTreeSet<String>) {
    let deadline = tokio::time::Instant::now() + READ_PATIENCE;
    loop {
        let seen = tally(
            members
                .iter()
                .map(|m| m.events())
                .collect::<Vec<_>>()
                .iter(),
        );
        if want.iter().all(|v| seen.contains_key(v)) {
            return;
        }
        let now = tokio::time::Instant::now();
        assert!(
            now < deadline,
            "{} of {} records read: missing {:?}",
            want.iter().filter(|v| seen.contains_key(*v)).count(),
            want.len(),
            want.iter()
                .filter(|v| !seen.contains_key(*v))
                .take(10)
                .collect::<Vec<_>>()
        );
        // Wakes on any member's next event.
        let count: usize = members.iter().map(|m| m.events().lines.len()).sum();
        let first = &mut members[0];
        let _ = tokio::time::timeout(
            Duration::from_millis(500),
            first.wait_for(READ_PATIENCE, "an event", move |e| {
                e.lines.len() > count || e.ended
            }),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_kip848_consumers_in_a_group_when_they_read_six_partitions_then_each_record_is_read_once_and_commits_land(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 6, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    produce(&kafka, "orders", 6, 50, 0).await;

    let mut a = GroupConsumer::start(&kafka, "billing", "orders", &[]);
    let mut b = GroupConsumer::start(&kafka, "billing", "orders", &[]);
    let want = expected(6, 0..50);
    read_all(&mut [&mut a, &mut b], &want).await;
    // Both members own partitions once the group settles: 3 each (uniform assignor).
    let owns_three = |e: &Events| e.owned().len() == 3;
    let a_events = a.wait_for(READ_PATIENCE, "3 partitions", owns_three).await;
    let b_events = b.wait_for(READ_PATIENCE, "3 partitions", owns_three).await;
    assert!(
        a_events.owned().is_disjoint(&b_events.owned()),
        "{:?} {:?}",
        a_events.owned(),
        b_events.owned()
    );

    let seen = tally([&a_events, &b_events]);
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "read more than once: {twice:?}");
    assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), want);
    a.close().await;
    b.close().await;
    assert_eq!(committed(&kafka, "billing", "orders", 6).await, vec![50; 6]);
}

/// Values received more than once by `members`.
fn duplicates<'a>(members: impl IntoIterator<Item = &'a Events>) -> BTreeSet<String> {
    tally(members)
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(v, _)| v)
        .collect()
}

/// The values `events` received whose synchronous commit did not return: the only
/// records a successor may read again.
fn uncommitted(events: &Events) -> BTreeSet<String> {
    let committed: BTreeSet<(i32, i64)> = events.committed().into_iter().collect();
    events
        .received()
        .into_iter()
        .filter(|(p, offset, _)| !committed.contains(&(*p, offset + 1)))
        .map(|(_, _, v)| v)
        .collect()
}

/// Two members settled on 3 partitions each of the 6-partition topic "orders", then
/// `count` records per partition produced, each member having read some: records are
/// flowing when this returns, with the producer still at work on the rest.
async fn settled_pair(
    kafka: &str,
    group: &str,
    count: usize,
) -> (GroupConsumer, GroupConsumer, tokio::task::JoinHandle<()>) {
    let mut a = GroupConsumer::start(kafka, group, "orders", &[]);
    let mut b = GroupConsumer::start(kafka, group, "orders", &[]);
    let three = |e: &Events| e.owned().len() == 3;
    a.wait_for(READ_PATIENCE, "3 partitions", three).await;
    b.wait_for(READ_PATIENCE, "3 partitions", three).await;
    let producer = {
        let kafka = kafka.to_string();
        tokio::spawn(async move { produce(&kafka, "orders", 6, count, 0).await })
    };
    let some = |e: &Events| e.received().len() >= 5;
    a.wait_for(READ_PATIENCE, "5 records", some).await;
    b.wait_for(READ_PATIENCE, "5 records", some).await;
    (a, b, producer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_member_that_leaves_while_records_flow_then_the_other_resumes_its_partitions_at_the_committed_offsets_with_no_duplicate(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 6, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    let (mut a, mut b, more) = settled_pair(&kafka, "billing", 150).await;
    let left = a.close().await;
    more.await.expect("producer");
    let want = expected(6, 0..150);
    // What a read before it went counts: b reads on from there.
    read_all(&mut [&mut b, &mut a], &want).await;
    let b_events = b
        .wait_for(READ_PATIENCE, "all 6 partitions", |e| e.owned().len() == 6)
        .await;

    // a committed synchronously after each record and left cleanly: b starts each
    // partition it takes over exactly where a stopped.
    assert!(uncommitted(&left).is_empty(), "{:?}", uncommitted(&left));
    assert_eq!(duplicates([&left, &b_events]), BTreeSet::new());
    assert_eq!(
        tally([&left, &b_events])
            .into_keys()
            .collect::<BTreeSet<_>>(),
        want
    );
    assert!(!left.received().is_empty() && !b_events.received().is_empty());
    b.close().await;
    assert_eq!(
        committed(&kafka, "billing", "orders", 6).await,
        vec![150; 6]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_member_sigkilled_while_records_flow_when_its_session_expires_then_the_other_reads_on_with_duplicates_only_from_its_uncommitted_records(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &SHORT_SESSION).await;
    cluster.create_topic("orders", 6, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    let (mut a, mut b, more) = settled_pair(&kafka, "billing", 150).await;
    let a_partitions = a.events().owned();
    let killed = a.kill().await;
    more.await.expect("producer");
    let want = expected(6, 0..150);
    // What a read before it went counts: b reads on from there.
    read_all(&mut [&mut b, &mut a], &want).await;
    let b_events = b
        .wait_for(READ_PATIENCE, "all 6 partitions", |e| e.owned().len() == 6)
        .await;

    // Nothing skipped; a record read twice is one a received whose commit never
    // returned: at most one per partition it owned (it commits after each record).
    assert_eq!(
        tally([&killed, &b_events])
            .into_keys()
            .collect::<BTreeSet<_>>(),
        want
    );
    let again = duplicates([&killed, &b_events]);
    let window = uncommitted(&killed);
    assert!(again.is_subset(&window), "{again:?} outside {window:?}");
    assert!(window.len() <= a_partitions.len(), "{window:?}");
    b.close().await;
    assert_eq!(
        committed(&kafka, "billing", "orders", 6).await,
        vec![150; 6]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_consumer_restarted_in_its_group_then_it_resumes_at_the_committed_offsets() {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 6, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    produce(&kafka, "orders", 6, 20, 0).await;
    let mut first = GroupConsumer::start(&kafka, "billing", "orders", &[]);
    read_all(&mut [&mut first], &expected(6, 0..20)).await;
    let first = first.close().await;
    assert_eq!(committed(&kafka, "billing", "orders", 6).await, vec![20; 6]);

    produce(&kafka, "orders", 6, 10, 20).await;
    let mut second = GroupConsumer::start(&kafka, "billing", "orders", &[]);
    let want = expected(6, 20..30);
    read_all(&mut [&mut second], &want).await;
    let second = second.close().await;
    // Only the new records: the restarted member starts at the group's offsets.
    assert_eq!(
        second
            .received()
            .into_iter()
            .map(|(_, _, v)| v)
            .collect::<BTreeSet<_>>(),
        want
    );
    assert_eq!(second.received().len(), 60);
    assert_eq!(first.received().len(), 120);
    assert_eq!(committed(&kafka, "billing", "orders", 6).await, vec![30; 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_60_partition_topic_when_a_group_of_two_reads_it_then_each_record_is_read_once_and_each_member_owns_30(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("wide", 60, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    let produced = python("group_produce.py", &[&kafka, "wide", "60", "10"]).await;
    assert_eq!(produced["delivered"], Value::from(600), "{produced}");

    let mut a = GroupConsumer::start(&kafka, "wide-readers", "wide", &[]);
    let mut b = GroupConsumer::start(&kafka, "wide-readers", "wide", &[]);
    let want = expected(60, 0..10);
    read_all(&mut [&mut a, &mut b], &want).await;
    let owns_30 = |e: &Events| e.owned().len() == 30;
    let a_events = a.wait_for(READ_PATIENCE, "30 partitions", owns_30).await;
    let b_events = b.wait_for(READ_PATIENCE, "30 partitions", owns_30).await;
    assert!(a_events.owned().is_disjoint(&b_events.owned()));
    assert_eq!(duplicates([&a_events, &b_events]), BTreeSet::new());
    a.close().await;
    b.close().await;
    let offsets = python(
        "group_committed.py",
        &[&kafka, "wide-readers", "wide", "60"],
    )
    .await;
    assert_eq!(offsets["offsets"], Value::from(vec![10; 60]), "{offsets}");
}
