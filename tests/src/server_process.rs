//! A real `idem-broker` process: started on a free port with its own data dir,
//! killed (SIGKILL), stopped (SIGTERM, clean shutdown) and restarted on the same port
//! and data dir so clients can keep their bootstrap address.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};

use crate::binaries::binary;

pub struct BrokerProcess {
    child: Option<Child>,
    addr: SocketAddr,
    data_dir: PathBuf,
    extra_args: Vec<String>,
    // Keeps the temporary data dir alive as long as the broker.
    _tmp: Option<tempfile::TempDir>,
}

impl BrokerProcess {
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
        let tmp = tempfile::tempdir().map_err(|e| format!("temp data dir: {e}"))?;
        let data_dir = tmp.path().join("data");
        let extra_args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let (child, addr) = try_spawn(&data_dir, "127.0.0.1:0", &extra_args)?;
        Ok(BrokerProcess {
            child: Some(child),
            addr,
            data_dir,
            extra_args,
            _tmp: Some(tmp),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `host:port` for a client's bootstrap setting.
    pub fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
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

    fn signal(&self, signal: &str) {
        crate::signal::send(self.child.as_ref().expect("broker is running"), signal);
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
            let exit = child.wait().expect("wait for broker");
            assert!(exit.success(), "broker exited with {exit} after SIGTERM");
        }
    }

    /// Starts the broker again on the same port and data dir.
    pub fn restart(&mut self) {
        self.kill();
        let (child, addr) = spawn(&self.data_dir, &self.addr.to_string(), &self.extra_args);
        assert_eq!(addr, self.addr, "restarted broker must keep its port");
        self.child = Some(child);
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(data_dir: &Path, listen: &str, extra_args: &[String]) -> (Child, SocketAddr) {
    try_spawn(data_dir, listen, extra_args).unwrap_or_else(|e| panic!("{e}"))
}

/// Starts the broker and waits for its "listening" line; if it exits first, the error
/// holds its exit status and everything it wrote to stderr.
fn try_spawn(
    data_dir: &Path,
    listen: &str,
    extra_args: &[String],
) -> Result<(Child, SocketAddr), String> {
    let mut child = Command::new(binary("idem-broker"))
        .arg("--listen")
        .arg(listen)
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra_args)
        .env(
            "IDEM_LOG",
            std::env::var("IDEM_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn idem-broker: {e}"))?;
    // Echo the broker's log into the test's output and keep it for error reports.
    let stderr = child.stderr.take().ok_or("broker stderr")?;
    let log = Arc::new(Mutex::new(String::new()));
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
    let stdout = child.stdout.take().ok_or("broker stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    // The broker prints its address once it is bound; until then it accepts nothing.
    let addr = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(addr) = line.strip_prefix("idem-broker listening on ") {
                    break addr
                        .trim()
                        .parse()
                        .map_err(|e| format!("broker address {addr:?}: {e}"))?;
                }
            }
            Some(Err(e)) => return Err(format!("reading broker stdout: {e}")),
            None => {
                let status = child.wait();
                let _ = echo.join();
                let log = log.lock().unwrap_or_else(PoisonError::into_inner).clone();
                return Err(format!(
                    "idem-broker exited before listening ({status:?}):\n{log}"
                ));
            }
        }
    };
    // Keep draining stdout so the broker never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok((child, addr))
}
