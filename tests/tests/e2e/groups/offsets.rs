//! Committed offsets: what a member commits is what OffsetFetch answers; a commit at a
//! stale member epoch, for a partition the member does not own, of a negative offset or
//! of a partition that does not exist is refused and changes nothing.

use idem_proto::ErrorCode;
use idem_tests::groups::{balanced, drive_until, GroupClient, Member};
use idem_tests::Cluster;

const TOPIC: &str = "events";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_commits_then_offset_fetch_answers_them_and_every_refused_commit_changes_nothing() {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, 2, 3).await;
    let client = GroupClient::new(&cluster.bootstrap(), "committers");
    let mut members = vec![Member::new("a", &[TOPIC])];
    drive_until(&client, &mut members, 10, |m| balanced(m, 2, 2)).await;
    let a = &members[0];

    let committed = client
        .commit(&a.member_id, a.epoch, &[(TOPIC, 0, 10), (TOPIC, 1, 20)])
        .await;
    assert_eq!(
        committed.error_code(),
        ErrorCode::None,
        "{}",
        committed.error_message
    );
    assert!(committed
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .all(|p| p.error_code() == ErrorCode::None));
    assert_eq!(client.committed(TOPIC, 2).await, [10, 20]);

    // A stale member epoch.
    let stale = client
        .commit(&a.member_id, a.epoch - 1, &[(TOPIC, 0, 99)])
        .await;
    assert_eq!(partition_codes(&stale), [(0, ErrorCode::StaleMemberEpoch)]);

    // A partition the member does not own: a second member takes one over.
    members.push(Member::new("b", &[TOPIC]));
    drive_until(&client, &mut members, 10, |m| balanced(m, 1, 2)).await;
    let (a, b) = (&members[0], &members[1]);
    let b_partition = b.owned.iter().next().expect("b owns one").1;
    let not_owned = client
        .commit(&a.member_id, a.epoch, &[(TOPIC, b_partition, 99)])
        .await;
    assert_eq!(
        partition_codes(&not_owned)[0].1,
        ErrorCode::StaleMemberEpoch
    );

    // A negative offset, refused by partition.
    let a_partition = a.owned.iter().next().expect("a owns one").1;
    let negative = client
        .commit(&a.member_id, a.epoch, &[(TOPIC, a_partition, -5)])
        .await;
    assert_eq!(
        partition_codes(&negative),
        [(a_partition, ErrorCode::InvalidRequest)]
    );
    assert_names_its_partition(&negative);
    // Partitions that do not exist, committed to a group without members (the only
    // kind a member-less commit is for): refused by partition, the valid one kept.
    let manual = GroupClient::new(&cluster.bootstrap(), "manual");
    let unknown = manual
        .commit("", -1, &[(TOPIC, 1, 3), (TOPIC, 7, 1), ("nope", 0, 1)])
        .await;
    let mut codes = partition_codes(&unknown);
    codes.sort_by_key(|(p, c)| (*p, *c as i32));
    assert_eq!(
        codes,
        [
            (0, ErrorCode::UnknownTopicOrPartition),
            (1, ErrorCode::None),
            (7, ErrorCode::UnknownTopicOrPartition)
        ]
    );
    assert_eq!(manual.committed(TOPIC, 2).await, [-1, 3]);
    assert_eq!(
        client.committed(TOPIC, 2).await,
        [10, 20],
        "nothing refused changed anything"
    );

    // Invalid group ids.
    for id in [String::new(), "g".repeat(250)] {
        let bad = GroupClient::new(&cluster.bootstrap(), &id);
        let (_, address) = GroupClient::new(&cluster.bootstrap(), "committers")
            .find()
            .await
            .expect("found");
        let mut raw = idem_proto::v1::group_coordinator_client::GroupCoordinatorClient::connect(
            format!("http://{address}"),
        )
        .await
        .expect("coordinator");
        let answer = raw
            .offset_commit(idem_proto::v1::OffsetCommitRequest {
                group_id: bad.group_id.clone(),
                member_id: String::new(),
                member_epoch: -1,
                topics: Vec::new(),
            })
            .await
            .expect("OffsetCommit")
            .into_inner();
        assert_eq!(
            answer.error_code(),
            ErrorCode::InvalidGroupId,
            "{}",
            answer.error_message
        );
        let heartbeat = raw
            .consumer_group_heartbeat(idem_proto::v1::ConsumerGroupHeartbeatRequest {
                group_id: bad.group_id,
                member_id: "m".into(),
                ..Default::default()
            })
            .await
            .expect("heartbeat")
            .into_inner();
        assert_eq!(heartbeat.error_code(), ErrorCode::InvalidGroupId);
    }
}

fn assert_names_its_partition(answer: &idem_proto::v1::OffsetCommitResponse) {
    for t in &answer.topics {
        for p in &t.partitions {
            let named = format!("{}-{}", t.name, p.partition);
            assert!(p.error_message.contains(&named), "{}", p.error_message);
        }
    }
}

fn partition_codes(answer: &idem_proto::v1::OffsetCommitResponse) -> Vec<(i32, ErrorCode)> {
    assert_eq!(
        answer.error_code(),
        ErrorCode::None,
        "{}",
        answer.error_message
    );
    answer
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.error_code())))
        .collect()
}
