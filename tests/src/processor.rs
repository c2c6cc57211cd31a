//! Consume-transform-produce processors as separate processes: the SDK's example
//! `client/examples/transform.rs`, built by `cargo build --workspace --examples`, so a
//! test kills, pauses and restarts real members of a group. Every process is killed
//! when its handle drops, even when the test panics.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::binaries::bin_dir;

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
    fn drop(&mut self) {
        self.kill();
    }
}
