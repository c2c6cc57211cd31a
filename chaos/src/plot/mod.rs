//! `REPORT_DIR/timeline.svg`, the picture of a chaos run: [`write_timeline`] reads the
//! report's `history.jsonl` and `nemesis.jsonl` (missing: no faults), builds the
//! [`Timeline`](crate::timeline::Timeline) and writes [`svg::render`]'s drawing of it.
//! The I/O shell around two pure steps; errors say which file and whether it was input.

mod legend;
pub mod svg;

use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};

use crate::history::{read_history, HistoryError};
use crate::nemesis_log::{read_nemesis_log, FaultInterval, NemesisLogError};
use crate::timeline::Timeline;

/// The history a run wrote, in its report directory.
pub const HISTORY_FILE: &str = "history.jsonl";
/// The faults a run injected, in its report directory.
pub const NEMESIS_FILE: &str = "nemesis.jsonl";
/// The picture [`write_timeline`] writes into the report directory.
pub const TIMELINE_FILE: &str = "timeline.svg";

/// Why a report could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("cannot open {}: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("{}: {source}", path.display())]
    History { path: PathBuf, source: HistoryError },
    #[error("{}: {source}", path.display())]
    Nemesis {
        path: PathBuf,
        source: NemesisLogError,
    },
    #[error("cannot draw the timeline: {0}")]
    Draw(String),
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
}

/// The font of every text in the picture (SVG text, rendered by the viewer).
const FONT: &str = "sans-serif";

/// A plotters drawing error as ours.
fn draw_error(err: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(err.to_string())
}

impl PlotError {
    /// The report's files are missing or malformed (as opposed to drawing or writing
    /// the picture failing).
    pub fn is_unreadable_input(&self) -> bool {
        matches!(
            self,
            PlotError::Open { .. } | PlotError::History { .. } | PlotError::Nemesis { .. }
        )
    }
}

/// Draws the run in `report_dir` into `report_dir/timeline.svg` and returns that path.
/// Titled with the directory's name (e.g. `kill-seed1`).
pub fn write_timeline(report_dir: &Path) -> Result<PathBuf, PlotError> {
    let history_path = report_dir.join(HISTORY_FILE);
    let history = File::open(&history_path).map_err(|source| PlotError::Open {
        path: history_path.clone(),
        source,
    })?;
    let ops = read_history(BufReader::new(history)).map_err(|source| PlotError::History {
        path: history_path,
        source,
    })?;
    let faults = read_faults(&report_dir.join(NEMESIS_FILE))?;
    let timeline = Timeline::build(&ops, &faults);
    let title = report_dir
        .canonicalize()
        .unwrap_or_else(|_| report_dir.to_path_buf())
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "chaos run".to_owned());
    let picture = svg::render(&timeline, &title)?;
    let out = report_dir.join(TIMELINE_FILE);
    std::fs::write(&out, picture).map_err(|source| PlotError::Write {
        path: out.clone(),
        source,
    })?;
    Ok(out)
}

/// The nemesis log at `path`; a run without one injected no faults.
fn read_faults(path: &Path) -> Result<Vec<FaultInterval>, PlotError> {
    match File::open(path) {
        Ok(file) => read_nemesis_log(BufReader::new(file)).map_err(|source| PlotError::Nemesis {
            path: path.to_path_buf(),
            source,
        }),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(PlotError::Open {
            path: path.to_path_buf(),
            source,
        }),
    }
}
