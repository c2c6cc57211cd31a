//! `idem txn slices` tells whether every partition of the transaction log is owned and
//! served, and `idem txn list` warns when one is not: a slice whose owner died shows as
//! "owner not answering" while its owner key lives, then as "NO OWNER", and the command
//! exits non-zero until a coordinator serves it again.

use std::process::Output;

use idem_tests::cli::idem;
use idem_tests::cluster::TXN_LOG_PARTITIONS;
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::Cluster;

fn rows_with(output: &Output, status: &str) -> usize {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.ends_with(status) || l.contains(&format!("  {status}")))
        .count()
}

/// Runs `idem txn slices` until `done` holds of its output.
async fn slices_until(bootstrap: &str, what: &str, done: impl Fn(&Output) -> bool) -> Output {
    let what = format!("idem txn slices showing {what}");
    let (output, _) = wait_until(PATIENCE, &what, || async {
        let output = idem(bootstrap, &["txn", "slices"]);
        if done(&output) {
            Seen::Reached(output)
        } else {
            Seen::Not(format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    })
    .await;
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_every_coordinator_killed_then_txn_slices_shows_the_unserved_slices_until_one_returns(
) {
    let mut cluster = Cluster::start_with_coordinators(1, 2, &[], &[]).await;
    let bootstrap = cluster.bootstrap();
    let partitions = TXN_LOG_PARTITIONS as usize;

    let served = idem(&bootstrap, &["txn", "slices"]);
    assert!(
        served.status.success(),
        "{}",
        String::from_utf8_lossy(&served.stderr)
    );
    assert_eq!(rows_with(&served, "served"), partitions);

    cluster.kill_coordinator(1);
    cluster.kill_coordinator(2);
    // The owner keys live until the coordinators' 2 s leases lapse.
    let silent = idem(&bootstrap, &["txn", "slices"]);
    assert!(!silent.status.success());
    assert_eq!(
        rows_with(&silent, "owner not answering"),
        partitions,
        "{}",
        String::from_utf8_lossy(&silent.stdout)
    );
    let unowned = slices_until(&bootstrap, "NO OWNER on every slice", |o| {
        rows_with(o, "NO OWNER") == partitions
    })
    .await;
    assert!(!unowned.status.success());
    assert!(
        String::from_utf8_lossy(&unowned.stderr).contains(&format!(
            "{partitions} of {partitions} __transaction_state partitions are not served"
        )),
        "{}",
        String::from_utf8_lossy(&unowned.stderr)
    );
    let list = idem(&bootstrap, &["txn", "list"]);
    let warnings = String::from_utf8_lossy(&list.stderr);
    assert_eq!(
        warnings
            .matches("NO OWNER; its transactional ids are unavailable")
            .count(),
        partitions,
        "{warnings}"
    );

    cluster.restart_coordinator(1);
    let back = slices_until(&bootstrap, "every slice served", |o| o.status.success()).await;
    assert_eq!(rows_with(&back, "served"), partitions);
}
