//! A real etcd server (the `etcd` binary of Debian's `etcd-server`, 3.4 or newer, from
//! `IDEM_ETCD_BIN` or `PATH`) on free 127.0.0.1 client and peer ports with its own
//! temporary data dir, alone or as one member of a cluster of several: started and waited
//! for until it answers a real request, killed with SIGKILL, paused with SIGSTOP,
//! restarted on the same ports and data dir, and killed and reaped on drop. A member may
//! run inside a host of a [`Lab`](crate::netns::Lab) instead, on the host's address and
//! etcd's usual ports (the host's port space is its own).

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::netns::Host;

/// How long etcd may take to serve after being started.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
const MEMBER_NAME: &str = "idem-test";

pub struct EtcdServer {
    child: Option<Child>,
    name: String,
    client_port: u16,
    peer_port: u16,
    /// `name=peer-url,...` of every member, this one included.
    initial_cluster: String,
    data_dir: PathBuf,
    log_path: PathBuf,
    /// The lab host it runs on, if any.
    host: Option<Host>,
    // Keeps the data dir and the log alive as long as the server.
    _tmp: tempfile::TempDir,
}

impl EtcdServer {
    /// Starts etcd on free ports in a fresh data dir and returns once it serves requests.
    pub fn start() -> Self {
        let tmp = tempfile::tempdir().expect("temp dir for etcd");
        let mut server = EtcdServer {
            child: None,
            name: MEMBER_NAME.to_string(),
            client_port: 0,
            peer_port: 0,
            initial_cluster: String::new(),
            data_dir: tmp.path().join("data"),
            log_path: tmp.path().join("etcd.log"),
            host: None,
            _tmp: tmp,
        };
        // Another process may take a port between probing and etcd binding it: try anew.
        let mut last_failure = String::new();
        for _attempt in 0..3 {
            (server.client_port, server.peer_port) = free_ports();
            server.initial_cluster = format!("{}={}", server.name, server.peer_url());
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(failure) => {
                    server.kill();
                    last_failure = failure;
                    let _ = std::fs::remove_dir_all(&server.data_dir);
                }
            }
        }
        panic!("etcd did not start: {last_failure}");
    }

    /// A cluster of `members` etcd servers, each on its own ports and data dir; returns
    /// once every member serves (which needs a quorum, so all are spawned first).
    pub fn start_cluster(members: usize) -> Vec<EtcdServer> {
        EtcdServer::start_members(vec![None; members])
    }

    /// A cluster of one member on each of `hosts`.
    pub fn start_cluster_on(hosts: &[Host]) -> Vec<EtcdServer> {
        EtcdServer::start_members(hosts.iter().cloned().map(Some).collect())
    }

    fn start_members(hosts: Vec<Option<Host>>) -> Vec<EtcdServer> {
        let mut servers: Vec<EtcdServer> = hosts
            .into_iter()
            .enumerate()
            .map(|(i, host)| {
                let tmp = tempfile::tempdir().expect("temp dir for etcd");
                let (client_port, peer_port) = match host {
                    Some(_) => (2379, 2380),
                    None => free_ports(),
                };
                EtcdServer {
                    child: None,
                    name: format!("{MEMBER_NAME}-{i}"),
                    client_port,
                    peer_port,
                    initial_cluster: String::new(),
                    data_dir: tmp.path().join("data"),
                    log_path: tmp.path().join("etcd.log"),
                    host,
                    _tmp: tmp,
                }
            })
            .collect();
        let initial_cluster = servers
            .iter()
            .map(|s| format!("{}={}", s.name, s.peer_url()))
            .collect::<Vec<_>>()
            .join(",");
        for server in &mut servers {
            server.initial_cluster = initial_cluster.clone();
            if let Err(failure) = server.spawn() {
                panic!("etcd member {} did not start: {failure}", server.name);
            }
        }
        for server in &mut servers {
            if let Err(failure) = server.wait_until_serving() {
                panic!("etcd member {} did not serve: {failure}", server.name);
            }
        }
        servers
    }

    /// `http://127.0.0.1:PORT` (or the lab host's address), the client URL.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.client_addr())
    }

    /// The client address, for a proxy in front of it.
    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip(), self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://{}", SocketAddr::new(self.ip(), self.peer_port))
    }

    fn ip(&self) -> IpAddr {
        match &self.host {
            Some(host) => IpAddr::V4(host.addr()),
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// The lab host it runs on, if it runs on one.
    pub fn host(&self) -> Option<&Host> {
        self.host.as_ref()
    }

    /// The endpoint as the one-element list `EtcdPidStore::connect` takes.
    pub fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint()]
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// SIGKILL: no goodbye; what etcd acknowledged is on disk.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same ports and data dir, returning once it serves.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(failure) = self.spawn_and_wait() {
            self.kill();
            panic!("etcd did not restart: {failure}");
        }
    }

    /// Starts a killed member of a cluster again without waiting for it to serve (it
    /// cannot while its cluster has no quorum).
    pub fn restart_member(&mut self) {
        self.kill();
        if let Err(failure) = self.spawn() {
            panic!("etcd member {} did not restart: {failure}", self.name);
        }
    }

    /// SIGSTOP: etcd keeps its connections open but answers nothing, like a hung or
    /// partitioned member. Undone by [`resume`](Self::resume) (or by drop, which kills it).
    pub fn pause(&mut self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&mut self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        crate::signal::send(self.child.as_ref().expect("etcd is not running"), signal);
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn spawn_and_wait(&mut self) -> Result<(), String> {
        self.spawn()?;
        self.wait_until_serving()
    }

    fn spawn(&mut self) -> Result<(), String> {
        let client_url = self.endpoint();
        let peer_url = self.peer_url();
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("open {}: {e}", self.log_path.display()))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("clone log file handle: {e}"))?;
        let mut command = match &self.host {
            Some(host) => host.command(etcd_binary()),
            None => Command::new(etcd_binary()),
        };
        let child = command
            .arg("--name")
            .arg(&self.name)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .arg("--initial-cluster-state")
            .arg("new")
            // zap is the default of 3.5 and the only logger of 3.6; 3.4 needs it named for
            // --log-level to apply.
            .args(["--logger", "zap", "--log-level", "error"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run etcd ({e}): install it with `apt-get install etcd-server` \
                     or point IDEM_ETCD_BIN at an etcd 3.4+ binary"
                )
            });
        self.child = Some(child);
        Ok(())
    }

    /// Polls a real (linearizable) read through the etcd client until it answers.
    pub fn wait_until_serving(&mut self) -> Result<(), String> {
        let endpoint = self.endpoint();
        let started = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("etcd exited with {status}; {}", self.log_tail()));
                }
            }
            match probe(&endpoint) {
                Ok(()) => return Ok(()),
                Err(e) if started.elapsed() > STARTUP_TIMEOUT => {
                    return Err(format!(
                        "etcd at {endpoint} did not serve within {STARTUP_TIMEOUT:?} \
                         (last error: {e}); {}",
                        self.log_tail()
                    ));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(25)),
            }
        }
    }

    fn log_tail(&self) -> String {
        let (tail, _) = crate::log_tail::log_tail(&self.log_path, 20);
        format!("etcd log tail:\n{tail}")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `IDEM_ETCD_BIN`, or `etcd` on `PATH`.
pub fn etcd_binary() -> PathBuf {
    if let Ok(bin) = std::env::var("IDEM_ETCD_BIN") {
        return PathBuf::from(bin);
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("etcd"))
            .find(|candidate| candidate.is_file())
    });
    on_path.unwrap_or_else(|| {
        panic!(
            "no etcd binary: install it with `apt-get install etcd-server` \
             or set IDEM_ETCD_BIN to an etcd 3.4+ binary"
        )
    })
}

/// Two distinct free 127.0.0.1 ports (client, peer), probed by binding port 0.
fn free_ports() -> (u16, u16) {
    let client = TcpListener::bind("127.0.0.1:0").expect("probe a free port");
    let peer = TcpListener::bind("127.0.0.1:0").expect("probe a free port");
    let ports = (
        client.local_addr().expect("port").port(),
        peer.local_addr().expect("port").port(),
    );
    drop((client, peer));
    ports
}

/// One linearizable read through the etcd client, on a thread of its own so that it works
/// from sync code and from inside an async test alike.
fn probe(endpoint: &str) -> Result<(), String> {
    let endpoint = endpoint.to_string();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        runtime.block_on(async {
            let options = etcd_client::ConnectOptions::new()
                .with_connect_timeout(Duration::from_millis(500))
                .with_timeout(Duration::from_secs(1));
            let probe = async {
                let mut client = etcd_client::Client::connect([endpoint], Some(options)).await?;
                client.get("/idem-test-probe", None).await?;
                Ok::<(), etcd_client::Error>(())
            };
            match tokio::time::timeout(Duration::from_secs(2), probe).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("timed out".to_string()),
            }
        })
    })
    .join()
    .map_err(|_| "probe thread panicked".to_string())?
}
