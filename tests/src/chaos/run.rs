//! One chaos run: a cluster (3 brokers at RF 3, 2 coordinators, etcd; for `split`, each
//! process on its own host of a lab network with a 3-member etcd), the workload
//! writing its history, the nemesis of the chosen families for the run's duration; then
//! every fault healed, the cluster serving again, the workload stopped, a final read of
//! every partition at both isolation levels and of the pipeline's output and committed
//! offsets, and the checker's verdict. Everything goes
//! to a report directory: history.jsonl, nemesis.jsonl, verdict.json, summary.txt,
//! timeline.svg (throughput and latency with the faults shaded) and each server's log.
//! Segments are small and roll by size and by age, so the log lifecycle (rolls, producer
//! snapshots, the cleaner of `__transaction_state`) runs under the faults; what it did
//! on each broker's disk is in the summary.

use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use idem_chaos::Verdict;
use idem_proto::txn::{OFFSETS_TOPIC, TXN_LOG_TOPIC};
use idem_proto::v1::{ConfigEntry, CreatableTopic};

use crate::chaos::lifecycle::{self, BrokerLifecycle};
use crate::chaos::nemesis::{Family, Nemesis};
use crate::chaos::pipeline::{self, OUTPUT};
use crate::chaos::recorder::{Recorder, PARTITIONS, TOPICS};
use crate::chaos::verify::{self, Checked};
use crate::chaos::workload::{Workload, CLIENTS};
use crate::Cluster;

/// How long the cluster may take to serve again once every fault is healed.
pub(crate) const RECOVERY: Duration = Duration::from_secs(30);
/// How long the clients run on a healed cluster before they stop: a length of the
/// workload (operations after the faults go into the history the checker reads), not a
/// wait for a state; that the cluster serves again is awaited before it.
pub(crate) const QUIET: Duration = Duration::from_secs(3);
/// On the lab, followers cut from their leader leave the ISR within a fault's length
/// (1 to 4 s), so splits exercise ISR shrinking and NOT_ENOUGH_REPLICAS, not only
/// waiting.
const LAB_REPLICA_LAG_MS: &str = "2000";
/// Segment size and age of every topic, the workload's and `__transaction_state` (which
/// takes the brokers' defaults): at the workload's rate every partition rolls every few
/// seconds, each roll writing a producer snapshot and sealing a transaction index, and
/// the sealed segments of the transaction log are there for the cleaner to compact.
/// (`tests/compose.chaos.yaml` gives the container run's brokers the same.)
const SEGMENT_BYTES: &str = "16384";
const SEGMENT_MS: &str = "3000";
/// The brokers' lifecycle flags: the segment defaults above, and a retention duty (which
/// also rolls by age and runs the cleaner) that looks twice a second.
const LIFECYCLE_FLAGS: [&str; 6] = [
    "--segment-bytes",
    SEGMENT_BYTES,
    "--log-segment-ms",
    SEGMENT_MS,
    "--log-retention-check-interval-ms",
    "500",
];

#[derive(Debug, Clone)]
pub struct ChaosRun {
    pub families: Vec<Family>,
    pub seed: u64,
    pub duration: Duration,
}

/// What a run produced.
pub struct Outcome {
    pub verdict: Verdict,
    pub report: PathBuf,
    pub summary: String,
    /// What the log lifecycle did on each broker's disk, by broker id.
    pub lifecycle: Vec<BrokerLifecycle>,
}

impl ChaosRun {
    fn name(&self) -> String {
        let families: Vec<&str> = self.families.iter().map(|f| f.name()).collect();
        format!("{}-seed{}", families.join("+"), self.seed)
    }

    pub async fn run(&self) -> Outcome {
        let report = verify::report_dir(&self.name());
        let linked = [Family::Partition, Family::Isolate];
        assert!(
            !(self.families.contains(&Family::EtcdMember)
                && self.families.iter().any(|f| linked.contains(f))),
            "etcd-member faults need a 3-member etcd, partition and isolate a linked \
             single-member one: run them separately"
        );
        let on_lab = self.families.contains(&Family::Split);
        assert!(
            !(on_lab && self.families.iter().any(|f| linked.contains(f))),
            "split faults need a lab network, partition and isolate a linked cluster: run \
             them separately"
        );
        // Brokers speak Kafka too, for the workload's Kafka client; not on the lab
        // network, whose hosts the test process reaches by their lab addresses only.
        let mut with_kafka = LIFECYCLE_FLAGS.to_vec();
        with_kafka.extend(["--kafka-listen", "127.0.0.1:0"]);
        let flags = &with_kafka[..];
        let coordinator_flags = ["--group-session-timeout-ms", pipeline::SESSION_TIMEOUT_MS];
        let mut cluster = if on_lab {
            // Every process on its own host; 3 etcd members so a split can leave one
            // on the minority side.
            let mut lab_flags = LIFECYCLE_FLAGS.to_vec();
            lab_flags.extend(["--replica-lag-time-max-ms", LAB_REPLICA_LAG_MS]);
            Cluster::start_on_lab(3, 2, 3, &lab_flags, &coordinator_flags).await
        } else if self.families.iter().any(|f| linked.contains(f)) {
            Cluster::start_linked_with(3, 2, flags, &coordinator_flags).await
        } else if self.families.contains(&Family::Membership) {
            // A 4th broker, so that every partition has somewhere to move to.
            Cluster::start_with_coordinators(4, 2, flags, &coordinator_flags).await
        } else if self.families.contains(&Family::EtcdMember) {
            Cluster::start_with_etcd_members(3, 3, 2, flags, &coordinator_flags).await
        } else {
            Cluster::start_with_coordinators(3, 2, flags, &coordinator_flags).await
        };
        for topic in TOPICS.into_iter().chain([OUTPUT]) {
            cluster.create(workload_topic(topic)).await;
            for p in 0..PARTITIONS {
                cluster.leader_of(topic, p).await;
            }
        }
        let bootstrap = cluster.bootstrap();
        let started = Instant::now();
        let history = Recorder::create(&report.join("history.jsonl"), started);
        let kafka = (!on_lab).then(|| {
            let listeners: Vec<String> = cluster
                .ids()
                .into_iter()
                .map(|id| cluster.broker(id).kafka_bootstrap())
                .collect();
            listeners.join(",")
        });
        let workload = Workload::start(&bootstrap, kafka.as_deref(), CLIENTS, self.seed, &history);

        let nemesis_log = File::create(report.join("nemesis.jsonl")).expect("nemesis log");
        let mut nemesis = Nemesis::new(self.seed, &self.families, nemesis_log, started);
        nemesis.run(&mut cluster, &bootstrap, self.duration).await;

        // Every fault is healed: the whole cluster serves again, and the clients get a
        // few quiet seconds before they stop.
        let healed = Instant::now();
        let mut topics: Vec<&str> = TOPICS.to_vec();
        topics.extend([OUTPUT, TXN_LOG_TOPIC, OFFSETS_TOPIC]);
        let recovered = match cluster.every_slice_served_within(healed, RECOVERY).await {
            Ok(()) => {
                cluster
                    .every_broker_serving_within(&topics, healed, RECOVERY)
                    .await
            }
            Err(problem) => Err(problem),
        };
        let serving_after = healed.elapsed();
        let save_logs = |cluster: &Cluster| {
            for id in cluster.ids() {
                let _ = std::fs::write(
                    report.join(format!("broker-{id}.log")),
                    cluster.broker(id).log(),
                );
            }
            for id in cluster.coordinator_ids() {
                let _ = std::fs::write(
                    report.join(format!("coordinator-{id}.log")),
                    cluster.coordinator(id).log(),
                );
            }
        };
        if let Err(problem) = recovered {
            save_logs(&cluster);
            panic!(
                "the cluster did not serve again after the faults: {problem}; report in {}",
                report.display()
            );
        }
        tokio::time::sleep(QUIET).await;
        workload.stop().await;
        let checked = verify::read_back_and_check(&cluster.bootstrap(), &history, &report).await;
        save_logs(&cluster);
        let lifecycle: Vec<BrokerLifecycle> = cluster
            .ids()
            .into_iter()
            .map(|id| lifecycle::scan(id, cluster.broker(id).data_dir(), &TOPICS))
            .collect();
        let summary = format!(
            "chaos run {}: {:?} of faults ({:?}); serving again {:?} after the last \
             fault; {}; report in {}",
            self.name(),
            self.duration,
            nemesis.injected,
            serving_after,
            checked.figures(),
            report.display()
        );
        let lifecycle_lines: Vec<String> = lifecycle.iter().map(|b| format!("  {b}")).collect();
        let summary = format!(
            "{summary}\nlog lifecycle on disk after the run:\n{}",
            lifecycle_lines.join("\n")
        );
        std::fs::write(report.join("summary.txt"), format!("{summary}\n")).expect("summary");
        let Checked { verdict, .. } = checked;
        Outcome {
            verdict,
            report,
            summary,
            lifecycle,
        }
    }
}

/// A workload topic: 3 replicas, small segments rolled by size and age, and no
/// retention (the checker would count deleted records as lost).
pub(crate) fn workload_topic(name: &str) -> CreatableTopic {
    let config = |name: &str, value: &str| ConfigEntry {
        name: name.into(),
        value: value.into(),
    };
    CreatableTopic {
        name: name.into(),
        num_partitions: PARTITIONS,
        replication_factor: 3,
        unclean_leader_election: false,
        coordinator_id: None,
        configs: vec![
            config("segment.bytes", SEGMENT_BYTES),
            config("segment.ms", SEGMENT_MS),
            config("retention.ms", "-1"),
            config("retention.bytes", "-1"),
        ],
    }
}
