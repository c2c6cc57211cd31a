//! **idem-chaos**, the chaos history and its checker. Depends on no idem crate: it
//! judges a history alone.
//! Every crate's place: docs/architecture.md, "Crates (workspace)".
//!
//! idem's chaos verification: the history a randomized workload writes ([`history`])
//! and a checker that reads only that history ([`checker`]), never broker internals.
//! `idem-chaos check HISTORY.jsonl` runs the checker on a file; `idem-chaos plot
//! REPORT_DIR` draws the run's [`timeline`] with its [`nemesis_log`]'s faults ([`plot`]).

pub mod checker;
pub mod history;
mod json_lines;
pub mod nemesis_log;
pub mod plot;
pub mod timeline;

pub use checker::{check, Anomalies, Stats, Verdict};
pub use history::{read_history, HistoryError, HistoryWriter, Op};
pub use json_lines::{Contents, JsonLinesError};
pub use nemesis_log::{read_nemesis_log, FaultInterval, NemesisLogError};
pub use plot::{write_timeline, PlotError};
pub use timeline::Timeline;
