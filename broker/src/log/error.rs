//! Errors of the partition log. `Corrupt` and the I/O variants are storage failures the
//! broker cannot retry its way out of; `OffsetOutOfRange` and `NotBatchBoundary` are the
//! caller asking for something the log does not hold.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("log I/O error: {0}")]
    Io(#[from] io::Error),
    /// An I/O error with the operation and file it happened on.
    #[error("log I/O error while {op} {}: {source}", path.display())]
    IoAt {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("offset {offset} is outside the log [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    /// Stored data failed verification; it is never served.
    #[error("log data at offset {offset} is corrupt: {reason}")]
    Corrupt { offset: i64, reason: String },
    /// `truncate_to` was asked to cut inside a batch.
    #[error("offset {offset} is not the start of a batch")]
    NotBatchBoundary { offset: i64 },
    /// `append` was handed bytes that are not exactly one batch.
    #[error("invalid batch for append: {reason}")]
    InvalidBatch { reason: String },
}

impl LogError {
    /// True for failures of the disk or the stored data, as opposed to bad requests.
    pub fn is_storage_failure(&self) -> bool {
        matches!(
            self,
            LogError::Io(_) | LogError::IoAt { .. } | LogError::Corrupt { .. }
        )
    }
}

/// Attaches the operation and path to an I/O result.
pub(crate) trait IoContext<T> {
    fn at(self, op: &'static str, path: &std::path::Path) -> Result<T, LogError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, op: &'static str, path: &std::path::Path) -> Result<T, LogError> {
        self.map_err(|source| LogError::IoAt {
            op,
            path: path.to_path_buf(),
            source,
        })
    }
}
