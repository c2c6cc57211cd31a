//! Authentication and ACL authorization (issue 29): a principal does only what the
//! ACLs stored in etcd allow it, on brokers and coordinators alike; a refusal names
//! principal, operation and resource and changes nothing (log ends, transaction
//! state, committed offsets); an ACL change applies within a second without a
//! restart, and a restarted broker enforces the stored ACLs from its first answer.
//!
//! Principals come from bearer tokens (`--auth-token-file`): alice may write topic
//! `orders` and use transactional ids `orders-*`; bob may only read `orders` (and use
//! his own group). The nodes and the operator are super users.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use idem_client::admin::acls::{AclBinding, AclFilter};
use idem_client::credentials::Credentials;
use idem_client::{
    Admin, Isolation, OffsetSpec, Producer, ProducerConfig, ProducerRecord, TransactionalConfig,
    TransactionalProducer,
};
use idem_proto::v1::broker_client::BrokerClient;
use idem_proto::v1::group_coordinator_client::GroupCoordinatorClient;
use idem_proto::v1::txn_coordinator_client::TxnCoordinatorClient;
use idem_proto::v1::{
    AddPartitionsToTxnRequest, CreatableTopic, CreateTopicsRequest, DescribeTransactionRequest,
    EndTxnRequest, FetchPartition, FetchRequest, FetchTopic, GroupTopicPartitions, IsolationLevel,
    MetadataRequest, OffsetCommitPartition, OffsetCommitRequest, OffsetCommitTopic,
    OffsetFetchRequest, PartitionProduceData, ProduceRequest, TopicProduceData,
    TransactionDescription, TxnInitProducerIdRequest, TxnOffsetCommitRequest, TxnTopicPartitions,
};
use idem_proto::ErrorCode;
use idem_runtime::authn::NodeCredential;
use idem_tests::cli::{idem, idem_with_input};
use idem_tests::cluster::as_strs;
use idem_tests::raw;
use idem_tests::wait::{wait_until, PATIENCE};
use idem_tests::Cluster;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

const TOPIC: &str = "orders";
const TXN_ID: &str = "orders-1";
/// A group bob holds no ACL for.
const GROUP: &str = "orders-app";

type Authed = InterceptedService<Channel, NodeCredential>;

/// Tokens, the nodes' own tokens, and the flags every node gets.
pub(crate) struct Secrets {
    _dir: tempfile::TempDir,
    tokens: PathBuf,
    pub(crate) broker_token: PathBuf,
    pub(crate) coordinator_token: PathBuf,
    admin_token: PathBuf,
}

impl Secrets {
    pub(crate) fn new() -> Secrets {
        let dir = tempfile::tempdir().expect("dir");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path
        };
        let tokens = write(
            "tokens",
            "alice t-alice\nbob t-bob\nbroker t-broker\ncoordinator t-coordinator\nadmin t-admin\n",
        );
        Secrets {
            tokens,
            broker_token: write("broker-token", "t-broker\n"),
            coordinator_token: write("coordinator-token", "t-coordinator\n"),
            admin_token: write("admin-token", "t-admin\n"),
            _dir: dir,
        }
    }

    pub(crate) fn flags(&self, own_token: &Path) -> Vec<String> {
        [
            "--authorizer",
            "acl",
            "--super-users",
            "User:broker,User:coordinator,User:admin",
            "--auth-token-file",
            &self.tokens.display().to_string(),
            "--auth-token",
            &own_token.display().to_string(),
        ]
        .map(String::from)
        .to_vec()
    }
}

async fn channel(address: &str) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect")
}

fn bearer(token: &str) -> NodeCredential {
    NodeCredential::bearer(Some(token)).expect("token")
}

pub(crate) async fn broker_as(address: &str, token: &str) -> BrokerClient<Authed> {
    BrokerClient::with_interceptor(channel(address).await, bearer(token))
}

pub(crate) async fn txn_as(address: &str, token: &str) -> TxnCoordinatorClient<Authed> {
    TxnCoordinatorClient::with_interceptor(channel(address).await, bearer(token))
}

async fn group_as(address: &str, token: &str) -> GroupCoordinatorClient<Authed> {
    GroupCoordinatorClient::with_interceptor(channel(address).await, bearer(token))
}

pub(crate) fn binding(
    principal: &str,
    resource_type: &str,
    name: &str,
    pattern: &str,
    operation: &str,
) -> AclBinding {
    AclBinding {
        principal: principal.into(),
        resource_type: resource_type.into(),
        resource_name: name.into(),
        pattern_type: pattern.into(),
        operation: operation.into(),
        permission: "allow".into(),
    }
}

/// The ACLs.
fn scenario_acls() -> Vec<AclBinding> {
    vec![
        binding("User:alice", "topic", TOPIC, "literal", "write"),
        binding(
            "User:alice",
            "transactional-id",
            "orders-",
            "prefixed",
            "write",
        ),
        binding("User:bob", "topic", TOPIC, "literal", "read"),
        binding("User:bob", "group", "bob-", "prefixed", "read"),
    ]
}

/// A cluster of one broker and one coordinator checking ACLs, topic `orders` (2
/// partitions) created and the scenario's ACLs stored, and an admin client.
pub(crate) async fn secured_cluster(secrets: &Secrets) -> (Cluster, Admin) {
    secured_cluster_of(secrets, 1).await
}

/// [`secured_cluster`] with `brokers` brokers, `orders` replicated on each.
async fn secured_cluster_of(secrets: &Secrets, brokers: i32) -> (Cluster, Admin) {
    let broker_flags = secrets.flags(&secrets.broker_token);
    let coordinator_flags = secrets.flags(&secrets.coordinator_token);
    let mut cluster = Cluster::start(brokers, &as_strs(&broker_flags));
    cluster
        .add_coordinators(1, &as_strs(&coordinator_flags))
        .await;
    let mut admin_broker = broker_as(&cluster.bootstrap(), "t-admin").await;
    let created = admin_broker
        .create_topics(CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: TOPIC.into(),
                num_partitions: 2,
                replication_factor: brokers,
                unclean_leader_election: false,
                coordinator_id: None,
                configs: Vec::new(),
            }],
        })
        .await
        .expect("CreateTopics")
        .into_inner();
    assert_eq!(
        created.topics[0].error_code(),
        ErrorCode::None,
        "{:?}",
        created
    );
    let admin = admin_of(&cluster).await;
    admin
        .create_acls(&scenario_acls())
        .await
        .expect("ACLs stored");
    (cluster, admin)
}

/// One broker with a Kafka listener and one coordinator, both checking ACLs (the
/// broker's token a super user of the coordinator, as a Kafka proxy needs), nothing
/// created yet, and an admin client: the scenario of the Kafka-listener ACL tests.
pub(crate) async fn kafka_acl_cluster(secrets: &Secrets) -> (Cluster, Admin) {
    let mut broker_flags = secrets.flags(&secrets.broker_token);
    broker_flags.extend(["--kafka-listen", "127.0.0.1:0"].map(String::from));
    let coordinator_flags = secrets.flags(&secrets.coordinator_token);
    let mut cluster = Cluster::start(1, &as_strs(&broker_flags));
    cluster
        .add_coordinators(1, &as_strs(&coordinator_flags))
        .await;
    let admin = admin_of(&cluster).await;
    (cluster, admin)
}

/// The operator's admin client (token `t-admin`, a super user in these clusters).
pub(crate) async fn admin_of(cluster: &Cluster) -> Admin {
    Admin::connect_with(
        &cluster.bootstrap(),
        Credentials::bearer("t-admin").expect("token"),
        None,
    )
    .await
    .expect("admin connects")
}

/// The latest offset of each partition of `orders`, asked of its leader as the
/// operator.
pub(crate) async fn log_ends(admin: &Admin) -> Vec<i64> {
    let mut ends = Vec::new();
    for partition in 0..2 {
        let end = admin
            .list_offsets(
                TOPIC,
                partition,
                OffsetSpec::Latest,
                Isolation::ReadUncommitted,
            )
            .await
            .expect("ListOffsets");
        ends.push(end);
    }
    ends
}

/// `orders-1` as its coordinator holds it, asked as the operator.
async fn transaction(cluster: &Cluster) -> TransactionDescription {
    let mut client = txn_as(&cluster.coordinator(1).bootstrap(), "t-admin").await;
    let answer = client
        .describe_transaction(DescribeTransactionRequest {
            transactional_id: TXN_ID.into(),
        })
        .await
        .expect("DescribeTransaction")
        .into_inner();
    assert_eq!(
        answer.error_code(),
        ErrorCode::None,
        "{}",
        answer.error_message
    );
    answer.transaction.expect("a description")
}

/// The committed offsets of `orders-app`, asked as the operator.
async fn committed(cluster: &Cluster) -> Vec<(i32, i64)> {
    let mut client = group_as(&cluster.coordinator(1).bootstrap(), "t-admin").await;
    let answer = client
        .offset_fetch(OffsetFetchRequest {
            group_id: GROUP.into(),
            topics: vec![GroupTopicPartitions {
                topic: TOPIC.into(),
                partitions: vec![0, 1],
            }],
            require_stable: false,
        })
        .await
        .expect("OffsetFetch")
        .into_inner();
    assert_eq!(
        answer.error_code(),
        ErrorCode::None,
        "{}",
        answer.error_message
    );
    answer
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.offset)))
        .collect()
}

pub(crate) fn produce_request(values: &[&str]) -> ProduceRequest {
    ProduceRequest {
        acks: -1,
        timeout_ms: 5000,
        topics: vec![TopicProduceData {
            name: TOPIC.into(),
            partitions: vec![PartitionProduceData {
                partition: 0,
                records: idem_proto::batch::encode(
                    idem_proto::batch::ProducerInfo::NONE,
                    0,
                    &raw::records(values),
                ),
            }],
        }],
        ..ProduceRequest::default()
    }
}

fn alice_txn_config(bootstrap: &str) -> TransactionalConfig {
    TransactionalConfig {
        credentials: Credentials::bearer("t-alice").expect("token"),
        ..TransactionalConfig::new(bootstrap, TXN_ID)
    }
}

#[tokio::test]
async fn given_acls_when_each_principal_oversteps_then_it_is_refused_and_nothing_changes() {
    let secrets = Secrets::new();
    let (cluster, admin) = secured_cluster(&secrets).await;
    let bootstrap = cluster.bootstrap();
    let coordinator = cluster.coordinator(1).bootstrap();

    // alice opens a transaction on orders-1 and writes to it.
    let alice = TransactionalProducer::connect(alice_txn_config(&bootstrap))
        .await
        .expect("alice connects");
    alice
        .init_transactions()
        .await
        .expect("alice inits orders-1");
    alice.begin().expect("begin");
    alice
        .send(ProducerRecord::new(TOPIC, "a-1").partition(0))
        .await
        .expect("send")
        .await
        .expect("alice's record acknowledged");
    let open = transaction(&cluster).await;
    assert_eq!(open.state, "Ongoing", "{open:?}");
    let ends = log_ends(&admin).await;
    let offsets = committed(&cluster).await;

    // bob cannot produce to orders.
    let mut bob_broker = broker_as(&bootstrap, "t-bob").await;
    let answer = bob_broker
        .produce(produce_request(&["b-1"]))
        .await
        .expect("Produce answered")
        .into_inner();
    let refused = &answer.topics[0].partitions[0];
    assert_eq!(refused.error_code(), ErrorCode::TopicAuthorizationFailed);
    assert!(
        refused.error_message.contains("User:bob")
            && refused.error_message.contains("write")
            && refused.error_message.contains("orders"),
        "{}",
        refused.error_message
    );
    assert_eq!(log_ends(&admin).await, ends, "bob's refused produce wrote");

    // bob cannot init alice's transactional id (which would fence her and abort her
    // transaction)...
    let mut bob_txn = txn_as(&coordinator, "t-bob").await;
    let init = bob_txn
        .init_producer_id(TxnInitProducerIdRequest {
            transactional_id: TXN_ID.into(),
            transaction_timeout_ms: 60_000,
            producer_id: None,
            producer_epoch: 0,
        })
        .await
        .expect("InitProducerId answered")
        .into_inner();
    assert_eq!(
        init.error_code(),
        ErrorCode::TransactionalIdAuthorizationFailed
    );
    assert!(
        init.error_message.contains("orders-1"),
        "{}",
        init.error_message
    );
    assert_eq!(
        transaction(&cluster).await,
        open,
        "bob's refused init changed the transaction"
    );

    // ... nor abort it, even knowing her producer id and epoch.
    let abort = bob_txn
        .end_txn(EndTxnRequest {
            transactional_id: TXN_ID.into(),
            producer_id: open.producer_id,
            producer_epoch: open.producer_epoch,
            commit: false,
            keep_epoch: false,
        })
        .await
        .expect("EndTxn answered")
        .into_inner();
    assert_eq!(
        abort.error_code(),
        ErrorCode::TransactionalIdAuthorizationFailed
    );
    assert_eq!(
        transaction(&cluster).await,
        open,
        "bob's refused abort changed the transaction"
    );
    assert_eq!(
        log_ends(&admin).await,
        ends,
        "bob's refused abort wrote a marker"
    );
    // ... nor add a partition to her transaction.
    let add = bob_txn
        .add_partitions_to_txn(AddPartitionsToTxnRequest {
            transactional_id: TXN_ID.into(),
            producer_id: open.producer_id,
            producer_epoch: open.producer_epoch,
            topics: vec![TxnTopicPartitions {
                topic: TOPIC.into(),
                partitions: vec![1],
            }],
        })
        .await
        .expect("AddPartitionsToTxn answered")
        .into_inner();
    assert_eq!(
        add.error_code(),
        ErrorCode::TransactionalIdAuthorizationFailed
    );
    assert_eq!(
        transaction(&cluster).await,
        open,
        "bob's refused AddPartitionsToTxn changed the transaction"
    );

    // bob cannot commit offsets for a group he has no ACL for.
    let mut bob_group = group_as(&coordinator, "t-bob").await;
    let commit = bob_group
        .offset_commit(OffsetCommitRequest {
            group_id: GROUP.into(),
            member_id: String::new(),
            member_epoch: -1,
            topics: vec![OffsetCommitTopic {
                name: TOPIC.into(),
                partitions: vec![OffsetCommitPartition {
                    partition: 0,
                    offset: 1,
                    leader_epoch: None,
                    metadata: String::new(),
                }],
            }],
        })
        .await
        .expect("OffsetCommit answered")
        .into_inner();
    assert_eq!(commit.error_code(), ErrorCode::GroupAuthorizationFailed);
    assert!(
        commit.error_message.contains(GROUP),
        "{}",
        commit.error_message
    );
    assert_eq!(
        committed(&cluster).await,
        offsets,
        "bob's refused commit stored offsets"
    );
    // Nor through a transaction (his rights on neither the id nor the group).
    let txn_commit = bob_group
        .txn_offset_commit(TxnOffsetCommitRequest {
            transactional_id: TXN_ID.into(),
            producer_id: open.producer_id,
            producer_epoch: open.producer_epoch,
            group_id: GROUP.into(),
            member_id: String::new(),
            member_epoch: -1,
            topics: vec![OffsetCommitTopic {
                name: TOPIC.into(),
                partitions: vec![OffsetCommitPartition {
                    partition: 0,
                    offset: 1,
                    leader_epoch: None,
                    metadata: String::new(),
                }],
            }],
        })
        .await
        .expect("TxnOffsetCommit answered")
        .into_inner();
    assert_eq!(
        txn_commit.error_code(),
        ErrorCode::TransactionalIdAuthorizationFailed
    );
    assert_eq!(committed(&cluster).await, offsets);
    assert_eq!(transaction(&cluster).await, open);

    // alice cannot read orders.
    let mut alice_broker = broker_as(&bootstrap, "t-alice").await;
    let fetched = alice_broker
        .fetch(FetchRequest {
            max_wait_ms: 0,
            max_bytes: 1024 * 1024,
            isolation_level: IsolationLevel::ReadUncommitted as i32,
            topics: vec![FetchTopic {
                name: TOPIC.into(),
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    partition_max_bytes: 1024 * 1024,
                    ..FetchPartition::default()
                }],
            }],
            ..FetchRequest::default()
        })
        .await
        .expect("Fetch answered")
        .into_inner();
    let read = &fetched.topics[0].partitions[0];
    assert_eq!(read.error_code(), ErrorCode::TopicAuthorizationFailed);
    assert!(
        read.records.is_empty(),
        "alice read {} bytes",
        read.records.len()
    );

    // bob may read what alice wrote; alice's transaction is intact and commits.
    let bob_read = bob_broker
        .fetch(FetchRequest {
            max_wait_ms: 0,
            max_bytes: 1024 * 1024,
            isolation_level: IsolationLevel::ReadUncommitted as i32,
            topics: vec![FetchTopic {
                name: TOPIC.into(),
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    partition_max_bytes: 1024 * 1024,
                    ..FetchPartition::default()
                }],
            }],
            ..FetchRequest::default()
        })
        .await
        .expect("Fetch answered")
        .into_inner();
    assert_eq!(
        bob_read.topics[0].partitions[0].error_code(),
        ErrorCode::None
    );
    alice.commit().await.expect("alice commits");
    // The coordinator writes the markers as User:coordinator (a super user).
    wait_until(PATIENCE, "alice's transaction completes", || async {
        let state = transaction(&cluster).await.state;
        (state == "CompleteCommit").then_some(())
    })
    .await;

    // Metadata leaves out what a principal may not describe.
    let listed = bob_broker
        .metadata(MetadataRequest { topics: Vec::new() })
        .await
        .expect("Metadata")
        .into_inner();
    let names: Vec<&str> = listed.topics.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec![TOPIC], "bob sees only orders");
}

#[tokio::test]
async fn given_an_unknown_token_when_calling_then_unauthenticated() {
    let secrets = Secrets::new();
    let (cluster, _admin) = secured_cluster(&secrets).await;
    let mut intruder = broker_as(&cluster.bootstrap(), "t-nobody").await;
    let status = intruder
        .metadata(MetadataRequest { topics: Vec::new() })
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
    assert!(
        status.message().contains("invalid bearer token"),
        "{}",
        status.message()
    );
    let mut intruder = txn_as(&cluster.coordinator(1).bootstrap(), "t-nobody").await;
    let status = intruder
        .describe_transaction(DescribeTransactionRequest {
            transactional_id: TXN_ID.into(),
        })
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
    // No credential at all is User:ANONYMOUS, which holds no ACL.
    let mut anonymous = raw::connect(&cluster.bootstrap()).await;
    let status = anonymous
        .create_acls(idem_proto::v1::CreateAclsRequest {
            acls: vec![binding("User:ANONYMOUS", "topic", "*", "literal", "all")],
        })
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
    assert!(
        status.message().contains("User:ANONYMOUS") && status.message().contains("cluster"),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn given_a_running_producer_when_its_acl_is_removed_then_its_next_produce_fails_within_a_second(
) {
    let secrets = Secrets::new();
    let (mut cluster, admin) = secured_cluster(&secrets).await;
    let bootstrap = cluster.bootstrap();
    let config = ProducerConfig {
        credentials: Credentials::bearer("t-alice").expect("token"),
        ..ProducerConfig::new(&bootstrap)
    };
    let producer = Producer::connect(config).await.expect("alice's producer");
    producer
        .send_record(ProducerRecord::new(TOPIC, "before").partition(0))
        .await
        .expect("send")
        .await
        .expect("allowed while the ACL stands");

    let write = binding("User:alice", "topic", TOPIC, "literal", "write");
    let removed = admin
        .delete_acls(std::slice::from_ref(&write))
        .await
        .expect("ACL removed");
    assert_eq!(removed, 1);
    let answered = Instant::now();
    let alice = broker_as(&bootstrap, "t-alice").await;
    let ((), took) = wait_until(PATIENCE, "alice's produce refused", || {
        let request = produce_request(&["after"]);
        let mut alice = alice.clone();
        async move {
            let answer = alice.produce(request).await.expect("answered").into_inner();
            let code = answer.topics[0].partitions[0].error_code();
            (code == ErrorCode::TopicAuthorizationFailed).then_some(())
        }
    })
    .await;
    let since_removal = answered.elapsed();
    println!("alice refused {since_removal:?} after the removal was answered");
    assert!(
        since_removal < Duration::from_secs(1),
        "refused {since_removal:?} after the removal was answered (waited {took:?})"
    );
    // The running SDK producer is refused too, as an authorization failure.
    let failed = producer
        .send_record(ProducerRecord::new(TOPIC, "after").partition(0))
        .await
        .expect("send")
        .await
        .expect_err("refused");
    assert!(failed.is_authorization_failure(), "{failed}");
    let ends = log_ends(&admin).await;

    // A restarted broker enforces the stored ACLs from its first answer.
    cluster.restart(1);
    let mut alice = broker_as(&cluster.bootstrap(), "t-alice").await;
    let answer = alice
        .produce(produce_request(&["after restart"]))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(
        answer.topics[0].partitions[0].error_code(),
        ErrorCode::TopicAuthorizationFailed
    );
    assert_eq!(log_ends(&admin).await, ends, "refused produces wrote");
    // Given back, the right applies again without a restart.
    admin
        .create_acls(std::slice::from_ref(&write))
        .await
        .expect("ACL added");
    wait_until(PATIENCE, "alice's produce allowed again", || {
        let request = produce_request(&["allowed again"]);
        let mut alice = alice.clone();
        async move {
            let answer = alice.produce(request).await.expect("answered").into_inner();
            (answer.topics[0].partitions[0].error_code() == ErrorCode::None).then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn given_the_cli_when_adding_listing_and_removing_an_acl_then_each_shows() {
    let secrets = Secrets::new();
    let (cluster, admin) = secured_cluster(&secrets).await;
    let bootstrap = cluster.bootstrap();
    let token = secrets.admin_token.display().to_string();
    let run = |args: &[&str]| {
        let mut all = vec!["--auth-token", token.as_str()];
        all.extend_from_slice(args);
        idem(&bootstrap, &all)
    };
    let added = run(&[
        "acl",
        "add",
        "--principal",
        "User:carol",
        "--allow",
        "--operation",
        "write",
        "--topic",
        "pay",
        "--prefixed",
    ]);
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    let carol = AclFilter {
        principal: "User:carol".into(),
        ..AclFilter::default()
    };
    assert_eq!(
        admin.describe_acls(&carol).await.expect("listed"),
        vec![binding("User:carol", "topic", "pay", "prefixed", "write")]
    );
    let listed = run(&["acl", "list", "--principal", "User:carol"]);
    let out = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success() && out.contains("User:carol") && out.contains("pay"),
        "{out}"
    );
    // The other client commands present the token too: the admin creates a topic and
    // produces to it; anonymously, the same create is refused naming the principal.
    let anonymous = idem(&bootstrap, &["topic", "create", "cli-made"]);
    assert!(!anonymous.status.success());
    assert!(
        String::from_utf8_lossy(&anonymous.stderr)
            .contains("User:ANONYMOUS is not authorized to create"),
        "{}",
        String::from_utf8_lossy(&anonymous.stderr)
    );
    let created = run(&["topic", "create", "cli-made"]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let mut with_token = vec!["--auth-token", token.as_str()];
    with_token.extend_from_slice(&["produce", "cli-made"]);
    let produced = idem_with_input(&bootstrap, &with_token, "one\ntwo\n");
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    assert_eq!(
        admin
            .list_offsets(
                "cli-made",
                0,
                OffsetSpec::Latest,
                Isolation::ReadUncommitted
            )
            .await
            .expect("log end"),
        2
    );

    // Bad input: a clear error, nothing stored.
    let bad = run(&[
        "acl",
        "add",
        "--principal",
        "User:carol",
        "--operation",
        "erase",
        "--topic",
        "pay",
    ]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("erase"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let empty = run(&[
        "acl",
        "add",
        "--principal",
        "User:carol",
        "--operation",
        "read",
        "--topic",
        "",
    ]);
    assert!(!empty.status.success());
    assert!(
        String::from_utf8_lossy(&empty.stderr).contains("empty"),
        "{}",
        String::from_utf8_lossy(&empty.stderr)
    );
    assert_eq!(admin.describe_acls(&carol).await.expect("listed").len(), 1);

    let removed = run(&[
        "acl",
        "remove",
        "--principal",
        "User:carol",
        "--allow",
        "--operation",
        "write",
        "--topic",
        "pay",
        "--prefixed",
    ]);
    assert!(
        removed.status.success(),
        "{}",
        String::from_utf8_lossy(&removed.stderr)
    );
    assert!(admin
        .describe_acls(&carol)
        .await
        .expect("listed")
        .is_empty());
    let again = run(&[
        "acl",
        "remove",
        "--principal",
        "User:carol",
        "--operation",
        "write",
        "--topic",
        "pay",
        "--prefixed",
    ]);
    assert!(!again.status.success(), "removing a missing ACL succeeded");

    // Without the operator's token the CLI is refused.
    let anonymous = idem(&bootstrap, &["acl", "list"]);
    assert!(!anonymous.status.success());
    assert!(
        String::from_utf8_lossy(&anonymous.stderr).contains("User:ANONYMOUS"),
        "{}",
        String::from_utf8_lossy(&anonymous.stderr)
    );
}

#[tokio::test]
async fn given_replicated_topic_under_acls_when_alice_produces_then_followers_replicate_as_the_broker_principal(
) {
    let secrets = Secrets::new();
    let (mut cluster, admin) = secured_cluster_of(&secrets, 2).await;
    let config = ProducerConfig {
        credentials: Credentials::bearer("t-alice").expect("token"),
        ..ProducerConfig::new(cluster.bootstrap())
    };
    let producer = Producer::connect(config).await.expect("alice's producer");
    let mut acked = Vec::new();
    for n in 0..10 {
        let record = ProducerRecord::new(TOPIC, format!("r-{n}")).partition(0);
        acked.push(producer.send_record(record).await.expect("send"));
    }
    for delivery in acked {
        delivery.await.expect("acks=all answered");
    }
    // The follower fetches as User:broker (its --auth-token, a super user): with its
    // fetches refused it would fall out of the ISR and hold nothing.
    let admin_broker = broker_as(&cluster.bootstrap(), "t-admin").await;
    wait_until(PATIENCE, "both replicas in the ISR", || {
        let mut client = admin_broker.clone();
        async move {
            let answer = client
                .metadata(MetadataRequest {
                    topics: vec![TOPIC.into()],
                })
                .await
                .expect("Metadata")
                .into_inner();
            let isr = answer.topics[0]
                .partitions
                .iter()
                .find(|p| p.partition == 0)
                .map(|p| p.isr.clone())
                .unwrap_or_default();
            (isr.len() == 2).then_some(())
        }
    })
    .await;
    let ends = log_ends(&admin).await;
    assert_eq!(ends[0], 10);
    producer.close().await;
    cluster.stop_all();
    // Panics unless both replicas hold the same batches below offset 10.
    let batches = cluster.compare_replicas(TOPIC, 0, 10);
    assert!(batches >= 1, "no batch replicated");
}
