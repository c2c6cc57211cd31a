//! Who saw an anomaly: the operation of the history that observed or wrote the value an
//! anomaly is about, so a report points at concrete events.

use serde::Serialize;

/// An operation that observed or wrote something; observers sort in history order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Observer {
    /// The index of its event in the history: the invocation of a write, the
    /// completion of a read or of an acknowledgement.
    pub index: u64,
    pub process: String,
    pub f: &'static str,
}
