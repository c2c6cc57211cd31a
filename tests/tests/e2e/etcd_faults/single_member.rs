//! One etcd member, killed and restarted or paused, alone or with a coordinator crash
//! during the outage: everything serves again within the bound and no transaction hangs.

use std::time::{Duration, Instant};

use super::{assert_recovered, cluster_under_load, LEASE_TTL};

/// An etcd outage well past the lease TTL: every process gives its lease up by its
/// own clock while etcd is away.
const LONG_OUTAGE: Duration = Duration::from_secs(5);
/// An etcd outage of about the lease TTL: processes are at the edge of giving up.
const SHORT_OUTAGE: Duration = Duration::from_secs(2);

/// etcd down for `outage` (SIGKILL, then a restart on the same data dir and ports).
async fn etcd_killed_for(outage: Duration, kill_coordinator: bool) {
    let (mut cluster, workload) = cluster_under_load(1).await;
    cluster.etcd(0).kill();
    if kill_coordinator {
        cluster.kill_coordinator(1);
    }
    // The outage's length is the fault under test, not a wait for a state: nothing is
    // meant to happen during it that the test could await instead; recovery is awaited
    // after it, with a bound.
    tokio::time::sleep(outage).await;
    cluster.etcd(0).restart();
    let healed = Instant::now();
    if kill_coordinator {
        cluster.restart_coordinator(1);
    }
    assert_recovered(&cluster, workload, healed).await;
}

/// etcd frozen for `outage` (SIGSTOP, then SIGCONT): connections stay open, nothing is
/// answered, and leases lapse on etcd's clock when it resumes.
async fn etcd_paused_for(outage: Duration, kill_coordinator: bool) {
    let (mut cluster, workload) = cluster_under_load(1).await;
    cluster.etcd(0).pause();
    if kill_coordinator {
        cluster.kill_coordinator(1);
    }
    // The outage's length is the fault under test, not a wait for a state (as in
    // `etcd_killed_for`).
    tokio::time::sleep(outage).await;
    cluster.etcd(0).resume();
    let healed = Instant::now();
    if kill_coordinator {
        cluster.restart_coordinator(1);
    }
    assert_recovered(&cluster, workload, healed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_transactions_running_when_etcd_is_killed_for_5s_and_restarted_then_every_slice_serves_again(
) {
    etcd_killed_for(LONG_OUTAGE, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_transactions_running_when_etcd_is_killed_for_2s_and_restarted_then_every_slice_serves_again(
) {
    etcd_killed_for(SHORT_OUTAGE, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_transactions_running_when_etcd_is_paused_past_the_lease_ttl_then_every_slice_serves_again(
) {
    etcd_paused_for(LEASE_TTL * 2, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_transactions_running_when_etcd_is_paused_for_half_the_lease_ttl_then_every_slice_serves_again(
) {
    etcd_paused_for(LEASE_TTL / 2, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_etcd_killed_when_a_coordinator_dies_during_the_outage_then_every_slice_serves_again()
{
    etcd_killed_for(LONG_OUTAGE, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_etcd_paused_past_the_ttl_when_a_coordinator_dies_during_the_outage_then_every_slice_serves_again(
) {
    etcd_paused_for(LEASE_TTL * 2, true).await;
}
