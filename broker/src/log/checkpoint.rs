//! Offset checkpoints of a partition log, each one small file replaced atomically
//! (temp file, fsync, rename, fsync of the directory, `idem_runtime::atomic_file`), so a
//! crash leaves either the old or the new value, never a torn one:
//! - `recovery-point`: the offset below which the log is known to be on disk. Recovery
//!   trusts the segments below it and scans everything from the segment that contains it.
//! - `log-start-offset`: the first offset the log serves, moved by retention (and by a
//!   follower after its leader's). Segments wholly below it are deleted; the one holding
//!   it may start earlier.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use super::error::{IoContext, LogError};

/// One offset checkpoint file: its name and the first line that identifies it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OffsetCheckpoint {
    pub file_name: &'static str,
    header: &'static str,
}

pub(crate) const RECOVERY_POINT: OffsetCheckpoint = OffsetCheckpoint {
    file_name: "recovery-point",
    header: "idem-recovery-point 1",
};

pub(crate) const LOG_START: OffsetCheckpoint = OffsetCheckpoint {
    file_name: "log-start-offset",
    header: "idem-log-start-offset 1",
};

/// What a checkpoint file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoredOffset {
    /// No file (for the recovery point: nothing is known to be flushed, scan every
    /// segment; for the log start: the first segment's base).
    Missing,
    Valid(i64),
    /// The file exists but cannot be parsed; treated like `Missing`.
    Invalid(String),
}

impl OffsetCheckpoint {
    pub(crate) fn path(&self, dir: &Path) -> PathBuf {
        dir.join(self.file_name)
    }

    /// Whether `name` is this checkpoint's leftover temp file.
    pub(crate) fn is_temp_file(&self, name: &str) -> bool {
        name.strip_suffix(".tmp") == Some(self.file_name)
    }

    pub(crate) fn read(&self, dir: &Path) -> Result<StoredOffset, LogError> {
        let path = self.path(dir);
        let text = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(StoredOffset::Missing),
            Err(e) => return Err(e).at("reading", &path),
        };
        Ok(self.parse(&text))
    }

    fn parse(&self, bytes: &[u8]) -> StoredOffset {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return StoredOffset::Invalid("not UTF-8".into());
        };
        let mut lines = text.lines();
        if lines.next() != Some(self.header) {
            return StoredOffset::Invalid(format!("first line is not {:?}", self.header));
        }
        let offset = match lines.next().map(str::parse::<i64>) {
            Some(Ok(offset)) if offset >= 0 => offset,
            _ => return StoredOffset::Invalid("second line is not an offset".into()),
        };
        if lines.next().is_some() {
            return StoredOffset::Invalid("trailing lines".into());
        }
        StoredOffset::Valid(offset)
    }

    /// Durably replaces the checkpoint with `offset`.
    pub(crate) fn write(&self, dir: &Path, offset: i64) -> Result<(), LogError> {
        let path = self.path(dir);
        idem_runtime::atomic_file::replace(&path, format!("{}\n{offset}\n", self.header).as_bytes())
            .at("replacing", &path)
    }
}

/// Makes creations, renames and deletions of files in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .at("fsyncing directory", dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_round_trip_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rp = RECOVERY_POINT;
        assert_eq!(rp.read(dir.path()).expect("read"), StoredOffset::Missing);
        rp.write(dir.path(), 42).expect("write");
        assert_eq!(rp.read(dir.path()).expect("read"), StoredOffset::Valid(42));
        rp.write(dir.path(), 7).expect("overwrite");
        LOG_START.write(dir.path(), 3).expect("write");
        assert_eq!(rp.read(dir.path()).expect("read"), StoredOffset::Valid(7));
        assert_eq!(
            LOG_START.read(dir.path()).expect("read"),
            StoredOffset::Valid(3)
        );
        assert!(!dir.path().join("recovery-point.tmp").exists());
        assert!(rp.is_temp_file("recovery-point.tmp") && !rp.is_temp_file("log-start-offset.tmp"));
    }

    #[test]
    fn garbage_recovery_point_is_invalid_not_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        for garbage in [
            &b""[..],
            b"idem-recovery-point 1\n",
            b"idem-recovery-point 1\nabc\n",
            b"idem-recovery-point 1\n-3\n",
            b"something else\n12\n",
            b"\xff\xfe",
        ] {
            fs::write(RECOVERY_POINT.path(dir.path()), garbage).expect("write garbage");
            assert!(
                matches!(
                    RECOVERY_POINT.read(dir.path()).expect("read"),
                    StoredOffset::Invalid(_)
                ),
                "{garbage:?}"
            );
        }
    }
}
