//! The container nemesis: the faults an operator's containers meet, injected with the
//! Docker CLI into the compose cluster ([`ComposeCluster`]): the leader of a partition
//! killed (`docker kill`) and started again, a broker frozen (`docker pause`), a broker
//! taken off the network (`docker network disconnect`, a real partition) and put back
//! under its alias, an etcd member killed and started, the coordinator owning a
//! transactional id killed and started, and a rolling restart of every broker. Seeded:
//! the seed decides what is done (the order, each fault's target and length); the
//! cluster's state decides who the target is (a leader, an owner). The schedule goes
//! through every family in a seeded order before any repeats, and runs at least one
//! whole round, so each family is injected in every run; every fault is healed, and its
//! container healthy again, before the next. The log is the process nemesis's
//! (`nemesis.jsonl`, one [`FaultInterval`] a line), so the timeline reads both.
//!
//! The Docker CLI blocks: [`ContainerNemesis::run`] runs on a thread of its own
//! (`spawn_blocking`) and drives its few gRPC questions with the runtime's handle, so
//! the workload's tasks never wait behind a `docker` command.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::time::{Duration, Instant};

use idem_chaos::FaultInterval;
use idem_proto::txn::{OFFSETS_TOPIC, TXN_LOG_TOPIC};
use idem_proto::v1::{FindCoordinatorRequest, MetadataRequest};
use idem_proto::ErrorCode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::runtime::Handle;

use crate::chaos::pipeline::{GROUP, OUTPUT};
use crate::chaos::recorder::{PARTITIONS, TOPICS};
use crate::cluster::TXN_LOG_PARTITIONS;
use crate::compose::{self, ComposeCluster, BROKERS, COORDINATORS, ETCD_MEMBERS};
use crate::serving::{broker_problem, served_slices};
use crate::wait::{try_wait_until, wait_until, Seen, PATIENCE};
use crate::{raw, txn};

/// How long a broker stopped by a rolling restart has to leave cleanly (flush,
/// snapshot, leave the cluster) before Docker kills it.
const ROLLING_GRACE: Duration = Duration::from_secs(10);

/// A family of container faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ContainerFamily {
    KillLeader,
    PauseBroker,
    DisconnectBroker,
    RestartEtcd,
    KillTxnCoordinator,
    RollingRestart,
}

impl ContainerFamily {
    pub const ALL: [ContainerFamily; 6] = [
        ContainerFamily::KillLeader,
        ContainerFamily::PauseBroker,
        ContainerFamily::DisconnectBroker,
        ContainerFamily::RestartEtcd,
        ContainerFamily::KillTxnCoordinator,
        ContainerFamily::RollingRestart,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ContainerFamily::KillLeader => "kill-leader",
            ContainerFamily::PauseBroker => "pause-broker",
            ContainerFamily::DisconnectBroker => "disconnect-broker",
            ContainerFamily::RestartEtcd => "restart-etcd",
            ContainerFamily::KillTxnCoordinator => "kill-txn-coordinator",
            ContainerFamily::RollingRestart => "rolling-restart",
        }
    }
}

/// One fault, as the nemesis log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ContainerFault {
    /// `broker` led `topic`-`partition` when it was killed.
    KillLeader {
        broker: i32,
        topic: &'static str,
        partition: i32,
    },
    PauseBroker(i32),
    DisconnectBroker(i32),
    /// Member 1..=3, killed and started again.
    RestartEtcd(usize),
    /// `coordinator` owned `transactional_id` when it was killed.
    KillTxnCoordinator {
        coordinator: i32,
        transactional_id: String,
    },
    /// Every broker in turn stopped with SIGTERM and started, the cluster serving again
    /// before the next.
    RollingRestart,
}

/// The seeded order of the families: rounds, each every family once in its own order.
struct Schedule {
    round: Vec<ContainerFamily>,
}

impl Schedule {
    fn next(&mut self, rng: &mut StdRng) -> ContainerFamily {
        if self.round.is_empty() {
            self.round = ContainerFamily::ALL.to_vec();
            // Popped from the back: shuffled, any order is as likely.
            for i in (1..self.round.len()).rev() {
                self.round.swap(i, rng.gen_range(0..=i));
            }
        }
        self.round.pop().expect("a round has every family")
    }

    /// Whether the current round is over (every family of it injected).
    fn round_done(&self) -> bool {
        self.round.is_empty()
    }
}

pub struct ContainerNemesis {
    rng: StdRng,
    schedule: Schedule,
    log: BufWriter<File>,
    started: Instant,
    /// Faults injected, by family name.
    pub injected: BTreeMap<&'static str, usize>,
    /// Every fault injected, in order, as logged.
    pub faults: Vec<FaultInterval>,
}

impl ContainerNemesis {
    pub fn new(seed: u64, log: File, started: Instant) -> ContainerNemesis {
        ContainerNemesis {
            rng: StdRng::seed_from_u64(seed),
            schedule: Schedule { round: Vec::new() },
            log: BufWriter::new(log),
            started,
            injected: ContainerFamily::ALL.iter().map(|f| (f.name(), 0)).collect(),
            faults: Vec::new(),
        }
    }

    /// Injects faults one after another, with healthy gaps between them, until
    /// `duration` has passed and the round under way is done (so at least one whole
    /// round, every family once); every fault is healed before this returns. Blocks:
    /// call it from a blocking thread, `handle` the runtime's.
    pub fn run(&mut self, cluster: &ComposeCluster, handle: &Handle, duration: Duration) {
        let until = Instant::now() + duration;
        while Instant::now() < until || !self.schedule.round_done() {
            let gap = Duration::from_millis(self.rng.gen_range(1_000..3_000));
            std::thread::sleep(gap);
            let family = self.schedule.next(&mut self.rng);
            let fault = self.choose(family, cluster, handle);
            let length = Duration::from_millis(self.rng.gen_range(2_000..5_000));
            let start = self.started.elapsed();
            inject_and_heal(cluster, handle, &fault, length);
            let end = self.started.elapsed();
            *self.injected.entry(family.name()).or_default() += 1;
            let interval = FaultInterval {
                family: family.name().into(),
                fault: format!("{fault:?}"),
                start_ns: start.as_nanos() as u64,
                end_ns: end.as_nanos() as u64,
            };
            let line = serde_json::to_string(&interval).expect("a fault as json");
            writeln!(self.log, "{line}").expect("write the nemesis log");
            self.log.flush().expect("flush the nemesis log");
            self.faults.push(interval);
        }
    }

    fn choose(
        &mut self,
        family: ContainerFamily,
        cluster: &ComposeCluster,
        handle: &Handle,
    ) -> ContainerFault {
        let broker = self.rng.gen_range(1..=BROKERS.len() as i32);
        match family {
            ContainerFamily::KillLeader => {
                let topic = TOPICS[self.rng.gen_range(0..TOPICS.len())];
                let partition = self.rng.gen_range(0..PARTITIONS);
                let broker = handle.block_on(leader_of(cluster, topic, partition));
                ContainerFault::KillLeader {
                    broker,
                    topic,
                    partition,
                }
            }
            ContainerFamily::PauseBroker => ContainerFault::PauseBroker(broker),
            ContainerFamily::DisconnectBroker => ContainerFault::DisconnectBroker(broker),
            ContainerFamily::RestartEtcd => {
                ContainerFault::RestartEtcd(self.rng.gen_range(1..=ETCD_MEMBERS.len()))
            }
            ContainerFamily::KillTxnCoordinator => {
                // A transactional producer's id, or a pipeline member's.
                let n = self.rng.gen_range(0..2);
                let transactional_id = if self.rng.gen_bool(0.5) {
                    format!("chaos-txn-{n}")
                } else {
                    format!("{GROUP}-{n}")
                };
                let coordinator = handle.block_on(owner_of(cluster, &transactional_id));
                ContainerFault::KillTxnCoordinator {
                    coordinator,
                    transactional_id,
                }
            }
            ContainerFamily::RollingRestart => ContainerFault::RollingRestart,
        }
    }
}

/// How a fault breaks one container, and how it is healed.
#[derive(Clone, Copy)]
enum Break {
    /// `docker kill`, then `docker start` (a container killed by hand is not restarted
    /// by its restart policy).
    Kill,
    /// `docker pause`, then `unpause`.
    Pause,
    /// Off the network, then back under its alias.
    Disconnect,
}

/// Injects `fault`, holds it `length`, heals it and waits until the container it hit
/// is healthy again and the whole cluster serves (for a rolling restart: after each
/// broker, before the next is stopped).
fn inject_and_heal(
    cluster: &ComposeCluster,
    handle: &Handle,
    fault: &ContainerFault,
    length: Duration,
) {
    let (service, how) = match fault {
        ContainerFault::KillLeader { broker, .. } => (broker_service(*broker), Break::Kill),
        ContainerFault::PauseBroker(broker) => (broker_service(*broker), Break::Pause),
        ContainerFault::DisconnectBroker(broker) => (broker_service(*broker), Break::Disconnect),
        ContainerFault::RestartEtcd(member) => (format!("etcd-{member}"), Break::Kill),
        ContainerFault::KillTxnCoordinator { coordinator, .. } => {
            (format!("coordinator-{coordinator}"), Break::Kill)
        }
        ContainerFault::RollingRestart => {
            for service in BROKERS {
                cluster.restart(service, ROLLING_GRACE);
                healed(cluster, handle, Some(service));
            }
            return;
        }
    };
    match how {
        Break::Kill => cluster.kill(&service),
        Break::Pause => cluster.pause(&service),
        Break::Disconnect => cluster.disconnect(&service),
    }
    std::thread::sleep(length);
    match how {
        Break::Kill => cluster.start(&service),
        Break::Pause => cluster.unpause(&service),
        Break::Disconnect => cluster.connect(&service),
    }
    // A coordinator too: restarted after the other claimed every slice it owns none,
    // and still reports SERVING (it answers FindCoordinator); before 2026-12-05 it
    // stayed NOT_SERVING, which this run found.
    healed(cluster, handle, Some(service.as_str()));
}

/// Waits until `service` (if any) is healthy again, then until the cluster serves;
/// panics saying what is still wrong (the cluster did not recover: a finding).
fn healed(cluster: &ComposeCluster, handle: &Handle, service: Option<&str>) {
    let since = Instant::now();
    if let Some(service) = service {
        handle.block_on(cluster.wait_healthy(service));
    }
    if let Err(problem) = serving_within(cluster, handle, since, compose::HEALTHY_WITHIN) {
        panic!("the compose cluster did not serve again after a fault: {problem}");
    }
}

fn broker_service(id: i32) -> String {
    format!("broker-{id}")
}

/// The broker that leads `topic`-`partition`, as the first broker that answers
/// Metadata from this host says; awaited (between faults the cluster serves).
async fn leader_of(cluster: &ComposeCluster, topic: &str, partition: i32) -> i32 {
    let what = format!("a broker leads {topic}-{partition}");
    let (leader, _) = wait_until(PATIENCE, &what, || async {
        for id in 1..=BROKERS.len() {
            let Ok(mut client) = raw::try_connect(&cluster.broker_address(id)).await else {
                continue;
            };
            let request = MetadataRequest {
                topics: vec![topic.into()],
            };
            let Ok(answer) = client.metadata(request).await else {
                continue;
            };
            let leader = answer
                .into_inner()
                .topics
                .into_iter()
                .flat_map(|t| t.partitions)
                .find(|p| p.partition == partition)
                .map(|p| p.leader_id);
            if let Some(leader) = leader.filter(|l| (1..=BROKERS.len() as i32).contains(l)) {
                return Seen::Reached(leader);
            }
        }
        Seen::Not(format!("no broker names a leader of {topic}-{partition}"))
    })
    .await;
    leader
}

/// The coordinator that owns `transactional_id`, as the first broker that answers
/// FindCoordinator from this host says; awaited.
async fn owner_of(cluster: &ComposeCluster, transactional_id: &str) -> i32 {
    let what = format!("a coordinator owns {transactional_id}");
    let (owner, _) = wait_until(PATIENCE, &what, || async {
        let mut last = String::from("no broker answers");
        for id in 1..=BROKERS.len() {
            let Ok(mut client) = raw::try_connect(&cluster.broker_address(id)).await else {
                continue;
            };
            let request = FindCoordinatorRequest {
                transactional_id: transactional_id.into(),
                group_id: String::new(),
            };
            let Ok(answer) = client.find_coordinator(request).await else {
                continue;
            };
            let answer = answer.into_inner();
            if answer.error_code() == ErrorCode::None {
                return Seen::Reached(answer.coordinator_id);
            }
            last = answer.error_message;
        }
        Seen::Not(last)
    })
    .await;
    owner
}

/// The topics whose every partition must be led and fully in sync for the cluster to
/// serve: the workload's, the pipeline's output and the internal ones.
pub fn serving_topics() -> Vec<&'static str> {
    let mut topics: Vec<&str> = TOPICS.to_vec();
    topics.extend([OUTPUT, TXN_LOG_TOPIC, OFFSETS_TOPIC]);
    topics
}

/// What keeps the compose cluster from serving, or `None`: an etcd member or a broker
/// not healthy by Docker's health check, a coordinator that does not answer, a broker
/// that does not see the others or a partition of [`serving_topics`] without a leader
/// or with a replica out of sync, a slice of the transaction log no coordinator has
/// loaded. (A coordinator's own health is not asked: one that owns no slice reports
/// NOT_SERVING, see [`coordinator_health`].) Blocks on the Docker CLI: only for a
/// future driven by a blocking thread (`Handle::block_on`), never a task.
async fn serving_problem(cluster: &ComposeCluster) -> Option<String> {
    for service in ETCD_MEMBERS.into_iter().chain(BROKERS) {
        let health = cluster.health(service);
        if health != "healthy" {
            return Some(format!("{service} is {health}"));
        }
    }
    let brokers: Vec<(i32, String)> = (1..=BROKERS.len())
        .map(|id| (id as i32, cluster.broker_address(id)))
        .collect();
    if let Some(problem) = broker_problem(&brokers, &serving_topics()).await {
        return Some(problem);
    }
    let coordinators: Vec<String> = (1..=COORDINATORS.len())
        .map(|id| cluster.coordinator_address(id))
        .collect();
    for (id, address) in coordinators.iter().enumerate() {
        if let Err(e) = txn::owned_partitions(address).await {
            return Some(format!("coordinator-{} does not answer: {e}", id + 1));
        }
    }
    let served = served_slices(&coordinators).await;
    if served.len() != TXN_LOG_PARTITIONS as usize {
        return Some(format!(
            "the coordinators serve only {served:?} of the {TXN_LOG_PARTITIONS} \
             {TXN_LOG_TOPIC} partitions"
        ));
    }
    None
}

/// Each coordinator's Docker health and the slices it serves, for the summary.
pub fn coordinator_health(cluster: &ComposeCluster, handle: &Handle) -> String {
    let lines: Vec<String> = (1..=COORDINATORS.len())
        .map(|id| {
            let service = format!("coordinator-{id}");
            let owned = handle.block_on(txn::owned_partitions(&cluster.coordinator_address(id)));
            format!(
                "{service} {} serving slices {owned:?}",
                cluster.health(&service)
            )
        })
        .collect();
    lines.join("; ")
}

/// Waits until the compose cluster serves ([`serving_problem`] finds nothing), within
/// `bound` of `since`; says what is still wrong if it does not. Blocks: from a blocking
/// thread, `handle` the runtime's.
pub fn serving_within(
    cluster: &ComposeCluster,
    handle: &Handle,
    since: Instant,
    bound: Duration,
) -> Result<(), String> {
    let left = bound.saturating_sub(since.elapsed());
    let probe = || async {
        match serving_problem(cluster).await {
            None => Seen::Reached(()),
            Some(problem) => Seen::Not(problem),
        }
    };
    handle
        .block_on(try_wait_until(left, probe))
        .map(|_| ())
        .map_err(|(_, problem)| format!("{:?} after healing: {problem}", since.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_of_the_schedule_has_every_family_once() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut schedule = Schedule { round: Vec::new() };
        for _ in 0..20 {
            let mut round: Vec<ContainerFamily> = (0..ContainerFamily::ALL.len())
                .map(|_| schedule.next(&mut rng))
                .collect();
            assert!(schedule.round_done());
            round.sort();
            assert_eq!(round, ContainerFamily::ALL.to_vec());
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_order() {
        let order = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut schedule = Schedule { round: Vec::new() };
            (0..12).map(|_| schedule.next(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(order(3), order(3));
    }
}
