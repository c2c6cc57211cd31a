//! Kafka's transactional producer works unchanged against idem (issue 30): a
//! confluent-kafka (librdkafka) producer with `transactional.id` commits and aborts
//! through a broker's Kafka listener, which proxies the coordinator APIs to idem's
//! coordinators; read_committed readers (kcat) see each committed record once and no
//! aborted one; a second instance fences the first; a killed coordinator is found again
//! through the proxy; User:ANONYMOUS needs write on the transactional id.

use std::collections::BTreeMap;

use idem_client::credentials::Credentials;
use idem_client::{Admin, TlsConfig};
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_tests::groups::GroupClient;
use idem_tests::kafka_clients::{kcat_read, transactional, KafkaProxy, TransactionalSession};
use idem_tests::tls::{CertAuthority, TlsFiles};
use idem_tests::txn;
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::Cluster;
use serde_json::{json, Value};

use crate::acls::{binding, kafka_acl_cluster, Secrets};
use crate::kafka_tls::{kcat_read_tls, ssl_settings};

const KAFKA_LISTEN: [&str; 2] = ["--kafka-listen", "127.0.0.1:0"];

/// librdkafka's settings for these tests: failures show up within the test's patience.
const SETTINGS: [&str; 2] = ["transaction.timeout.ms=30000", "message.timeout.ms=30000"];

/// The values of `topic`'s `partition` as kcat reads them with `isolation`.
async fn values(kafka: &str, topic: &str, partition: i32, isolation: &str) -> Vec<String> {
    kcat_read(kafka, topic, partition, isolation)
        .await
        .into_iter()
        .map(|(_, value)| value)
        .collect()
}

/// Asserts every step line says the step succeeded.
fn assert_all_ok(steps: &[Value]) {
    for step in steps {
        assert_eq!(step["ok"], Value::Bool(true), "step failed: {step}");
    }
}

/// The steps of one transaction of producer `name`: begin, produce each
/// `(topic, partition, value)`, then commit, or flush and abort (flushed, the aborted
/// records are written before the abort, which would otherwise drop them unsent).
fn transaction(name: &str, records: &[(&str, i32, &str)], commit: bool) -> Vec<Value> {
    let mut steps = vec![json!(["begin", name])];
    steps.extend(
        records
            .iter()
            .map(|(topic, partition, value)| json!(["produce", name, topic, partition, value])),
    );
    if commit {
        steps.push(json!(["commit", name]));
    } else {
        steps.push(json!(["flush", name]));
        steps.push(json!(["abort", name]));
    }
    steps
}

fn plan(parts: impl IntoIterator<Item = Vec<Value>>) -> Value {
    Value::Array(parts.into_iter().flatten().collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_kafka_transactional_producer_when_it_commits_aborts_and_commits_then_read_committed_sees_each_committed_record_once(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 2, 1).await;
    cluster.create_topic("audit", 1, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();

    let steps = plan([
        vec![json!(["init", "p", "checkout"])],
        transaction(
            "p",
            &[("orders", 0, "o1"), ("audit", 0, "a1"), ("orders", 1, "o2")],
            true,
        ),
        transaction("p", &[("orders", 0, "x1"), ("audit", 0, "x2")], false),
        transaction(
            "p",
            &[("orders", 0, "o3"), ("audit", 0, "a3"), ("orders", 1, "o4")],
            true,
        ),
    ]);
    let (ran, reports) = transactional(&kafka, &steps, &SETTINGS).await;
    assert_all_ok(&ran);
    // Every record acknowledged, the aborted ones too (they were flushed).
    assert_eq!(reports.len(), 8, "{reports:?}");
    assert!(reports.iter().all(|r| r["error"].is_null()), "{reports:?}");
    // The producer kept the epoch init_transactions gave it through all three: it is
    // the one the coordinator still holds.
    let described = txn::wait_for_description(
        &cluster.bootstrap(),
        "checkout",
        "completes its last commit",
        |t| t.state == "CompleteCommit",
    )
    .await;
    assert_eq!(described.producer_epoch, 0);

    let grpc = cluster.bootstrap();
    txn::wait_until_stable(&grpc, "orders", &[0, 1]).await;
    txn::wait_until_stable(&grpc, "audit", &[0]).await;
    assert_eq!(
        values(&kafka, "orders", 0, "read_committed").await,
        ["o1", "o3"]
    );
    assert_eq!(
        values(&kafka, "orders", 1, "read_committed").await,
        ["o2", "o4"]
    );
    assert_eq!(
        values(&kafka, "audit", 0, "read_committed").await,
        ["a1", "a3"]
    );
    // The aborted records were written; only read_committed leaves them out.
    assert_eq!(
        values(&kafka, "orders", 0, "read_uncommitted").await,
        ["o1", "x1", "o3"]
    );
    assert_eq!(
        values(&kafka, "audit", 0, "read_uncommitted").await,
        ["a1", "x2", "a3"]
    );
}

/// Every partition's `(partition, value)` of `topic` as one kcat run reads them with
/// `isolation`, grouped by partition in offset order.
async fn values_by_partition(
    kafka: &str,
    topic: &str,
    isolation: &str,
) -> BTreeMap<i32, Vec<String>> {
    let isolation = format!("isolation.level={isolation}");
    let read = idem_tests::kafka_clients::kcat(
        &[
            "-C", "-b", kafka, "-t", topic, "-e", "-q", "-f", "%p %s\n", "-X", &isolation,
        ],
        "",
    )
    .await;
    let mut by_partition: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for line in read.lines() {
        let (partition, value) = line.split_once(' ').expect("partition and value");
        by_partition
            .entry(partition.parse().expect("a partition"))
            .or_default()
            .push(value.to_string());
    }
    by_partition
}

/// Kafka transactions at the width users run: one librdkafka transaction writes a
/// record to each of 60 partitions of two topics led by three brokers (AddPartitionsToTxn
/// of 60 partitions, 60 BEGIN and 60 COMMIT or ABORT markers), then one aborts, then
/// one commits: read_committed sees exactly the two committed records of every
/// partition, read_uncommitted the aborted one between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_kafka_transactions_over_60_partitions_on_three_brokers_then_every_partition_holds_each_committed_record_once(
) {
    const PER_TOPIC: i32 = 30;
    let cluster = Cluster::start_with_coordinators(3, 1, &KAFKA_LISTEN, &[]).await;
    for topic in ["wide-orders", "wide-audit"] {
        cluster.create_topic(topic, PER_TOPIC, 2).await;
    }
    let kafka = cluster.broker(1).kafka_bootstrap();
    let every = |tag: &str| -> Vec<(String, i32, String)> {
        ["wide-orders", "wide-audit"]
            .iter()
            .flat_map(|topic| {
                (0..PER_TOPIC).map(move |p| (topic.to_string(), p, format!("{tag}-{p}")))
            })
            .collect()
    };
    let steps_of = |records: &[(String, i32, String)], commit: bool| {
        let refs: Vec<(&str, i32, &str)> = records
            .iter()
            .map(|(t, p, v)| (t.as_str(), *p, v.as_str()))
            .collect();
        transaction("p", &refs, commit)
    };
    let steps = plan([
        vec![json!(["init", "p", "wide-checkout"])],
        steps_of(&every("c1"), true),
        steps_of(&every("x"), false),
        steps_of(&every("c2"), true),
    ]);
    let (ran, reports) = transactional(&kafka, &steps, &SETTINGS).await;
    assert_all_ok(&ran);
    assert_eq!(
        reports.len(),
        180,
        "every record acknowledged, the aborted too"
    );
    assert!(reports.iter().all(|r| r["error"].is_null()), "{reports:?}");

    let grpc = cluster.bootstrap();
    let partitions: Vec<i32> = (0..PER_TOPIC).collect();
    for topic in ["wide-orders", "wide-audit"] {
        txn::wait_until_stable(&grpc, topic, &partitions).await;
        let committed = values_by_partition(&kafka, topic, "read_committed").await;
        let uncommitted = values_by_partition(&kafka, topic, "read_uncommitted").await;
        for p in 0..PER_TOPIC {
            let (c1, x, c2) = (format!("c1-{p}"), format!("x-{p}"), format!("c2-{p}"));
            assert_eq!(
                committed.get(&p).cloned().unwrap_or_default(),
                [c1.clone(), c2.clone()],
                "{topic}/{p} read_committed"
            );
            assert_eq!(
                uncommitted.get(&p).cloned().unwrap_or_default(),
                [c1, x, c2],
                "{topic}/{p} read_uncommitted"
            );
        }
    }
}

/// KIP-447's consume-transform-produce step: confluent-kafka's
/// send_offsets_to_transaction (AddOffsetsToTxn, then TxnOffsetCommit to the group's
/// coordinator, both through the proxy) makes the offsets the group's only with the
/// commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_offsets_sent_in_a_committed_and_an_aborted_kafka_transaction_then_the_group_has_only_the_committed_ones(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("incoming", 1, 1).await;
    cluster.create_topic("outgoing", 1, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    let grpc = cluster.bootstrap();

    let steps = json!([
        ["init", "p", "transformer"],
        ["begin", "p"],
        ["produce", "p", "outgoing", 0, "out-1"],
        ["send_offsets", "p", "readers", "incoming", 0, 5],
        ["commit", "p"],
        ["begin", "p"],
        ["produce", "p", "outgoing", 0, "out-2"],
        ["send_offsets", "p", "readers", "incoming", 0, 9],
        ["flush", "p"],
        ["abort", "p"],
    ]);
    let (ran, _) = transactional(&kafka, &steps, &SETTINGS).await;
    assert_all_ok(&ran);
    txn::wait_until_stable(&grpc, "outgoing", &[0]).await;
    let group = GroupClient::new(&grpc, "readers");
    // The offsets become the group's with the COMMIT marker, written after EndTxn's
    // answer; the aborted transaction's 9 never does.
    wait_until(
        PATIENCE,
        "the committed offsets are the group's",
        || async {
            let committed = group.committed("incoming", 1).await;
            if committed == [5] {
                Seen::Reached(())
            } else {
                Seen::Not(format!("{committed:?}"))
            }
        },
    )
    .await;
    txn::wait_for_description(&grpc, "transformer", "completes its abort", |t| {
        t.state == "CompleteAbort"
    })
    .await;
    assert_eq!(group.committed("incoming", 1).await, [5]);
    assert_eq!(
        values(&kafka, "outgoing", 0, "read_committed").await,
        ["out-1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_second_kafka_producer_with_the_same_transactional_id_when_it_initialises_then_the_first_is_fenced(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("ledger", 1, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();

    let steps = plan([
        vec![json!(["init", "first", "ledger-writer"])],
        transaction("first", &[("ledger", 0, "first-1")], true),
        vec![json!(["init", "second", "ledger-writer"])],
        transaction("first", &[("ledger", 0, "zombie")], true),
        transaction("second", &[("ledger", 0, "second-1")], true),
    ]);
    let (ran, _) = transactional(&kafka, &steps, &SETTINGS).await;
    assert_all_ok(&ran[..5]);
    // The first producer's commit after the second's init_transactions: fatal, fenced.
    let zombie_commit = &ran[7];
    assert_eq!(zombie_commit["step"], json!(["commit", "first"]));
    assert_eq!(zombie_commit["ok"], Value::Bool(false), "{zombie_commit}");
    assert_eq!(zombie_commit["fatal"], Value::Bool(true), "{zombie_commit}");
    let code = zombie_commit["code"].as_str().unwrap_or_default();
    assert!(
        ["_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"].contains(&code),
        "{zombie_commit}"
    );
    assert_all_ok(&ran[8..]);

    let grpc = cluster.bootstrap();
    txn::wait_until_stable(&grpc, "ledger", &[0]).await;
    assert_eq!(
        values(&kafka, "ledger", 0, "read_committed").await,
        ["first-1", "second-1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_three_brokers_when_the_coordinator_is_killed_between_kafka_transactions_then_the_next_commits_and_each_record_is_read_once(
) {
    let mut cluster = Cluster::start_with_coordinators(3, 2, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("spread", 3, 1).await;
    let mut leaders = BTreeMap::new();
    for partition in 0..3 {
        leaders.insert(
            partition,
            cluster.leader_of("spread", partition).await.leader_id,
        );
    }
    let distinct: std::collections::BTreeSet<_> = leaders.values().collect();
    assert!(
        distinct.len() > 1,
        "partitions led by one broker: {leaders:?}"
    );
    let kafka = cluster.broker(1).kafka_bootstrap();
    let grpc = cluster.bootstrap();

    let records = |round: usize| -> Vec<(String, i32)> {
        (0..3)
            .flat_map(|partition| {
                (0..2).map(move |i| (format!("r{round}-p{partition}-{i}"), partition))
            })
            .collect()
    };
    let mut steps = vec![json!(["init", "p", "spreader"])];
    for round in 0..3 {
        if round == 1 {
            steps.push(json!(["wait"]));
        }
        let batch = records(round);
        let batch: Vec<(&str, i32, &str)> = batch
            .iter()
            .map(|(value, partition)| ("spread", *partition, value.as_str()))
            .collect();
        steps.extend(transaction("p", &batch, true));
    }
    let mut session = TransactionalSession::start(&kafka, &Value::Array(steps), &SETTINGS);
    let before = session.until_waiting().await;
    assert_all_ok(&before);
    let owner = txn::find_coordinator(&grpc, "spreader").await;
    cluster.kill_coordinator(owner.coordinator_id);
    session.proceed().await;
    let (after, reports) = session.finish().await;
    assert_all_ok(&after);
    assert_eq!(reports.len(), 18, "{reports:?}");
    // The survivor took the id over: the client found it through the proxy.
    let successor = txn::find_coordinator(&grpc, "spreader").await;
    assert_ne!(successor.coordinator_id, owner.coordinator_id);

    txn::wait_until_stable(&grpc, "spread", &[0, 1, 2]).await;
    for partition in 0..3 {
        let expected: Vec<String> = (0..3)
            .flat_map(&records)
            .filter(|(_, p)| *p == partition)
            .map(|(value, _)| value)
            .collect();
        assert_eq!(
            values(&kafka, "spread", partition, "read_committed").await,
            expected,
            "partition {partition}: every committed record once, in order"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_acls_when_an_anonymous_kafka_producer_lacks_transactional_id_write_then_init_is_refused_until_an_acl_allows_it(
) {
    let secrets = Secrets::new();
    let (cluster, admin) = kafka_acl_cluster(&secrets).await;
    admin
        .create_topic("guarded", 1, 1)
        .await
        .expect("topic created by the operator");
    // The topic is open to anonymous clients; the transactional id is not.
    admin
        .create_acls(&[
            binding("User:ANONYMOUS", "topic", "guarded", "literal", "write"),
            binding("User:ANONYMOUS", "topic", "guarded", "literal", "read"),
        ])
        .await
        .expect("ACLs stored");
    let kafka = cluster.broker(1).kafka_bootstrap();
    wait_until(PATIENCE, "anonymous clients may read the topic", || async {
        let read = kcat_read_checked(&kafka).await;
        match read {
            Some(values) => Seen::Reached(values),
            None => Seen::Not("not yet".to_string()),
        }
    })
    .await;

    let steps = json!([["init", "p", "guarded-writer"]]);
    let (ran, _) = transactional(&kafka, &steps, &SETTINGS).await;
    assert_eq!(ran[0]["ok"], Value::Bool(false), "{ran:?}");
    assert_eq!(
        ran[0]["code"],
        json!("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
        "{ran:?}"
    );
    assert!(
        values(&kafka, "guarded", 0, "read_uncommitted")
            .await
            .is_empty(),
        "nothing written"
    );

    // Describe alone: FindCoordinator passes, InitProducerId does not. The broker
    // forwards with its own (super-user) credential, so this refusal is the Kafka
    // listener's own check.
    let acl = |operation: &str| {
        binding(
            "User:ANONYMOUS",
            "transactional-id",
            "guarded-writer",
            "literal",
            operation,
        )
    };
    admin
        .create_acls(&[acl("describe")])
        .await
        .expect("ACL stored");
    let (refused, _) = wait_until(PATIENCE, "the coordinator is found", || async {
        let (ran, _) = transactional(&kafka, &steps, &SETTINGS).await;
        let error = ran[0]["error"].as_str().unwrap_or_default().to_string();
        let found = !error.contains("find transaction coordinator");
        if found {
            Seen::Reached(ran)
        } else {
            Seen::Not(error)
        }
    })
    .await;
    assert_eq!(
        refused[0]["code"],
        json!("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
        "{refused:?}"
    );

    admin
        .create_acls(&[acl("write")])
        .await
        .expect("ACL stored");
    // ACLs reach the broker through an etcd watch: retry until init_transactions passes.
    let steps = plan([
        vec![json!(["init", "p", "guarded-writer"])],
        transaction("p", &[("guarded", 0, "allowed")], true),
    ]);
    let ((ran, _), _) = wait_until(PATIENCE, "the broker applies the new ACL", || async {
        let (ran, reports) = transactional(&kafka, &steps, &SETTINGS).await;
        let passed = ran.iter().all(|s| s["ok"] == Value::Bool(true));
        if passed {
            Seen::Reached((ran, reports))
        } else {
            Seen::Not(format!("{ran:?}"))
        }
    })
    .await;
    assert_all_ok(&ran);
    txn::wait_until_stable(&cluster.bootstrap(), "guarded", &[0]).await;
    assert_eq!(
        values(&kafka, "guarded", 0, "read_committed").await,
        ["allowed"]
    );
}

/// What kcat reads of `guarded` (read_uncommitted), or `None` while it may not.
async fn kcat_read_checked(kafka: &str) -> Option<Vec<String>> {
    let ran = idem_tests::kafka_clients::run(
        idem_tests::kafka_clients::kcat_bin(),
        &[
            "-b",
            kafka,
            "-C",
            "-t",
            "guarded",
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%s\\n",
        ],
        "",
    )
    .await;
    (ran.success && !ran.stderr.to_lowercase().contains("authoriz"))
        .then(|| ran.stdout.lines().map(str::to_string).collect())
}

/// A cluster whose members speak mutual TLS to each other: the broker dials the
/// coordinator it proxies with its peer certificate (and its Kafka listener speaks
/// mutual TLS too: the producer and the reader present the operator's certificate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_mutual_tls_cluster_when_a_kafka_producer_commits_then_the_broker_reaches_the_coordinator_over_tls(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = CertAuthority::new("idem cluster CA");
    let server = TlsFiles::write(dir.path(), "server", &ca.server(&[]), &ca);
    let tls_flags = server.server_flags("required");
    let mut broker_flags: Vec<&str> = tls_flags.iter().map(String::as_str).collect();
    broker_flags.extend_from_slice(&KAFKA_LISTEN);
    let coordinator_flags: Vec<&str> = tls_flags.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start(1, &broker_flags);
    cluster.spawn_coordinators(1, &coordinator_flags);
    let client = ca.client("operator");
    let operator = TlsFiles::write(dir.path(), "operator", &client, &ca);
    let tls = TlsConfig::new(ca.cert_pem()).with_client_identity(client.cert_pem, client.key_pem);
    let admin = Admin::connect_with(&cluster.bootstrap(), Credentials::none(), Some(tls))
        .await
        .expect("admin connects over mTLS");
    admin
        .create_topic("sealed", 1, 1)
        .await
        .expect("create topic");
    let kafka = cluster.broker(1).kafka_bootstrap();

    // init_transactions retries FindCoordinator until the coordinator owns the id.
    let steps = plan([
        vec![json!(["init", "p", "sealed-writer"])],
        transaction("p", &[("sealed", 0, "s1")], true),
        transaction("p", &[("sealed", 0, "s2")], true),
    ]);
    let ssl = ssl_settings(&operator.ca, Some(&operator));
    let settings: Vec<&str> = SETTINGS
        .into_iter()
        .chain(ssl.iter().map(String::as_str))
        .collect();
    let (ran, _) = transactional(&kafka, &steps, &settings).await;
    assert_all_ok(&ran);
    let mut read_committed = ssl.clone();
    read_committed.push("isolation.level=read_committed".into());
    wait_until(PATIENCE, "both commits are readable", || async {
        let read: Vec<String> = kcat_read_tls(&kafka, "sealed", &read_committed)
            .await
            .into_iter()
            .map(|(_, value)| value)
            .collect();
        let both = read == ["s1", "s2"];
        if both {
            Seen::Reached(())
        } else {
            Seen::Not(format!("{read:?}"))
        }
    })
    .await;
}

/// EndTxn's answer lost on the way back (the connection closed after the coordinator
/// decided): librdkafka sends the same EndTxn again, at the epoch it kept, and the
/// coordinator answers it again rather than refusing it; every committed record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_lost_end_txn_answers_when_librdkafka_retries_then_each_transaction_commits_once() {
    let proxy = KafkaProxy::bind().await;
    let advertised = proxy.addr().to_string();
    // Metadata and FindCoordinator name the proxy: the coordinator connection too.
    let cluster = Cluster::start_with_coordinators(
        1,
        1,
        &[
            KAFKA_LISTEN[0],
            KAFKA_LISTEN[1],
            "--kafka-advertise",
            &advertised,
        ],
        &[],
    )
    .await;
    proxy.forward_to(
        cluster
            .broker(1)
            .kafka_bootstrap()
            .parse()
            .expect("address"),
    );
    cluster.create_topic("receipts", 1, 1).await;
    const END_TXN: i16 = 26;
    proxy.lose_responses(END_TXN, 1, 2);

    let steps = plan([
        vec![json!(["init", "p", "receipts-writer"])],
        transaction("p", &[("receipts", 0, "r1")], true),
        transaction("p", &[("receipts", 0, "r2")], true),
        transaction("p", &[("receipts", 0, "r3")], true),
    ]);
    let (ran, _) = transactional(&advertised, &steps, &SETTINGS).await;
    assert_eq!(proxy.lost_responses(), 2, "the faults happened");
    assert_all_ok(&ran);
    txn::wait_until_stable(&cluster.bootstrap(), "receipts", &[0]).await;
    assert_eq!(
        values(&advertised, "receipts", 0, "read_committed").await,
        ["r1", "r2", "r3"]
    );
}

/// The window the kept epoch opens: EndTxn answered (PrepareCommit durable, the epoch
/// kept) but the markers not yet written, because the coordinator cannot reach the
/// partition's leader (its advertised address cut; it keeps its lease and its Kafka
/// listener); then the owning coordinator is SIGKILLed and the cut healed. Its
/// successor reads the kept end back from `__transaction_state`, writes the markers at
/// the transaction's own epoch, and librdkafka's next transaction, at the same epoch,
/// commits: nothing fenced, nothing hanging, each committed record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_kept_epoch_commit_with_markers_unwritten_when_the_coordinator_is_killed_then_the_successor_completes_it_and_the_next_commits(
) {
    let mut cluster = Cluster::start_linked_with(3, 2, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("ledger", 3, 1).await;
    let grpc = cluster.bootstrap();
    // The cut broker must not lead the id's `__transaction_state` partition, or
    // PrepareCommit itself could not be written.
    let found = txn::find_coordinator(&grpc, "ledger-writer").await;
    let state_leader = cluster
        .leader_of(TXN_LOG_TOPIC, found.txn_log_partition)
        .await
        .leader_id;
    let mut chosen = None;
    for partition in 0..3 {
        let leader = cluster.leader_of("ledger", partition).await.leader_id;
        if leader != state_leader {
            chosen = Some((partition, leader));
            break;
        }
    }
    let (partition, leader) = chosen.expect("a ledger partition led apart from the state");
    // The client bootstraps from a broker that is never cut.
    let observer = cluster.observer(&[leader]);
    let kafka = cluster.broker(observer).kafka_bootstrap();
    let grpc = cluster.broker(observer).bootstrap();

    let steps = plan([
        vec![json!(["init", "p", "ledger-writer"])],
        vec![
            json!(["begin", "p"]),
            json!(["produce", "p", "ledger", partition, "t1-a"]),
            json!(["produce", "p", "ledger", partition, "t1-b"]),
            json!(["flush", "p"]),
            json!(["wait"]),
            json!(["commit", "p"]),
            json!(["wait"]),
        ],
        transaction("p", &[("ledger", partition, "t2-a")], true),
    ]);
    let mut session = TransactionalSession::start(&kafka, &steps, &SETTINGS);
    let before = session.until_waiting().await;
    assert_all_ok(&before);
    let initialised = txn::wait_for_description(&grpc, "ledger-writer", "is described", |t| {
        t.state == "Ongoing"
    })
    .await;

    cluster.cut_inbound(leader);
    session.proceed().await;
    let committed = session.until_waiting().await;
    assert_all_ok(&committed);
    let owner = txn::find_coordinator(&grpc, "ledger-writer").await;
    // EndTxn was answered before the markers were written: the state stays
    // PrepareCommit while the leader is out of reach (CompleteCommit fails the wait).
    let in_window = txn::wait_for_description(&grpc, "ledger-writer", "waits for markers", |t| {
        t.state == "PrepareCommit"
    })
    .await;
    assert_eq!(in_window.producer_epoch, initialised.producer_epoch);

    cluster.kill_coordinator(owner.coordinator_id);
    cluster.heal_inbound(leader);
    session.proceed().await;
    let (after, reports) = session.finish().await;
    assert_all_ok(&after);
    assert_eq!(reports.len(), 3, "{reports:?}");
    assert!(reports.iter().all(|r| r["error"].is_null()), "{reports:?}");

    let successor = txn::find_coordinator(&grpc, "ledger-writer").await;
    assert_ne!(successor.coordinator_id, owner.coordinator_id);
    let done = txn::wait_for_description(&grpc, "ledger-writer", "completes", |t| {
        t.state == "CompleteCommit"
    })
    .await;
    assert_eq!(
        done.producer_epoch, initialised.producer_epoch,
        "the successor kept the epoch librdkafka holds"
    );
    txn::wait_until_stable(&grpc, "ledger", &[partition]).await;
    assert_eq!(
        values(&kafka, "ledger", partition, "read_committed").await,
        ["t1-a", "t1-b", "t2-a"]
    );
    assert_eq!(
        values(&kafka, "ledger", partition, "read_uncommitted").await,
        ["t1-a", "t1-b", "t2-a"],
        "no record written twice"
    );
}
