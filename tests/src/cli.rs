//! The `idem` command line as a test runs it: the binary under test, pointed at a
//! bootstrap broker, with its log quiet.

use std::process::{Command, Output};

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
