//! Brokers register in etcd under a lease: every broker of the cluster shows up in
//! `Metadata`, a broker that stops cleanly leaves at once, one that dies leaves when its
//! lease lapses, a broker id can be held by one live broker only, and a broker restarted
//! on its own data dir takes its id back at once; one paused past its lease registers
//! again when it resumes.

use std::time::{Duration, Instant};

use idem_proto::v1::MetadataRequest;
use idem_tests::etcd::EtcdServer;
use idem_tests::raw;
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::BrokerProcess;

const TTL_MS: &str = "2000";

fn cluster_broker(etcd: &EtcdServer, id: i32) -> BrokerProcess {
    let id = id.to_string();
    BrokerProcess::start_with(&[
        "--id",
        &id,
        "--etcd",
        &etcd.endpoint(),
        "--lease-ttl-ms",
        TTL_MS,
    ])
}

async fn registered(bootstrap: &str) -> Vec<(i32, String)> {
    let mut client = raw::connect(bootstrap).await;
    let metadata = client
        .metadata(MetadataRequest { topics: vec![] })
        .await
        .expect("Metadata")
        .into_inner();
    metadata
        .brokers
        .into_iter()
        .map(|b| (b.broker_id, b.address))
        .collect()
}

/// Waits until `observer` lists `count` registered brokers.
async fn wait_until_registered(observer: &BrokerProcess, count: usize) {
    let what = format!(
        "broker {} lists {count} registered brokers",
        observer.bootstrap()
    );
    wait_until(PATIENCE, &what, || async {
        let brokers = registered(&observer.bootstrap()).await;
        let reached = brokers.len() == count;
        seen_if(brokers, reached)
    })
    .await;
}

#[tokio::test]
async fn given_two_brokers_when_either_is_asked_then_metadata_lists_both() {
    let etcd = EtcdServer::start();
    let (one, two) = (cluster_broker(&etcd, 1), cluster_broker(&etcd, 2));
    let expected = vec![(1, one.bootstrap()), (2, two.bootstrap())];
    assert_eq!(registered(&one.bootstrap()).await, expected);
    assert_eq!(registered(&two.bootstrap()).await, expected);
}

#[tokio::test]
async fn given_a_broker_stopped_cleanly_then_it_leaves_the_cluster_at_once() {
    let etcd = EtcdServer::start();
    let (mut one, two) = (cluster_broker(&etcd, 1), cluster_broker(&etcd, 2));
    one.stop();
    assert_eq!(
        registered(&two.bootstrap()).await,
        vec![(2, two.bootstrap())]
    );
}

#[tokio::test]
async fn given_a_broker_killed_then_it_leaves_the_cluster_when_its_lease_lapses() {
    let etcd = EtcdServer::start();
    let (mut one, two) = (cluster_broker(&etcd, 1), cluster_broker(&etcd, 2));
    one.kill();
    let killed = Instant::now();
    // The lease lapses on etcd's clock; only polling shows when.
    wait_until_registered(&two, 1).await;
    assert!(
        killed.elapsed() >= Duration::from_millis(1000),
        "gone after {:?}, before its lease TTL",
        killed.elapsed()
    );
    assert_eq!(
        registered(&two.bootstrap()).await,
        vec![(2, two.bootstrap())]
    );
}

#[tokio::test]
async fn given_a_live_broker_holding_an_id_when_another_claims_it_then_the_second_refuses_to_start()
{
    let etcd = EtcdServer::start();
    let holder = cluster_broker(&etcd, 7);
    let started = Instant::now();
    let endpoint = etcd.endpoint();
    let refused = BrokerProcess::try_start_with(&[
        "--id",
        "7",
        "--etcd",
        &endpoint,
        "--lease-ttl-ms",
        TTL_MS,
    ]);
    let error = refused.err().expect("a second broker 7 must not start");
    assert!(
        error.contains("broker id 7 is registered by another live broker"),
        "{error}"
    );
    assert!(
        error.contains(&holder.bootstrap()),
        "the error names the holder: {error}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "it waited two lease TTLs for the holder to lapse"
    );
    assert_eq!(
        registered(&holder.bootstrap()).await,
        vec![(7, holder.bootstrap())]
    );
}

#[tokio::test]
async fn given_a_broker_killed_when_restarted_on_its_data_dir_then_it_takes_its_id_back_at_once() {
    let etcd = EtcdServer::start();
    // A lease far longer than a restart takes: waiting for its own old lease to lapse
    // would take 120 s, a restart takes a few seconds even on a loaded 2-core machine, so
    // a deadline of half the lease tells the two apart with 10x headroom.
    const LEASE_TTL: Duration = Duration::from_secs(120);
    let ttl_ms = LEASE_TTL.as_millis().to_string();
    let mut one = BrokerProcess::start_with(&[
        "--id",
        "1",
        "--etcd",
        &etcd.endpoint(),
        "--lease-ttl-ms",
        &ttl_ms,
    ]);
    one.kill();
    let restarting = Instant::now();
    one.restart();
    assert!(
        restarting.elapsed() < LEASE_TTL / 2,
        "restart took {:?}: it waited for its own old lease",
        restarting.elapsed()
    );
    assert_eq!(
        registered(&one.bootstrap()).await,
        vec![(1, one.bootstrap())]
    );
}

#[tokio::test]
async fn given_a_broker_paused_past_its_lease_when_resumed_then_it_registers_again() {
    let etcd = EtcdServer::start();
    let (one, two) = (cluster_broker(&etcd, 1), cluster_broker(&etcd, 2));
    one.pause();
    // Lease expiry and re-registration happen on etcd's and the broker's clocks: poll.
    wait_until_registered(&two, 1).await;
    one.resume();
    wait_until_registered(&two, 2).await;
    let expected = vec![(1, one.bootstrap()), (2, two.bootstrap())];
    assert_eq!(registered(&two.bootstrap()).await, expected);
}
