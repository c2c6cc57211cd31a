//! Topics live in etcd: any broker creates them by compare-and-swap (never with more
//! replicas than live brokers), partitions are
//! spread evenly over the live brokers, every broker answers Metadata with the same
//! leaders, only a partition's leader accepts produce and fetch, and a restarted
//! broker reopens the partitions the catalog gives it.

use std::collections::HashMap;

use idem_proto::v1::{CreatableTopic, CreateTopicsRequest, MetadataRequest, MetadataResponse};
use idem_proto::ErrorCode;
use idem_tests::etcd::EtcdServer;
use idem_tests::raw::{self, RawClient};
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::BrokerProcess;

fn cluster(etcd: &EtcdServer, n: i32) -> Vec<BrokerProcess> {
    (1..=n)
        .map(|id| {
            let id = id.to_string();
            BrokerProcess::start_with(&[
                "--id",
                &id,
                "--etcd",
                &etcd.endpoint(),
                "--lease-ttl-ms",
                "2000",
            ])
        })
        .collect()
}

async fn metadata(client: &mut RawClient, topic: &str) -> MetadataResponse {
    client
        .metadata(MetadataRequest {
            topics: vec![topic.into()],
        })
        .await
        .expect("Metadata")
        .into_inner()
}

/// Leader of each partition as `client`'s broker sees it, once it sees all of them.
/// Other brokers learn of a new topic through their catalog watch, hence the bounded poll.
async fn leaders(client: &mut RawClient, topic: &str, partitions: usize) -> Vec<i32> {
    let what = format!("{topic} shows up with its {partitions} partitions");
    let (leaders, _) = wait_until(PATIENCE, &what, || {
        let mut client = client.clone();
        async move {
            let answer = metadata(&mut client, topic).await;
            let t = &answer.topics[0];
            if t.error_code() != ErrorCode::None || t.partitions.len() != partitions {
                return Seen::Not(format!("{answer:?}"));
            }
            let mut by_partition: Vec<_> = t
                .partitions
                .iter()
                .map(|p| (p.partition, p.leader_id))
                .collect();
            by_partition.sort();
            Seen::Reached(by_partition.into_iter().map(|(_, leader)| leader).collect())
        }
    })
    .await;
    leaders
}

#[tokio::test]
async fn given_three_brokers_when_a_topic_is_created_then_every_broker_reports_the_same_evenly_spread_leaders(
) {
    let etcd = EtcdServer::start();
    let brokers = cluster(&etcd, 3);
    let mut first = raw::connect(&brokers[0].bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut first, "orders", 6).await,
        ErrorCode::None
    );
    let seen_by_creator = leaders(&mut first, "orders", 6).await;
    let mut count: HashMap<i32, usize> = HashMap::new();
    for leader in &seen_by_creator {
        *count.entry(*leader).or_default() += 1;
    }
    assert_eq!(
        count,
        HashMap::from([(1, 2), (2, 2), (3, 2)]),
        "leaders: {seen_by_creator:?}"
    );
    for broker in &brokers[1..] {
        let mut client = raw::connect(&broker.bootstrap()).await;
        assert_eq!(leaders(&mut client, "orders", 6).await, seen_by_creator);
    }
    let answer = metadata(&mut first, "orders").await;
    for p in &answer.topics[0].partitions {
        assert_eq!(
            (p.leader_epoch, p.replicas.clone(), p.isr.clone()),
            (0, vec![p.leader_id], vec![p.leader_id])
        );
    }
    assert_eq!(answer.brokers.len(), 3);
}

#[tokio::test]
async fn given_a_partition_when_a_non_leader_is_asked_then_not_leader_or_follower_and_the_leader_accepts(
) {
    let etcd = EtcdServer::start();
    let brokers = cluster(&etcd, 3);
    let mut first = raw::connect(&brokers[0].bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut first, "orders", 3).await,
        ErrorCode::None
    );
    let leaders = leaders(&mut first, "orders", 3).await;
    for (partition, leader) in leaders.iter().enumerate() {
        let partition = partition as i32;
        for (i, broker) in brokers.iter().enumerate() {
            let mut client = raw::connect(&broker.bootstrap()).await;
            let _ = self::leaders(&mut client, "orders", 3).await;
            let batch = raw::idempotent_batch(100 + i as i64, 0, 0, &["x"]);
            let answer = raw::produce(&mut client, "orders", partition, batch).await;
            if i as i32 + 1 == *leader {
                assert_eq!(
                    (answer.error_code(), answer.base_offset),
                    (ErrorCode::None, 0)
                );
            } else {
                assert_eq!(
                    answer.error_code(),
                    ErrorCode::NotLeaderOrFollower,
                    "broker {} p{partition}",
                    i + 1
                );
                assert!(
                    answer
                        .error_message
                        .contains(&format!("leader: broker {leader}")),
                    "{}",
                    answer.error_message
                );
                let fetched = raw::fetch(&mut client, "orders", partition, 0).await;
                assert_eq!(fetched.error_code(), ErrorCode::NotLeaderOrFollower);
            }
        }
        let mut leader_client = raw::connect(&brokers[*leader as usize - 1].bootstrap()).await;
        assert_eq!(
            raw::values(&raw::read_partition(&mut leader_client, "orders", partition).await),
            vec!["x"]
        );
    }
}

#[tokio::test]
async fn given_bad_replication_factors_or_a_taken_name_then_creation_is_refused_and_nothing_changes(
) {
    let etcd = EtcdServer::start();
    let brokers = cluster(&etcd, 2);
    let mut first = raw::connect(&brokers[0].bootstrap()).await;
    let mut second = raw::connect(&brokers[1].bootstrap()).await;
    for factor in [3, 5] {
        let answer = first
            .create_topics(CreateTopicsRequest {
                topics: vec![CreatableTopic {
                    name: "r".into(),
                    num_partitions: 1,
                    replication_factor: factor,
                    unclean_leader_election: false,
                    coordinator_id: None,
                    configs: Vec::new(),
                }],
            })
            .await
            .expect("CreateTopics")
            .into_inner();
        assert_eq!(
            answer.topics[0].error_code(),
            ErrorCode::InvalidReplicationFactor,
            "factor {factor}"
        );
    }
    assert_eq!(
        metadata(&mut first, "r").await.topics[0].error_code(),
        ErrorCode::UnknownTopicOrPartition
    );
    // Two brokers race to create one name: exactly one wins.
    let (a, b) = tokio::join!(
        raw::create_topic(&mut first, "race", 4),
        raw::create_topic(&mut second, "race", 4)
    );
    let mut codes = vec![a, b];
    codes.sort_by_key(|c| *c as i32);
    assert_eq!(codes, vec![ErrorCode::None, ErrorCode::TopicAlreadyExists]);
    assert_eq!(leaders(&mut first, "race", 4).await.len(), 4);
}

#[tokio::test]
async fn given_a_broker_killed_when_restarted_then_it_reopens_its_partitions_from_the_catalog() {
    let etcd = EtcdServer::start();
    let mut brokers = cluster(&etcd, 2);
    let mut first = raw::connect(&brokers[0].bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut first, "orders", 2).await,
        ErrorCode::None
    );
    let leaders = leaders(&mut first, "orders", 2).await;
    let partition = leaders
        .iter()
        .position(|l| *l == 2)
        .expect("broker 2 leads a partition") as i32;
    let mut second = raw::connect(&brokers[1].bootstrap()).await;
    let _ = self::leaders(&mut second, "orders", 2).await;
    let answer = raw::produce(
        &mut second,
        "orders",
        partition,
        raw::idempotent_batch(9, 0, 0, &["kept"]),
    )
    .await;
    assert_eq!(answer.error_code(), ErrorCode::None);
    brokers[1].kill();
    brokers[1].restart();
    let mut second = raw::connect(&brokers[1].bootstrap()).await;
    assert_eq!(
        raw::values(&raw::read_partition(&mut second, "orders", partition).await),
        vec!["kept"]
    );
    let dup = raw::produce(
        &mut second,
        "orders",
        partition,
        raw::idempotent_batch(9, 0, 0, &["kept"]),
    )
    .await;
    assert_eq!(
        (dup.error_code(), dup.base_offset),
        (ErrorCode::None, 0),
        "producer state came back too"
    );
}
