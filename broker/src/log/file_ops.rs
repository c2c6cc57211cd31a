//! Performs the [`FileOp`]s of a segment swap on a partition directory. A rename is
//! atomic (it replaces its target), a removal of a missing file succeeds, and `SyncDir`
//! fsyncs the directory so the ops after it cannot reach the disk before those above.

use std::fs;
use std::io;
use std::path::Path;

use super::checkpoint;
use super::error::{IoContext, LogError};
use super::segment_swap::FileOp;

pub(crate) fn perform(dir: &Path, op: FileOp) -> Result<(), LogError> {
    match op {
        FileOp::Rename { from, to } => {
            let (from, to) = (from.path(dir), to.path(dir));
            fs::rename(&from, &to).at("renaming into place", &to)
        }
        FileOp::Remove(file) => {
            let path = file.path(dir);
            match fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e).at("removing", &path),
            }
        }
        FileOp::SyncDir => checkpoint::sync_dir(dir),
    }
}
