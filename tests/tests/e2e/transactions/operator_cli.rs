//! The operator's commands against a real cluster: `idem txn list`, `describe`,
//! `find-hanging` and `abort`. A transaction open at a broker that no coordinator knows
//! (written here by hand, the way a bug or a lost coordinator state would leave it) is
//! reported as hanging; a live producer's open transaction is not, and `abort` ends it
//! and fences the producer.

use std::process::Output;

use idem_client::{ProducerRecord, TxnErrorClass};
use idem_proto::v1::ControlType;
use idem_proto::ErrorCode;
use idem_tests::cli::idem;
use idem_tests::raw::{self, Marker};
use idem_tests::{txn, Cluster};

const TOPIC: &str = "payments";
const ORPHAN: i64 = 987_654;

fn ok_stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_open_and_an_orphaned_transaction_then_the_txn_commands_list_describe_find_and_abort(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, 1, 1).await;
    let bootstrap = cluster.bootstrap();

    let producer = txn::producer(&bootstrap, "stuck-payer").await;
    producer.begin().expect("begin");
    producer
        .send(ProducerRecord::new(TOPIC, "pay-1").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    let live = producer.producer_id().expect("initialised");

    // An open transaction no coordinator will end.
    let mut broker = raw::connect(&bootstrap).await;
    let begin = Marker {
        topic: TOPIC,
        partition: 0,
        producer_id: ORPHAN,
        producer_epoch: 0,
        control: ControlType::Begin,
        coordinator_epoch: 0,
    };
    assert_eq!(
        raw::write_marker(&mut broker, begin).await.error_code(),
        ErrorCode::None
    );

    let listed = ok_stdout(&idem(&bootstrap, &["txn", "list"]));
    let row = listed
        .lines()
        .find(|l| l.starts_with("stuck-payer"))
        .unwrap_or_else(|| panic!("not listed: {listed}"));
    assert!(
        row.contains("Ongoing") && row.contains("payments-0"),
        "{row}"
    );

    let described = ok_stdout(&idem(&bootstrap, &["txn", "describe", "stuck-payer"]));
    for expected in [
        "state:             Ongoing",
        "partitions:        payments-0",
        &format!("producer_id:       {}", live.producer_id),
    ] {
        assert!(described.contains(expected), "{expected:?} in {described}");
    }

    let hanging = ok_stdout(&idem(&bootstrap, &["txn", "find-hanging"]));
    let rows: Vec<&str> = hanging.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "only the orphan hangs: {hanging}");
    let fields: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(
        (fields[0], fields[1], fields[2]),
        ("payments", "0", ORPHAN.to_string().as_str()),
        "{hanging}"
    );

    let aborted = ok_stdout(&idem(&bootstrap, &["txn", "abort", "stuck-payer"]));
    assert!(aborted.contains("aborted the open transaction of stuck-payer"));
    let after = ok_stdout(&idem(&bootstrap, &["txn", "describe", "stuck-payer"]));
    assert!(
        after.contains("Abort") && !after.contains("Ongoing"),
        "{after}"
    );
    let fenced = producer
        .commit()
        .await
        .expect_err("the aborted producer cannot commit");
    assert_eq!(fenced.txn_class(), TxnErrorClass::Fatal, "{fenced}");

    // Nothing to abort now, and an unknown id: both refused with a reason.
    let again = idem(&bootstrap, &["txn", "abort", "stuck-payer"]);
    assert!(!again.status.success());
    let unknown = idem(&bootstrap, &["txn", "describe", "nobody"]);
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("nobody"),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
}
