//! Offset expiry (KIP-211): a group with no members loses its committed offsets once the
//! retention has passed since it became empty (or, for offsets committed with no members,
//! since their commit), and goes from ListGroups with them; a group with a member keeps
//! its offsets however old; and what expired stays expired after its coordinator is
//! SIGKILLed, because the tombstones were written to `__consumer_offsets`.

use std::time::{Duration, Instant};

use idem_client::Admin;
use idem_proto::ErrorCode;
use idem_tests::groups::{drive_until, GroupClient, Member};
use idem_tests::wait::{seen_if, wait_until, PATIENCE, POLL_INTERVAL};
use idem_tests::Cluster;

const TOPIC: &str = "events";
const RETENTION: Duration = Duration::from_millis(2000);
const EXPIRY_FLAGS: [&str; 4] = [
    "--group-offsets-retention-ms",
    "2000",
    "--group-offsets-retention-check-interval-ms",
    "200",
];

/// A member alone in its group, owning both partitions, with `offsets` committed.
async fn committed_member(client: &GroupClient, member_id: &str, offsets: [i64; 2]) -> Member {
    let mut members = vec![Member::new(member_id, &[TOPIC])];
    drive_until(client, &mut members, 10, |m| m[0].owned.len() == 2).await;
    let member = members.pop().expect("one member");
    let answer = client
        .commit(
            &member.member_id,
            member.epoch,
            &[(TOPIC, 0, offsets[0]), (TOPIC, 1, offsets[1])],
        )
        .await;
    assert_eq!(
        answer.error_code(),
        ErrorCode::None,
        "{}",
        answer.error_message
    );
    assert_eq!(client.committed(TOPIC, 2).await, offsets);
    member
}

/// Waits until OffsetFetch answers no committed offset (-1) for both partitions while
/// `alive` heartbeat on; returns how long after `since` that was seen.
async fn await_expiry(
    client: &GroupClient,
    alive: &mut [(&GroupClient, &mut Member)],
    since: Instant,
) -> Duration {
    let started = Instant::now();
    loop {
        for (group, member) in alive.iter_mut() {
            let answer = member.heartbeat(group).await;
            assert_eq!(
                answer.error_code(),
                ErrorCode::None,
                "{}",
                answer.error_message
            );
        }
        let offsets = client.committed(TOPIC, 2).await;
        if offsets == [-1, -1] {
            return since.elapsed();
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the offsets of {} never expired: {offsets:?}",
            client.group_id
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

async fn listed(admin: &Admin) -> Vec<String> {
    let groups = admin.list_groups().await.expect("groups listed");
    groups.into_iter().map(|g| g.group_id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_empty_groups_then_their_offsets_expire_after_the_retention_while_a_live_group_keeps_its_own(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &[], &EXPIRY_FLAGS).await;
    cluster.create_topic(TOPIC, 2, 1).await;
    let admin = Admin::connect(&cluster.bootstrap()).await.expect("admin");
    let keepers = GroupClient::new(&cluster.bootstrap(), "keepers");
    let leavers = GroupClient::new(&cluster.bootstrap(), "leavers");
    let manual = GroupClient::new(&cluster.bootstrap(), "manual");
    let mut keeper = committed_member(&keepers, "k", [5, 6]).await;
    let mut leaver = committed_member(&leavers, "l", [10, 20]).await;

    // Offsets committed with no members (manual assignment) count from their commit.
    let manual_commit = Instant::now();
    let answer = manual.commit("", -1, &[(TOPIC, 0, 3), (TOPIC, 1, 4)]).await;
    assert_eq!(
        answer.error_code(),
        ErrorCode::None,
        "{}",
        answer.error_message
    );
    assert_eq!(manual.committed(TOPIC, 2).await, [3, 4]);
    let waited = await_expiry(
        &manual,
        &mut [(&keepers, &mut keeper), (&leavers, &mut leaver)],
        manual_commit,
    )
    .await;
    assert!(waited >= RETENTION, "expired after {waited:?}");
    // Both members committed before that commit, longer ago than the retention: they
    // keep their offsets while they are members.
    assert_eq!(keepers.committed(TOPIC, 2).await, [5, 6]);
    assert_eq!(leavers.committed(TOPIC, 2).await, [10, 20]);

    // The retention of a group that had members runs from when the last one left.
    let left = Instant::now();
    let answer = leaver.leave(&leavers).await;
    assert_eq!(answer.error_code(), ErrorCode::None);
    assert_eq!(leavers.describe().await.members.len(), 0);
    let waited = await_expiry(&leavers, &mut [(&keepers, &mut keeper)], left).await;
    assert!(
        waited >= RETENTION,
        "expired {waited:?} after the group emptied"
    );
    let described = leavers.describe().await;
    assert_eq!(
        described.error_code(),
        ErrorCode::GroupIdNotFound,
        "{described:?}"
    );
    let (groups, _) = wait_until(PATIENCE, "only the live group is listed", || async {
        let groups = listed(&admin).await;
        seen_if(groups.clone(), groups == ["keepers"])
    })
    .await;
    assert_eq!(groups, ["keepers"]);

    // The live group's offsets, committed longer ago than two retentions, are all there.
    assert_eq!(keepers.committed(TOPIC, 2).await, [5, 6]);
    assert_eq!(keepers.describe().await.members.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_expired_group_when_its_coordinator_is_killed_and_restarted_then_it_stays_gone() {
    let mut cluster = Cluster::start_with_coordinators(1, 1, &[], &EXPIRY_FLAGS).await;
    cluster.create_topic(TOPIC, 2, 1).await;
    let leavers = GroupClient::new(&cluster.bootstrap(), "leavers");
    let mut leaver = committed_member(&leavers, "l", [10, 20]).await;
    let answer = leaver.leave(&leavers).await;
    assert_eq!(answer.error_code(), ErrorCode::None);
    await_expiry(&leavers, &mut [], Instant::now()).await;

    // Restarted with a retention far longer than the test: had the expiry not been
    // written, the group read back (empty for seconds only) would keep its offsets.
    let (owner, _) = leavers.find().await.expect("an owner");
    cluster.restart_coordinator_with(owner, "--group-offsets-retention-ms", "3600000");
    cluster.wait_for_coordinators().await;
    assert_eq!(leavers.committed(TOPIC, 2).await, [-1, -1]);
    let described = leavers.describe().await;
    assert_eq!(
        described.error_code(),
        ErrorCode::GroupIdNotFound,
        "{described:?}"
    );
    let admin = Admin::connect(&cluster.bootstrap()).await.expect("admin");
    assert_eq!(
        admin.list_groups().await.expect("groups listed"),
        Vec::new()
    );
}
