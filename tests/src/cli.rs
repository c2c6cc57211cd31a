//! The `idem` command line as a test runs it: the binary under test, pointed at a
//! bootstrap broker, with its log quiet.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use crate::binaries::binary;

/// Runs `idem --bootstrap BOOTSTRAP ARGS...` and returns what it printed and its status.
pub fn idem(bootstrap: &str, args: &[&str]) -> Output {
    Command::new(binary("idem"))
        .args(["--bootstrap", bootstrap])
        .args(args)
        .env("IDEM_LOG", "error")
        .output()
        .expect("run idem")
}

/// [`idem`] with `input` written to its stdin (`produce` reads records from it).
pub fn idem_with_input(bootstrap: &str, args: &[&str], input: &str) -> Output {
    let mut child = Command::new(binary("idem"))
        .args(["--bootstrap", bootstrap])
        .args(args)
        .env("IDEM_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run idem");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("idem finishes")
}
