//! One chaos run on containers: the compose cluster of `deploy/compose.yaml` (3 etcd
//! members, 3 brokers, 2 coordinators) from the images just built, with the chaos
//! settings of `tests/compose.chaos.yaml`; the workload of the process runs, on this
//! host, through the external listeners; the container nemesis for the run's duration;
//! then every fault healed, every container healthy and the cluster serving, a few
//! quiet seconds, the workload stopped, and the end every run shares (read back,
//! checked). The report directory holds the history, `nemesis.jsonl`, `verdict.json`,
//! `summary.txt` (every fault, the count of each family, the history's figures), the
//! timeline and `compose.log`, every container's log.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_chaos::Verdict;
use tokio::runtime::Handle;

use crate::chaos::container_nemesis::{self, ContainerNemesis};
use crate::chaos::pipeline::OUTPUT;
use crate::chaos::recorder::{Recorder, TOPICS};
use crate::chaos::run::{workload_topic, QUIET, RECOVERY};
use crate::chaos::verify;
use crate::chaos::workload::{Workload, CLIENTS};
use crate::compose::{self, ComposeCluster};
use crate::raw;

/// How long the cluster may take, once up, to lead and replicate the topics just
/// created.
const TOPICS_SERVED_WITHIN: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct ContainerRun {
    pub seed: u64,
    /// How long faults are injected (the round under way is finished after it).
    pub duration: Duration,
}

/// What a run produced.
pub struct ContainerOutcome {
    pub verdict: Verdict,
    pub report: PathBuf,
    pub summary: String,
    /// Faults injected, by family name (every family, injected or not).
    pub injected: BTreeMap<&'static str, usize>,
    pub transforms_committed: usize,
}

/// The chaos settings merged over `deploy/compose.yaml`.
fn chaos_override() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("compose.chaos.yaml")
}

impl ContainerRun {
    fn name(&self) -> String {
        format!("containers-seed{}", self.seed)
    }

    pub async fn run(&self) -> ContainerOutcome {
        let report = verify::report_dir(&self.name());
        let run_started = Instant::now();
        // The image tag in the project's name: runs of two tags (a helper's and the
        // test command's) never share containers.
        let project = format!("idem-chaos-containers-{}", compose::image_tag());
        let cluster = Arc::new(ComposeCluster::up_with(&project, &[chaos_override()]));
        // Dropped before the cluster is taken down: a failing run keeps its logs.
        let _logs = LogsOnPanic {
            cluster: cluster.clone(),
            report: report.clone(),
        };
        let up_took = cluster.up_took;
        create_topics(&cluster).await;
        let ready = blocking(&cluster, |cluster, handle| {
            let since = Instant::now();
            container_nemesis::serving_within(cluster, handle, since, TOPICS_SERVED_WITHIN)
        })
        .await;
        if let Err(problem) = ready {
            panic!("the compose cluster did not serve the new topics: {problem}");
        }

        let started = Instant::now();
        let bootstrap = cluster.bootstrap();
        let history = Recorder::create(&report.join("history.jsonl"), started);
        let kafka = cluster.kafka_bootstrap();
        let workload = Workload::start(&bootstrap, Some(&kafka), CLIENTS, self.seed, &history);

        let nemesis_log = File::create(report.join("nemesis.jsonl")).expect("nemesis log");
        let mut nemesis = ContainerNemesis::new(self.seed, nemesis_log, started);
        let duration = self.duration;
        let (nemesis, faults_took, recovered, serving_after) =
            blocking(&cluster, move |cluster, handle| {
                nemesis.run(cluster, handle, duration);
                let faults_took = started.elapsed();
                // Every fault is healed: the whole cluster serves again.
                let healed = Instant::now();
                let recovered =
                    container_nemesis::serving_within(cluster, handle, healed, RECOVERY);
                let serving_after = healed.elapsed();
                let coordinators = container_nemesis::coordinator_health(cluster, handle);
                (
                    nemesis,
                    faults_took,
                    recovered.map(|()| coordinators),
                    serving_after,
                )
            })
            .await;
        let coordinators = recovered.unwrap_or_else(|problem| {
            panic!(
                "the compose cluster did not serve again after the faults: {problem}; \
                 report in {}",
                report.display()
            )
        });
        // The clients get a few quiet seconds on the healed cluster before they stop.
        tokio::time::sleep(QUIET).await;
        workload.stop().await;
        // The harness's readers and group client dial one address; every broker serves.
        let reader = cluster.broker_address(1);
        let checked = verify::read_back_and_check(&reader, &history, &report).await;
        save_logs(&cluster, &report);

        let fault_lines: Vec<String> = nemesis
            .faults
            .iter()
            .map(|f| {
                let at = Duration::from_nanos(f.start_ns);
                let lasted = Duration::from_nanos(f.end_ns - f.start_ns);
                format!("  {at:>9.1?} +{lasted:>6.1?}  {:<21} {}", f.family, f.fault)
            })
            .collect();
        let summary = format!(
            "container chaos run {}: compose up in {up_took:?}; {:?} of faults, {} faults \
             by family {:?}; serving again {serving_after:?} after the last fault \
             ({coordinators}); {}; whole run {:?}; report in {}\nfaults (start, length, \
             family, fault):\n{}",
            self.name(),
            faults_took,
            nemesis.faults.len(),
            nemesis.injected,
            checked.figures(),
            run_started.elapsed(),
            report.display(),
            fault_lines.join("\n")
        );
        std::fs::write(report.join("summary.txt"), format!("{summary}\n")).expect("summary");
        ContainerOutcome {
            transforms_committed: checked.transforms_committed(),
            verdict: checked.verdict,
            report,
            summary,
            injected: nemesis.injected,
        }
    }
}

/// Creates the workload's topics (RF 3, the process runs' configs) through broker 1's
/// external listener.
async fn create_topics(cluster: &ComposeCluster) {
    for topic in TOPICS.into_iter().chain([OUTPUT]) {
        raw::create(&cluster.broker_address(1), workload_topic(topic)).await;
    }
}

/// Runs `f` on a blocking thread with the runtime's handle: the Docker CLI blocks, and
/// must not hold up the workload's tasks.
async fn blocking<T: Send + 'static>(
    cluster: &Arc<ComposeCluster>,
    f: impl FnOnce(&ComposeCluster, &Handle) -> T + Send + 'static,
) -> T {
    let cluster = cluster.clone();
    tokio::task::spawn_blocking(move || f(&cluster, &Handle::current()))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// Every container's log, into `report/compose.log`.
fn save_logs(cluster: &ComposeCluster, report: &Path) {
    if let Err(e) = std::fs::write(report.join("compose.log"), cluster.logs()) {
        eprintln!("cannot save the containers' logs: {e}");
    }
}

/// Saves the containers' logs into the report when the run panics (the cluster is
/// taken down right after).
struct LogsOnPanic {
    cluster: Arc<ComposeCluster>,
    report: PathBuf,
}

impl Drop for LogsOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            save_logs(&self.cluster, &self.report);
            eprintln!(
                "the container chaos run failed; report in {}",
                self.report.display()
            );
        }
    }
}
