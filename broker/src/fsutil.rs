//! Small file-system primitives shared by the broker's on-disk state.

use std::io::Write;
use std::path::Path;

/// Replaces `path` with `contents` so that a crash leaves either the old or the new
/// file, never a torn one: write a temp file, fsync it, rename, fsync the directory.
pub fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
