//! Guarantee: a deleted topic is gone everywhere (no partition directory on any broker,
//! no key in etcd), its producers and consumers get a clear unknown-topic error instead
//! of hanging, a broker that was down deletes its copy when it returns, and a topic
//! created again under the name is a new incarnation (another topic id) that starts
//! empty on every replica. Internal and unknown topics are refused and nothing changes.

use std::path::Path;
use std::time::Duration;

use etcd_client::{Client, GetOptions};
use idem_broker::cluster::catalog::EtcdCatalog;
use idem_broker::topic_config::TopicConfig;
use idem_broker::topic_id::{TopicId, TOPIC_ID_FILE};
use idem_broker::topic_spec::TopicSpec;
use idem_client::{
    Admin, ClientError, Consumer, ConsumerConfig, Delivery, Isolation, OffsetSpec, Producer,
};
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::ErrorCode;
use idem_tests::cli::idem;
use idem_tests::sdk::{self, send_one};
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::{BrokerProcess, Cluster};

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 2;

async fn admin(bootstrap: &str) -> Admin {
    Admin::connect(bootstrap).await.expect("connect")
}

/// Whether an SDK error says the topic (or partition) does not exist.
fn is_unknown_topic(e: &ClientError) -> bool {
    matches!(e, ClientError::UnknownTopic { .. })
        || e.code() == Some(ErrorCode::UnknownTopicOrPartition)
}

/// The partition directories of `topic` in a broker's data dir.
fn partition_dirs(data_dir: &Path, topic: &str) -> Vec<String> {
    let prefix = format!("{topic}-");
    std::fs::read_dir(data_dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| {
                    name.strip_prefix(&prefix)
                        .is_some_and(|p| p.parse::<i32>().is_ok())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The etcd keys that name `topic` (its spec and its partition states).
async fn etcd_keys(endpoint: &str, topic: &str) -> Vec<String> {
    let mut client = Client::connect([endpoint], None).await.expect("etcd");
    let answer = client
        .get(
            "/idem/",
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .expect("etcd get");
    answer
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .filter(|k| {
            k.ends_with(&format!("/topics/{topic}")) || k.contains(&format!("/partitions/{topic}/"))
        })
        .collect()
}

/// The topic id broker `bootstrap` reports for `topic`, once it lists the topic.
async fn topic_id(bootstrap: &str, topic: &str) -> String {
    let admin = admin(bootstrap).await;
    let (id, _) = wait_until(PATIENCE, &format!("{bootstrap} lists {topic}"), || async {
        let metadata = admin.metadata(&[topic]).await.ok();
        let found = metadata
            .as_ref()
            .and_then(|m| m.topic(topic))
            .filter(|t| t.error.is_none() && !t.topic_id.is_empty())
            .map(|t| t.topic_id.clone());
        seen_if(found.clone().unwrap_or_default(), found.is_some())
    })
    .await;
    id
}

/// Waits until broker `bootstrap` no longer lists `topic`.
async fn unlisted(bootstrap: &str, topic: &str) {
    let admin = admin(bootstrap).await;
    wait_until(
        PATIENCE,
        &format!("{bootstrap} no longer lists {topic}"),
        || async {
            let error = admin
                .metadata(&[topic])
                .await
                .ok()
                .and_then(|m| m.topic(topic).map(|t| t.error));
            seen_if(
                error,
                error == Some(Some(ErrorCode::UnknownTopicOrPartition)),
            )
        },
    )
    .await;
}

fn cluster_dirs_gone(cluster: &Cluster, ids: &[i32], topic: &str) -> Vec<(i32, Vec<String>)> {
    ids.iter()
        .map(|id| (*id, partition_dirs(cluster.broker(*id).data_dir(), topic)))
        .filter(|(_, dirs)| !dirs.is_empty())
        .collect()
}

async fn wait_dirs_gone(cluster: &Cluster, ids: &[i32], topic: &str) {
    wait_until(
        PATIENCE,
        &format!("no broker holds a directory of {topic}"),
        || async {
            let left = cluster_dirs_gone(cluster, ids, topic);
            let gone = left.is_empty();
            seen_if(left, gone)
        },
    )
    .await;
}

async fn latest(admin: &Admin, topic: &str, partition: i32) -> i64 {
    admin
        .list_offsets(
            topic,
            partition,
            OffsetSpec::Latest,
            Isolation::ReadUncommitted,
        )
        .await
        .expect("list offsets")
}

/// Sends until a send fails, and returns that error; panics when sends keep
/// succeeding past `within`.
async fn first_failure(producer: &Producer, within: Duration) -> ClientError {
    let started = std::time::Instant::now();
    let mut n = 0;
    loop {
        let partition = n % PARTITIONS;
        match tokio::time::timeout(within, send_one(producer, TOPIC, partition, "after")).await {
            Err(_) => panic!("a send neither succeeded nor failed within {within:?}"),
            Ok(Err(e)) => return e,
            Ok(Ok(_)) => {}
        }
        n += 1;
        assert!(
            started.elapsed() < within,
            "sends kept succeeding for {within:?} after the deletion"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls until a poll fails, and returns that error; panics after [`PATIENCE`].
async fn poll_failure(consumer: &mut Consumer) -> ClientError {
    let started = std::time::Instant::now();
    while started.elapsed() < PATIENCE {
        if let Err(e) = consumer.poll(Duration::from_millis(200)).await {
            return e;
        }
    }
    panic!("the consumer kept polling without an error for {PATIENCE:?} after the deletion");
}

#[tokio::test]
async fn given_a_producer_and_a_consumer_when_the_topic_is_deleted_then_they_fail_with_unknown_topic_nothing_remains_and_a_new_topic_of_the_name_is_empty(
) {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_topic(TOPIC, PARTITIONS, 3).await;
    for p in 0..PARTITIONS {
        cluster.leader_of(TOPIC, p).await;
    }
    let bootstrap = cluster.bootstrap();
    let producer = sdk::with_timeouts(
        &bootstrap,
        Delivery::ExactlyOnce,
        Duration::from_secs(5),
        Duration::from_secs(20),
    )
    .await;
    for p in 0..PARTITIONS {
        for i in 0..3 {
            send_one(&producer, TOPIC, p, &format!("v{i}"))
                .await
                .expect("send before the deletion");
        }
    }
    let mut consumer = Consumer::connect(
        &bootstrap,
        ConsumerConfig {
            max_wait: Duration::from_millis(50),
            ..ConsumerConfig::default()
        },
    )
    .await
    .expect("consumer");
    consumer.assign((0..PARTITIONS).map(|p| (TOPIC.to_string(), p)).collect());
    for p in 0..PARTITIONS {
        consumer.seek_to_beginning(TOPIC, p).expect("seek");
    }
    let mut read = 0;
    while read < 6 {
        read += consumer
            .poll(Duration::from_secs(5))
            .await
            .expect("poll before the deletion")
            .len();
    }
    let old_id = topic_id(&bootstrap, TOPIC).await;
    let dirs: Vec<_> = cluster
        .ids()
        .iter()
        .map(|id| partition_dirs(cluster.broker(*id).data_dir(), TOPIC).len())
        .collect();
    assert_eq!(
        dirs,
        vec![PARTITIONS as usize; 3],
        "every broker hosts both"
    );

    let admin = admin(&bootstrap).await;
    admin.delete_topic(TOPIC).await.expect("delete");

    let error = first_failure(&producer, Duration::from_secs(30)).await;
    assert!(is_unknown_topic(&error), "the producer's error: {error:?}");
    let error = poll_failure(&mut consumer).await;
    assert!(is_unknown_topic(&error), "the consumer's error: {error:?}");

    wait_dirs_gone(&cluster, &cluster.ids(), TOPIC).await;
    let endpoint = cluster.etcd(0).endpoint();
    assert_eq!(etcd_keys(&endpoint, TOPIC).await, Vec::<String>::new());
    for id in cluster.ids() {
        unlisted(&cluster.broker(id).bootstrap(), TOPIC).await;
    }

    cluster.create_topic(TOPIC, PARTITIONS, 3).await;
    for p in 0..PARTITIONS {
        let leader = cluster.leader_of(TOPIC, p).await.leader_id;
        let leader = self::admin(&cluster.broker(leader).bootstrap()).await;
        assert_eq!(
            latest(&leader, TOPIC, p).await,
            0,
            "partition {p} starts empty"
        );
    }
    let new_id = topic_id(&bootstrap, TOPIC).await;
    assert_ne!(new_id, old_id, "a new incarnation has another id");
    let fresh = sdk::one_record_per_batch(&bootstrap, Delivery::ExactlyOnce).await;
    let written = send_one(&fresh, TOPIC, 0, "new").await.expect("send");
    assert_eq!(written.offset, 0);
}

#[tokio::test]
async fn given_a_broker_down_when_the_topic_is_deleted_then_it_deletes_its_copy_when_it_returns() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_topic(TOPIC, PARTITIONS, 3).await;
    for p in 0..PARTITIONS {
        cluster.leader_of(TOPIC, p).await;
    }
    cluster.kill(3);
    let admin = admin(&cluster.broker(1).bootstrap()).await;
    admin.delete_topic(TOPIC).await.expect("delete");
    wait_dirs_gone(&cluster, &[1, 2], TOPIC).await;
    assert_eq!(
        partition_dirs(cluster.broker(3).data_dir(), TOPIC).len(),
        PARTITIONS as usize,
        "the broker that is down still has its copy"
    );

    cluster.restart(3);
    wait_dirs_gone(&cluster, &[3], TOPIC).await;
    unlisted(&cluster.broker(3).bootstrap(), TOPIC).await;
    assert_eq!(
        etcd_keys(&cluster.etcd(0).endpoint(), TOPIC).await,
        Vec::<String>::new(),
        "nothing resurrected"
    );
}

#[tokio::test]
async fn given_a_broker_down_when_the_topic_is_deleted_and_created_again_then_it_returns_serving_the_new_empty_one(
) {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_topic(TOPIC, 1, 3).await;
    cluster.leader_of(TOPIC, 0).await;
    let producer = sdk::one_record_per_batch(&cluster.bootstrap(), Delivery::ExactlyOnce).await;
    for i in 0..5 {
        send_one(&producer, TOPIC, 0, &format!("old{i}"))
            .await
            .expect("send");
    }
    let old_id = topic_id(&cluster.bootstrap(), TOPIC).await;
    cluster.kill(3);
    let admin = admin(&cluster.broker(1).bootstrap()).await;
    admin.delete_topic(TOPIC).await.expect("delete");
    wait_dirs_gone(&cluster, &[1, 2], TOPIC).await;
    // Created again with broker 3 among the replicas, as if it had been there: the
    // catalog is written directly, since a creation places replicas on live brokers.
    let catalog = EtcdCatalog::connect(&[cluster.etcd(0).endpoint()], "/idem")
        .await
        .expect("catalog");
    let spec = TopicSpec {
        name: TOPIC.into(),
        topic_id: TopicId::random(),
        partitions: 1,
        replication_factor: 3,
        min_insync_replicas: 2,
        unclean_leader_election: false,
        config: TopicConfig::default(),
    };
    catalog
        .create_topic(&spec, &[1, 2, 3])
        .await
        .expect("create again");
    let new_id = topic_id(&cluster.broker(1).bootstrap(), TOPIC).await;
    assert_eq!(new_id, spec.topic_id.to_string());
    assert_ne!(new_id, old_id);

    cluster.restart(3);
    let data_dir = cluster.broker(3).data_dir().join(format!("{TOPIC}-0"));
    wait_until(PATIENCE, "broker 3 records the new topic id", || async {
        let recorded = std::fs::read_to_string(data_dir.join(TOPIC_ID_FILE)).unwrap_or_default();
        let reached = recorded.trim() == new_id;
        seen_if(recorded, reached)
    })
    .await;
    // Broker 3 in sync, then the only replica left: it leads, and what it serves is
    // the new incarnation's log, not the old one's five records.
    cluster
        .wait_for(1, TOPIC, 0, |p| p.isr.contains(&3) && p.leader_id >= 0)
        .await;
    cluster.kill(1);
    cluster.kill(2);
    let led = cluster.wait_for(3, TOPIC, 0, |p| p.leader_id == 3).await;
    assert_eq!(
        led.log_end_offset, 0,
        "broker 3 serves the new, empty log: {led:?}"
    );
    let admin = self::admin(&cluster.broker(3).bootstrap()).await;
    assert_eq!(latest(&admin, TOPIC, 0).await, 0);
}

#[tokio::test]
async fn given_a_topic_recorded_before_topic_ids_then_the_brokers_give_it_one_id_and_record_it_in_every_replica(
) {
    let mut cluster = Cluster::start(3, &[]);
    let catalog = EtcdCatalog::connect(&[cluster.etcd(0).endpoint()], "/idem")
        .await
        .expect("catalog");
    let spec = TopicSpec {
        name: TOPIC.into(),
        topic_id: TopicId::ZERO,
        partitions: 1,
        replication_factor: 3,
        min_insync_replicas: 2,
        unclean_leader_election: false,
        config: TopicConfig::default(),
    };
    catalog
        .create_topic(&spec, &[1, 2, 3])
        .await
        .expect("create");
    let id = topic_id(&cluster.bootstrap(), TOPIC).await;
    let (stored, _) = catalog
        .read_topic(TOPIC)
        .await
        .expect("read")
        .expect("ready");
    assert_eq!(stored.topic_id.to_string(), id, "the id given is in etcd");
    for broker in cluster.ids() {
        assert_eq!(
            topic_id(&cluster.broker(broker).bootstrap(), TOPIC).await,
            id
        );
        let file = cluster
            .broker(broker)
            .data_dir()
            .join(format!("{TOPIC}-0"))
            .join(TOPIC_ID_FILE);
        wait_until(
            PATIENCE,
            &format!("broker {broker} records the id"),
            || async {
                let recorded = std::fs::read_to_string(&file).unwrap_or_default();
                let reached = recorded.trim() == id;
                seen_if(recorded, reached)
            },
        )
        .await;
    }
}

#[tokio::test]
async fn given_internal_or_unknown_topics_when_deletion_is_asked_then_it_is_refused_by_name_and_nothing_changes(
) {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_topic(TOPIC, 1, 3).await;
    cluster.leader_of(TOPIC, 0).await;
    let keys_before = etcd_keys(&cluster.etcd(0).endpoint(), TOPIC).await;
    let id_before = topic_id(&cluster.bootstrap(), TOPIC).await;
    let admin = admin(&cluster.bootstrap()).await;
    let outcomes = admin
        .delete_topics(&[TXN_LOG_TOPIC, "__consumer_offsets", "missing"])
        .await
        .expect("answered");
    let codes: Vec<(String, Option<ErrorCode>)> = outcomes
        .iter()
        .map(|(name, outcome)| (name.clone(), outcome.as_ref().err().and_then(|e| e.code())))
        .collect();
    assert_eq!(
        codes,
        vec![
            (
                TXN_LOG_TOPIC.to_string(),
                Some(ErrorCode::InvalidTopicException)
            ),
            (
                "__consumer_offsets".to_string(),
                Some(ErrorCode::InvalidTopicException)
            ),
            (
                "missing".to_string(),
                Some(ErrorCode::UnknownTopicOrPartition)
            ),
        ]
    );
    for (name, outcome) in &outcomes {
        let e = outcome.as_ref().expect_err("refused");
        assert!(
            e.to_string().contains(name.as_str()),
            "{name} not named: {e}"
        );
    }
    let internal = outcomes[0].1.as_ref().expect_err("refused").to_string();
    assert!(internal.contains("internal"), "{internal}");
    assert_eq!(
        etcd_keys(&cluster.etcd(0).endpoint(), TOPIC).await,
        keys_before
    );
    assert_eq!(topic_id(&cluster.bootstrap(), TOPIC).await, id_before);
    assert_eq!(
        partition_dirs(cluster.broker(1).data_dir(), TOPIC).len(),
        1,
        "untouched"
    );
}

#[tokio::test]
async fn given_a_single_broker_when_a_topic_is_deleted_and_created_again_then_its_data_dir_goes_and_the_new_one_is_empty(
) {
    let broker = BrokerProcess::start();
    let bootstrap = broker.bootstrap();
    let admin = admin(&bootstrap).await;
    admin
        .create_topic(TOPIC, PARTITIONS, 1)
        .await
        .expect("create");
    let producer = sdk::one_record_per_batch(&bootstrap, Delivery::ExactlyOnce).await;
    for p in 0..PARTITIONS {
        send_one(&producer, TOPIC, p, "old").await.expect("send");
    }
    let old_id = topic_id(&bootstrap, TOPIC).await;
    admin.delete_topic(TOPIC).await.expect("delete");
    assert_eq!(
        partition_dirs(broker.data_dir(), TOPIC),
        Vec::<String>::new()
    );
    let error = first_failure(&producer, Duration::from_secs(30)).await;
    assert!(is_unknown_topic(&error), "{error:?}");
    let again = admin.delete_topic(TOPIC).await.expect_err("already gone");
    assert_eq!(again.code(), Some(ErrorCode::UnknownTopicOrPartition));

    admin
        .create_topic(TOPIC, PARTITIONS, 1)
        .await
        .expect("create again");
    for p in 0..PARTITIONS {
        assert_eq!(latest(&admin, TOPIC, p).await, 0);
    }
    assert_ne!(topic_id(&bootstrap, TOPIC).await, old_id);
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn given_the_cli_when_topics_are_deleted_then_it_reports_each_and_refuses_internal_and_unknown_ones(
) {
    let broker = BrokerProcess::start();
    let bootstrap = broker.bootstrap();
    let run = |args: &[&str]| idem(&bootstrap, args);
    let created = run(&["topic", "create", TOPIC, "--partitions", "2"]);
    assert!(created.status.success(), "{}", stderr(&created));
    let described = run(&["topic", "describe", TOPIC]);
    assert!(
        stdout(&described).contains("partition(s), topic id "),
        "{}",
        stdout(&described)
    );

    let deleted = run(&["topic", "delete", TOPIC]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    assert!(
        stdout(&deleted).contains("deleted topic orders"),
        "{}",
        stdout(&deleted)
    );
    let listed = run(&["topic", "list"]);
    assert!(!stdout(&listed).contains(TOPIC), "{}", stdout(&listed));
    assert!(partition_dirs(broker.data_dir(), TOPIC).is_empty());

    let refused = run(&["topic", "delete", TXN_LOG_TOPIC, TOPIC]);
    assert!(!refused.status.success());
    let err = stderr(&refused);
    assert!(
        err.contains(TXN_LOG_TOPIC) && err.contains("internal"),
        "{err}"
    );
    assert!(
        err.contains("orders: refused") && err.contains("unknown topic"),
        "{err}"
    );
    assert!(err.contains("2 of 2 deletion(s) refused"), "{err}");
}
