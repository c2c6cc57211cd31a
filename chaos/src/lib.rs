//! idem's chaos verification: the history a randomized workload writes ([`history`])
//! and a checker that reads only that history ([`checker`]), never broker internals.
//! `idem-chaos check HISTORY.jsonl` runs the checker on a file.

pub mod checker;
pub mod history;

pub use checker::{check, Anomalies, Stats, Verdict};
pub use history::{read_history, HistoryError, HistoryWriter, Op};
