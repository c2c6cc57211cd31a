//! ACLs across an etcd restart (issues 21 and 29): while etcd is down every server
//! keeps deciding on the last ACLs it read (a deny stays a deny, an allow an allow, as
//! Kafka's authorizer does when ZooKeeper is away); once etcd is back, an ACL added or
//! removed (even while the watch is still being re-established) applies on the broker
//! and the coordinator within [`APPLIED_WITHIN`], with no restart. A watch etcd
//! cancels (its start revision compacted away) ends with an error, so the server reads
//! the ACLs again, instead of waiting on a stream that will never carry an event.

use std::time::{Duration, Instant};

use idem_proto::v1::{
    FetchPartition, FetchRequest, FetchTopic, IsolationLevel, TxnInitProducerIdRequest,
};
use idem_proto::ErrorCode;
use idem_runtime::acl::{
    Acl, AclStoreError, Authorizer, AuthorizerKind, EtcdAclStore, Operation, PatternType,
    Permission, ResourceType,
};
use idem_tests::etcd::EtcdServer;
use idem_tests::wait::{wait_until, Seen};

use crate::acls::{
    binding, broker_as, log_ends, produce_request, secured_cluster, txn_as, Secrets,
};

/// The promise: an ACL change made once etcd serves again is applied this soon.
const APPLIED_WITHIN: Duration = Duration::from_secs(10);
/// How long etcd stays down: past the watch's first retries (500 ms apart), so the
/// watch is broken and re-established, not merely delayed.
const OUTAGE: Duration = Duration::from_secs(2);

fn bob_fetch() -> FetchRequest {
    FetchRequest {
        max_wait_ms: 0,
        max_bytes: 1024 * 1024,
        isolation_level: IsolationLevel::ReadUncommitted as i32,
        topics: vec![FetchTopic {
            name: "orders".into(),
            partitions: vec![FetchPartition {
                partition: 0,
                fetch_offset: 0,
                partition_max_bytes: 1024 * 1024,
                ..FetchPartition::default()
            }],
        }],
        ..FetchRequest::default()
    }
}

fn bob_init() -> TxnInitProducerIdRequest {
    TxnInitProducerIdRequest {
        transactional_id: "bob-txn".into(),
        transaction_timeout_ms: 60_000,
        producer_id: None,
        producer_epoch: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_etcd_restarted_when_acls_change_then_broker_and_coordinator_apply_them_within_the_bound(
) {
    let secrets = Secrets::new();
    let (mut cluster, admin) = secured_cluster(&secrets).await;
    let bootstrap = cluster.bootstrap();
    let coordinator = cluster.coordinator(1).bootstrap();
    let mut bob = broker_as(&bootstrap, "t-bob").await;
    let mut bob_txn = txn_as(&coordinator, "t-bob").await;
    let answer = bob_txn
        .init_producer_id(bob_init())
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(
        answer.error_code(),
        ErrorCode::TransactionalIdAuthorizationFailed
    );
    let ends = log_ends(&admin).await;

    cluster.etcd(0).kill();
    let killed = Instant::now();
    // During the outage the last ACLs stand: bob may still read orders, and may still
    // not write it. (Metadata needs etcd for the broker list: not asked here.)
    let refused = bob
        .produce(produce_request(&["during the outage"]))
        .await
        .expect("Produce answered")
        .into_inner();
    assert_eq!(
        refused.topics[0].partitions[0].error_code(),
        ErrorCode::TopicAuthorizationFailed
    );
    assert_eq!(log_ends(&admin).await, ends, "bob's refused produce wrote");
    let read = bob.fetch(bob_fetch()).await.expect("Fetch").into_inner();
    assert_eq!(read.topics[0].partitions[0].error_code(), ErrorCode::None);
    // The outage's length is the fault under test, not a wait for a state.
    tokio::time::sleep(OUTAGE.saturating_sub(killed.elapsed())).await;
    cluster.etcd(0).restart();

    // At once, while the servers' watches are still being re-established: bob may now
    // write orders and use `bob-txn`; alice may no longer write orders.
    admin
        .create_acls(&[
            binding("User:bob", "topic", "orders", "literal", "write"),
            binding(
                "User:bob",
                "transactional-id",
                "bob-txn",
                "literal",
                "write",
            ),
        ])
        .await
        .expect("ACLs added");
    let removed = admin
        .delete_acls(&[binding("User:alice", "topic", "orders", "literal", "write")])
        .await
        .expect("ACL removed");
    assert_eq!(removed, 1);
    let changed = Instant::now();

    let ((), broker_took) = wait_until(APPLIED_WITHIN, "bob's produce allowed", || {
        let mut bob = bob.clone();
        async move {
            let answer = bob
                .produce(produce_request(&["bob after the restart"]))
                .await
                .expect("Produce answered")
                .into_inner();
            match answer.topics[0].partitions[0].error_code() {
                ErrorCode::None => Seen::Reached(()),
                // Refused as unauthorized until the broker applies the ACL; any other
                // refusal (a leader re-elected after the outage) is not the ACL's doing.
                code => Seen::Not(format!("{code:?}")),
            }
        }
    })
    .await;
    let before_alice = log_ends(&admin).await;
    let mut alice = broker_as(&bootstrap, "t-alice").await;
    let answer = alice
        .produce(produce_request(&["alice after the restart"]))
        .await
        .expect("Produce answered")
        .into_inner();
    assert_eq!(
        answer.topics[0].partitions[0].error_code(),
        ErrorCode::TopicAuthorizationFailed,
        "the removed ACL is still applied"
    );
    assert_eq!(
        log_ends(&admin).await,
        before_alice,
        "alice's refused produce wrote"
    );
    let (coordinator_answer, coordinator_took) = wait_until(
        APPLIED_WITHIN.saturating_sub(changed.elapsed()),
        "bob's transactional id allowed",
        || {
            let mut bob_txn = bob_txn.clone();
            async move {
                let answer = bob_txn
                    .init_producer_id(bob_init())
                    .await
                    .expect("answered")
                    .into_inner();
                // Authorized is the point; the slice may still be being claimed again.
                match answer.error_code() {
                    ErrorCode::TransactionalIdAuthorizationFailed => {
                        Seen::Not("TransactionalIdAuthorizationFailed".to_string())
                    }
                    code => Seen::Reached(code),
                }
            }
        },
    )
    .await;
    eprintln!(
        "ACL change applied {broker_took:?} (broker) and {coordinator_took:?} (coordinator, \
         answering {coordinator_answer:?}) after it was stored"
    );
}

#[tokio::test]
async fn given_a_watch_from_a_compacted_revision_then_it_ends_with_an_error_rather_than_waiting_forever(
) {
    let etcd = EtcdServer::start();
    let store = EtcdAclStore::connect(&etcd.endpoints(), "/idem")
        .await
        .expect("connects");
    for topic in ["a", "b", "c"] {
        let acl = Acl::new(
            "User:alice",
            ResourceType::Topic,
            topic,
            PatternType::Literal,
            Operation::Read,
            Permission::Allow,
        )
        .expect("valid");
        assert!(store.add(&acl).await.expect("stored"));
    }
    let (_, revision) = store.list().await.expect("listed");
    let mut client = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .expect("connects");
    client.compact(revision, None).await.expect("compacted");

    let authorizer = Authorizer::new(AuthorizerKind::Acl, []);
    let followed = tokio::time::timeout(Duration::from_secs(10), store.follow(&authorizer, 1))
        .await
        .expect("a cancelled watch ends: waiting on it would miss every later change");
    match followed {
        Err(AclStoreError::WatchCancelled {
            compact_revision, ..
        }) => assert_eq!(compact_revision, revision),
        other => panic!("expected the cancelled watch, got {other:?}"),
    }
}
