//! The `recovery-point` file: the offset below which the log is known to be on disk.
//! It is replaced atomically (temp file, fsync, rename, fsync of the directory), so a
//! crash leaves either the old or the new value, never a torn one. Recovery trusts the
//! segments below it and scans everything from the segment that contains it.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::error::{IoContext, LogError};

pub(crate) const FILE_NAME: &str = "recovery-point";
pub(crate) const TEMP_FILE_NAME: &str = "recovery-point.tmp";
const HEADER: &str = "idem-recovery-point 1";

/// What the recovery-point file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RecoveryPoint {
    /// No file: nothing is known to be flushed, scan every segment.
    Missing,
    Valid(i64),
    /// The file exists but cannot be parsed; treated like `Missing`.
    Invalid(String),
}

pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

pub(crate) fn read(dir: &Path) -> Result<RecoveryPoint, LogError> {
    let path = path(dir);
    let text = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(RecoveryPoint::Missing),
        Err(e) => return Err(e).at("reading", &path),
    };
    Ok(parse(&text))
}

fn parse(bytes: &[u8]) -> RecoveryPoint {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return RecoveryPoint::Invalid("not UTF-8".into());
    };
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return RecoveryPoint::Invalid(format!("first line is not {HEADER:?}"));
    }
    let offset = match lines.next().map(str::parse::<i64>) {
        Some(Ok(offset)) if offset >= 0 => offset,
        _ => return RecoveryPoint::Invalid("second line is not an offset".into()),
    };
    if lines.next().is_some() {
        return RecoveryPoint::Invalid("trailing lines".into());
    }
    RecoveryPoint::Valid(offset)
}

/// Durably replaces the recovery point with `offset`.
pub(crate) fn write(dir: &Path, offset: i64) -> Result<(), LogError> {
    let temp = dir.join(TEMP_FILE_NAME);
    let mut file = File::create(&temp).at("creating", &temp)?;
    file.write_all(format!("{HEADER}\n{offset}\n").as_bytes())
        .at("writing", &temp)?;
    file.sync_all().at("fsyncing", &temp)?;
    drop(file);
    let target = path(dir);
    fs::rename(&temp, &target).at("renaming into place", &target)?;
    sync_dir(dir)
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
    fn recovery_point_round_trips() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read(dir.path()).expect("read"), RecoveryPoint::Missing);
        write(dir.path(), 42).expect("write");
        assert_eq!(read(dir.path()).expect("read"), RecoveryPoint::Valid(42));
        write(dir.path(), 7).expect("overwrite");
        assert_eq!(read(dir.path()).expect("read"), RecoveryPoint::Valid(7));
        assert!(!dir.path().join(TEMP_FILE_NAME).exists());
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
            fs::write(path(dir.path()), garbage).expect("write garbage");
            assert!(
                matches!(read(dir.path()).expect("read"), RecoveryPoint::Invalid(_)),
                "{garbage:?}"
            );
        }
    }
}
