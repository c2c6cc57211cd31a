//! A real `idem-broker` or `idem-coordinator` process: started on a free port (a
//! broker with its own data dir), killed (SIGKILL), paused (SIGSTOP), stopped (SIGTERM,
//! clean shutdown) and restarted on the same port and data dir so clients can keep
//! their address. On 127.0.0.1, or inside a host of a [`Lab`](crate::netns::Lab) (bound to the host's
//! address, which it advertises).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};

use crate::binaries::binary;
use crate::netns::Host;

/// Which binary a [`ServerProcess`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    Broker,
    Coordinator,
}

impl Program {
    fn binary(self) -> &'static str {
        match self {
            Program::Broker => "idem-broker",
            Program::Coordinator => "idem-coordinator",
        }
    }

    /// The line the process prints once it is bound (followed by its address).
    fn banner(self) -> &'static str {
        match self {
            Program::Broker => "idem-broker listening on ",
            Program::Coordinator => "idem-coordinator listening on ",
        }
    }
}

/// A broker (the default constructors) or a coordinator ([`ServerProcess::coordinator`]).
pub type BrokerProcess = ServerProcess;
pub type CoordinatorProcess = ServerProcess;

pub struct ServerProcess {
    program: Program,
    child: Option<Child>,
    addr: SocketAddr,
    /// The Kafka listener's address, when started with `--kafka-listen` (it printed
    /// "kafka listener on ADDR").
    kafka_addr: Option<SocketAddr>,
    data_dir: PathBuf,
    extra_args: Vec<String>,
    /// The lab host it runs on, if any.
    host: Option<Host>,
    /// Everything the process (and its restarts) wrote to stderr.
    log: Arc<Mutex<String>>,
    // Keeps the temporary data dir alive as long as the broker.
    _tmp: Option<tempfile::TempDir>,
}

impl ServerProcess {
    /// Starts a broker on a free port in a fresh temporary data dir.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a broker with extra command-line flags (e.g. `--segment-bytes 4096`).
    pub fn start_with(extra_args: &[&str]) -> Self {
        Self::try_start_with(extra_args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`BrokerProcess::start_with`], but a broker that refuses to start is an
    /// `Err` with its exit status and log.
    pub fn try_start_with(extra_args: &[&str]) -> Result<Self, String> {
        Self::try_start_on(None, extra_args)
    }

    /// Starts a broker inside lab host `host`, bound to the host's address.
    pub fn start_on(host: &Host, extra_args: &[&str]) -> Self {
        Self::try_start_on(Some(host), extra_args).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_start_on(host: Option<&Host>, extra_args: &[&str]) -> Result<Self, String> {
        let tmp = tempfile::tempdir().map_err(|e| format!("temp data dir: {e}"))?;
        let data_dir = tmp.path().join("data");
        let extra_args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let log = Arc::default();
        let (child, addr, kafka_addr) = try_spawn(
            Program::Broker,
            host,
            &data_dir,
            &any_port(host),
            &extra_args,
            &log,
        )?;
        Ok(ServerProcess {
            program: Program::Broker,
            child: Some(child),
            addr,
            kafka_addr,
            data_dir,
            extra_args,
            host: host.cloned(),
            log,
            _tmp: Some(tmp),
        })
    }

    /// Starts an `idem-coordinator` on a free port with `args` (its `--data-dir`, for
    /// the solo mode, is a fresh temporary dir the caller may pass via `{data_dir}`).
    pub fn coordinator(args: &[&str]) -> Self {
        Self::coordinator_on_host(None, args)
    }

    /// [`ServerProcess::coordinator`] inside lab host `host`, bound to its address.
    pub fn coordinator_on(host: &Host, args: &[&str]) -> Self {
        Self::coordinator_on_host(Some(host), args)
    }

    fn coordinator_on_host(host: Option<&Host>, args: &[&str]) -> Self {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("temp data dir: {e}"));
        let data_dir = tmp.path().join("data");
        let extra_args: Vec<String> = args
            .iter()
            .map(|s| s.replace("{data_dir}", &data_dir.display().to_string()))
            .collect();
        let log = Arc::default();
        let (child, addr, kafka_addr) = try_spawn(
            Program::Coordinator,
            host,
            &data_dir,
            &any_port(host),
            &extra_args,
            &log,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        ServerProcess {
            program: Program::Coordinator,
            child: Some(child),
            addr,
            kafka_addr,
            data_dir,
            extra_args,
            host: host.cloned(),
            log,
            _tmp: Some(tmp),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `host:port` of the Kafka listener (`--kafka-listen`); panics without one.
    pub fn kafka_bootstrap(&self) -> String {
        self.kafka_addr
            .expect("the process was started with --kafka-listen")
            .to_string()
    }

    /// `host:port` for a client's bootstrap setting.
    pub fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// What the process has written to stderr so far (at the level `IDEM_LOG` set,
    /// `warn` by default), across restarts.
    pub fn log(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// SIGKILL: no flush, no snapshot, no goodbye.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the broker freezes with its sockets open, as in a long GC pause.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`BrokerProcess::pause`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// SIGHUP: a TLS server reloads its certificate, key and CA.
    pub fn hang_up(&self) {
        self.signal("-HUP");
    }

    /// The operating system's id of the running process.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the process is running").id()
    }

    fn signal(&self, signal: &str) {
        crate::signal::send(self.child.as_ref().expect("the process is running"), signal);
    }

    /// SIGTERM and wait for the clean shutdown to finish.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.id().to_string();
            let status = Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .expect("run kill");
            assert!(status.success(), "kill -TERM {pid} failed");
            let exit = child.wait().expect("wait for the process");
            assert!(
                exit.success(),
                "{} exited with {exit} after SIGTERM",
                self.program.binary()
            );
        }
    }

    /// Starts the broker again on the same port and data dir.
    pub fn restart(&mut self) {
        self.kill();
        let (child, addr, kafka_addr) = try_spawn(
            self.program,
            self.host.as_ref(),
            &self.data_dir,
            &self.addr.to_string(),
            &self.extra_args,
            &self.log,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(addr, self.addr, "a restarted process must keep its port");
        self.kafka_addr = kafka_addr;
        self.child = Some(child);
    }

    /// [`ServerProcess::restart`] with `flag` set to `value` from now on (replacing the
    /// value it was started with, if any): an operator restarting with another setting.
    pub fn restart_with(&mut self, flag: &str, value: &str) {
        match self.extra_args.iter().position(|a| a == flag) {
            Some(at) if at + 1 < self.extra_args.len() => self.extra_args[at + 1] = value.into(),
            _ => self
                .extra_args
                .extend([flag.to_string(), value.to_string()]),
        }
        self.restart();
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The lab host it runs on, if it runs on one.
    pub fn host(&self) -> Option<&Host> {
        self.host.as_ref()
    }
}

/// `--listen` for a free port: on 127.0.0.1, or on the host's address (a namespace has
/// ports of its own, so any is free there).
fn any_port(host: Option<&Host>) -> String {
    match host {
        Some(host) => format!("{}:0", host.addr()),
        None => "127.0.0.1:0".to_string(),
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts the process and waits for its "listening" line; if it exits first, the error
/// holds its exit status and everything it wrote to stderr.
fn try_spawn(
    program: Program,
    host: Option<&Host>,
    data_dir: &Path,
    listen: &str,
    extra_args: &[String],
    log: &Arc<Mutex<String>>,
) -> Result<(Child, SocketAddr, Option<SocketAddr>), String> {
    let name = program.binary();
    let mut command = match host {
        Some(host) => host.command(binary(name)),
        None => Command::new(binary(name)),
    };
    command.arg("--listen").arg(listen);
    if program == Program::Broker {
        command.arg("--data-dir").arg(data_dir);
    }
    let mut child = command
        .args(extra_args)
        .env(
            "IDEM_LOG",
            std::env::var("IDEM_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn {name}: {e}"))?;
    // Echo the broker's log into the test's output and keep it for error reports.
    let stderr = child.stderr.take().ok_or("stderr")?;
    let log = log.clone();
    let echo = {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("{line}");
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                log.push_str(&line);
                log.push('\n');
            }
        })
    };
    let stdout = child.stdout.take().ok_or("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    // The broker prints its address once it is bound; until then it accepts nothing.
    let mut kafka_addr = None;
    let addr = loop {
        match lines.next() {
            Some(Ok(line)) => {
                // Printed just before the banner by a broker with --kafka-listen.
                if let Some(addr) = line.strip_prefix("kafka listener on ") {
                    kafka_addr = Some(
                        addr.trim()
                            .parse()
                            .map_err(|e| format!("{name} Kafka address {addr:?}: {e}"))?,
                    );
                }
                if let Some(addr) = line.strip_prefix(program.banner()) {
                    break addr
                        .trim()
                        .parse()
                        .map_err(|e| format!("{name} address {addr:?}: {e}"))?;
                }
            }
            Some(Err(e)) => return Err(format!("reading {name} stdout: {e}")),
            None => {
                let status = child.wait();
                let _ = echo.join();
                let log = log.lock().unwrap_or_else(PoisonError::into_inner).clone();
                return Err(format!(
                    "{name} exited before listening ({status:?}):\n{log}"
                ));
            }
        }
    };
    // Keep draining stdout so the process never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok((child, addr, kafka_addr))
}
