//! `idem bench` reports only what it verified: every mode it runs reads its topic back
//! and says so, `--null` measures the transport without touching a log, `e2e` counts
//! every record it sent through a read_committed consumer, and flags that make no sense
//! together are refused with a message saying why.

use std::process::{Command, Output};

use idem_client::Admin;
use idem_tests::binaries::binary;
use idem_tests::Cluster;

const MODES: [&str; 5] = [
    "at-most-once",
    "at-least-once",
    "at-least-once-unordered",
    "exactly-once",
    "transactional",
];

fn bench(args: &[&str]) -> Output {
    Command::new(binary("idem"))
        .arg("bench")
        .args(args)
        .env("IDEM_LOG", "error")
        .output()
        .expect("run idem bench")
}

fn succeeded(output: &Output) -> String {
    assert!(
        output.status.success(),
        "idem bench failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("UTF-8 stdout")
}

/// Every value of `"key": value` in `json`, in document order, as the raw token
/// (strings without their quotes). The bench's JSON is flat enough for this: no key
/// the tests read is nested under another with the same name.
fn values(json: &str, key: &str) -> Vec<String> {
    let needle = format!("\"{key}\":");
    json.match_indices(&needle)
        .map(|(at, _)| {
            let rest = json[at + needle.len()..].trim_start();
            let end = rest.find([',', '}', '\n']).unwrap_or(rest.len());
            rest[..end].trim().trim_matches('"').to_string()
        })
        .collect()
}

fn numbers(json: &str, key: &str) -> Vec<f64> {
    values(json, key)
        .iter()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{key} is not a number: {v:?}"))
        })
        .collect()
}

#[test]
fn given_every_mode_when_benched_embedded_then_each_reports_throughput_and_verifies() {
    let json = succeeded(&bench(&[
        "produce",
        "--embedded",
        "--records",
        "3000",
        "--modes",
        "all",
        "--json",
    ]));
    assert!(json.contains("\"modes\": ["), "{json}");
    assert_eq!(values(&json, "mode"), MODES, "{json}");
    let rates = numbers(&json, "records_per_sec");
    assert_eq!(rates.len(), MODES.len());
    assert!(rates.iter().all(|r| *r > 0.0), "{json}");
    assert_eq!(
        values(&json, "verified"),
        vec!["true"; MODES.len()],
        "{json}"
    );
    for key in ["mb_per_sec", "p50_ms", "p99_ms", "p999_ms"] {
        assert_eq!(numbers(&json, key).len(), MODES.len(), "{key}");
    }
    assert_eq!(
        numbers(&json, "records"),
        vec![3000.0; MODES.len()],
        "{json}"
    );
}

#[test]
fn given_pipelined_commits_when_benched_then_every_record_of_many_transactions_is_read_once() {
    // 5 ms transactions: dozens of commits, each going on while the next is sent.
    let json = succeeded(&bench(&[
        "produce",
        "--embedded",
        "--records",
        "20000",
        "--modes",
        "transactional",
        "--txn-ms",
        "5",
        "--txn-pipelined",
        "--json",
    ]));
    assert_eq!(values(&json, "mode"), vec!["transactional"], "{json}");
    assert_eq!(numbers(&json, "records"), vec![20000.0], "{json}");
    assert_eq!(values(&json, "verified"), vec!["true"], "{json}");
}

#[test]
fn given_a_terminal_when_benching_then_a_progress_bar_shows_the_live_rate_and_a_pipe_gets_none() {
    // `script` (util-linux) gives the bench a terminal and copies what it draws to
    // stdout; the bar redraws every 200 ms, so a 2 s run draws it several times.
    let idem = binary("idem");
    let command = format!(
        "{} bench produce --embedded --duration 2s --modes exactly-once",
        idem.display()
    );
    let output = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("IDEM_LOG", "error")
        .output()
        .expect("util-linux `script` runs (Debian's bsdutils)");
    let screen = String::from_utf8_lossy(&output.stdout).replace('\r', "\n");
    assert!(output.status.success(), "{screen}");
    let rates: Vec<u64> = screen
        .lines()
        .filter(|line| line.contains("exactly-once [") && !line.contains("verify"))
        .filter_map(|line| {
            let (_, after) = line.split_once("records, ")?;
            after.split('/').next()?.trim().parse().ok()
        })
        .collect();
    assert!(
        rates.iter().any(|rate| *rate > 0),
        "no live rate drawn while producing: {screen}"
    );
    // Without a terminal (this test's pipes) nothing is drawn.
    let piped = bench(&["produce", "--embedded", "--records", "2000"]);
    succeeded(&piped);
    assert!(
        !String::from_utf8_lossy(&piped.stderr).contains("records, "),
        "a progress bar reached a pipe"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_running_cluster_when_benched_then_its_topics_have_the_asked_shape_and_each_mode_verifies(
) {
    let cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    let bootstrap = cluster.bootstrap();
    let address = bootstrap.clone();
    let output = tokio::task::spawn_blocking(move || {
        bench(&[
            "produce",
            "--bootstrap",
            address.as_str(),
            "--replication-factor",
            "3",
            "--partitions",
            "3",
            "--producers",
            "2",
            "--record-size",
            "512",
            "--records",
            "4000",
            "--modes",
            "exactly-once,transactional",
            "--topic-prefix",
            "shape",
            "--json",
        ])
    })
    .await
    .expect("bench task");
    let json = succeeded(&output);
    assert_eq!(
        values(&json, "mode"),
        vec!["exactly-once", "transactional"],
        "{json}"
    );
    assert_eq!(values(&json, "verified"), vec!["true"; 2], "{json}");
    assert_eq!(numbers(&json, "records"), vec![4000.0; 2], "{json}");
    // 512-byte records: MB/s (10^6 bytes) over records/s.
    for (mb, records) in numbers(&json, "mb_per_sec")
        .into_iter()
        .zip(numbers(&json, "records_per_sec"))
    {
        let size = mb * 1e6 / records;
        assert!(
            (size - 512.0).abs() < 0.01,
            "{size} bytes per record: {json}"
        );
    }
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    let metadata = admin.metadata(&[]).await.expect("metadata");
    let shapes: Vec<(usize, Vec<usize>)> = metadata
        .topics
        .iter()
        .filter(|t| t.name.starts_with("shape-"))
        .map(|t| {
            (
                t.partitions.len(),
                t.partitions.iter().map(|p| p.replicas.len()).collect(),
            )
        })
        .collect();
    assert_eq!(
        shapes,
        vec![(3, vec![3, 3, 3]); 2],
        "one topic per mode, 3 partitions of 3 replicas"
    );
}

#[test]
fn given_null_mode_when_benched_then_it_reports_the_transport_rate_unverified() {
    let output = Command::new(binary("idem"))
        .args([
            "bench",
            "produce",
            "--embedded",
            "--null",
            "--records",
            "2000",
            "--json",
        ])
        .env("IDEM_LOG", "warn")
        .output()
        .expect("run idem bench");
    let json = succeeded(&output);
    let rates = numbers(&json, "records_per_sec");
    assert_eq!(rates.len(), 1, "{json}");
    assert!(rates[0] > 0.0, "{json}");
    assert_eq!(values(&json, "verified"), vec!["null"], "{json}");
    // The one warning is the broker's own about discarding records: no coordinator
    // runs beside a log that takes no writes (it could never load, and said so).
    let stderr = String::from_utf8_lossy(&output.stderr);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert!(
        warnings.len() == 1 && warnings[0].contains("NULL PRODUCE MODE"),
        "{warnings:#?}"
    );
}

#[test]
fn given_an_e2e_run_then_every_record_is_read_once_and_latencies_are_ordered() {
    let json = succeeded(&bench(&[
        "e2e",
        "--embedded",
        "--records",
        "500",
        "--rate",
        "2000",
        "--json",
    ]));
    assert_eq!(numbers(&json, "count"), vec![500.0], "{json}");
    let p50 = numbers(&json, "p50_ms")[0];
    let p99 = numbers(&json, "p99_ms")[0];
    assert!(p50 > 0.0 && p50 <= p99, "{json}");
    assert_eq!(values(&json, "verified"), vec!["true"], "{json}");
}

#[test]
fn given_a_long_linger_then_every_record_waits_for_it_and_a_batch_smaller_than_a_record_is_refused()
{
    // 20 records a second: a batch opened by one record is sealed by the linger, so its
    // records wait 200 ms on average (the SDK's 5 ms linger gives about 11 ms here;
    // only the last records are flushed sooner).
    let json = succeeded(&bench(&[
        "e2e",
        "--embedded",
        "--duration",
        "2s",
        "--rate",
        "20",
        "--linger-ms",
        "400",
        "--json",
    ]));
    let p50 = numbers(&json, "p50_ms")[0];
    assert!(p50 >= 100.0, "the linger was not applied: {json}");
    let output = bench(&[
        "produce",
        "--embedded",
        "--batch-size",
        "100",
        "--records",
        "1",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--batch-size must hold at least one record"),
        "{stderr}"
    );
}

#[test]
fn given_null_without_embedded_then_the_bench_refuses_and_says_why() {
    let output = bench(&["produce", "--null", "--records", "10"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--null needs --embedded"), "{stderr}");
    assert!(
        output.stdout.is_empty(),
        "nothing on stdout for a refused run"
    );
}

#[test]
fn given_rounds_and_with_null_then_each_mode_reports_its_median_round_beside_the_transport_limit() {
    let json = succeeded(&bench(&[
        "produce",
        "--embedded",
        "--records",
        "500",
        "--modes",
        "exactly-once",
        "--with-null",
        "--rounds",
        "2",
        "--json",
    ]));
    assert_eq!(
        values(&json, "mode"),
        vec!["exactly-once", "null/at-least-once-unordered"],
        "{json}"
    );
    assert_eq!(values(&json, "verified"), vec!["true", "null"], "{json}");
    let rates = numbers(&json, "records_per_sec");
    assert!(rates.iter().all(|r| *r > 0.0), "{json}");
    // Each row carries both rounds' rates, and its own rate is one of them.
    let rounds: Vec<&str> = json.matches("\"round_records_per_sec\": [").collect();
    assert_eq!(rounds.len(), 2, "{json}");
    let first_rounds = json
        .split("\"round_records_per_sec\": [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("rounds of the first row");
    let first_rounds: Vec<f64> = first_rounds
        .split(',')
        .map(|v| v.trim().parse().expect("a rate"))
        .collect();
    assert_eq!(first_rounds.len(), 2, "{json}");
    assert!(first_rounds.contains(&rates[0]), "{json}");
    // The target that these two rows allow is checked and reported.
    assert_eq!(
        values(&json, "name"),
        vec!["exactly-once / null/at-least-once-unordered"],
        "{json}"
    );
    assert_eq!(values(&json, "goal"), vec!["0.5"], "{json}");
}

#[test]
fn given_json_outputs_of_several_runs_then_report_combines_them_as_rounds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = Vec::new();
    for round in 0..2 {
        for mode in ["at-least-once", "transactional"] {
            let json = succeeded(&bench(&[
                "produce",
                "--embedded",
                "--records",
                "300",
                "--modes",
                mode,
                "--json",
            ]));
            let file = dir.path().join(format!("{round}-{mode}.json"));
            std::fs::write(&file, json).expect("write");
            files.push(file.to_string_lossy().into_owned());
        }
    }
    let mut args = vec!["report", "--json"];
    args.extend(files.iter().map(String::as_str));
    let json = succeeded(&bench(&args));
    assert_eq!(
        values(&json, "mode"),
        vec!["at-least-once", "transactional"],
        "{json}"
    );
    assert_eq!(values(&json, "verified"), vec!["true", "true"], "{json}");
    assert_eq!(
        json.matches("\"round_records_per_sec\": [").count(),
        2,
        "{json}"
    );
    assert_eq!(
        values(&json, "name"),
        vec!["transactional / at-least-once"],
        "{json}"
    );
    // Anything else is refused with the file's name.
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{}").expect("write");
    let refused = bench(&["report", junk.to_str().expect("path")]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("junk.json"));
}

/// `--compare-tls` runs each mode in plaintext and then over mutual TLS (certificates
/// made for the run) against embedded servers; both rows verify what they read back.
#[test]
fn given_compare_tls_when_benched_then_the_tls_row_runs_beside_plaintext_and_verifies() {
    let json = succeeded(&bench(&[
        "produce",
        "--embedded",
        "--compare-tls",
        "--records",
        "2000",
        "--json",
    ]));
    assert_eq!(
        values(&json, "mode"),
        vec!["exactly-once", "tls/exactly-once"],
        "{json}"
    );
    assert_eq!(values(&json, "verified"), vec!["true", "true"], "{json}");
    assert_eq!(numbers(&json, "records"), vec![2000.0, 2000.0], "{json}");
}

/// A bench that cannot run over TLS refuses the TLS flags instead of running plaintext.
#[test]
fn given_tls_flags_when_benching_e2e_then_the_bench_refuses_and_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(
        &ca,
        idem_tests::tls::CertAuthority::new("bench CA").cert_pem(),
    )
    .expect("CA");
    let output = Command::new(binary("idem"))
        .args([
            "--tls-ca",
            &ca.display().to_string(),
            "bench",
            "e2e",
            "--embedded",
        ])
        .output()
        .expect("run idem bench");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("does not run over TLS yet"), "{stderr}");
}
