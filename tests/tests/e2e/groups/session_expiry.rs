//! Sessions: a member that stops heartbeating is removed once its session timeout
//! passes, and its partitions go to the members still heartbeating.

use std::time::{Duration, Instant};

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
