//! Two reasons an assignment changes, or must not: a static member (one with an
//! instance id) that closes and comes back under a new member id gets its partitions
//! back while the other member sees no rebalance at all; a subscribed topic that
//! grows gets its new partitions shared out.

use std::collections::BTreeSet;
use std::time::Duration;

use idem_client::{Admin, GroupConfig, GroupConsumer, GroupEvent, OffsetSpec};

/// A partition as a group member names it.
type TopicPartition = (String, i32);
use idem_tests::wait::PATIENCE;
use idem_tests::Cluster;
use tokio::time::Instant;

const COORDINATOR_FLAGS: &[&str] = &["--group-session-timeout-ms", "6000"];

async fn member(
    bootstrap: &str,
    group: &str,
    topic: &str,
    instance: Option<&str>,
) -> GroupConsumer {
    let mut config = GroupConfig::new(group);
    config.instance_id = instance.map(String::from);
    config.consumer.start = OffsetSpec::Earliest;
    config.consumer.max_wait = Duration::from_millis(50);
    GroupConsumer::subscribe(bootstrap, config, &[topic])
        .await
        .expect("subscribes")
}

/// Polls every member in turn until `done` holds for their assignments (or fails after
/// the harness's patience); every event each member got, by member.
async fn poll_until(
    members: &mut [&mut GroupConsumer],
    done: impl Fn(&[BTreeSet<TopicPartition>]) -> bool,
    what: &str,
) -> Vec<Vec<GroupEvent>> {
    let deadline = Instant::now() + PATIENCE;
    let mut events = vec![Vec::new(); members.len()];
    loop {
        let owned: Vec<BTreeSet<TopicPartition>> =
            members.iter().map(|m| m.assignment().clone()).collect();
        for (i, a) in owned.iter().enumerate() {
            for b in &owned[i + 1..] {
                assert!(a.is_disjoint(b), "two members own one partition: {owned:?}");
            }
        }
        if done(&owned) {
            return events;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not reached; owned {owned:?}"
        );
        for (i, m) in members.iter_mut().enumerate() {
            let polled = m.poll(Duration::from_millis(100)).await.expect("poll");
            events[i].extend(polled.events);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_static_member_that_closes_and_returns_then_it_gets_its_partitions_back_and_the_other_sees_no_rebalance(
) {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], COORDINATOR_FLAGS).await;
    cluster.create_topic("statics", 4, 3).await;
    let bootstrap = cluster.bootstrap();
    let mut a = member(&bootstrap, "static-group", "statics", Some("instance-a")).await;
    let mut b = member(&bootstrap, "static-group", "statics", Some("instance-b")).await;
    poll_until(
        &mut [&mut a, &mut b],
        |owned| owned.iter().all(|o| o.len() == 2),
        "a and b own 2 partitions each",
    )
    .await;
    let (a_owned, b_owned) = (a.assignment().clone(), b.assignment().clone());
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    let before = admin
        .describe_group("static-group")
        .await
        .expect("describe");

    // a restarts: it leaves for a while, and a new member with its instance id joins.
    a.close().await.expect("a closes");
    let mut a_again = member(&bootstrap, "static-group", "statics", Some("instance-a")).await;
    let events = poll_until(
        &mut [&mut a_again, &mut b],
        |owned| owned[0].len() == 2,
        "the returning instance owns its partitions again",
    )
    .await;
    assert_eq!(
        a_again.assignment(),
        &a_owned,
        "the same partitions came back"
    );
    assert_eq!(b.assignment(), &b_owned);
    assert!(events[1].is_empty(), "b saw a rebalance: {:?}", events[1]);
    let after = admin
        .describe_group("static-group")
        .await
        .expect("describe");
    assert_eq!(
        (after.members.len(), after.target_epoch),
        (2, before.target_epoch),
        "no new target assignment: {after:?}"
    );

    // A member without an instance id that closes leaves for good: its partitions move.
    let mut c = member(&bootstrap, "dynamic-group", "statics", None).await;
    let mut d = member(&bootstrap, "dynamic-group", "statics", None).await;
    poll_until(
        &mut [&mut c, &mut d],
        |owned| owned.iter().all(|o| o.len() == 2),
        "c and d own 2 partitions each",
    )
    .await;
    c.close().await.expect("c closes");
    poll_until(&mut [&mut d], |owned| owned[0].len() == 4, "d owns all 4").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_subscribed_topic_that_grows_then_its_new_partitions_are_shared_out() {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], COORDINATOR_FLAGS).await;
    cluster.create_topic("growing", 4, 3).await;
    let bootstrap = cluster.bootstrap();
    let mut a = member(&bootstrap, "growers", "growing", None).await;
    let mut b = member(&bootstrap, "growers", "growing", None).await;
    poll_until(
        &mut [&mut a, &mut b],
        |owned| owned.iter().all(|o| o.len() == 2),
        "a and b own 2 partitions each",
    )
    .await;
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    admin
        .create_partitions("growing", 6)
        .await
        .expect("the topic grows to 6");
    poll_until(
        &mut [&mut a, &mut b],
        |owned| owned.iter().all(|o| o.len() == 3),
        "a and b own 3 partitions each",
    )
    .await;
    let all: BTreeSet<i32> = a
        .assignment()
        .iter()
        .chain(b.assignment())
        .map(|tp| tp.1)
        .collect();
    assert_eq!(all, (0..6).collect(), "every partition of the grown topic");
}
