//! Sending a POSIX signal to a child process by pid (through `kill`, since the crate
//! forbids `unsafe` and so calls no libc).

use std::process::{Child, Command};

/// `kill -<signal> <pid of child>`; panics if it fails.
pub fn send(child: &Child, signal: &str) {
    let pid = child.id().to_string();
    let status = Command::new("kill")
        .args([signal, &pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {pid} failed");
}
