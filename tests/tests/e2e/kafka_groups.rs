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
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::Cluster;
use kafka_protocol::messages::consumer_group_describe_request::ConsumerGroupDescribeRequest;
use kafka_protocol::messages::consumer_group_describe_response::ConsumerGroupDescribeResponse;
use kafka_protocol::messages::consumer_group_heartbeat_request::ConsumerGroupHeartbeatRequest;
use kafka_protocol::messages::consumer_group_heartbeat_response::ConsumerGroupHeartbeatResponse;
use kafka_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_protocol::messages::delete_groups_response::DeleteGroupsResponse;
use kafka_protocol::messages::describe_groups_request::DescribeGroupsRequest;
use kafka_protocol::messages::describe_groups_response::DescribeGroupsResponse;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::metadata_response::MetadataResponse;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_commit_response::OffsetCommitResponse;
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequest, OffsetFetchRequestGroup};
use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponse;
use kafka_protocol::messages::{GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;
use serde_json::Value;

use crate::acls::{binding, kafka_acl_cluster, Secrets};
use crate::kafka::{exchange, read_response, request_frame};

const KAFKA_LISTEN: [&str; 2] = ["--kafka-listen", "127.0.0.1:0"];

/// A short session, so a killed member's partitions move within a test's patience.
const SHORT_SESSION: [&str; 2] = ["--group-session-timeout-ms", "6000"];

/// How long a group of consumers may take to read what a test produced.
pub(crate) const READ_PATIENCE: Duration = Duration::from_secs(90);

/// Produces `count` records (from `start`) to each of `partitions` partitions.
pub(crate) async fn produce(kafka: &str, topic: &str, partitions: i32, count: usize, start: usize) {
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
pub(crate) fn expected(partitions: i32, range: std::ops::Range<usize>) -> BTreeSet<String> {
    (0..partitions)
        .flat_map(|p| range.clone().map(move |i| format!("{p}-{i}")))
        .collect()
}

/// The values received by all `members`, with how often each was received.
pub(crate) fn tally<'a>(members: impl IntoIterator<Item = &'a Events>) -> BTreeMap<String, usize> {
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
pub(crate) async fn committed(kafka: &str, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
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
pub(crate) async fn read_all(members: &mut [&mut GroupConsumer], want: &BTreeSet<String>) {
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
pub(crate) fn duplicates<'a>(members: impl IntoIterator<Item = &'a Events>) -> BTreeSet<String> {
    tally(members)
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(v, _)| v)
        .collect()
}

/// The values `events` received whose synchronous commit did not return: the only
/// records a successor may read again.
pub(crate) fn uncommitted(events: &Events) -> BTreeSet<String> {
    let committed: BTreeSet<(i32, i64)> = events.committed().into_iter().collect();
    events
        .received()
        .into_iter()
        .filter(|(p, offset, _)| !committed.contains(&(*p, offset + 1)))
        .map(|(_, _, v)| v)
        .collect()
}

/// After a member of `group` (which owned `killed_partitions`) was SIGKILLed and every
/// record in `want` was read: `survivor` owns all 6 partitions of `orders`, nothing was
/// skipped, a record read twice is one the dead member received but whose commit never
/// returned (at most one per partition it owned), and the survivor's commits reach the
/// log ends (150 each).
pub(crate) async fn assert_handed_over_to_survivor(
    kafka: &str,
    group: &str,
    killed: &Events,
    killed_partitions: usize,
    mut survivor: GroupConsumer,
    want: &BTreeSet<String>,
) {
    let survivor_events = survivor
        .wait_for(READ_PATIENCE, "all 6 partitions", |e| e.owned().len() == 6)
        .await;
    assert_eq!(
        tally([killed, &survivor_events])
            .into_keys()
            .collect::<BTreeSet<_>>(),
        *want
    );
    let again = duplicates([killed, &survivor_events]);
    let window = uncommitted(killed);
    assert!(again.is_subset(&window), "{again:?} outside {window:?}");
    assert!(window.len() <= killed_partitions, "{window:?}");
    survivor.close().await;
    assert_eq!(committed(kafka, group, "orders", 6).await, vec![150; 6]);
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
    assert_handed_over_to_survivor(&kafka, "billing", &killed, a_partitions.len(), b, &want).await;
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

/// `body` sent as one request of `api_key` at `version` to `kafka`; the answer.
async fn ask<T: kafka_protocol::protocol::Decodable>(
    kafka: &str,
    api_key: i16,
    version: i16,
    body: &impl kafka_protocol::protocol::Encodable,
) -> T {
    let answer = exchange(kafka, &request_frame(api_key, version, body)).await;
    read_response(&answer, api_key, version)
}

/// A raw OffsetCommit v9 of `offset` for `orders` partition `partition`; its code.
async fn commit_v9(
    kafka: &str,
    group: &str,
    member: &str,
    epoch: i32,
    partition: i32,
    offset: i64,
) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_member_id(StrBytes::from_string(member.to_string()))
        .with_generation_id_or_member_epoch(epoch)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("orders")))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(-1)])]);
    let answer: OffsetCommitResponse = ask(kafka, 8, 9, &request).await;
    answer.topics[0].partitions[0].error_code
}

/// A raw OffsetFetch v8 of every offset of `group`: `(partition, offset)` of `orders`,
/// or the group's error code.
async fn fetch_v8(kafka: &str, group: &str) -> Result<Vec<(i32, i64)>, i16> {
    let request =
        OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_topics(None)]);
    let answer: OffsetFetchResponse = ask(kafka, 9, 8, &request).await;
    let group = &answer.groups[0];
    if group.error_code != 0 {
        return Err(group.error_code);
    }
    Ok(group
        .topics
        .iter()
        .filter(|t| t.name.0.as_str() == "orders")
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.partition_index, p.committed_offset))
        })
        .collect())
}

/// A raw ConsumerGroupHeartbeat v1.
async fn heartbeat(
    kafka: &str,
    member: &str,
    epoch: i32,
    subscribe: bool,
) -> ConsumerGroupHeartbeatResponse {
    let request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("raw")))
        .with_member_id(StrBytes::from_string(member.to_string()))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(
            subscribe.then(|| vec![TopicName(StrBytes::from_static_str("orders"))]),
        )
        .with_topic_partitions(subscribe.then(Vec::new));
    ask(kafka, 68, 1, &request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_raw_group_requests_when_they_name_unknown_groups_or_stale_epochs_then_kafka_error_codes_and_nothing_committed(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 2, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();

    // An unknown group: "Dead" before DescribeGroups v6, GROUP_ID_NOT_FOUND (69) from
    // v6 and in ConsumerGroupDescribe.
    let describe = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(StrBytes::from_static_str("nobody"))]);
    let v5: DescribeGroupsResponse = ask(&kafka, 15, 5, &describe).await;
    assert_eq!(
        (v5.groups[0].error_code, v5.groups[0].group_state.as_str()),
        (0, "Dead")
    );
    let v6: DescribeGroupsResponse = ask(&kafka, 15, 6, &describe).await;
    assert_eq!(v6.groups[0].error_code, 69);
    let cg: ConsumerGroupDescribeResponse = ask(
        &kafka,
        69,
        0,
        &ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(StrBytes::from_static_str("nobody"))]),
    )
    .await;
    assert_eq!(cg.groups[0].error_code, 69);

    // A member joins; its assignment names "orders" by the id Metadata gives it.
    let joined = heartbeat(&kafka, "m1", 0, true).await;
    assert_eq!(joined.error_code, 0, "{joined:?}");
    let epoch = joined.member_epoch;
    assert!(epoch > 0);
    let metadata: MetadataResponse = ask(
        &kafka,
        3,
        12,
        &MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("orders"))))])),
    )
    .await;
    let orders_id = metadata.topics[0].topic_id;
    let assigned = joined.assignment.expect("an assignment");
    assert_eq!(assigned.topic_partitions.len(), 1);
    assert_eq!(assigned.topic_partitions[0].topic_id, orders_id);
    assert_eq!(assigned.topic_partitions[0].partitions, vec![0, 1]);

    // Stale and unknown memberships are refused and commit nothing.
    assert_eq!(
        commit_v9(&kafka, "raw", "m1", epoch + 1, 0, 7).await,
        113,
        "STALE_MEMBER_EPOCH"
    );
    assert_eq!(
        commit_v9(&kafka, "raw", "ghost", epoch, 0, 7).await,
        25,
        "UNKNOWN_MEMBER_ID"
    );
    assert_eq!(fetch_v8(&kafka, "raw").await, Ok(vec![]));
    assert_eq!(
        heartbeat(&kafka, "m1", epoch + 5, false).await.error_code,
        110,
        "FENCED_MEMBER_EPOCH"
    );
    assert_eq!(
        heartbeat(&kafka, "ghost", 3, false).await.error_code,
        25,
        "UNKNOWN_MEMBER_ID"
    );

    // The member's own epoch commits.
    assert_eq!(commit_v9(&kafka, "raw", "m1", epoch, 1, 7).await, 0);
    assert_eq!(fetch_v8(&kafka, "raw").await, Ok(vec![(1, 7)]));

    // DeleteGroups: NON_EMPTY_GROUP (68) while m1 is a member, then, after it leaves
    // (epoch -1), the group and its offsets go; an unknown group is 69.
    let delete = |names: &[&'static str]| {
        DeleteGroupsRequest::default().with_groups_names(
            names
                .iter()
                .map(|n| GroupId(StrBytes::from_static_str(n)))
                .collect(),
        )
    };
    let busy: DeleteGroupsResponse = ask(&kafka, 42, 2, &delete(&["raw", "nobody"])).await;
    let codes: Vec<i16> = busy.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, [68, 69]);
    assert_eq!(
        heartbeat(&kafka, "m1", -1, false).await.error_code,
        0,
        "leave"
    );
    let deleted: DeleteGroupsResponse = ask(&kafka, 42, 2, &delete(&["raw"])).await;
    assert_eq!(deleted.results[0].error_code, 0);
    assert_eq!(fetch_v8(&kafka, "raw").await, Ok(vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_acls_when_user_anonymous_lacks_group_read_then_its_consumer_gets_group_authorization_failed_and_commits_nothing(
) {
    let secrets = Secrets::new();
    let (cluster, admin) = kafka_acl_cluster(&secrets).await;
    admin
        .create_topic("orders", 2, 1)
        .await
        .expect("topic created");
    // The topic is readable and the group describable, but not readable.
    admin
        .create_acls(&[
            binding("User:ANONYMOUS", "topic", "orders", "literal", "read"),
            binding("User:ANONYMOUS", "topic", "orders", "literal", "describe"),
            binding("User:ANONYMOUS", "group", "guarded", "literal", "describe"),
        ])
        .await
        .expect("ACLs stored");
    let kafka = cluster.broker(1).kafka_bootstrap();
    wait_until(
        PATIENCE,
        "anonymous clients may describe the group",
        || async {
            match fetch_v8(&kafka, "guarded").await {
                Ok(offsets) => Seen::Reached(offsets),
                Err(code) => Seen::Not(format!("OffsetFetch: {code}")),
            }
        },
    )
    .await;

    let mut consumer = GroupConsumer::start(&kafka, "guarded", "orders", &[]);
    let refused = consumer
        .wait_for(READ_PATIENCE, "GROUP_AUTHORIZATION_FAILED", |e| {
            e.lines.iter().any(|l| {
                l["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("Group authorization failed"))
            })
        })
        .await;
    assert!(refused.owned().is_empty(), "{:?}", refused.lines);
    // A commit outside membership is refused too (code 30), and nothing is stored.
    assert_eq!(commit_v9(&kafka, "guarded", "", -1, 0, 5).await, 30);
    assert_eq!(fetch_v8(&kafka, "guarded").await, Ok(vec![]));
    assert_eq!(
        committed(&kafka, "guarded", "orders", 2).await,
        vec![-1001, -1001],
        "librdkafka's 'no offset'"
    );
}
