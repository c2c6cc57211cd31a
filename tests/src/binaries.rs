//! Finds the binaries under test in the cargo target dir this test was built into,
//! never on `$PATH`: `IDEM_BIN_DIR` if set, else the directory above `deps/`.

use std::path::PathBuf;

/// Path of a workspace binary (`idem-broker`, `idem`), built by
/// `cargo build --workspace --bins` before the tests run.
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} not found: run `cargo build --workspace --bins` first (or set IDEM_BIN_DIR)",
        path.display()
    );
    path
}

/// Where the binaries under test are: `IDEM_BIN_DIR`, else `target/<profile>`.
pub fn bin_dir() -> PathBuf {
    match std::env::var_os("IDEM_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let exe = std::env::current_exe().expect("test executable path");
            // target/<profile>/deps/<test-binary> -> target/<profile>
            exe.parent()
                .and_then(|deps| deps.parent())
                .expect("target dir")
                .to_path_buf()
        }
    }
}
