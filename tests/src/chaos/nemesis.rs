//! The nemesis: seeded, one fault at a time, each logged with when it began and ended.
//! Families: process kills (a random broker, the leader of a random partition, the
//! coordinator owning a random transactional id or the pipeline's group), pauses (SIGSTOP/SIGCONT of a broker or
//! a coordinator), partitions (a broker or coordinator cut off from etcd, through the
//! links of [`Cluster::start_linked`]), isolation (the leader of a partition unreachable
//! by anyone and cut off from etcd), etcd faults (killed and restarted, paused) and, on a
//! 3-member etcd, etcd member faults (one member killed or paused, or two killed: the
//! quorum lost and regained), torn writes (a broker killed, the active segment of
//! every partition log on its disk cut inside a batch, as a crash mid-write leaves it,
//! then restarted), and on a lab network ([`Cluster::start_on_lab`]), splits:
//! a majority/minority split of every host (etcd keeping its quorum on the majority
//! side), the leader of a partition cut from every other host (clients still reach it),
//! or a one-way or two-way cut between two brokers. With a 4th broker, membership
//! changes: a partition moved to another replica set, or a broker removed (everything
//! it holds moved away, then stopped) and added back empty.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use idem_proto::batch;
use idem_proto::v1::FindCoordinatorRequest;
use idem_proto::ErrorCode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::chaos::membership::{self, Placement};
use crate::chaos::recorder::{PARTITIONS, TOPICS};
use crate::cluster::ProcessId;
use crate::netns::ClientLink;
use crate::{raw, segments, Cluster};

/// A family of faults a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Kill,
    Pause,
    Partition,
    Isolate,
    Etcd,
    EtcdMember,
    Torn,
    Split,
    Membership,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Kill => "kill",
            Family::Pause => "pause",
            Family::Partition => "partition",
            Family::Isolate => "isolate",
            Family::Etcd => "etcd",
            Family::EtcdMember => "etcd-member",
            Family::Torn => "torn",
            Family::Split => "split",
            Family::Membership => "membership",
        }
    }

    pub fn parse(name: &str) -> Option<Family> {
        [
            Family::Kill,
            Family::Pause,
            Family::Partition,
            Family::Isolate,
            Family::Etcd,
            Family::EtcdMember,
            Family::Torn,
            Family::Split,
            Family::Membership,
        ]
        .into_iter()
        .find(|f| f.name() == name)
    }
}

/// One fault, as the nemesis log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fault {
    KillBroker(i32),
    KillCoordinator(i32),
    PauseBroker(i32),
    PauseCoordinator(i32),
    CutFromEtcd(ProcessId),
    Isolate(i32),
    KillEtcd,
    PauseEtcd,
    KillEtcdMember(usize),
    PauseEtcdMember(usize),
    /// Two of three members killed: no quorum until they return.
    KillEtcdQuorum(usize, usize),
    /// A partition moved to the replicas named (one broker's replica moved to another).
    MovePartition(Placement),
    /// Every replica of a broker moved to the others, then the broker stopped; healing
    /// starts it again, holding nothing, as a new member.
    RemoveBroker(i32),
    /// A broker killed and every partition log on its disk torn (`seed` picks where).
    TearLogs {
        broker: i32,
        seed: u64,
    },
    /// The hosts of `minority` cut both ways from those of `majority`.
    Split {
        minority: Vec<ProcessId>,
        majority: Vec<ProcessId>,
    },
    /// The leader of a partition cut both ways from every other host; clients reach it.
    IsolateLeaderHost(i32),
    /// Packets from the first broker to the second dropped.
    CutOneWay(i32, i32),
    /// Two brokers cut both ways.
    CutBrokers(i32, i32),
}

pub struct Nemesis {
    rng: StdRng,
    families: Vec<Family>,
    log: BufWriter<File>,
    started: Instant,
    /// Faults injected, by family name.
    pub injected: std::collections::BTreeMap<&'static str, usize>,
}

impl Nemesis {
    pub fn new(seed: u64, families: &[Family], log: File, started: Instant) -> Nemesis {
        Nemesis {
            rng: StdRng::seed_from_u64(seed),
            families: families.to_vec(),
            log: BufWriter::new(log),
            started,
            injected: Default::default(),
        }
    }

    /// Injects faults one after another, with healthy gaps between them, until
    /// `duration` has passed; every fault is healed before this returns.
    pub async fn run(&mut self, cluster: &mut Cluster, bootstrap: &str, duration: Duration) {
        let until = Instant::now() + duration;
        while Instant::now() < until {
            let gap = Duration::from_millis(self.rng.gen_range(1_000..3_000));
            tokio::time::sleep(gap).await;
            let family = self.families[self.rng.gen_range(0..self.families.len())];
            let Some(fault) = self.choose(family, cluster, bootstrap).await else {
                continue;
            };
            let length = Duration::from_millis(self.rng.gen_range(1_000..4_000));
            let start = self.started.elapsed();
            inject(cluster, &fault).await;
            tokio::time::sleep(length).await;
            heal(cluster, &fault).await;
            let end = self.started.elapsed();
            *self.injected.entry(family.name()).or_default() += 1;
            let line = json!({
                "family": family.name(),
                "fault": format!("{fault:?}"),
                "start_ns": start.as_nanos() as u64,
                "end_ns": end.as_nanos() as u64,
            });
            writeln!(self.log, "{line}").expect("write the nemesis log");
        }
        self.log.flush().expect("flush the nemesis log");
    }

    /// The leader of a random partition of the workload's topics.
    async fn random_leader(&mut self, cluster: &Cluster) -> Option<i32> {
        let (topic, partition) = self.random_partition();
        let observer = cluster.observer(&[]);
        Some(
            cluster
                .partition(observer, topic, partition)
                .await?
                .leader_id,
        )
    }

    fn random_partition(&mut self) -> (&'static str, i32) {
        let topic = TOPICS[self.rng.gen_range(0..TOPICS.len())];
        (topic, self.rng.gen_range(0..PARTITIONS))
    }

    async fn choose(
        &mut self,
        family: Family,
        cluster: &Cluster,
        bootstrap: &str,
    ) -> Option<Fault> {
        let brokers = cluster.ids();
        let coordinators = cluster.coordinator_ids();
        let broker = brokers[self.rng.gen_range(0..brokers.len())];
        let coordinator = coordinators[self.rng.gen_range(0..coordinators.len())];
        Some(match family {
            Family::Kill => match self.rng.gen_range(0..3) {
                0 => Fault::KillBroker(broker),
                1 => Fault::KillBroker(self.random_leader(cluster).await?),
                _ => {
                    // The owner of a transactional producer's id, or of the
                    // consume-transform-produce group.
                    let owned = match self.rng.gen_range(0..3) {
                        2 => Owned::Group(super::pipeline::GROUP.to_string()),
                        n => Owned::TransactionalId(format!("chaos-txn-{n}")),
                    };
                    Fault::KillCoordinator(owner_of(bootstrap, owned).await.unwrap_or(coordinator))
                }
            },
            Family::Pause => {
                if self.rng.gen_bool(0.5) {
                    Fault::PauseBroker(broker)
                } else {
                    Fault::PauseCoordinator(coordinator)
                }
            }
            Family::Partition => {
                if self.rng.gen_bool(0.5) {
                    Fault::CutFromEtcd(ProcessId::Broker(broker))
                } else {
                    Fault::CutFromEtcd(ProcessId::Coordinator(coordinator))
                }
            }
            Family::Isolate => Fault::Isolate(self.random_leader(cluster).await?),
            Family::Etcd => {
                if self.rng.gen_bool(0.5) {
                    Fault::KillEtcd
                } else {
                    Fault::PauseEtcd
                }
            }
            Family::Torn => Fault::TearLogs {
                broker,
                seed: self.rng.gen(),
            },
            Family::Split => self.choose_split(cluster).await?,
            // Moves need a broker outside every replica set: a 4th broker at RF 3.
            Family::Membership if brokers.len() < 4 => return None,
            Family::Membership => {
                if self.rng.gen_bool(0.5) {
                    Fault::RemoveBroker(broker)
                } else {
                    let observer = cluster.observer(&[]);
                    let (topic, partition) = self.random_partition();
                    let placement = membership::placements(cluster, observer)
                        .await
                        .into_iter()
                        .find(|p| p.topic == topic && p.partition == partition)?;
                    let leaving =
                        placement.replicas[self.rng.gen_range(0..placement.replicas.len())];
                    Fault::MovePartition(membership::without(&placement, leaving, &brokers)?)
                }
            }
            Family::EtcdMember => {
                let member = self.rng.gen_range(0..3);
                match self.rng.gen_range(0..3) {
                    0 => Fault::KillEtcdMember(member),
                    1 => Fault::PauseEtcdMember(member),
                    _ => Fault::KillEtcdQuorum(member, (member + 1) % 3),
                }
            }
        })
    }
}

impl Nemesis {
    /// One of the `split` faults, each as likely.
    async fn choose_split(&mut self, cluster: &Cluster) -> Option<Fault> {
        let brokers = cluster.ids();
        let a = brokers[self.rng.gen_range(0..brokers.len())];
        let others: Vec<i32> = brokers.iter().copied().filter(|b| *b != a).collect();
        let b = others[self.rng.gen_range(0..others.len())];
        Some(match self.rng.gen_range(0..4) {
            0 => {
                let processes = cluster.processes();
                let etcd_members = processes
                    .iter()
                    .filter(|p| matches!(p, ProcessId::EtcdMember(_)))
                    .count();
                let size = self.rng.gen_range(1..=(processes.len() - 1) / 2);
                let order = shuffled(&mut self.rng, processes.len());
                let (minority, majority) =
                    split_keeping_quorum(&processes, &order, size, etcd_members);
                Fault::Split { minority, majority }
            }
            1 => Fault::IsolateLeaderHost(self.random_leader(cluster).await?),
            2 => Fault::CutOneWay(a, b),
            _ => Fault::CutBrokers(a, b),
        })
    }
}

/// `0..n` in a random order.
fn shuffled(rng: &mut StdRng, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    order
}

/// The first `size` processes in `order` form the minority, except etcd members beyond
/// the share the minority may take and leave etcd its quorum on the majority side
/// (none of one member, one of three); the rest is the majority.
fn split_keeping_quorum(
    processes: &[ProcessId],
    order: &[usize],
    size: usize,
    etcd_members: usize,
) -> (Vec<ProcessId>, Vec<ProcessId>) {
    let etcd_share = etcd_members.saturating_sub(1) / 2;
    let mut minority = Vec::new();
    let mut etcd_taken = 0;
    for process in order.iter().map(|i| processes[*i]) {
        if minority.len() == size {
            break;
        }
        if matches!(process, ProcessId::EtcdMember(_)) {
            if etcd_taken == etcd_share {
                continue;
            }
            etcd_taken += 1;
        }
        minority.push(process);
    }
    minority.sort();
    let majority = processes
        .iter()
        .copied()
        .filter(|p| !minority.contains(p))
        .collect();
    (minority, majority)
}

/// The lab hosts of `processes`.
fn hosts(cluster: &Cluster, processes: &[ProcessId]) -> Vec<usize> {
    processes.iter().map(|p| cluster.host_of(*p)).collect()
}

/// What a coordinator owns: a transactional id or a consumer group.
enum Owned {
    TransactionalId(String),
    Group(String),
}

/// The coordinator that owns `owned`, as a broker answers.
async fn owner_of(bootstrap: &str, owned: Owned) -> Option<i32> {
    let mut client = raw::connect(bootstrap).await;
    let request = match owned {
        Owned::TransactionalId(id) => FindCoordinatorRequest {
            transactional_id: id,
            group_id: String::new(),
        },
        Owned::Group(group_id) => FindCoordinatorRequest {
            transactional_id: String::new(),
            group_id,
        },
    };
    let answer = client.find_coordinator(request).await.ok()?.into_inner();
    (answer.error_code() == ErrorCode::None).then_some(answer.coordinator_id)
}

async fn inject(cluster: &mut Cluster, fault: &Fault) {
    match fault {
        Fault::KillBroker(id) => cluster.kill(*id),
        Fault::KillCoordinator(id) => cluster.kill_coordinator(*id),
        Fault::PauseBroker(id) => cluster.pause(*id),
        Fault::PauseCoordinator(id) => cluster.pause_coordinator(*id),
        Fault::CutFromEtcd(process) => cluster.cut_from_etcd(*process),
        Fault::Isolate(id) => cluster.isolate(*id),
        Fault::KillEtcd => cluster.etcd(0).kill(),
        Fault::PauseEtcd => cluster.etcd(0).pause(),
        Fault::KillEtcdMember(member) => cluster.etcd(*member).kill(),
        Fault::PauseEtcdMember(member) => cluster.etcd(*member).pause(),
        Fault::KillEtcdQuorum(a, b) => {
            cluster.etcd(*a).kill();
            cluster.etcd(*b).kill();
        }
        Fault::MovePartition(target) => {
            let via = cluster.observer(&[]);
            membership::reassign(cluster, via, std::slice::from_ref(target)).await;
        }
        Fault::RemoveBroker(id) => {
            let via = cluster.observer(&[*id]);
            let brokers = cluster.ids();
            let moves: Vec<Placement> = membership::placements(cluster, via)
                .await
                .iter()
                .filter_map(|p| membership::without(p, *id, &brokers))
                .collect();
            membership::reassign(cluster, via, &moves).await;
            membership::wait_until_settled(cluster, via).await;
            cluster.kill(*id);
        }
        Fault::TearLogs { broker, seed } => {
            cluster.kill(*broker);
            tear_logs(cluster.broker(*broker).data_dir(), *seed);
        }
        Fault::Split { minority, majority } => cluster
            .lab()
            .split(&hosts(cluster, minority), &hosts(cluster, majority)),
        Fault::IsolateLeaderHost(id) => cluster
            .lab()
            .isolate(cluster.host_of(ProcessId::Broker(*id)), ClientLink::Kept),
        Fault::CutOneWay(from, to) => cluster.lab().cut_one_way(
            cluster.host_of(ProcessId::Broker(*from)),
            cluster.host_of(ProcessId::Broker(*to)),
        ),
        Fault::CutBrokers(a, b) => cluster.lab().cut(
            cluster.host_of(ProcessId::Broker(*a)),
            cluster.host_of(ProcessId::Broker(*b)),
        ),
    }
}

/// Cuts the active segment of every partition under `data_dir` inside one of its last
/// three batches, never on a batch boundary: a write torn by a crash, as the log's
/// recovery must detect it (a cut on a boundary would be a disk that lost data it had
/// confirmed as synced, which no replication protocol can tell from a shorter log).
fn tear_logs(data_dir: &Path, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut partitions: Vec<PathBuf> = std::fs::read_dir(data_dir)
        .expect("read the broker's data dir")
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.is_dir())
        .collect();
    partitions.sort();
    for dir in partitions {
        let Some(active) = segments::active_segment(&dir) else {
            continue;
        };
        let bytes = std::fs::read(&active).expect("read a segment");
        let batches = batch_spans(&bytes);
        let Some(last) = batches.len().checked_sub(1) else {
            continue;
        };
        let (start, size) = batches[rng.gen_range(last.saturating_sub(2)..=last)];
        let keep = start + rng.gen_range(1..size);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&active)
            .and_then(|file| file.set_len(keep as u64))
            .expect("tear a segment");
    }
}

/// (start, size) of each whole batch in a segment's bytes, in order.
fn batch_spans(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut at = 0;
    while let Ok(header) = batch::decode_header(&bytes[at..]) {
        let size = header.size();
        if size <= 1 || at + size > bytes.len() {
            break;
        }
        spans.push((at, size));
        at += size;
    }
    spans
}

async fn heal(cluster: &mut Cluster, fault: &Fault) {
    match fault {
        Fault::KillBroker(id) => cluster.restart(*id),
        Fault::KillCoordinator(id) => cluster.restart_coordinator(*id),
        Fault::PauseBroker(id) => cluster.resume(*id),
        Fault::PauseCoordinator(id) => cluster.resume_coordinator(*id),
        Fault::CutFromEtcd(process) => cluster.heal_link_to_etcd(*process),
        Fault::Isolate(id) => cluster.heal_isolation(*id),
        Fault::KillEtcd => cluster.etcd(0).restart(),
        Fault::PauseEtcd => cluster.etcd(0).resume(),
        Fault::KillEtcdMember(member) => {
            cluster.etcd(*member).restart_member();
            // It serves once it has caught up with the other two.
            if let Err(e) = cluster.etcd(*member).wait_until_serving() {
                panic!("etcd member {member} did not rejoin: {e}");
            }
        }
        Fault::PauseEtcdMember(member) => cluster.etcd(*member).resume(),
        Fault::TearLogs { broker, .. } => cluster.restart(*broker),
        Fault::MovePartition(_) => {
            let observer = cluster.observer(&[]);
            membership::wait_until_settled(cluster, observer).await;
        }
        Fault::RemoveBroker(id) => cluster.restart(*id),
        Fault::KillEtcdQuorum(a, b) => {
            cluster.etcd(*a).restart_member();
            cluster.etcd(*b).restart_member();
            if let Err(e) = cluster.etcd(*a).wait_until_serving() {
                panic!("the etcd quorum did not return: {e}");
            }
        }
        Fault::Split { .. }
        | Fault::IsolateLeaderHost(_)
        | Fault::CutOneWay(..)
        | Fault::CutBrokers(..) => cluster.lab().heal(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab_processes() -> Vec<ProcessId> {
        let mut processes: Vec<ProcessId> = (0..3).map(ProcessId::EtcdMember).collect();
        processes.extend((1..=3).map(ProcessId::Broker));
        processes.extend((1..=2).map(ProcessId::Coordinator));
        processes
    }

    #[test]
    fn a_split_leaves_at_most_one_of_three_etcd_members_in_the_minority() {
        let processes = lab_processes();
        // Every etcd member first in the order: the minority still takes only one.
        let order: Vec<usize> = (0..processes.len()).collect();
        let (minority, majority) = split_keeping_quorum(&processes, &order, 3, 3);
        assert_eq!(
            minority,
            vec![
                ProcessId::Broker(1),
                ProcessId::Broker(2),
                ProcessId::EtcdMember(0)
            ]
        );
        assert_eq!(majority.len(), processes.len() - 3);
        let etcd_in_majority = majority
            .iter()
            .filter(|p| matches!(p, ProcessId::EtcdMember(_)))
            .count();
        assert_eq!(etcd_in_majority, 2);
    }

    #[test]
    fn a_single_etcd_member_is_never_in_the_minority() {
        let processes = vec![
            ProcessId::EtcdMember(0),
            ProcessId::Broker(1),
            ProcessId::Broker(2),
            ProcessId::Broker(3),
        ];
        let (minority, majority) = split_keeping_quorum(&processes, &[0, 1, 2, 3], 1, 1);
        assert_eq!(minority, vec![ProcessId::Broker(1)]);
        assert!(majority.contains(&ProcessId::EtcdMember(0)));
    }

    #[test]
    fn every_seeded_split_is_a_minority_and_a_majority_covering_every_process() {
        let processes = lab_processes();
        let mut rng = StdRng::seed_from_u64(11);
        for _ in 0..200 {
            let size = rng.gen_range(1..=(processes.len() - 1) / 2);
            let order = shuffled(&mut rng, processes.len());
            let (minority, majority) = split_keeping_quorum(&processes, &order, size, 3);
            assert_eq!(minority.len(), size);
            assert!(minority.len() < majority.len());
            let mut all: Vec<ProcessId> = minority.iter().chain(&majority).copied().collect();
            all.sort();
            let mut expected = processes.clone();
            expected.sort();
            assert_eq!(all, expected);
        }
    }
}
