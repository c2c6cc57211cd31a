//! idem's chaos verification: the history a randomized workload writes ([`history`]),
//! to be judged by a checker that reads only that history, never broker internals.

pub mod history;

pub use history::{read_history, HistoryError, HistoryWriter, Op};
