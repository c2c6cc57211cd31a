//! Kafka consumers with the classic group protocol (librdkafka's default) work against
//! idem (issue 30): they join the same KIP-848 groups as classic members, read every
//! record once, never own one partition two at a time, and hand a dead member's
//! partitions on at the committed offsets; the classic APIs refuse stale generations,
//! unknown members, id-less joins and unauthorized clients with Kafka's codes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use idem_tests::kafka_clients::kcat;
use idem_tests::kafka_groups::{Events, GroupConsumer};
use idem_tests::txn;
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::Cluster;
use kafka_protocol::messages::heartbeat_request::HeartbeatRequest;
use kafka_protocol::messages::heartbeat_response::HeartbeatResponse;
use kafka_protocol::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use kafka_protocol::messages::join_group_response::JoinGroupResponse;
use kafka_protocol::messages::leave_group_request::{LeaveGroupRequest, MemberIdentity};
use kafka_protocol::messages::leave_group_response::LeaveGroupResponse;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_commit_response::OffsetCommitResponse;
use kafka_protocol::messages::sync_group_request::SyncGroupRequest;
use kafka_protocol::messages::sync_group_response::SyncGroupResponse;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, GroupId, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::acls::{binding, kafka_acl_cluster, Secrets};
use crate::kafka::{exchange, read_response, request_frame};
use crate::kafka_groups::{
    assert_handed_over_to_survivor, committed, duplicates, expected, produce, read_all, tally,
    READ_PATIENCE,
};

const KAFKA_LISTEN: [&str; 2] = ["--kafka-listen", "127.0.0.1:0"];

/// librdkafka's default protocol (classic), a 6 s session (the shortest a classic
/// member may ask for) and quick heartbeats, so rebalances and a dead member's
/// expiry take seconds.
const CLASSIC: [&str; 3] = [
    "group.protocol=",
    "session.timeout.ms=6000",
    "heartbeat.interval.ms=500",
];

fn classic(extra: &[&'static str]) -> Vec<&'static str> {
    CLASSIC.iter().chain(extra).copied().collect()
}

/// Per partition, the `[from, to)` times (the scripts' monotonic clock) each member
/// owned it, from its assignment callbacks; still owned: to the end.
fn ownership(events: &Events) -> BTreeMap<i32, Vec<(f64, f64)>> {
    let mut open: BTreeMap<i32, f64> = BTreeMap::new();
    let mut spans: BTreeMap<i32, Vec<(f64, f64)>> = BTreeMap::new();
    let partitions = |v: &serde_json::Value| -> Vec<i32> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.as_i64())
                    .map(|p| p as i32)
                    .collect()
            })
            .unwrap_or_default()
    };
    for line in &events.lines {
        let t = line["t"].as_f64().unwrap_or(f64::MAX);
        if let Some(added) = line.get("assigned") {
            for p in partitions(added) {
                open.entry(p).or_insert(t);
            }
        }
        if let Some(taken) = line.get("revoked") {
            for p in partitions(taken) {
                if let Some(from) = open.remove(&p) {
                    spans.entry(p).or_default().push((from, t));
                }
            }
        }
    }
    for (p, from) in open {
        spans.entry(p).or_default().push((from, f64::MAX));
    }
    spans
}

/// Panics if two members owned one partition at the same time.
fn assert_one_owner_at_a_time(members: &[&Events]) {
    let spans: Vec<BTreeMap<i32, Vec<(f64, f64)>>> = members.iter().map(|e| ownership(e)).collect();
    for (i, a) in spans.iter().enumerate() {
        for b in spans.iter().skip(i + 1) {
            for (p, a_spans) in a {
                for (a_from, a_to) in a_spans {
                    for (b_from, b_to) in b.get(p).into_iter().flatten() {
                        let end = |t: &f64| match *t {
                            f64::MAX => "still owned".to_string(),
                            t => format!("{t:.3}"),
                        };
                        assert!(
                            a_to <= b_from || b_to <= a_from,
                            "partition {p} owned by two members: {a_from:.3} to {} and {b_from:.3} to {}",
                            end(a_to),
                            end(b_to)
                        );
                    }
                }
            }
        }
    }
}

/// Two classic members (with `a_settings` and `b_settings`) read a 6-partition topic
/// while it is produced: each record once, one owner per partition at a time, and the
/// commits land.
async fn two_members_read_once(a_settings: &[&str], b_settings: &[&str]) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 6, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    let mut a = GroupConsumer::start(&kafka, "billing", "orders", a_settings);
    let mut b = GroupConsumer::start(&kafka, "billing", "orders", b_settings);
    let producer = {
        let kafka = kafka.clone();
        tokio::spawn(async move { produce(&kafka, "orders", 6, 50, 0).await })
    };
    let want = expected(6, 0..50);
    read_all(&mut [&mut a, &mut b], &want).await;
    producer.await.expect("producer");
    // Both own partitions once the group settles: 3 each (idem's uniform assignor).
    let owns_three = |e: &Events| e.owned().len() == 3;
    let a_events = a.wait_for(READ_PATIENCE, "3 partitions", owns_three).await;
    let b_events = b.wait_for(READ_PATIENCE, "3 partitions", owns_three).await;
    assert!(a_events.owned().is_disjoint(&b_events.owned()));
    assert_one_owner_at_a_time(&[&a_events, &b_events]);
    assert_eq!(duplicates([&a_events, &b_events]), BTreeSet::new());
    assert_eq!(
        tally([&a_events, &b_events])
            .into_keys()
            .collect::<BTreeSet<_>>(),
        want
    );
    a.close().await;
    b.close().await;
    assert_eq!(committed(&kafka, "billing", "orders", 6).await, vec![50; 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_classic_members_one_asking_for_range_when_records_flow_then_each_record_is_read_once_by_one_owner_at_a_time(
) {
    two_members_read_once(
        &classic(&["partition.assignment.strategy=range"]),
        &classic(&[]),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_cooperative_sticky_members_when_records_flow_then_each_record_is_read_once_by_one_owner_at_a_time(
) {
    // Revocations take 1 s, so a partition handed on before its owner's rejoin
    // reported it gone would show two owners at once.
    let cooperative = [
        "partition.assignment.strategy=cooperative-sticky",
        "revoke_delay_ms=1000",
    ];
    two_members_read_once(&classic(&cooperative), &classic(&cooperative)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_kip848_member_and_a_classic_member_in_one_group_when_records_flow_then_each_record_is_read_once_by_one_owner_at_a_time(
) {
    // Kafka 4.0's online migration: both protocols in one group.
    two_members_read_once(
        &["group.protocol=consumer"],
        &classic(&["revoke_delay_ms=1000"]),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_60_partition_topic_when_two_classic_members_and_a_kip848_member_read_it_then_each_record_is_read_once_and_each_owns_20(
) {
    // The scale users run (a 60-partition topic once could not be read at all): two
    // classic members (eager range, cooperative-sticky with 1 s revocations) and a
    // KIP-848 member in one group; the first owns all 60 before the others join while
    // records are produced, so partitions move to two newcomers at once.
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("wide", 60, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    let mut a = GroupConsumer::start(
        &kafka,
        "wide-readers",
        "wide",
        &classic(&["partition.assignment.strategy=range"]),
    );
    let all = |e: &Events| e.owned().len() == 60;
    a.wait_for(READ_PATIENCE, "60 partitions", all).await;
    let producer = {
        let kafka = kafka.clone();
        tokio::spawn(async move { produce(&kafka, "wide", 60, 10, 0).await })
    };
    let mut b = GroupConsumer::start(
        &kafka,
        "wide-readers",
        "wide",
        &classic(&[
            "partition.assignment.strategy=cooperative-sticky",
            "revoke_delay_ms=1000",
        ]),
    );
    let mut c = GroupConsumer::start(&kafka, "wide-readers", "wide", &["group.protocol=consumer"]);
    producer.await.expect("producer");
    let want = expected(60, 0..10);
    read_all(&mut [&mut a, &mut b, &mut c], &want).await;
    let owns_20 = |e: &Events| e.owned().len() == 20;
    let a_events = a.wait_for(READ_PATIENCE, "20 partitions", owns_20).await;
    let b_events = b.wait_for(READ_PATIENCE, "20 partitions", owns_20).await;
    let c_events = c.wait_for(READ_PATIENCE, "20 partitions", owns_20).await;
    let owned: Vec<BTreeSet<i32>> = [&a_events, &b_events, &c_events]
        .iter()
        .map(|e| e.owned())
        .collect();
    assert_eq!(
        owned.iter().flatten().copied().collect::<BTreeSet<i32>>(),
        (0..60).collect(),
        "every partition owned"
    );
    assert_one_owner_at_a_time(&[&a_events, &b_events, &c_events]);
    assert_eq!(
        duplicates([&a_events, &b_events, &c_events]),
        BTreeSet::new()
    );
    assert_eq!(
        tally([&a_events, &b_events, &c_events])
            .into_keys()
            .collect::<BTreeSet<_>>(),
        want
    );
    a.close().await;
    b.close().await;
    c.close().await;
    assert_eq!(
        committed(&kafka, "wide-readers", "wide", 60).await,
        vec![10; 60]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_classic_member_sigkilled_while_records_flow_when_its_session_expires_then_the_survivor_reads_on_with_duplicates_only_from_its_uncommitted_records(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 6, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    let mut a = GroupConsumer::start(&kafka, "billing", "orders", &classic(&[]));
    let mut b = GroupConsumer::start(&kafka, "billing", "orders", &classic(&[]));
    let three = |e: &Events| e.owned().len() == 3;
    a.wait_for(READ_PATIENCE, "3 partitions", three).await;
    b.wait_for(READ_PATIENCE, "3 partitions", three).await;
    let more = {
        let kafka = kafka.clone();
        tokio::spawn(async move { produce(&kafka, "orders", 6, 150, 0).await })
    };
    let some = |e: &Events| e.received().len() >= 5;
    a.wait_for(READ_PATIENCE, "5 records", some).await;
    b.wait_for(READ_PATIENCE, "5 records", some).await;
    let a_partitions = a.events().owned();
    let killed = a.kill().await;
    more.await.expect("producer");
    let want = expected(6, 0..150);
    read_all(&mut [&mut b, &mut a], &want).await;
    assert_handed_over_to_survivor(&kafka, "billing", &killed, a_partitions.len(), b, &want).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_kcat_as_a_balanced_consumer_then_it_reads_what_was_produced_through_the_classic_protocol(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 3, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    produce(&kafka, "orders", 3, 20, 0).await;
    let read = tokio::time::timeout(
        Duration::from_secs(60),
        kcat(
            &[
                "-b",
                &kafka,
                "-G",
                "kcat-readers",
                "orders",
                "-e",
                "-q",
                "-X",
                "auto.offset.reset=earliest",
                "-X",
                "session.timeout.ms=6000",
                "-f",
                "%s\\n",
            ],
            "",
        ),
    )
    .await
    .expect("kcat -G read to the end within 60 s");
    let values: Vec<String> = read.lines().map(str::to_string).collect();
    assert_eq!(values.len(), 60, "{values:?}");
    assert_eq!(
        values.into_iter().collect::<BTreeSet<_>>(),
        expected(3, 0..20)
    );
}

/// `body` sent as one request of `api_key` at `version` to `kafka`; the answer.
async fn ask<T: Decodable>(kafka: &str, api_key: i16, version: i16, body: &impl Encodable) -> T {
    let answer = exchange(kafka, &request_frame(api_key, version, body)).await;
    read_response(&answer, api_key, version)
}

/// A ConsumerProtocolSubscription v1 to `orders` as JoinGroup metadata.
fn subscription() -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(1);
    ConsumerProtocolSubscription::default()
        .with_topics(vec![StrBytes::from_static_str("orders")])
        .encode(&mut out, 1)
        .expect("encodes");
    out.freeze()
}

/// A raw JoinGroup v5 of `member` (empty: none yet) to `group`.
async fn join(kafka: &str, group: &str, member: &str) -> JoinGroupResponse {
    join_for(kafka, group, member, 10_000).await
}

/// A raw JoinGroup v5 with a session of `session_timeout_ms`.
async fn join_for(
    kafka: &str,
    group: &str,
    member: &str,
    session_timeout_ms: i32,
) -> JoinGroupResponse {
    let request = JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_session_timeout_ms(session_timeout_ms)
        .with_rebalance_timeout_ms(30_000)
        .with_member_id(StrBytes::from_string(member.to_string()))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(StrBytes::from_static_str("range"))
            .with_metadata(subscription())]);
    ask(kafka, 11, 5, &request).await
}

async fn heartbeat(kafka: &str, group: &str, member: &str, generation: i32) -> i16 {
    let request = HeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_member_id(StrBytes::from_string(member.to_string()))
        .with_generation_id(generation);
    let answer: HeartbeatResponse = ask(kafka, 12, 3, &request).await;
    answer.error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_raw_classic_frames_then_ids_generations_and_members_are_checked_with_kafkas_codes() {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 6, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();

    // KIP-394: no member id at v4+ is MEMBER_ID_REQUIRED, with an id to join with.
    let first = join(&kafka, "raw", "").await;
    assert_eq!(first.error_code, 79, "{first:?}");
    let member = first.member_id.to_string();
    assert!(!member.is_empty());
    let joined = join(&kafka, "raw", &member).await;
    assert_eq!(joined.error_code, 0, "{joined:?}");
    let generation = joined.generation_id;
    assert!(generation >= 1);
    // A session outside 6 s..30 min, or a protocol type other than "consumer".
    assert_eq!(join_for(&kafka, "raw", "other", 1_000).await.error_code, 26);
    let connect = JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("raw")))
        .with_session_timeout_ms(10_000)
        .with_member_id(StrBytes::from_static_str("other"))
        .with_protocol_type(StrBytes::from_static_str("connect"));
    let refused: JoinGroupResponse = ask(&kafka, 11, 5, &connect).await;
    assert_eq!(refused.error_code, 23);
    // Nobody is the leader: the coordinator assigns, no client-side assignor runs.
    assert_ne!(joined.leader.as_str(), member);
    assert!(joined.members.is_empty());
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));

    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("raw")))
        .with_member_id(StrBytes::from_string(member.clone()))
        .with_generation_id(generation)
        .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
        .with_protocol_name(Some(StrBytes::from_static_str("range")));
    let synced: SyncGroupResponse = ask(&kafka, 14, 5, &sync).await;
    assert_eq!(synced.error_code, 0);
    let mut bytes = synced.assignment.clone();
    let version = bytes.get_i16();
    let assignment = ConsumerProtocolAssignment::decode(&mut bytes, version).expect("decodes");
    let mut partitions: Vec<i32> = assignment
        .assigned_partitions
        .iter()
        .flat_map(|t| t.partitions.clone())
        .collect();
    partitions.sort_unstable();
    assert_eq!(partitions, vec![0, 1, 2, 3, 4, 5]);

    assert_eq!(heartbeat(&kafka, "raw", &member, generation).await, 0);
    assert_eq!(
        heartbeat(&kafka, "raw", &member, generation + 5).await,
        22,
        "ILLEGAL_GENERATION"
    );
    let stale_sync: SyncGroupResponse = ask(
        &kafka,
        14,
        5,
        &sync.clone().with_generation_id(generation - 1),
    )
    .await;
    assert_eq!(stale_sync.error_code, 22);
    assert_eq!(
        heartbeat(&kafka, "raw", "nobody", generation).await,
        25,
        "UNKNOWN_MEMBER_ID"
    );

    // A classic commit at a stale generation is fenced like a KIP-848 one.
    let commit = |generation: i32| {
        OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("raw")))
            .with_member_id(StrBytes::from_string(member.clone()))
            .with_generation_id_or_member_epoch(generation)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("orders")))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(0)
                    .with_committed_leader_epoch(-1)])])
    };
    let stale: OffsetCommitResponse = ask(&kafka, 8, 8, &commit(generation - 1)).await;
    assert_eq!(stale.topics[0].partitions[0].error_code, 22);
    let current: OffsetCommitResponse = ask(&kafka, 8, 8, &commit(generation)).await;
    assert_eq!(current.topics[0].partitions[0].error_code, 0);

    // LeaveGroup v3+: a batch of members, one code each.
    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("raw")))
        .with_members(vec![
            MemberIdentity::default().with_member_id(StrBytes::from_string(member.clone())),
            MemberIdentity::default().with_member_id(StrBytes::from_static_str("nobody")),
        ]);
    let left: LeaveGroupResponse = ask(&kafka, 13, 3, &leave).await;
    assert_eq!(left.error_code, 0);
    let codes: Vec<i16> = left.members.iter().map(|m| m.error_code).collect();
    assert_eq!(codes, vec![0, 25]);
    assert_eq!(heartbeat(&kafka, "raw", &member, generation).await, 25);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_acls_when_user_anonymous_lacks_group_read_then_classic_requests_get_group_authorization_failed(
) {
    let secrets = Secrets::new();
    let (cluster, admin) = kafka_acl_cluster(&secrets).await;
    admin
        .create_topic("orders", 2, 1)
        .await
        .expect("topic created");
    admin
        .create_acls(&[
            binding("User:ANONYMOUS", "topic", "orders", "literal", "read"),
            binding("User:ANONYMOUS", "group", "guarded", "literal", "describe"),
        ])
        .await
        .expect("ACLs stored");
    let kafka = cluster.broker(1).kafka_bootstrap();
    let refused = join(&kafka, "guarded", "m-1").await;
    assert_eq!(refused.error_code, 30, "{refused:?}");
    assert_eq!(heartbeat(&kafka, "guarded", "m-1", 1).await, 30);
    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("guarded")))
        .with_members(vec![
            MemberIdentity::default().with_member_id(StrBytes::from_static_str("m-1"))
        ]);
    let left: LeaveGroupResponse = ask(&kafka, 13, 3, &leave).await;
    assert_eq!(left.error_code, 30);
}

/// A raw SyncGroup v5 of `member` at `generation`: its code and partitions.
async fn sync_partitions(
    kafka: &str,
    group: &str,
    member: &str,
    generation: i32,
) -> (i16, Vec<i32>) {
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_member_id(StrBytes::from_string(member.to_string()))
        .with_generation_id(generation)
        .with_protocol_type(Some(StrBytes::from_static_str("consumer")))
        .with_protocol_name(Some(StrBytes::from_static_str("range")));
    let synced: SyncGroupResponse = ask(kafka, 14, 5, &sync).await;
    if synced.error_code != 0 {
        return (synced.error_code, Vec::new());
    }
    let mut bytes = synced.assignment.clone();
    let version = bytes.get_i16();
    let assignment = ConsumerProtocolAssignment::decode(&mut bytes, version).expect("decodes");
    let mut partitions: Vec<i32> = assignment
        .assigned_partitions
        .iter()
        .flat_map(|t| t.partitions.clone())
        .collect();
    partitions.sort_unstable();
    (0, partitions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_classic_member_when_its_coordinator_is_killed_then_the_successor_keeps_its_generation_assignment_and_session_timeout(
) {
    let mut cluster = Cluster::start_with_coordinators(1, 2, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 6, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    let member = join(&kafka, "moving", "").await.member_id.to_string();
    let joined = join_for(&kafka, "moving", &member, 6_000).await;
    assert_eq!(joined.error_code, 0, "{joined:?}");
    let generation = joined.generation_id;
    let (code, before) = sync_partitions(&kafka, "moving", &member, generation).await;
    assert_eq!((code, before.len()), (0, 6));

    // Groups hash onto the transaction log's slices as transactional ids do.
    let owner = txn::find_coordinator(&cluster.bootstrap(), "moving").await;
    cluster.kill_coordinator(owner.coordinator_id);
    // The member heartbeats through the takeover (retriable codes meanwhile).
    wait_until(PATIENCE, "the successor knows the member", || {
        let (kafka, member) = (kafka.clone(), member.clone());
        async move {
            match heartbeat(&kafka, "moving", &member, generation).await {
                0 => Seen::Reached(()),
                code => Seen::Not(format!("Heartbeat: {code}")),
            }
        }
    })
    .await;
    let successor = txn::find_coordinator(&cluster.bootstrap(), "moving").await;
    assert_ne!(successor.coordinator_id, owner.coordinator_id);
    assert_eq!(
        sync_partitions(&kafka, "moving", &member, generation).await,
        (0, before)
    );
    assert_eq!(
        heartbeat(&kafka, "moving", &member, generation - 1).await,
        22
    );
    // Its own 6 s session (not the coordinator's 45 s) came through the takeover.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(heartbeat(&kafka, "moving", &member, generation).await, 25);
}

/// The assignment events (`assigned` or `revoked`) a member printed.
fn rebalances(events: &Events) -> Vec<serde_json::Value> {
    events
        .lines
        .iter()
        .filter(|l| l.get("assigned").is_some() || l.get("revoked").is_some())
        .cloned()
        .collect()
}

/// KIP-345 through librdkafka's classic protocol: a static member (group.instance.id)
/// SIGKILLed and restarted within its session joins under a new member id and gets
/// exactly its old partitions back; the other member sees no rebalance (no assignment
/// event after the first settled one), and every record is read, again only if the
/// killed process had not committed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_static_classic_member_sigkilled_and_restarted_within_its_session_then_it_gets_its_partitions_back_and_the_other_sees_no_rebalance(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 6, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    // A 30 s session: the restart comes back well within it.
    let static_a = classic(&["group.instance.id=box-a", "session.timeout.ms=30000"]);
    let mut a = GroupConsumer::start(&kafka, "ledger", "orders", &static_a);
    let mut b = GroupConsumer::start(&kafka, "ledger", "orders", &classic(&[]));
    let three = |e: &Events| e.owned().len() == 3;
    a.wait_for(READ_PATIENCE, "3 partitions", three).await;
    let settled = b.wait_for(READ_PATIENCE, "3 partitions", three).await;
    produce(&kafka, "orders", 6, 50, 0).await;
    let some = |e: &Events| e.received().len() >= 5;
    a.wait_for(READ_PATIENCE, "5 records", some).await;
    let a_partitions = a.events().owned();
    let killed = a.kill().await;

    let mut a2 = GroupConsumer::start(&kafka, "ledger", "orders", &static_a);
    let back = a2
        .wait_for(READ_PATIENCE, "its partitions back", |e| {
            !e.owned().is_empty()
        })
        .await;
    assert_eq!(back.owned(), a_partitions, "the restart owns what a owned");
    produce(&kafka, "orders", 6, 50, 50).await;
    let want = expected(6, 0..100);
    // What a received before it died counts: a2 resumes after a's commits.
    read_all(&mut [&mut a, &mut a2, &mut b], &want).await;
    let b_events = b.events();
    assert_eq!(
        rebalances(&b_events),
        rebalances(&settled),
        "b saw a rebalance: {:?}",
        b_events.lines
    );
    assert!(
        a2.events().errors().is_empty(),
        "{:?}",
        a2.events().errors()
    );
    // Exactly once but for what a received and had not committed.
    let a2_events = a2.events();
    let again = duplicates([&killed, &a2_events, &b_events]);
    let allowed = crate::kafka_groups::uncommitted(&killed);
    assert!(again.is_subset(&allowed), "{again:?} beyond {allowed:?}");
    a2.close().await;
    b.close().await;
}

/// The admin's removal of a static member (LeaveGroup v3 by group.instance.id, as
/// Kafka's `removeMembersFromConsumerGroup` sends it): a static member SIGKILLed with a
/// 60 s session would hold its partitions for a minute; removed by its instance id, its
/// partitions move to the survivor at once. A removal naming the instance with a member
/// id that is not its holder's is FENCED_INSTANCE_ID and removes nothing; an unknown
/// instance is UNKNOWN_MEMBER_ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_dead_static_classic_member_when_an_admin_removes_it_by_instance_id_then_the_survivor_takes_its_partitions(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 6, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    let static_a = classic(&["group.instance.id=box-a", "session.timeout.ms=60000"]);
    let mut a = GroupConsumer::start(&kafka, "payroll", "orders", &static_a);
    let mut b = GroupConsumer::start(&kafka, "payroll", "orders", &classic(&[]));
    let three = |e: &Events| e.owned().len() == 3;
    a.wait_for(READ_PATIENCE, "3 partitions", three).await;
    b.wait_for(READ_PATIENCE, "3 partitions", three).await;
    a.kill().await;

    let remove = |member: &str, instance: &str| {
        LeaveGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("payroll")))
            .with_members(vec![MemberIdentity::default()
                .with_member_id(StrBytes::from_string(member.to_string()))
                .with_group_instance_id(Some(StrBytes::from_string(
                    instance.to_string(),
                )))])
    };
    let codes = |answer: &LeaveGroupResponse| -> Vec<i16> {
        answer.members.iter().map(|m| m.error_code).collect()
    };
    let stale: LeaveGroupResponse = ask(&kafka, 13, 3, &remove("not-a", "box-a")).await;
    assert_eq!(
        (stale.error_code, codes(&stale)),
        (0, vec![82]),
        "{stale:?}"
    );
    let unknown: LeaveGroupResponse = ask(&kafka, 13, 3, &remove("", "box-z")).await;
    assert_eq!(codes(&unknown), vec![25], "{unknown:?}");
    assert_eq!(b.events().owned().len(), 3, "nothing moved yet");

    let removed: LeaveGroupResponse = ask(&kafka, 13, 3, &remove("", "box-a")).await;
    assert_eq!(
        (removed.error_code, codes(&removed)),
        (0, vec![0]),
        "{removed:?}"
    );
    // Well within a's 60 s session: the removal, not its expiry, moved them.
    let all = b
        .wait_for(Duration::from_secs(30), "all 6 partitions", |e| {
            e.owned().len() == 6
        })
        .await;
    assert_eq!(all.owned().len(), 6);
    b.close().await;
}
