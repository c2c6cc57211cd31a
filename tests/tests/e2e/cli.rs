//! The README's walk-through, run for real: `idem dev`, then `idem topic create`,
//! `idem produce` from stdin, `idem consume`, `idem topic describe`; Ctrl-C stops the
//! dev server cleanly and a restart on the same data dir keeps every record.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use idem_tests::binaries::binary;
use idem_tests::cli::idem_with_input;

/// A running `idem dev` (also used by `transactions::deleted_topic` for the solo
/// coordinator).
pub(crate) struct DevServer {
    child: Child,
    pub(crate) addr: String,
    /// The banner's `Authorization: ...` line: what `idem dev` said it enforces.
    pub(crate) authorization: String,
}

impl DevServer {
    pub(crate) fn start(data_dir: &Path, listen: &str) -> Self {
        DevServer::start_with(data_dir, listen, &[])
    }

    /// [`DevServer::start`] with `extra` flags of `idem dev`.
    pub(crate) fn start_with(data_dir: &Path, listen: &str, extra: &[&str]) -> Self {
        let mut child = Command::new(binary("idem"))
            .args([
                "dev",
                "--listen",
                listen,
                "--coordinator-listen",
                "127.0.0.1:0",
                // Not the default 9094: tests run side by side.
                "--kafka-listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(data_dir)
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn idem dev");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = lines
            .next()
            .expect("idem dev prints its address")
            .expect("stdout line");
        let addr = first
            .strip_prefix("idem dev: broker listening on ")
            .and_then(|rest| rest.split([' ', ',']).next())
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_string();
        let authorization = lines
            .by_ref()
            .map(|line| line.expect("stdout line"))
            .find(|line| line.starts_with("Authorization: "))
            .expect("idem dev says whether it checks requests");
        std::thread::spawn(move || for _ in lines {});
        DevServer {
            child,
            addr,
            authorization,
        }
    }

    /// Ctrl-C, and the exit status it produced.
    fn interrupt(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill")
            .success());
        self.child.wait().expect("wait for idem dev")
    }
}

impl Drop for DevServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn given_idem_dev_when_a_user_follows_the_readme_then_records_round_trip_and_survive_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("idem-data");
    let dev = DevServer::start(&data_dir, "127.0.0.1:0");
    let addr = dev.addr.clone();

    let created = idem_with_input(&addr, &["topic", "create", "demo", "--partitions", "3"], "");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let produced = idem_with_input(
        &addr,
        &["produce", "demo", "--key-separator", ":"],
        "k1:order-1\nk2:order-2\nk3:order-3\n",
    );
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    assert_eq!(
        stdout(&produced).lines().count(),
        3,
        "one acknowledgement per record"
    );

    let consumed = idem_with_input(
        &addr,
        &["consume", "demo", "--from-beginning", "--max-messages", "3"],
        "",
    );
    assert!(
        consumed.status.success(),
        "{}",
        String::from_utf8_lossy(&consumed.stderr)
    );
    let mut values: Vec<String> = stdout(&consumed).lines().map(str::to_string).collect();
    values.sort();
    assert_eq!(values, vec!["order-1", "order-2", "order-3"]);

    // The dev coordinator commits a transactional produce; a read_committed consume
    // sees it, and `idem txn list` shows the id completed.
    let transactional = idem_with_input(
        &addr,
        &[
            "produce",
            "demo",
            "--transactional-id",
            "cli-txn",
            "--commit-every",
            "2",
        ],
        "t-1\nt-2\nt-3\n",
    );
    assert!(
        transactional.status.success(),
        "{}",
        String::from_utf8_lossy(&transactional.stderr)
    );
    let consumed = idem_with_input(
        &addr,
        &["consume", "demo", "--from-beginning", "--max-messages", "6"],
        "",
    );
    let mut values: Vec<String> = stdout(&consumed).lines().map(str::to_string).collect();
    values.sort();
    assert_eq!(
        values,
        vec!["order-1", "order-2", "order-3", "t-1", "t-2", "t-3"]
    );
    let txns = idem_with_input(&addr, &["txn", "list"], "");
    assert!(
        stdout(&txns)
            .lines()
            .any(|l| l.starts_with("cli-txn") && l.contains("CompleteCommit")),
        "{}",
        stdout(&txns)
    );

    let listed = idem_with_input(&addr, &["topic", "list"], "");
    assert_eq!(stdout(&listed).lines().collect::<Vec<_>>(), vec!["demo"]);
    let all = idem_with_input(&addr, &["topic", "list", "--internal"], "");
    let mut all: Vec<String> = stdout(&all).lines().map(str::to_string).collect();
    all.sort();
    assert_eq!(
        all,
        vec!["__consumer_offsets", "__transaction_state", "demo"]
    );
    let described = idem_with_input(&addr, &["topic", "describe", "demo"], "");
    assert!(
        stdout(&described).contains("3 partition(s)"),
        "{}",
        stdout(&described)
    );

    // Records the broker refuses make the command fail.
    let refused = idem_with_input(&addr, &["produce", "no-such-topic"], "x\n");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not acknowledged"));

    assert!(dev.interrupt().success(), "Ctrl-C stops idem dev cleanly");
    let dev = DevServer::start(&data_dir, &addr);
    let again = idem_with_input(
        &dev.addr,
        &[
            "consume",
            "demo",
            "--from-beginning",
            "--max-messages",
            "3",
            "--partition",
            "0",
        ],
        "",
    );
    let again_all = idem_with_input(
        &dev.addr,
        &["consume", "demo", "--from-beginning", "--timeout-ms", "300"],
        "",
    );
    assert!(again.status.success());
    let mut values: Vec<String> = stdout(&again_all).lines().map(str::to_string).collect();
    values.sort();
    assert_eq!(
        values,
        vec!["order-1", "order-2", "order-3", "t-1", "t-2", "t-3"],
        "the data survived the restart"
    );
}

#[tokio::test]
async fn given_a_cluster_when_describing_a_topic_then_every_partition_shows_replicas_isr_and_its_leaders_offsets(
) {
    let cluster = idem_tests::Cluster::start(3, &[]);
    cluster.create_topic("orders", 3, 3).await;
    for partition in 0..3 {
        cluster.leader_of("orders", partition).await;
    }
    let bootstrap = cluster.broker(1).bootstrap();
    let producer =
        idem_tests::sdk::one_record_per_batch(&bootstrap, idem_client::Delivery::ExactlyOnce).await;
    for partition in 0..3 {
        let value = idem_tests::sdk::bytes(&format!("v{partition}"));
        producer
            .send_to("orders", partition, None, value)
            .await
            .expect("send")
            .await
            .expect("acked");
    }
    producer.close().await;
    let described = idem_with_input(&bootstrap, &["topic", "describe", "orders"], "");
    assert!(
        described.status.success(),
        "{}",
        String::from_utf8_lossy(&described.stderr)
    );
    let text = stdout(&described);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(2)
        .map(|line| line.split_whitespace().collect())
        .filter(|r: &Vec<&str>| r.len() == 8)
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    for row in rows {
        // partition leader leader_epoch replicas isr log_start high_watermark log_end
        assert_eq!(row[3].split(',').count(), 3, "{text}");
        assert_eq!(row[4].split(',').count(), 3, "{text}");
        assert_eq!(
            (row[5], row[6], row[7]),
            ("0", "1", "1"),
            "offsets come from each leader: {text}"
        );
    }
}
