//! Unclean leader election is off unless a topic enables it: when the leader dies and
//! the only live replica is out of the ISR, a default topic stays without a leader
//! (nothing acknowledged can be lost), while a topic created with
//! `unclean_leader_election` lets that replica take over, and loses what only the old
//! ISR had.

use idem_proto::v1::CreatableTopic;
use idem_proto::ErrorCode;
use idem_tests::raw;
use idem_tests::Cluster;

#[tokio::test]
async fn given_the_whole_isr_gone_then_only_a_topic_that_enables_unclean_election_gets_an_out_of_isr_leader(
) {
    let mut cluster = Cluster::start(2, &["--replica-lag-time-max-ms", "1000"]);
    cluster.create_topic("clean", 1, 2).await;
    let clean = cluster.leader_of("clean", 0).await;
    // Find an unclean topic led by the same broker (layouts rotate by topic name).
    let mut unclean_name = String::new();
    for attempt in 0..20 {
        let name = format!("unclean-{attempt}");
        cluster
            .create(CreatableTopic {
                name: name.clone(),
                num_partitions: 1,
                replication_factor: 2,
                unclean_leader_election: true,
                coordinator_id: None,
                configs: Vec::new(),
            })
            .await;
        if cluster.leader_of(&name, 0).await.leader_id == clean.leader_id {
            unclean_name = name;
            break;
        }
    }
    assert!(!unclean_name.is_empty(), "no topic got the same leader");
    let leader = clean.leader_id;
    let follower = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let mut client = raw::connect(&cluster.broker(leader).bootstrap()).await;
    for topic in ["clean", unclean_name.as_str()] {
        let before = raw::produce(
            &mut client,
            topic,
            0,
            raw::idempotent_batch(3, 0, 0, &["before"]),
        )
        .await;
        assert_eq!(before.error_code(), ErrorCode::None);
    }

    // The follower dies and drops out of both ISRs; the leader takes more writes alone.
    cluster.kill(follower);
    for topic in ["clean", unclean_name.as_str()] {
        cluster
            .wait_for(leader, topic, 0, |p| p.isr == vec![leader])
            .await;
        let alone = raw::produce(
            &mut client,
            topic,
            0,
            raw::idempotent_batch(3, 0, 1, &["only-on-leader"]),
        )
        .await;
        assert_eq!(alone.error_code(), ErrorCode::None);
    }
    // Then the leader dies and the out-of-ISR follower comes back.
    cluster.kill(leader);
    cluster.restart(follower);
    let taken = cluster
        .wait_for(follower, &unclean_name, 0, |p| p.leader_id == follower)
        .await;
    assert_eq!(taken.isr, vec![follower]);
    // The follower has seen the catalog and run its elections: the clean topic kept its
    // dead leader and epoch.
    let kept = cluster
        .partition(follower, "clean", 0)
        .await
        .expect("clean partition");
    assert_eq!(
        (kept.leader_id, kept.leader_epoch),
        (leader, clean.leader_epoch)
    );

    let mut new_leader = raw::connect(&cluster.broker(follower).bootstrap()).await;
    let values = raw::values(&raw::read_partition(&mut new_leader, &unclean_name, 0).await);
    assert_eq!(
        values,
        vec!["before"],
        "the unclean leader lost what only the old ISR had"
    );
}
