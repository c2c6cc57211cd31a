//! One process cut off from etcd while every other process reaches it: the process
//! stops serving what it owned within its lease TTL (before etcd can hand it to another),
//! the others take over, and once the link heals it registers again and serves.

use std::time::{Duration, Instant};

use idem_tests::cluster::ProcessId;
use idem_tests::{txn, Cluster};

use super::{assert_recovered, put_under_load, LEASE_TTL, RECOVERY_MARGIN, TOPIC};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_coordinator_cut_off_from_etcd_then_it_stops_serving_and_the_other_takes_every_slice(
) {
    let (cluster, workload) = put_under_load(Cluster::start_linked(3, 2).await).await;
    let cut_off = ProcessId::Coordinator(1);
    let address = cluster.coordinator(1).bootstrap();
    assert!(
        !txn::owned_partitions(&address)
            .await
            .expect("answers")
            .is_empty(),
        "coordinator 1 serves a share before the cut"
    );
    cluster.cut_from_etcd(cut_off);
    let cut = Instant::now();
    // It can no longer renew its lease: by its own clock it must stop within the TTL,
    // before etcd lets the lease lapse and hands its slices to coordinator 2.
    loop {
        let owned = txn::owned_partitions(&address)
            .await
            .expect("still answers");
        if owned.is_empty() {
            break;
        }
        assert!(
            cut.elapsed() < LEASE_TTL + Duration::from_millis(500),
            "coordinator 1 still serves {owned:?} {:?} after losing etcd",
            cut.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster
        .wait_until_every_slice_served(cut, LEASE_TTL + RECOVERY_MARGIN)
        .await;
    workload
        .wait_for_commits_since(Instant::now(), 2, Duration::from_secs(20))
        .await;
    cluster.heal_link_to_etcd(cut_off);
    assert_recovered(&cluster, workload, Instant::now()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_partition_leader_cut_off_from_etcd_then_another_leads_and_it_rejoins_the_isr_after_healing(
) {
    let (cluster, workload) = put_under_load(Cluster::start_linked(3, 2).await).await;
    let old = cluster.leader_of(TOPIC, 0).await;
    cluster.cut_from_etcd(ProcessId::Broker(old.leader_id));
    cluster.new_leader(TOPIC, 0, &old).await;
    workload
        .wait_for_commits_since(Instant::now(), 2, Duration::from_secs(20))
        .await;
    cluster.heal_link_to_etcd(ProcessId::Broker(old.leader_id));
    assert_recovered(&cluster, workload, Instant::now()).await;
}
