//! The one error type of producer-id allocation. [`PidStoreError::is_retriable`] tells the
//! caller whether asking again later can succeed.

/// Why no producer id block could be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PidStoreError {
    /// The store cannot be reached or did not answer in time. Retriable.
    #[error("producer id store unavailable: {0}")]
    Unavailable(String),
    /// The next block would pass `i64::MAX`. Fatal: no producer id can be handed out again.
    #[error("all producer ids are exhausted")]
    Exhausted,
    /// The stored block key holds something that is not a valid block. Fatal until an
    /// operator repairs the key.
    #[error("producer id store is corrupt: {0}")]
    Corrupt(String),
    /// The store failed locally (disk, embedded database). Fatal.
    #[error("producer id store failed: {0}")]
    Storage(String),
}

impl PidStoreError {
    /// Whether the same request may succeed later without operator action.
    pub fn is_retriable(&self) -> bool {
        matches!(self, PidStoreError::Unavailable(_))
    }
}
