//! A 3-member etcd: losing one member changes nothing (transactions keep committing
//! through it); losing the quorum stops the cluster like an outage, and once the quorum
//! is back everything serves again within the bound.

use std::time::{Duration, Instant};

use super::{assert_recovered, cluster_under_load};

/// How long the quorum stays lost: longer than every lease, so leases lapse while it is
/// away. A fault length, not a wait: nothing happens during it that the test could
/// await; recovery is awaited after it, with a bound.
const QUORUM_OUTAGE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_3_member_etcd_when_one_member_is_killed_then_transactions_go_on_committing() {
    let (mut cluster, workload) = cluster_under_load(3).await;
    cluster.etcd(0).kill();
    let killed = Instant::now();
    // No effect expected: every producer commits while the member is down.
    workload
        .wait_for_commits_since(killed, 3, Duration::from_secs(20))
        .await;
    cluster.etcd(0).restart_member();
    cluster
        .etcd(0)
        .wait_until_serving()
        .expect("the member rejoins");
    assert_recovered(&cluster, workload, killed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_3_member_etcd_when_the_quorum_is_lost_and_regained_then_every_slice_serves_again()
{
    let (mut cluster, workload) = cluster_under_load(3).await;
    cluster.etcd(0).kill();
    cluster.etcd(1).kill();
    tokio::time::sleep(QUORUM_OUTAGE).await;
    cluster.etcd(0).restart_member();
    cluster.etcd(1).restart_member();
    cluster
        .etcd(0)
        .wait_until_serving()
        .expect("the quorum is back");
    let healed = Instant::now();
    assert_recovered(&cluster, workload, healed).await;
}
