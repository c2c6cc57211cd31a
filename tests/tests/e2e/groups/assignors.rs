//! KIP-848 server-side assignors: members that ask for `range` get co-partitioned
//! ranges (the same partition numbers of each topic), the group moves there from
//! `uniform` without a partition ever owned twice, and a name the coordinator does not
//! have is UNSUPPORTED_ASSIGNOR and changes nothing.

use idem_proto::ErrorCode;
use idem_tests::groups::{balanced, drive_until, GroupClient, Member, Owned};
use idem_tests::Cluster;

const ORDERS: &str = "orders";
const PAYMENTS: &str = "payments";

fn both(partitions: &[i32]) -> Owned {
    [ORDERS, PAYMENTS]
        .iter()
        .flat_map(|t| partitions.iter().map(move |p| (t.to_string(), *p)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_members_switching_to_range_on_two_topics_of_four_then_each_owns_the_same_range_of_both(
) {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    cluster.create_topic(ORDERS, 4, 3).await;
    cluster.create_topic(PAYMENTS, 4, 3).await;
    let client = GroupClient::new(&cluster.bootstrap(), "joiners");

    // Naming no assignor: uniform, 4 partitions each.
    let mut members = vec![
        Member::new("a", &[ORDERS, PAYMENTS]),
        Member::new("b", &[ORDERS, PAYMENTS]),
    ];
    drive_until(&client, &mut members, 20, |m| balanced(m, 4, 8)).await;
    assert_eq!(client.describe().await.assignor_name, "uniform");

    // Both ask for range: the group moves to ranges of each topic, revoking before it
    // reassigns (drive_until checks no partition is owned twice after every answer).
    for m in &mut members {
        m.assignor = Some("range".into());
    }
    drive_until(&client, &mut members, 20, |m| {
        m[0].owned == both(&[0, 1]) && m[1].owned == both(&[2, 3]) && m[0].epoch == m[1].epoch
    })
    .await;
    let described = client.describe().await;
    assert_eq!(described.assignor_name, "range");
    assert_eq!(described.state, "Stable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_unknown_assignor_then_the_heartbeat_is_unsupported_and_the_group_is_unchanged() {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    cluster.create_topic(ORDERS, 4, 3).await;
    let client = GroupClient::new(&cluster.bootstrap(), "strict");
    let mut a = Member::new("a", &[ORDERS]);
    a.assignor = Some("range".into());
    let mut members = vec![a];
    drive_until(&client, &mut members, 20, |m| balanced(m, 4, 4)).await;
    let before = client.describe().await;
    assert_eq!(before.assignor_name, "range");

    // A member joining with it, and a member already in the group asking for it.
    let mut newcomer = Member::new("c", &[ORDERS]);
    newcomer.assignor = Some("sticky".into());
    let mut switcher = members[0].clone();
    switcher.assignor = Some("sticky".into());
    for m in [&mut newcomer, &mut switcher] {
        let refused = m.heartbeat(&client).await;
        assert_eq!(
            refused.error_code(),
            ErrorCode::UnsupportedAssignor,
            "{}: {}",
            m.member_id,
            refused.error_message
        );
    }
    assert_eq!(client.describe().await, before, "nothing changed");
    // The member carries on with what it has.
    let answer = members[0].heartbeat(&client).await;
    assert_eq!(
        answer.error_code(),
        ErrorCode::None,
        "{}",
        answer.error_message
    );
    assert_eq!(answer.member_epoch, before.group_epoch);
}
