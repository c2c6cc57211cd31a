//! The coordination store fails too (issue 21): after etcd is killed and restarted,
//! paused for less or more than the lease TTL, combined with a coordinator crash, or (in
//! a 3-member etcd) loses a member or its quorum, or one process alone is cut off from
//! etcd, every transaction log slice is owned
//! and served again, every broker is registered and every partition led with its full
//! ISR within a stated bound, no transaction hangs, and transactional producers that ran
//! throughout lost and duplicated nothing.

mod acl_watch;
mod kafka_clients;
mod one_process_cut_off;
mod single_member;
mod three_members;

use std::time::{Duration, Instant};

use idem_client::Admin;
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_tests::txn_workload::TxnWorkload;
use idem_tests::Cluster;

pub const TOPIC: &str = "etcd-faults";
pub const PARTITIONS: [i32; 3] = [0, 1, 2];
/// The lease TTL of every broker and coordinator in [`Cluster`].
pub const LEASE_TTL: Duration = Duration::from_secs(2);
/// The promise: once etcd serves again, everything serves again within the lease TTL
/// plus this much (a lapsed lease is noticed, a new one granted, slices claimed and
/// loaded, leaders elected).
pub const RECOVERY_MARGIN: Duration = Duration::from_secs(8);
const PRODUCERS: usize = 4;

/// Three brokers, two coordinators on `etcd_members` etcd members, the topic at RF 3,
/// and the workload running (it has committed a few transactions before this returns).
pub async fn cluster_under_load(etcd_members: usize) -> (Cluster, TxnWorkload) {
    let cluster = Cluster::start_with_etcd_members(etcd_members, 3, 2, &[], &[]).await;
    put_under_load(cluster).await
}

/// The topic at RF 3 and the workload running on `cluster` (3 brokers, 2 coordinators).
pub async fn put_under_load(cluster: Cluster) -> (Cluster, TxnWorkload) {
    cluster
        .create_topic(TOPIC, PARTITIONS.len() as i32, 3)
        .await;
    for p in PARTITIONS {
        cluster.leader_of(TOPIC, p).await;
    }
    let workload = TxnWorkload::start(
        &cluster.bootstrap(),
        "etcd-fault",
        PRODUCERS,
        TOPIC,
        &PARTITIONS,
    );
    workload
        .wait_for_commits_since(Instant::now(), 2, Duration::from_secs(30))
        .await;
    (cluster, workload)
}

/// After a fault healed at `healed`: within the promised bound every slice is served,
/// every broker registered and every partition led with its full ISR, and every producer
/// commits again; then the producers stop and nothing is hanging, every transactional
/// id is listed, and the read-back is exactly once.
pub async fn assert_recovered(cluster: &Cluster, workload: TxnWorkload, healed: Instant) {
    let bound = LEASE_TTL + RECOVERY_MARGIN;
    let bootstrap = cluster.bootstrap();
    cluster.wait_until_every_slice_served(healed, bound).await;
    cluster
        .wait_until_every_broker_serving(&[TOPIC, TXN_LOG_TOPIC], healed, bound)
        .await;
    let serving = healed.elapsed();
    // Producers meet the fault's errors, replace themselves and go on committing.
    workload
        .wait_for_commits_since(Instant::now(), 3, Duration::from_secs(30))
        .await;
    let ids = workload.transactional_ids();
    let committed = workload.stop_and_check().await;
    eprintln!(
        "serving again {serving:?} after the fault healed; {committed} transactions committed"
    );

    let admin = Admin::connect(&bootstrap).await.expect("admin connects");
    let hanging = admin
        .find_hanging(Duration::from_secs(300))
        .await
        .expect("find-hanging asks every broker and coordinator");
    assert!(hanging.is_empty(), "hanging transactions: {hanging:?}");
    let listed = admin
        .list_transactions()
        .await
        .expect("every coordinator lists its transactions");
    for id in ids {
        assert!(
            listed.iter().any(|t| t.transactional_id == id),
            "{id} is not listed by any coordinator"
        );
        admin
            .describe_transaction(&id)
            .await
            .unwrap_or_else(|e| panic!("{id} cannot be described: {e}"));
    }
}
