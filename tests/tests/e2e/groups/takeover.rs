//! A coordinator that owns a group is SIGKILLed: the coordinator that takes its slice
//! over reads the group back from `__consumer_offsets` — members, epochs, assignment
//! and committed offsets are the same — and the members heartbeat on at their epochs.

use idem_proto::ErrorCode;
use idem_tests::groups::{balanced, drive_until, GroupClient, Member};
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::Cluster;

const TOPIC: &str = "events";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_groups_coordinator_killed_then_its_successor_serves_the_same_group_and_offsets()
{
    let mut cluster = Cluster::start_with_coordinators(3, 2, &[], &[]).await;
    cluster.create_topic(TOPIC, 4, 3).await;
    let client = GroupClient::new(&cluster.bootstrap(), "survivors");
    let mut members = vec![Member::new("a", &[TOPIC]), Member::new("b", &[TOPIC])];
    drive_until(&client, &mut members, 20, |m| balanced(m, 2, 4)).await;
    for m in &members {
        let offsets: Vec<(&str, i32, i64)> = m
            .owned
            .iter()
            .map(|(_, p)| (TOPIC, *p, 100 + i64::from(*p)))
            .collect();
        let answer = client.commit(&m.member_id, m.epoch, &offsets).await;
        assert_eq!(
            answer.error_code(),
            ErrorCode::None,
            "{}",
            answer.error_message
        );
    }
    let before = client.describe().await;
    let offsets_before = client.committed(TOPIC, 4).await;
    assert_eq!(offsets_before, [100, 101, 102, 103]);

    let (owner, _) = client.find().await.expect("an owner");
    cluster.kill_coordinator(owner);
    let _moved = wait_until(PATIENCE, "another coordinator owns the group", || async {
        let found = client.find().await;
        let moved = matches!(&found, Ok((id, _)) if *id != owner);
        seen_if(found, moved)
    })
    .await;

    let after = client.describe().await;
    assert_ne!(after.coordinator_id, owner);
    assert_eq!(after.group_epoch, before.group_epoch);
    assert_eq!(after.target_epoch, before.target_epoch);
    assert_eq!(
        after.members, before.members,
        "members, epochs and assignment"
    );
    assert_eq!(client.committed(TOPIC, 4).await, offsets_before);

    // The members carry on at their epochs: nothing moves.
    for m in &mut members {
        let (epoch, owned) = (m.epoch, m.owned.clone());
        let answer = m.heartbeat(&client).await;
        assert_eq!(
            answer.error_code(),
            ErrorCode::None,
            "{}",
            answer.error_message
        );
        assert_eq!((m.epoch, &m.owned), (epoch, &owned));
    }
}
