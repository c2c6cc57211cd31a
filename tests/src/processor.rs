//! Consume-transform-produce processors as separate processes: the SDK's example
//! `client/examples/transform.rs`, built by `cargo build --workspace --examples`, so a
//! test kills, pauses and restarts real members of a group. Every process is killed
//! when its handle drops, even when the test panics.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idem_client::{Admin, ConsumerRecord, Isolation};

use crate::binaries::bin_dir;
use crate::groups::GroupClient;
use crate::log_tail::log_tail;
use crate::txn::{self, wait_until_stable};
use crate::wait::{try_wait_until, Seen};

/// The example binary `name` (`target/<profile>/examples/<name>`).
pub fn example(name: &str) -> PathBuf {
    let path = bin_dir().join("examples").join(name);
    assert!(
        path.exists(),
        "{} not found: run `cargo build --workspace --examples` first",
        path.display()
    );
    path
}

/// One `transform` process: a member of `group` reading `input`, writing `output`,
/// under transactional id `{group}-{instance}`.
pub struct Processor {
    args: Vec<String>,
    child: Option<Child>,
    /// What the process (and its restarts) wrote to stderr.
    log: tempfile::NamedTempFile,
}

impl Processor {
    pub fn start(bootstrap: &str, input: &str, output: &str, group: &str, instance: &str) -> Self {
        let args = [bootstrap, input, output, group, instance]
            .map(String::from)
            .to_vec();
        let log = tempfile::NamedTempFile::new().expect("processor log file");
        let mut p = Processor {
            args,
            child: None,
            log,
        };
        p.spawn();
        p
    }

    fn spawn(&mut self) {
        let child = Command::new(example("transform"))
            .args(&self.args)
            .env(
                "IDEM_LOG",
                std::env::var("IDEM_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.log.reopen().expect("processor log file"))
            .spawn()
            .expect("spawn transform");
        self.child = Some(child);
    }

    /// The instance name it was started with (its transactional id's suffix).
    pub fn instance(&self) -> &str {
        self.args.last().map_or("", String::as_str)
    }

    /// Everything the process and its restarts wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// SIGKILL, and reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL, then the same instance again (its transactional id fences the old one).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn pause(&self) {
        if let Some(child) = &self.child {
            crate::signal::send(child, "-STOP");
        }
    }

    pub fn resume(&self) {
        if let Some(child) = &self.child {
            crate::signal::send(child, "-CONT");
        }
    }
}

impl Drop for Processor {
    /// Kills the process; when the test is failing, prints the end of its log first, so
    /// that a stalled or failed pipeline is diagnosed from CI's output alone.
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let (tail, lines) = log_tail(self.log.path(), LOG_TAIL);
            eprintln!(
                "--- processor {} (last {LOG_TAIL} of {lines} log lines) ---\n{tail}",
                self.instance(),
            );
        }
    }
}

/// Waits until `group` has committed at least `at_least` offsets of `input` in all
/// (partitions `0..partitions`). When it is not reached in time, the failure names each
/// partition's committed offset and the group's members and what they own (the
/// processors print their logs as the panic drops them).
pub async fn wait_committed(
    group: &GroupClient,
    input: &str,
    partitions: i32,
    at_least: i64,
    within: Duration,
    what: &str,
) {
    let waited = try_wait_until(within, || async {
        let committed = group.committed(input, partitions).await;
        let sum: i64 = committed.iter().map(|o| (*o).max(0)).sum();
        if sum >= at_least {
            Seen::Reached(())
        } else {
            Seen::Not(format!("{sum} committed, by partition {committed:?}"))
        }
    })
    .await;
    if let Err((waited, last)) = waited {
        let description = group.describe().await;
        let members: Vec<String> = description
            .members
            .iter()
            .map(|m| {
                let owned: Vec<i32> = m
                    .assignment
                    .iter()
                    .flat_map(|t| t.partitions.clone())
                    .collect();
                let target: Vec<i32> = m
                    .target_assignment
                    .iter()
                    .flat_map(|t| t.partitions.clone())
                    .collect();
                format!(
                    "{} (instance {:?}, epoch {}, {}): owns {owned:?}, target {target:?}",
                    m.member_id, m.instance_id, m.member_epoch, m.state
                )
            })
            .collect();
        // An offset an open transaction holds keeps its partition from being read.
        let stable = group.fetch(input, partitions, true).await;
        let unstable: Vec<String> = stable
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .filter(|p| p.error_code != 0)
            .map(|p| format!("{}: {}", p.partition, p.error_message))
            .collect();
        let transactions = match Admin::connect(group.bootstrap()).await {
            Ok(admin) => format!("{:#?}", admin.list_transactions().await),
            Err(e) => format!("cannot list them: {e}"),
        };
        panic!(
            "{what}: not reached within {waited:?}; last seen: {last}\n\
             unstable offsets: {unstable:?}\nopen transactions: {transactions}\n\
             group {} on coordinator {}: {} at epoch {} (target {})\n{}",
            description.group_id,
            description.coordinator_id,
            description.state,
            description.group_epoch,
            description.target_epoch,
            members.join("\n"),
        );
    }
}

/// How many of a processor's last log lines a failing test prints.
const LOG_TAIL: usize = 40;

/// An output record's `source` header (`topic/partition/offset` of its input) and value.
fn source_and_value(record: &ConsumerRecord) -> (String, String) {
    let source = record
        .headers
        .iter()
        .find(|(k, _)| k == "source")
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default();
    let value = String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).into_owned();
    (source, value)
}

/// Asserts that `group` committed every input (`per_partition` in each partition
/// `0..partitions`) and that `output`, read_committed once its markers landed, holds
/// exactly one `transform` output per input record — `input_value(p, n)` upper-cased,
/// at input offset `n` of partition `p` — in input order.
pub async fn assert_pipeline_exactly_once(
    group: &GroupClient,
    bootstrap: &str,
    (input, output): (&str, &str),
    partitions: i32,
    per_partition: usize,
    input_value: impl Fn(i32, usize) -> String,
) {
    let committed = group.committed(input, partitions).await;
    assert_eq!(
        committed,
        vec![per_partition as i64; partitions as usize],
        "the group's committed offsets are the input's log end"
    );
    let all: Vec<i32> = (0..partitions).collect();
    // The last transactions' markers may still be on their way: read once they landed.
    wait_until_stable(bootstrap, output, &all).await;
    let records = txn::read(bootstrap, output, &all, Isolation::ReadCommitted).await;
    let mut got: Vec<Vec<(String, String)>> = vec![Vec::new(); partitions as usize];
    for record in &records {
        got[record.partition as usize].push(source_and_value(record));
    }
    for (p, got) in (0..partitions).zip(got) {
        let expected: Vec<(String, String)> = (0..per_partition)
            .map(|n| (format!("{input}/{p}/{n}"), input_value(p, n).to_uppercase()))
            .collect();
        assert_eq!(
            got.len(),
            expected.len(),
            "partition {p}: one output per input"
        );
        assert_eq!(got, expected, "partition {p}: each input once, in order");
    }
}
