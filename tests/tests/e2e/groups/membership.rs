//! KIP-848 membership: members of a group get disjoint, balanced shares of the topic,
//! and while the group rebalances (a member joins, a member leaves) no partition is
//! ever owned by two members at once.

use idem_proto::ErrorCode;
use idem_tests::groups::{balanced, drive_until, GroupClient, Member};
use idem_tests::Cluster;

const TOPIC: &str = "events";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_members_joining_and_leaving_then_partitions_are_shared_evenly_and_never_owned_twice()
{
    let cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, 6, 3).await;
    let client = GroupClient::new(&cluster.bootstrap(), "readers");

    let mut members = vec![Member::new("a", &[TOPIC]), Member::new("b", &[TOPIC])];
    drive_until(&client, &mut members, 20, |m| balanced(m, 3, 6)).await;

    members.push(Member::new("c", &[TOPIC]));
    drive_until(&client, &mut members, 20, |m| balanced(m, 2, 6)).await;
    let described = client.describe().await;
    assert_eq!(described.state, "Stable");
    assert_eq!(described.members.len(), 3);

    let mut gone = members.remove(1);
    let left = gone.leave(&client).await;
    assert_eq!(left.error_code(), ErrorCode::None, "{}", left.error_message);
    assert_eq!(left.member_epoch, -1);
    drive_until(&client, &mut members, 20, |m| balanced(m, 3, 6)).await;
    let described = client.describe().await;
    let ids: Vec<&str> = described
        .members
        .iter()
        .map(|m| m.member_id.as_str())
        .collect();
    assert_eq!(ids, ["a", "c"]);

    // A heartbeat at an epoch the member is not at (a zombie's older than the one
    // before, which a lost answer excuses; or a future one) is FENCED_MEMBER_EPOCH and
    // changes nothing.
    let before = client.describe().await;
    assert!(members[0].epoch > 2, "{members:?}");
    for stale in [members[0].epoch - 2, members[0].epoch + 1] {
        let mut zombie = members[0].clone();
        zombie.epoch = stale;
        let fenced = zombie.heartbeat(&client).await;
        assert_eq!(
            fenced.error_code(),
            ErrorCode::FencedMemberEpoch,
            "epoch {stale}: {}",
            fenced.error_message
        );
    }
    assert_eq!(client.describe().await, before, "nothing changed");

    // A heartbeat of a member that left is refused: it must join again.
    gone.epoch = members[0].epoch;
    let refused = gone.heartbeat(&client).await;
    assert_eq!(
        refused.error_code(),
        ErrorCode::UnknownMemberId,
        "{}",
        refused.error_message
    );
}
