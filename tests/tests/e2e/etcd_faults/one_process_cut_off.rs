//! One process cut off from etcd while every other process reaches it: the process
//! stops serving what it owned within its lease TTL (before etcd can hand it to another),
//! the others take over, and once the link heals it registers again and serves.

use std::time::{Duration, Instant};

use idem_tests::cluster::ProcessId;
use idem_tests::wait::{seen_if, wait_until};
use idem_tests::{txn, Cluster};

use super::{assert_recovered, put_under_load, LEASE_TTL, PARTITIONS, RECOVERY_MARGIN, TOPIC};

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
    // before etcd lets the lease lapse and hands its slices to coordinator 2. A bound on
    // purpose: it must stop by its own clock at about the TTL, not at some later event.
    // The second of slack absorbs a loaded machine's scheduling and the polls.
    wait_until(
        LEASE_TTL + Duration::from_secs(1),
        "coordinator 1 stops serving after losing etcd (it still owns)",
        || async {
            let owned = txn::owned_partitions(&address)
                .await
                .expect("still answers");
            let reached = owned.is_empty();
            seen_if(owned, reached)
        },
    )
    .await;
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
    // The leader of a partition other than the workload's bootstrap broker: a client
    // has one bootstrap address, and a broker cut off from etcd answers Metadata
    // UNAVAILABLE, so a producer instance started during the cut through that broker
    // could not start at all (what a lone bootstrap server that is down does too).
    let bootstrap_broker = cluster.observer(&[]);
    let mut cut = None;
    for p in PARTITIONS {
        let leader = cluster.leader_of(TOPIC, p).await;
        if leader.leader_id != bootstrap_broker {
            cut = Some((p, leader));
            break;
        }
    }
    let (partition, old) = cut.expect("3 partitions on 3 brokers: one is led elsewhere");
    cluster.cut_from_etcd(ProcessId::Broker(old.leader_id));
    cluster.new_leader(TOPIC, partition, &old).await;
    workload
        .wait_for_commits_since(Instant::now(), 2, Duration::from_secs(20))
        .await;
    cluster.heal_link_to_etcd(ProcessId::Broker(old.leader_id));
    assert_recovered(&cluster, workload, Instant::now()).await;
}
