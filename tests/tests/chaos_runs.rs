//! Chaos verification in CI (issue 23): every nemesis family in six bounded runs, two
//! families sharing a run where their clusters agree (process kills with torn logs;
//! pauses with partition moves and broker removals on 4 brokers; cuts from etcd with
//! isolated leaders), and etcd faults, etcd member faults of a 3-member etcd and
//! network splits on a lab network on their own; fixed seeds, 40 s of faults each,
//! the stage under 10 minutes on 2 cores;
//! any anomaly the checker finds in the history fails the test and names the report
//! directory. Segments are small, so rolls, producer snapshots and the cleaner of
//! `__transaction_state` run under the faults; a run in which no segment rolled, or the
//! cleaner removed nothing, fails. The runs take turns (one cluster at a time on a 2-core machine).
//! `scripts/chaos.sh` runs the soak below for as long as asked.

use std::time::Duration;

use idem_tests::chaos::nemesis::Family;
use idem_tests::chaos::run::ChaosRun;
use idem_tests::chaos::{soak, verify};

/// One run at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn run(families: &[Family], seed: u64, duration: Duration) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let outcome = ChaosRun {
        families: families.to_vec(),
        seed,
        duration,
    }
    .run()
    .await;
    eprintln!("{}", outcome.summary);
    verify::assert_no_anomaly(&outcome.verdict, &outcome.report, &outcome.summary);
    let stats = serde_json::to_value(&outcome.verdict.stats).expect("stats");
    eprintln!("stats: {stats}");
    // The consume-transform-produce members must have committed through the faults,
    // or the run says nothing about exactly-once pipelines.
    let transforms = outcome.verdict.stats.ops.get("transform");
    let committed = transforms.and_then(|t| t.get("ok")).copied().unwrap_or(0);
    assert!(
        committed > 0,
        "no consume-transform-produce transaction committed: {transforms:?}; {}",
        outcome.summary
    );
    // Without rolls the run no longer tests producer snapshots, transaction index
    // sealing or the cleaner under faults: a change of the workload or of the segment
    // settings must not make that silent.
    let rolled: usize = outcome.lifecycle.iter().map(|b| b.workload_rolls).sum();
    assert!(
        rolled > 0,
        "no segment of the workload's topics rolled: the run did not exercise the log \
         lifecycle; {}",
        outcome.summary
    );
    let cleaned: u64 = outcome.lifecycle.iter().map(|b| b.records_cleaned).sum();
    assert!(
        cleaned > 0,
        "the cleaner removed nothing from the transaction log: the run did not exercise \
         compaction; {}",
        outcome.summary
    );
}

/// 40 s (60 s until stop 38 gave 10 to 14 faults a run, 45 s until stop 40 8 to 9): the
/// whole suite must stay under 30 minutes on CI's 2 cores (stop 39's CI: 1,743 s), and
/// soaks (`scripts/chaos.sh`) go longer.
const CI_RUN: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_brokers_killed_some_with_torn_logs_then_the_history_has_no_anomaly() {
    run(&[Family::Kill, Family::Torn], 1, CI_RUN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_pauses_partition_moves_and_broker_removals_then_the_history_has_no_anomaly() {
    run(&[Family::Pause, Family::Membership], 2, CI_RUN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_processes_cut_off_from_etcd_and_leaders_isolated_then_the_history_has_no_anomaly() {
    run(&[Family::Partition, Family::Isolate], 3, CI_RUN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_etcd_killed_and_paused_then_the_history_has_no_anomaly() {
    run(&[Family::Etcd], 4, CI_RUN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_etcd_members_killed_paused_and_the_quorum_lost_then_the_history_has_no_anomaly() {
    run(&[Family::EtcdMember], 6, CI_RUN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_network_splits_between_hosts_then_the_history_has_no_anomaly() {
    run(&[Family::Split], 8, CI_RUN).await;
}

/// `IDEM_CHAOS_DURATION` (seconds, default 600), `IDEM_CHAOS_SEED` (default 42),
/// `IDEM_CHAOS_NEMESIS` (comma-separated families, default all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a long soak: scripts/chaos.sh runs it"]
async fn soak() {
    let families: Vec<Family> = match std::env::var("IDEM_CHAOS_NEMESIS") {
        Ok(list) => list
            .split(',')
            .map(|name| {
                Family::parse(name.trim()).unwrap_or_else(|| {
                    panic!(
                        "unknown nemesis family {name:?}: kill, pause, partition, isolate, \
                         etcd, etcd-member, torn, split, membership"
                    )
                })
            })
            .collect(),
        Err(_) => vec![
            Family::Kill,
            Family::Pause,
            Family::Partition,
            Family::Isolate,
            Family::Etcd,
            Family::Torn,
        ],
        // etcd-member needs a 3-member etcd, and the other families one member: a
        // soak of it is its own run (IDEM_CHAOS_NEMESIS=etcd-member); so is split, on a
        // lab network (IDEM_CHAOS_NEMESIS=split), and membership, on 4 brokers.
    };
    run(&families, soak::seed(), soak::duration()).await;
}
