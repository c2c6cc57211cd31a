//! The end every chaos run shares, on processes or on containers: once the faults are
//! healed and the workload stopped, every transaction settled, every partition read from
//! the start at both isolation levels, the pipeline's committed offsets and output read,
//! then the history read back and judged by the checker alone. The verdict and the
//! timeline picture go to the run's report directory.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use idem_chaos::history::{Call, OpKind, Read};
use idem_chaos::{check, read_history, Verdict};
use idem_client::Isolation;

use crate::chaos::pipeline::{self, OUTPUT};
use crate::chaos::recorder::{read_isolation, read_record, Recorder, PARTITIONS, TOPICS};
use crate::txn;

/// What the checker made of a run's history.
pub struct Checked {
    /// How many events (invokes and completions) the history holds.
    pub events: usize,
    pub verdict: Verdict,
}

impl Checked {
    /// The history's figures for a summary: events, operations by kind and outcome,
    /// anomalies, validity.
    pub fn figures(&self) -> String {
        let ops = serde_json::to_string(&self.verdict.stats.ops).expect("ops as json");
        format!(
            "{} history events; operations {ops}; anomalies {:?}; valid: {}",
            self.events,
            self.verdict.anomalies.counts(),
            self.verdict.valid
        )
    }

    /// Consume-transform-produce transactions that committed.
    pub fn transforms_committed(&self) -> usize {
        let transforms = self.verdict.stats.ops.get("transform");
        transforms.and_then(|t| t.get("ok")).copied().unwrap_or(0)
    }
}

/// Fails the test unless the checker found the history valid, naming the report.
pub fn assert_no_anomaly(verdict: &Verdict, report: &Path, summary: &str) {
    assert!(
        verdict.valid,
        "anomalies found; see {}/verdict.json: {summary}",
        report.display()
    );
}

/// The report directory of the run `name`, emptied: `IDEM_CHAOS_REPORTS` or
/// `target/<profile>/chaos-reports`, then the name.
pub fn report_dir(name: &str) -> PathBuf {
    let root = std::env::var_os("IDEM_CHAOS_REPORTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::binaries::bin_dir().join("chaos-reports"));
    let report = root.join(name);
    let _ = std::fs::remove_dir_all(&report);
    std::fs::create_dir_all(&report).expect("report dir");
    report
}

/// Reads everything back through `bootstrap` into `history` (the workload stopped, the
/// cluster serving), then checks the history `report/history.jsonl` and writes
/// `verdict.json` and the timeline beside it.
pub async fn read_back_and_check(bootstrap: &str, history: &Recorder, report: &Path) -> Checked {
    for topic in TOPICS.into_iter().chain([OUTPUT]) {
        txn::wait_until_stable(bootstrap, topic, &(0..PARTITIONS).collect::<Vec<_>>()).await;
    }
    for isolation in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
        final_read(bootstrap, isolation, history).await;
    }
    pipeline::final_pipeline(bootstrap, history).await;
    history.flush();
    let ops = read_history(BufReader::new(
        File::open(report.join("history.jsonl")).expect("history"),
    ))
    .unwrap_or_else(|e| panic!("the run wrote an invalid history: {e}"));
    let verdict = check(&ops);
    std::fs::write(
        report.join("verdict.json"),
        serde_json::to_string_pretty(&verdict).expect("verdict json"),
    )
    .expect("write the verdict");
    // The picture: throughput and latency over time, the faults shaded.
    if let Err(e) = idem_chaos::plot::write_timeline(report) {
        eprintln!("no timeline picture for {}: {e}", report.display());
    }
    Checked {
        events: ops.len(),
        verdict,
    }
}

/// Reads every partition of every topic from the start to its end at `isolation` and
/// records it as one `final_read`.
async fn final_read(bootstrap: &str, isolation: Isolation, history: &Recorder) {
    let process = format!("final-{}", read_isolation(isolation).as_str());
    let mut read = Read {
        isolation: read_isolation(isolation),
        records: Vec::new(),
    };
    history.invoke(&process, Call::FinalRead(read.clone()));
    let partitions: Vec<i32> = (0..PARTITIONS).collect();
    for topic in TOPICS {
        for record in txn::read(bootstrap, topic, &partitions, isolation).await {
            read.records.push(read_record(&record));
        }
    }
    history.complete(&process, OpKind::Ok, Call::FinalRead(read));
}
