//! Sessions: a member that stops heartbeating is removed once its session timeout
//! passes, and its partitions go to the members still heartbeating.

use std::time::{Duration, Instant};

use idem_proto::v1::{ConsumerGroupHeartbeatRequest, OwnedPartitions, SubscribedTopics};
use idem_proto::ErrorCode;
use idem_tests::groups::{balanced, drive_until, GroupClient, Member};
use idem_tests::wait::PATIENCE;
use idem_tests::Cluster;

const TOPIC: &str = "events";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_member_that_stops_heartbeating_then_it_is_removed_and_its_partitions_move() {
    let cluster =
        Cluster::start_with_coordinators(3, 1, &[], &["--group-session-timeout-ms", "2000"]).await;
    cluster.create_topic(TOPIC, 4, 3).await;
    let client = GroupClient::new(&cluster.bootstrap(), "sleepers");
    let mut members = vec![Member::new("a", &[TOPIC]), Member::new("b", &[TOPIC])];
    drive_until(&client, &mut members, 20, |m| balanced(m, 2, 4)).await;
    let mut b = members.pop().expect("b");
    let mut a = members.pop().expect("a");

    // Only "a" heartbeats on, at the interval its answers ask for, as a consumer does.
    let stopped = Instant::now();
    loop {
        let answer = a.heartbeat(&client).await;
        assert_eq!(
            answer.error_code(),
            ErrorCode::None,
            "{}",
            answer.error_message
        );
        if a.owned.len() == 4 {
            break;
        }
        assert!(
            stopped.elapsed() < PATIENCE,
            "a never got b's partitions: {a:?}"
        );
        tokio::time::sleep(Duration::from_millis(answer.heartbeat_interval_ms as u64)).await;
    }
    assert!(
        stopped.elapsed() >= Duration::from_millis(2000),
        "b was removed before its session ended ({:?})",
        stopped.elapsed()
    );
    let described = client.describe().await;
    let ids: Vec<&str> = described
        .members
        .iter()
        .map(|m| m.member_id.as_str())
        .collect();
    assert_eq!(ids, ["a"]);
    let late = b.heartbeat(&client).await;
    assert_eq!(
        late.error_code(),
        ErrorCode::UnknownMemberId,
        "{}",
        late.error_message
    );
}

/// A member that heartbeats but never releases the partitions it was asked to revoke
/// is removed once its rebalance timeout passes (long before its session would end),
/// so the member waiting for them gets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_member_that_never_revokes_then_it_is_removed_after_its_rebalance_timeout() {
    let cluster =
        Cluster::start_with_coordinators(3, 1, &[], &["--group-session-timeout-ms", "60000"]).await;
    cluster.create_topic(TOPIC, 4, 3).await;
    let client = GroupClient::new(&cluster.bootstrap(), "stubborn");
    // "s" joins first and owns all 4; its rebalance timeout is 2 s.
    let join =
        |member: &str, epoch: i32, owned: Option<OwnedPartitions>| ConsumerGroupHeartbeatRequest {
            group_id: "stubborn".into(),
            member_id: member.into(),
            member_epoch: epoch,
            instance_id: None,
            rebalance_timeout_ms: 2000,
            subscribed: (epoch == 0).then(|| SubscribedTopics {
                topics: vec![TOPIC.into()],
            }),
            owned,
            server_assignor: None,
        };
    let first = client.heartbeat(join("s", 0, None)).await;
    assert_eq!(
        first.error_code(),
        ErrorCode::None,
        "{}",
        first.error_message
    );
    // The coordinator may not see the new topic's partitions at once: s heartbeats on
    // (owning what it was given) until it owns all 4, or it would have nothing to
    // revoke when b comes.
    let mut first = first;
    let owned_count = |a: &idem_proto::v1::ConsumerGroupHeartbeatResponse| {
        a.assignment.as_ref().map_or(0, |o| {
            o.topics.iter().map(|t| t.partitions.len()).sum::<usize>()
        })
    };
    let started = Instant::now();
    while owned_count(&first) < 4 {
        assert!(
            started.elapsed() < PATIENCE,
            "s never owned the topic: {first:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let next = client
            .heartbeat(join("s", first.member_epoch, first.assignment.clone()))
            .await;
        assert_eq!(next.error_code(), ErrorCode::None, "{}", next.error_message);
        if next.assignment.is_some() {
            first = next;
        } else {
            first.member_epoch = next.member_epoch;
        }
    }
    let everything = first.assignment.clone().expect("s owns the topic");
    // The rebalance timeout runs from b's join at the earliest, so the time the test
    // measures starts before b's heartbeat is sent (not after it is answered).
    let asked = Instant::now();
    let mut b = Member::new("b", &[TOPIC]);
    b.heartbeat(&client).await;

    // "s" goes on heartbeating, always saying it still owns everything.
    let removed = loop {
        let answer = client
            .heartbeat(join("s", first.member_epoch, Some(everything.clone())))
            .await;
        if answer.error_code() != ErrorCode::None {
            break answer;
        }
        assert!(asked.elapsed() < PATIENCE, "s was never removed");
        b.heartbeat(&client).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(
        removed.error_code(),
        ErrorCode::UnknownMemberId,
        "{}",
        removed.error_message
    );
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_millis(2000) && waited < Duration::from_secs(60),
        "removed after {waited:?}: by the rebalance timeout, not the session"
    );
    drive_until(&client, std::slice::from_mut(&mut b), 20, |m| {
        m[0].owned.len() == 4
    })
    .await;
}
