//! Guarantee: a topic's settings are stored with the topic, every broker describes the
//! same ones, a change reaches the partitions and acts there, and bad input is refused
//! by name (INVALID_CONFIG) and changes nothing. One contract, run on a single broker
//! (topics.json) and on a 3-broker cluster (the etcd catalog).

use idem_broker::cluster::catalog::EtcdCatalog;
use idem_broker::topic_config::TopicConfig;
use idem_broker::topic_id::TopicId;
use idem_broker::topic_spec::TopicSpec;
use idem_client::{Admin, AlterConfigOp, ClientError, NewTopic, TopicConfigEntry};
use idem_proto::ErrorCode;
use idem_tests::cli::idem;
use idem_tests::etcd::EtcdServer;
use idem_tests::raw;
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::{BrokerProcess, Cluster};

const TOPIC: &str = "orders";
const WEEK_MS: &str = "604800000";
const DEFAULT_MAX_MESSAGE_BYTES: &str = "1048576";

/// The brokers the contract asks: one alone, or three sharing etcd.
enum Backend {
    Single(BrokerProcess),
    Cluster(Cluster),
}

impl Backend {
    fn single() -> Backend {
        Backend::Single(BrokerProcess::start())
    }

    fn cluster() -> Backend {
        Backend::Cluster(Cluster::start(3, &[]))
    }

    fn replication_factor(&self) -> i32 {
        match self {
            Backend::Single(_) => 1,
            Backend::Cluster(_) => 3,
        }
    }

    fn bootstraps(&self) -> Vec<String> {
        match self {
            Backend::Single(broker) => vec![broker.bootstrap()],
            Backend::Cluster(cluster) => cluster
                .ids()
                .into_iter()
                .map(|id| cluster.broker(id).bootstrap())
                .collect(),
        }
    }

    /// The broker leading `TOPIC`-0, once every replica is in sync.
    async fn leader(&self) -> String {
        match self {
            Backend::Single(broker) => broker.bootstrap(),
            Backend::Cluster(cluster) => {
                let leader = cluster.leader_of(TOPIC, 0).await.leader_id;
                cluster.broker(leader).bootstrap()
            }
        }
    }
}

async fn admin(bootstrap: &str) -> Admin {
    Admin::connect(bootstrap).await.expect("connect")
}

/// `(value, is_default)` of every key, in name order.
fn by_key(entries: &[TopicConfigEntry]) -> Vec<(String, String, bool)> {
    entries
        .iter()
        .map(|e| (e.name.clone(), e.value.clone(), e.is_default))
        .collect()
}

fn entry<'a>(entries: &'a [(String, String, bool)], key: &str) -> (&'a str, bool) {
    let (_, value, is_default) = entries
        .iter()
        .find(|(k, _, _)| k == key)
        .unwrap_or_else(|| panic!("{key} not described: {entries:?}"));
    (value.as_str(), *is_default)
}

/// Waits until every broker describes `TOPIC` so that `expected` holds, and returns what
/// the first one describes.
async fn every_broker_describes(
    backend: &Backend,
    what: &str,
    expected: impl Fn(&[(String, String, bool)]) -> bool,
) -> Vec<(String, String, bool)> {
    let mut seen = Vec::new();
    for bootstrap in backend.bootstraps() {
        let admin = admin(&bootstrap).await;
        let what = format!("broker {bootstrap} describes {what}");
        let (entries, _) = wait_until(PATIENCE, &what, || async {
            match admin.describe_configs(TOPIC).await {
                Ok(entries) => {
                    let entries = by_key(&entries);
                    let reached = expected(&entries);
                    seen_if(entries, reached)
                }
                Err(e) => seen_if(vec![("error".into(), e.to_string(), false)], false),
            }
        })
        .await;
        seen.push(entries);
    }
    assert!(
        seen.windows(2).all(|w| w[0] == w[1]),
        "brokers disagree: {seen:?}"
    );
    seen.swap_remove(0)
}

/// Produces one batch of one record of `value_bytes` bytes to the leader of `TOPIC`-0.
async fn produce(leader: &str, producer_id: i64, value_bytes: usize) -> ErrorCode {
    let mut client = raw::connect(leader).await;
    let value = "x".repeat(value_bytes);
    let batch = raw::idempotent_batch(producer_id, 0, 0, &[value.as_str()]);
    raw::produce(&mut client, TOPIC, 0, batch)
        .await
        .error_code()
}

async fn create_alter_and_delete(backend: Backend) {
    let first = admin(&backend.bootstraps()[0]).await;
    first
        .create_topic_with(
            NewTopic::new(TOPIC, 1)
                .replication_factor(backend.replication_factor())
                .config("retention.ms", "3600000")
                .config("max.message.bytes", "100000"),
        )
        .await
        .expect("create with configs");
    let created = every_broker_describes(&backend, "the configs of the create", |e| {
        entry(e, "retention.ms") == ("3600000", false)
            && entry(e, "max.message.bytes") == ("100000", false)
    })
    .await;
    assert_eq!(entry(&created, "segment.ms"), (WEEK_MS, true));
    assert_eq!(entry(&created, "cleanup.policy"), ("delete", true));
    let min_isr = if backend.replication_factor() >= 3 {
        "2"
    } else {
        "1"
    };
    assert_eq!(entry(&created, "min.insync.replicas"), (min_isr, true));

    first
        .alter_configs(
            TOPIC,
            &[
                AlterConfigOp::set("max.message.bytes", "200"),
                AlterConfigOp::delete("retention.ms"),
            ],
            false,
        )
        .await
        .expect("alter");
    every_broker_describes(&backend, "the altered configs", |e| {
        entry(e, "max.message.bytes") == ("200", false)
            && entry(e, "retention.ms") == (WEEK_MS, true)
    })
    .await;
    let leader = backend.leader().await;
    assert_eq!(
        produce(&leader, 1, 300).await,
        ErrorCode::MessageTooLarge,
        "a batch over the topic's max.message.bytes"
    );
    assert_eq!(produce(&leader, 2, 10).await, ErrorCode::None);

    first
        .alter_configs(TOPIC, &[AlterConfigOp::delete("max.message.bytes")], false)
        .await
        .expect("delete the override");
    every_broker_describes(&backend, "max.message.bytes back to the default", |e| {
        entry(e, "max.message.bytes") == (DEFAULT_MAX_MESSAGE_BYTES, true)
    })
    .await;
    assert_eq!(produce(&leader, 3, 300).await, ErrorCode::None);
}

#[tokio::test]
async fn given_a_single_broker_when_configs_are_created_altered_and_deleted_then_describe_and_produce_follow(
) {
    create_alter_and_delete(Backend::single()).await;
}

#[tokio::test]
async fn given_three_brokers_when_configs_are_created_altered_and_deleted_then_every_broker_describes_them_and_the_leader_acts(
) {
    create_alter_and_delete(Backend::cluster()).await;
}

fn assert_invalid_config(result: Result<(), ClientError>, key: &str) {
    let e = result.expect_err("refused");
    assert_eq!(e.code(), Some(ErrorCode::InvalidConfig), "{e}");
    assert!(e.to_string().contains(key), "{key} not named: {e}");
}

async fn bad_input_changes_nothing(backend: Backend) {
    let rf = backend.replication_factor();
    let first = admin(&backend.bootstraps()[0]).await;
    assert_invalid_config(
        first
            .create_topic_with(
                NewTopic::new(TOPIC, 1)
                    .replication_factor(rf)
                    .config("retention.ms", "-2"),
            )
            .await,
        "retention.ms",
    );
    let absent = first
        .describe_configs(TOPIC)
        .await
        .expect_err("not created");
    assert_eq!(absent.code(), Some(ErrorCode::UnknownTopicOrPartition));

    first
        .create_topic_with(
            NewTopic::new(TOPIC, 1)
                .replication_factor(rf)
                .config("retention.ms", "3600000"),
        )
        .await
        .expect("create");
    let before = every_broker_describes(&backend, "the created configs", |e| {
        entry(e, "retention.ms") == ("3600000", false)
    })
    .await;

    let above_rf = (rf + 1).to_string();
    let refusals: Vec<(Vec<AlterConfigOp>, &str)> = vec![
        (
            vec![AlterConfigOp::set("retention.hours", "5")],
            "retention.hours",
        ),
        (
            vec![AlterConfigOp::set("retention.ms", "-2")],
            "retention.ms",
        ),
        (vec![AlterConfigOp::set("segment.ms", "soon")], "segment.ms"),
        (
            vec![AlterConfigOp::set("segment.bytes", "100")],
            "segment.bytes",
        ),
        (
            vec![AlterConfigOp::set("min.insync.replicas", &above_rf)],
            "min.insync.replicas",
        ),
        (
            vec![AlterConfigOp::set("cleanup.policy", "purge")],
            "cleanup.policy",
        ),
        (
            vec![AlterConfigOp::delete("retention.hours")],
            "retention.hours",
        ),
        // One bad op refuses the good ones with it.
        (
            vec![
                AlterConfigOp::delete("retention.ms"),
                AlterConfigOp::set("segment.ms", "1000"),
                AlterConfigOp::set("max.message.bytes", "0"),
            ],
            "max.message.bytes",
        ),
    ];
    for bootstrap in backend.bootstraps() {
        let admin = admin(&bootstrap).await;
        for (ops, key) in &refusals {
            assert_invalid_config(admin.alter_configs(TOPIC, ops, false).await, key);
            assert_invalid_config(admin.alter_configs(TOPIC, ops, true).await, key);
        }
        admin
            .alter_configs(TOPIC, &[AlterConfigOp::set("segment.ms", "1000")], true)
            .await
            .expect("valid, but validate_only");
        let unknown = admin
            .alter_configs(
                "missing",
                &[AlterConfigOp::set("segment.ms", "1000")],
                false,
            )
            .await
            .expect_err("unknown topic");
        assert_eq!(
            unknown.code(),
            Some(ErrorCode::UnknownTopicOrPartition),
            "{unknown}"
        );
        let unknown = admin
            .describe_configs("missing")
            .await
            .expect_err("unknown topic");
        assert_eq!(
            unknown.code(),
            Some(ErrorCode::UnknownTopicOrPartition),
            "{unknown}"
        );
    }
    let after = every_broker_describes(&backend, "the configs as before", |_| true).await;
    assert_eq!(after, before);
}

#[tokio::test]
async fn given_a_single_broker_when_bad_configs_are_asked_then_invalid_config_names_the_key_and_nothing_changes(
) {
    bad_input_changes_nothing(Backend::single()).await;
}

#[tokio::test]
async fn given_three_brokers_when_bad_configs_are_asked_then_invalid_config_names_the_key_and_nothing_changes(
) {
    bad_input_changes_nothing(Backend::cluster()).await;
}

#[tokio::test]
async fn given_a_topic_in_etcd_when_its_spec_is_swapped_on_a_stale_revision_then_nothing_is_written(
) {
    let etcd = EtcdServer::start();
    let catalog = EtcdCatalog::connect(&etcd.endpoints(), "/idem")
        .await
        .expect("connect");
    let spec = TopicSpec {
        name: TOPIC.into(),
        topic_id: TopicId::random(),
        partitions: 2,
        replication_factor: 1,
        min_insync_replicas: 1,
        unclean_leader_election: false,
        config: TopicConfig::default(),
    };
    catalog.create_topic(&spec, &[1]).await.expect("create");
    let (read, revision) = catalog
        .read_topic(TOPIC)
        .await
        .expect("read")
        .expect("ready");
    assert_eq!(read, spec);
    let with = |key: &str, value: &str| TopicSpec {
        config: TopicConfig::from_pairs([(key, value)]).expect("valid"),
        ..spec.clone()
    };
    let first = with("retention.ms", "1000");
    assert!(catalog
        .compare_and_set_topic(revision, &first)
        .await
        .expect("swap"));
    assert!(
        !catalog
            .compare_and_set_topic(revision, &with("segment.ms", "5"))
            .await
            .expect("swap"),
        "a second change based on the same read loses"
    );
    let (now, _) = catalog
        .read_topic(TOPIC)
        .await
        .expect("read")
        .expect("ready");
    assert_eq!(now, first);
    let snapshot = catalog.snapshot().await.expect("snapshot");
    let (spec_in_snapshot, partitions) = &snapshot.topics[TOPIC];
    assert_eq!(spec_in_snapshot, &first);
    assert!(
        partitions.iter().all(Option::is_some),
        "partitions untouched"
    );
    assert!(catalog.read_topic("missing").await.expect("read").is_none());
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn given_the_cli_when_a_topic_is_created_with_configs_and_altered_then_describe_prints_them() {
    let broker = BrokerProcess::start();
    let bootstrap = broker.bootstrap();
    let run = |args: &[&str]| idem(&bootstrap, args);
    let created = run(&[
        "topic",
        "create",
        TOPIC,
        "--config",
        "retention.ms=60000",
        "--config",
        "max.message.bytes=5000",
    ]);
    assert!(created.status.success(), "{}", stderr(&created));

    let described = stdout(&run(&["topic", "describe", TOPIC]));
    assert!(
        described.contains("topic orders: 1 partition(s)"),
        "{described}"
    );
    for line in [
        "  retention.ms=60000\n",
        "  max.message.bytes=5000\n",
        "  segment.ms=604800000 (default)\n",
    ] {
        assert!(
            described.contains(line),
            "{line:?} missing from:\n{described}"
        );
    }

    let altered = run(&[
        "topic",
        "alter-config",
        TOPIC,
        "--set",
        "segment.ms=1000",
        "--delete",
        "retention.ms",
    ]);
    assert!(altered.status.success(), "{}", stderr(&altered));
    let described = stdout(&run(&["topic", "describe", TOPIC]));
    for line in [
        "  segment.ms=1000\n",
        "  retention.ms=604800000 (default)\n",
        "  max.message.bytes=5000\n",
    ] {
        assert!(
            described.contains(line),
            "{line:?} missing from:\n{described}"
        );
    }

    let checked = run(&[
        "topic",
        "alter-config",
        TOPIC,
        "--set",
        "segment.ms=2000",
        "--validate-only",
    ]);
    assert!(checked.status.success(), "{}", stderr(&checked));
    assert!(
        stdout(&checked).contains("nothing changed"),
        "{}",
        stdout(&checked)
    );

    let refused = run(&["topic", "alter-config", TOPIC, "--set", "retention.ms=-2"]);
    assert!(!refused.status.success());
    let message = stderr(&refused);
    assert!(
        message.contains("InvalidConfig") && message.contains("retention.ms"),
        "{message}"
    );
    let refused = run(&["topic", "create", "other", "--config", "nope=1"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("\"nope\""),
        "{}",
        stderr(&refused)
    );

    assert_eq!(stdout(&run(&["topic", "describe", TOPIC])), described);
}
