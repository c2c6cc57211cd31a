//! Producer ids are unique across the whole cluster, forever: brokers lease blocks of
//! 1000 ids from a real etcd by compare-and-swap, a restarted broker takes a fresh
//! block, and an unreachable etcd is a retriable error the SDK waits out.

use std::collections::HashSet;
use std::time::Duration;

use idem_client::{Delivery, Producer, ProducerConfig};
use idem_proto::v1::InitProducerIdRequest;
use idem_proto::ErrorCode;
use idem_tests::etcd::EtcdServer;
use idem_tests::raw::{self, RawClient};
use idem_tests::{BrokerProcess, FaultyProxy};

fn etcd_broker(etcd: &EtcdServer, id: i32) -> BrokerProcess {
    let id = id.to_string();
    BrokerProcess::start_with(&[
        "--id",
        &id,
        "--pid-store",
        "etcd",
        "--etcd",
        &etcd.endpoint(),
    ])
}

async fn init_producer_id(client: &mut RawClient) -> (ErrorCode, i64) {
    let answer = client
        .init_producer_id(InitProducerIdRequest::default())
        .await
        .expect("InitProducerId")
        .into_inner();
    (answer.error_code(), answer.producer_id)
}

async fn ids(client: &mut RawClient, n: usize) -> Vec<i64> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let (code, id) = init_producer_id(client).await;
        assert_eq!(code, ErrorCode::None);
        out.push(id);
    }
    out
}

#[tokio::test]
async fn given_etcd_backed_broker_killed_when_restarted_then_every_producer_id_it_hands_out_is_new()
{
    let etcd = EtcdServer::start();
    let mut broker = etcd_broker(&etcd, 1);
    let mut client = raw::connect(&broker.bootstrap()).await;
    let before = ids(&mut client, 50).await;
    broker.kill();
    broker.restart();
    let mut client = raw::connect(&broker.bootstrap()).await;
    let after = ids(&mut client, 50).await;
    let highest_before = before.iter().max().copied().unwrap_or(-1);
    assert!(
        after.iter().all(|id| *id > highest_before),
        "restart took a fresh block: {after:?}"
    );
    let all: HashSet<i64> = before.iter().chain(&after).copied().collect();
    assert_eq!(all.len(), 100, "no id handed out twice");
}

#[tokio::test]
async fn given_two_etcd_backed_brokers_when_many_clients_init_at_once_then_every_producer_id_is_unique(
) {
    let etcd = EtcdServer::start();
    let brokers = [etcd_broker(&etcd, 1), etcd_broker(&etcd, 2)];
    let mut tasks = Vec::new();
    for client_no in 0..16 {
        let bootstrap = brokers[client_no % 2].bootstrap();
        tasks.push(tokio::spawn(async move {
            let mut client = raw::connect(&bootstrap).await;
            ids(&mut client, 150).await
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("client task"));
    }
    let unique: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), 16 * 150);
    assert_eq!(
        unique.len(),
        all.len(),
        "every producer id is unique across both brokers"
    );
}

#[tokio::test]
async fn given_etcd_down_when_a_producer_starts_then_it_gets_a_retriable_error_and_the_sdk_waits_until_etcd_is_back(
) {
    let mut etcd = EtcdServer::start();
    // Without prefetch, the id after the first block's last one needs etcd.
    let broker = BrokerProcess::start_with(&[
        "--id",
        "1",
        "--pid-store",
        "etcd",
        "--etcd",
        &etcd.endpoint(),
        "--pid-prefetch",
        "false",
    ]);
    let mut client = raw::connect(&broker.bootstrap()).await;
    let before = ids(&mut client, 1000).await;
    etcd.kill();
    let (code, _) = init_producer_id(&mut client).await;
    assert_eq!(
        code,
        ErrorCode::CoordinatorLoadInProgress,
        "etcd unreachable is retriable"
    );

    // The producer dials through a proxy so the test can see its refused attempts.
    let proxy = FaultyProxy::start(broker.addr()).await;
    let config = ProducerConfig {
        request_timeout: Duration::from_secs(30),
        ..ProducerConfig::new(proxy.bootstrap()).with_delivery(Delivery::ExactlyOnce)
    };
    let connecting = tokio::spawn(Producer::connect(config));
    // At most one other request precedes InitProducerId, so two answers include a refusal.
    proxy.wait_forwarded_responses(2).await;
    assert!(
        !connecting.is_finished(),
        "the producer is still waiting for a producer id"
    );
    etcd.restart();
    let producer = connecting
        .await
        .expect("task")
        .expect("the SDK retried until etcd was back");
    let id = producer
        .producer_id()
        .expect("idempotent producer")
        .producer_id;
    assert!(before.iter().all(|old| id > *old), "{id} is new");
    producer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_cluster_started_without_pid_store_flags_then_no_two_producers_share_an_id() {
    // Found by a chaos run: brokers of a cluster left at the embedded default each
    // counted from 0, so an idempotent producer and a transactional one shared producer
    // id 2, and the coordinator's ABORT marker for one was fenced by the other's epoch:
    // a slice of the transaction log could never load again.
    let mut cluster = idem_tests::Cluster::start_with_coordinators(2, 1, &[], &[]).await;
    let mut seen = HashSet::new();
    for id in cluster.ids() {
        let mut client = raw::connect(&cluster.broker(id).bootstrap()).await;
        for producer_id in ids(&mut client, 20).await {
            assert!(
                seen.insert(producer_id),
                "producer id {producer_id} handed out twice"
            );
        }
    }
    let bootstrap = cluster.bootstrap();
    for n in 0..5 {
        let producer = idem_tests::txn::producer(&bootstrap, &format!("unique-{n}")).await;
        let producer_id = producer.producer_id().expect("initialised").producer_id;
        assert!(
            seen.insert(producer_id),
            "transactional producer id {producer_id} is also an idempotent producer's"
        );
    }
    // And a broker of the cluster told to use its own store refuses to start.
    let endpoint = cluster.etcd(0).endpoint();
    let refused = BrokerProcess::try_start_with(&[
        "--id",
        "9",
        "--etcd",
        &endpoint,
        "--pid-store",
        "embedded",
    ]);
    let error = refused.err().expect("refused");
    assert!(
        error.contains("--pid-store embedded cannot be used with --etcd"),
        "{error}"
    );
}
