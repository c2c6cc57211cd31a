//! A random id written once into a data dir (`data-dir-id`), so a broker restarted on
//! the same data can tell its own stale registration from another broker's.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;

const FILE: &str = "data-dir-id";

/// The data dir's id, created on first use.
pub fn load_or_create(data_dir: &Path) -> std::io::Result<String> {
    let path = data_dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(data_dir)?;
    let id = format!("{:016x}{:016x}", random_u64(), random_u64());
    crate::fsutil::write_atomically(&path, id.as_bytes())?;
    Ok(id)
}

// std's per-process random hash keys, mixed with the clock: unique enough for telling
// data dirs apart, without a dependency for it.
fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_created_once_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = load_or_create(dir.path()).expect("create");
        assert_eq!(first.len(), 32);
        assert_eq!(load_or_create(dir.path()).expect("load"), first);
        let other = tempfile::tempdir().expect("tempdir");
        assert_ne!(load_or_create(other.path()).expect("create"), first);
    }
}
