//! `Cluster`: a real etcd (one member, or several), N `idem-broker` processes (ids 1..=N)
//! and M `idem-coordinator` processes (ids 1..=M) registered in it, with the faults a test
//! injects by id (SIGKILL, SIGSTOP/SIGCONT, restart; of etcd members too) and the waits it
//! needs (leadership,
//! ISR and coordinator ownership change on etcd's and the processes' clocks, so they
//! are polled, bounded). Everything is reaped on drop. [`Cluster::start_on_lab`] puts
//! every process (etcd members too) on its own host of a lab network, so links between
//! any two processes can be cut.

use std::collections::BTreeMap;
use std::time::Instant;

use idem_proto::v1::{CreatableTopic, MetadataRequest, PartitionMetadata};

use crate::etcd::EtcdServer;
use crate::link::CuttableLink;
use crate::netns::Lab;
use crate::wait::{wait_until, Seen};
use crate::{raw, replicas, BrokerProcess, CoordinatorProcess};

/// Partitions of `__transaction_state` in test clusters: few, so ownership moves fast.
pub const TXN_LOG_PARTITIONS: i32 = 4;

/// Longest a test waits for the cluster to reach a state.
pub use crate::wait::PATIENCE;

pub struct Cluster {
    // Processes first: they are dropped (killed) before etcd, which lives as long as
    // the cluster.
    coordinators: Vec<CoordinatorProcess>,
    brokers: Vec<BrokerProcess>,
    /// With [`Cluster::start_linked`]: each process's own link to etcd, by process.
    links: BTreeMap<ProcessId, CuttableLink>,
    /// With [`Cluster::start_linked`]: the link every other process and client dials a
    /// broker through (its advertised address), by broker id.
    inbound: BTreeMap<i32, CuttableLink>,
    etcd: Vec<EtcdServer>,
    /// With [`Cluster::start_on_lab`]: the host of every process.
    hosts: BTreeMap<ProcessId, usize>,
    /// Last, so its namespaces go after every process in them is reaped.
    lab: Option<Lab>,
    /// The flags every broker was started with, for [`Cluster::add_broker`].
    broker_extra: Vec<String>,
}

/// A process of the cluster, by kind and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProcessId {
    Broker(i32),
    Coordinator(i32),
    /// An etcd member, 0-based as in [`Cluster::etcd`].
    EtcdMember(usize),
}

impl Cluster {
    /// `n` brokers with 2-second leases plus `extra` flags for every broker.
    pub fn start(n: i32, extra: &[&str]) -> Cluster {
        Cluster::start_on(vec![EtcdServer::start()], BTreeMap::new(), n, extra)
    }

    /// [`Cluster::start`] on the given etcd members (every process is given all of them,
    /// or its own link when `links` has one).
    fn start_on(
        etcd: Vec<EtcdServer>,
        links: BTreeMap<ProcessId, CuttableLink>,
        n: i32,
        extra: &[&str],
    ) -> Cluster {
        Cluster::start_each_on(etcd, links, &BTreeMap::new(), n, extra)
    }

    /// [`Cluster::start`], each broker also given the flags `own` names for it (its
    /// metrics port, say).
    pub fn start_each(n: i32, extra: &[&str], own: &BTreeMap<i32, Vec<String>>) -> Cluster {
        Cluster::start_each_on(vec![EtcdServer::start()], BTreeMap::new(), own, n, extra)
    }

    /// [`Cluster::start_on`], each broker also given the flags `own` names for it.
    fn start_each_on(
        etcd: Vec<EtcdServer>,
        links: BTreeMap<ProcessId, CuttableLink>,
        own: &BTreeMap<i32, Vec<String>>,
        n: i32,
        extra: &[&str],
    ) -> Cluster {
        let direct = endpoints(&etcd);
        let brokers = (1..=n)
            .map(|id| {
                let endpoint = links
                    .get(&ProcessId::Broker(id))
                    .map_or_else(|| direct.clone(), CuttableLink::endpoint);
                let mut args = broker_args(id, &endpoint);
                args.extend(own.get(&id).into_iter().flatten().cloned());
                args.extend(extra.iter().map(|s| s.to_string()));
                BrokerProcess::start_with(&as_strs(&args))
            })
            .collect();
        Cluster {
            coordinators: Vec::new(),
            brokers,
            links,
            inbound: BTreeMap::new(),
            etcd,
            hosts: BTreeMap::new(),
            lab: None,
            broker_extra: extra.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Starts one more broker (id n + 1) against the same etcd, with the flags the
    /// others got, and returns its id. It holds no partition until a reassignment or a
    /// new topic names it; it is registered (and in Metadata) once this returns.
    pub async fn add_broker(&mut self) -> i32 {
        let id = self.brokers.len() as i32 + 1;
        let endpoint = endpoints(&self.etcd);
        let mut args = broker_args(id, &endpoint);
        args.extend(self.broker_extra.iter().cloned());
        self.brokers
            .push(BrokerProcess::start_with(&as_strs(&args)));
        // Asked of another broker: it knows the newcomer from etcd, as clients will.
        self.wait_for_registration(self.observer(&[id]), id, true)
            .await;
        id
    }

    /// Waits until broker `observer`'s Metadata lists broker `id` among the registered
    /// brokers (`registered`) or no longer lists it.
    pub async fn wait_for_registration(&self, observer: i32, id: i32, registered: bool) {
        let what = format!("broker {observer} sees broker {id} registered: {registered}");
        wait_until(PATIENCE, &what, || async {
            let mut client = raw::connect(&self.broker(observer).bootstrap()).await;
            let listed = client
                .metadata(MetadataRequest { topics: Vec::new() })
                .await
                .ok()?
                .into_inner()
                .brokers
                .iter()
                .any(|b| b.broker_id == id);
            (listed == registered).then_some(())
        })
        .await;
    }

    /// `n` brokers and `m` coordinators on one etcd member, each process reaching etcd
    /// through a link of its own that [`Cluster::cut_from_etcd`] cuts.
    pub async fn start_linked(n: i32, m: i32) -> Cluster {
        Cluster::start_linked_with(n, m, &[], &[]).await
    }

    /// [`Cluster::start_linked`] with `broker_extra` flags for every broker and
    /// `coordinator_extra` for every coordinator.
    pub async fn start_linked_with(
        n: i32,
        m: i32,
        broker_extra: &[&str],
        coordinator_extra: &[&str],
    ) -> Cluster {
        let etcd = EtcdServer::start();
        let upstream = etcd.client_addr();
        let mut links = BTreeMap::new();
        for id in 1..=n {
            links.insert(ProcessId::Broker(id), CuttableLink::start(upstream).await);
        }
        for id in 1..=m {
            links.insert(
                ProcessId::Coordinator(id),
                CuttableLink::start(upstream).await,
            );
        }
        // Each broker advertises a reserved port where a link to it listens, so every
        // connection to it (clients, followers, coordinators) can be cut.
        // The ports stay bound until the links take them over: a port released after
        // the probe was taken by another socket (a broker's own, an outgoing
        // connection's) before the link could bind it (AddrInUse in a CI run).
        let reserved: BTreeMap<i32, std::net::TcpListener> =
            (1..=n).map(|id| (id, reserve_port())).collect();
        let own = reserved
            .iter()
            .map(|(id, port)| {
                let address = port.local_addr().expect("reserved port").to_string();
                (*id, vec!["--advertise".to_string(), address])
            })
            .collect();
        let mut cluster = Cluster::start_each_on(vec![etcd], links, &own, n, broker_extra);
        for (id, port) in reserved {
            let link = CuttableLink::start_reserved(port, cluster.broker(id).addr());
            cluster.inbound.insert(id, link);
        }
        cluster.add_coordinators(m, coordinator_extra).await;
        cluster
    }

    /// `brokers` brokers, `coordinators` coordinators and an etcd of `etcd_members`
    /// members, each process on its own host of a new [`Lab`] (bound to the host's
    /// address and advertising it), brokers with `broker_extra` flags, coordinators with
    /// `coordinator_extra`; returns once the
    /// coordinators own the whole transaction log. Links between processes are cut
    /// through [`Cluster::lab`] and [`Cluster::host_of`].
    pub async fn start_on_lab(
        brokers: i32,
        coordinators: i32,
        etcd_members: usize,
        broker_extra: &[&str],
        coordinator_extra: &[&str],
    ) -> Cluster {
        let mut processes: Vec<ProcessId> = (0..etcd_members).map(ProcessId::EtcdMember).collect();
        processes.extend((1..=brokers).map(ProcessId::Broker));
        processes.extend((1..=coordinators).map(ProcessId::Coordinator));
        let lab = Lab::new(processes.len());
        let hosts: BTreeMap<ProcessId, usize> = processes
            .iter()
            .enumerate()
            .map(|(host, process)| (*process, host))
            .collect();
        let etcd_hosts: Vec<_> = (0..etcd_members)
            .map(|m| lab.host(hosts[&ProcessId::EtcdMember(m)]).clone())
            .collect();
        let etcd = EtcdServer::start_cluster_on(&etcd_hosts);
        let endpoint = endpoints(&etcd);
        let brokers = (1..=brokers)
            .map(|id| {
                let host = lab.host(hosts[&ProcessId::Broker(id)]);
                let mut args = broker_args(id, &endpoint);
                args.extend(broker_extra.iter().map(|s| s.to_string()));
                BrokerProcess::start_on(host, &as_strs(&args))
            })
            .collect();
        let mut cluster = Cluster {
            coordinators: Vec::new(),
            brokers,
            links: BTreeMap::new(),
            inbound: BTreeMap::new(),
            etcd,
            hosts,
            lab: Some(lab),
            broker_extra: broker_extra.iter().map(|s| s.to_string()).collect(),
        };
        cluster
            .add_coordinators(coordinators, coordinator_extra)
            .await;
        cluster
    }

    /// The lab network of a cluster started by [`Cluster::start_on_lab`].
    pub fn lab(&self) -> &Lab {
        self.lab
            .as_ref()
            .expect("the cluster runs on a lab network (Cluster::start_on_lab)")
    }

    /// The lab host `process` runs on (see [`Cluster::start_on_lab`]).
    pub fn host_of(&self, process: ProcessId) -> usize {
        *self
            .hosts
            .get(&process)
            .unwrap_or_else(|| panic!("{process:?} has no lab host"))
    }

    /// Every process of the cluster: etcd members, brokers, coordinators.
    pub fn processes(&self) -> Vec<ProcessId> {
        let mut processes: Vec<ProcessId> =
            (0..self.etcd.len()).map(ProcessId::EtcdMember).collect();
        processes.extend(self.ids().into_iter().map(ProcessId::Broker));
        processes.extend(
            self.coordinator_ids()
                .into_iter()
                .map(ProcessId::Coordinator),
        );
        processes
    }

    /// Cuts broker `id` off from everything (started by [`Cluster::start_linked`]):
    /// nothing reaches it through its advertised address and it does not reach etcd, as
    /// a leader isolated by a network partition; its own connections to other brokers
    /// stay (a one-way cut).
    pub fn isolate(&self, id: i32) {
        self.inbound[&id].cut();
        self.cut_from_etcd(ProcessId::Broker(id));
    }

    /// Cuts every connection to broker `id` through its advertised address (started by
    /// [`Cluster::start_linked`]): clients, followers and coordinators no longer reach
    /// it, while it keeps its etcd lease and its own outgoing connections. Its Kafka
    /// listener, advertised apart, stays reachable.
    pub fn cut_inbound(&self, id: i32) {
        self.inbound[&id].cut();
    }

    /// Undoes [`Cluster::cut_inbound`].
    pub fn heal_inbound(&self, id: i32) {
        self.inbound[&id].heal();
    }

    /// Undoes [`Cluster::isolate`].
    pub fn heal_isolation(&self, id: i32) {
        self.inbound[&id].heal();
        self.heal_link_to_etcd(ProcessId::Broker(id));
    }

    /// Cuts `process` off from etcd (it must have been started by
    /// [`Cluster::start_linked`]); every other process still reaches etcd.
    pub fn cut_from_etcd(&self, process: ProcessId) {
        self.links[&process].cut();
    }

    pub fn heal_link_to_etcd(&self, process: ProcessId) {
        self.links[&process].heal();
    }

    /// [`Cluster::start`] plus `m` coordinators (2-second leases, transactions checked
    /// for timeouts every 100 ms) with `coordinator_extra` flags each; returns once the
    /// coordinators own every partition of the transaction log.
    pub async fn start_with_coordinators(
        n: i32,
        m: i32,
        broker_extra: &[&str],
        coordinator_extra: &[&str],
    ) -> Cluster {
        Cluster::start_with_etcd_members(1, n, m, broker_extra, coordinator_extra).await
    }

    /// [`Cluster::start_with_coordinators`] on an etcd cluster of `etcd_members` members.
    pub async fn start_with_etcd_members(
        etcd_members: usize,
        n: i32,
        m: i32,
        broker_extra: &[&str],
        coordinator_extra: &[&str],
    ) -> Cluster {
        let etcd = if etcd_members == 1 {
            vec![EtcdServer::start()]
        } else {
            EtcdServer::start_cluster(etcd_members)
        };
        let mut cluster = Cluster::start_on(etcd, BTreeMap::new(), n, broker_extra);
        cluster.add_coordinators(m, coordinator_extra).await;
        cluster
    }

    /// Starts coordinators 1..=m and waits until they own the whole transaction log.
    pub async fn add_coordinators(&mut self, m: i32, extra: &[&str]) {
        for id in 1..=m {
            let process = self.spawn_coordinator(id, extra);
            self.coordinators.push(process);
        }
        self.wait_for_coordinators().await;
    }

    /// Starts coordinators 1..=m without waiting for them to own the transaction log
    /// (what waits asks them in plaintext; a TLS cluster's tests wait through the SDK).
    pub fn spawn_coordinators(&mut self, m: i32, extra: &[&str]) {
        for id in 1..=m {
            let process = self.spawn_coordinator(id, extra);
            self.coordinators.push(process);
        }
    }

    fn spawn_coordinator(&self, id: i32, extra: &[&str]) -> CoordinatorProcess {
        let host = self.hosts.get(&ProcessId::Coordinator(id)).copied();
        let endpoint = self
            .links
            .get(&ProcessId::Coordinator(id))
            .map_or_else(|| endpoints(&self.etcd), CuttableLink::endpoint);
        let id = id.to_string();
        // Every broker, as a bootstrap list: the coordinator gets in through any that is up
        // and learns the others from its metadata.
        let bootstrap = self
            .ids()
            .into_iter()
            .map(|b| self.broker(b).bootstrap())
            .collect::<Vec<_>>()
            .join(",");
        let partitions = TXN_LOG_PARTITIONS.to_string();
        let mut args = vec![
            "--id",
            id.as_str(),
            "--etcd",
            endpoint.as_str(),
            "--bootstrap",
            bootstrap.as_str(),
            "--lease-ttl-ms",
            "2000",
            "--txn-log-partitions",
            partitions.as_str(),
            "--txn-check-interval-ms",
            "100",
        ];
        args.extend_from_slice(extra);
        match host {
            Some(host) => CoordinatorProcess::coordinator_on(self.lab().host(host), &args),
            None => CoordinatorProcess::coordinator(&args),
        }
    }

    /// The address of a running broker, for a client's bootstrap setting.
    pub fn bootstrap(&self) -> String {
        self.broker(self.observer(&[])).bootstrap()
    }

    /// etcd member `member` (0-based), to kill, pause or restart.
    pub fn etcd(&mut self, member: usize) -> &mut EtcdServer {
        &mut self.etcd[member]
    }

    pub fn coordinator_ids(&self) -> Vec<i32> {
        (1..=self.coordinators.len() as i32).collect()
    }

    pub fn coordinator(&self, id: i32) -> &CoordinatorProcess {
        &self.coordinators[index(id)]
    }

    pub fn kill_coordinator(&mut self, id: i32) {
        self.coordinators[index(id)].kill();
    }

    /// SIGTERM: a graceful stop, which gives the coordinator's claims up at once.
    pub fn stop_coordinator(&mut self, id: i32) {
        self.coordinators[index(id)].stop();
    }

    pub fn restart_coordinator(&mut self, id: i32) {
        self.coordinators[index(id)].restart();
    }

    /// Kills coordinator `id` and starts it again with `flag` set to `value`.
    pub fn restart_coordinator_with(&mut self, id: i32, flag: &str, value: &str) {
        self.coordinators[index(id)].restart_with(flag, value);
    }

    pub fn pause_coordinator(&self, id: i32) {
        self.coordinators[index(id)].pause();
    }

    pub fn resume_coordinator(&self, id: i32) {
        self.coordinators[index(id)].resume();
    }

    /// Waits until the running coordinators together own and have loaded every
    /// partition of the transaction log.
    pub async fn wait_for_coordinators(&self) {
        self.wait_until_every_slice_served(Instant::now(), PATIENCE)
            .await;
    }

    pub fn broker(&self, id: i32) -> &BrokerProcess {
        &self.brokers[index(id)]
    }

    pub fn ids(&self) -> Vec<i32> {
        (1..=self.brokers.len() as i32).collect()
    }

    pub fn kill(&mut self, id: i32) {
        self.brokers[index(id)].kill();
    }

    pub fn restart(&mut self, id: i32) {
        self.brokers[index(id)].restart();
    }

    pub fn pause(&self, id: i32) {
        self.brokers[index(id)].pause();
    }

    pub fn resume(&self, id: i32) {
        self.brokers[index(id)].resume();
    }

    /// A running broker other than `except`, to ask for metadata.
    pub fn observer(&self, except: &[i32]) -> i32 {
        self.ids()
            .into_iter()
            .find(|id| !except.contains(id) && self.broker(*id).is_running())
            .expect("a running broker")
    }

    /// Creates a topic through broker 1.
    pub async fn create_topic(&self, name: &str, partitions: i32, replication_factor: i32) {
        self.create(CreatableTopic {
            name: name.into(),
            num_partitions: partitions,
            replication_factor,
            unclean_leader_election: false,
            coordinator_id: None,
            configs: Vec::new(),
        })
        .await;
    }

    /// Creates a topic with every setting spelled out, through broker 1.
    pub async fn create(&self, topic: CreatableTopic) {
        raw::create(&self.broker(1).bootstrap(), topic).await;
    }

    /// `topic`-`partition` as broker `observer` describes it.
    pub async fn partition(
        &self,
        observer: i32,
        topic: &str,
        partition: i32,
    ) -> Option<PartitionMetadata> {
        let mut client = raw::connect(&self.broker(observer).bootstrap()).await;
        let answer = client
            .metadata(MetadataRequest {
                topics: vec![topic.into()],
            })
            .await
            .ok()?
            .into_inner();
        answer
            .topics
            .into_iter()
            .next()?
            .partitions
            .into_iter()
            .find(|p| p.partition == partition)
    }

    /// Polls `observer` until `topic`-`partition` satisfies `done`; panics after
    /// [`PATIENCE`] with the partition as last seen.
    pub async fn wait_for(
        &self,
        observer: i32,
        topic: &str,
        partition: i32,
        done: impl Fn(&PartitionMetadata) -> bool,
    ) -> PartitionMetadata {
        let what =
            format!("{topic}-{partition} as broker {observer} sees it reaches the awaited state");
        let (reached, _) = wait_until(PATIENCE, &what, || async {
            match self.partition(observer, topic, partition).await {
                Some(p) if done(&p) => Seen::Reached(p),
                other => Seen::Not(format!("{other:?}")),
            }
        })
        .await;
        reached
    }

    /// The current leader of `topic`-`partition`, once every replica is in sync.
    pub async fn leader_of(&self, topic: &str, partition: i32) -> PartitionMetadata {
        let replicas = self.brokers.len();
        let seen = self
            .wait_for(self.observer(&[]), topic, partition, |p| {
                p.isr.len() == p.replicas.len().min(replicas)
            })
            .await;
        self.confirmed_by_leader(topic, partition, &seen).await
    }

    /// Other brokers learn of topics and leaders through their own catalog watch, so a
    /// state one broker reports may not have reached the leader yet: wait until the
    /// leader itself reports leading in that epoch (then it serves produce and fetch).
    async fn confirmed_by_leader(
        &self,
        topic: &str,
        partition: i32,
        seen: &PartitionMetadata,
    ) -> PartitionMetadata {
        let (leader, epoch) = (seen.leader_id, seen.leader_epoch);
        self.wait_for(leader, topic, partition, |p| {
            p.leader_id == leader && p.leader_epoch >= epoch
        })
        .await
    }

    /// Waits until a broker other than `old` leads with a newer epoch.
    pub async fn new_leader(
        &self,
        topic: &str,
        partition: i32,
        old: &PartitionMetadata,
    ) -> PartitionMetadata {
        let observer = self.observer(&[old.leader_id]);
        let seen = self
            .wait_for(observer, topic, partition, |p| {
                p.leader_id != old.leader_id && p.leader_epoch > old.leader_epoch
            })
            .await;
        self.confirmed_by_leader(topic, partition, &seen).await
    }

    /// Stops every broker cleanly, so their logs can be compared on disk.
    pub fn stop_all(&mut self) {
        replicas::stop_all(&mut self.brokers);
    }

    /// After [`Cluster::stop_all`]: every replica of `topic`-`partition` holds the same
    /// batches below `high_watermark`; returns how many.
    pub fn compare_replicas(&self, topic: &str, partition: i32, high_watermark: i64) -> usize {
        replicas::compare_replicas(&self.brokers, topic, partition, high_watermark)
    }
}

/// A free 127.0.0.1 port, bound and kept, for a link to listen on once the process that
/// advertises it has started.
fn reserve_port() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").expect("reserve a port")
}

/// Every member's client URL, comma separated, as `--etcd` takes them.
fn endpoints(etcd: &[EtcdServer]) -> String {
    etcd.iter()
        .map(EtcdServer::endpoint)
        .collect::<Vec<_>>()
        .join(",")
}

fn index(id: i32) -> usize {
    usize::try_from(id - 1).expect("broker ids start at 1")
}

/// The flags every broker of a cluster starts with: its id, etcd, 2-second leases.
fn broker_args(id: i32, etcd_endpoint: &str) -> Vec<String> {
    [
        "--id",
        &id.to_string(),
        "--etcd",
        etcd_endpoint,
        "--lease-ttl-ms",
        "2000",
    ]
    .map(String::from)
    .to_vec()
}

/// Owned arguments as the `&str`s process starters take.
pub fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}
