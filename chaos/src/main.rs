//! `idem-chaos check HISTORY.jsonl`: prints the checker's verdict as JSON on stdout and
//! a one-line summary on stderr. Exit status: 0 valid, 1 anomalies found, 2 the history
//! could not be read (the message names the line). `idem-chaos plot REPORT_DIR` writes
//! `REPORT_DIR/timeline.svg`: 0 written, 1 drawing or writing failed, 2 unreadable input.

use std::fs::File;
use std::io::{self, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use idem_chaos::{check, read_history, write_timeline, Verdict};

#[derive(Parser)]
#[command(name = "idem-chaos", version, about = "idem chaos verification")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a history (JSON lines, see docs/reliability.md) for anomalies.
    Check {
        /// The history file.
        history: PathBuf,
    },
    /// Draw a run's report directory (history.jsonl, nemesis.jsonl) into timeline.svg.
    Plot {
        /// The report directory a chaos run wrote.
        report_dir: PathBuf,
    },
}

const VALID: u8 = 0;
const ANOMALIES: u8 = 1;
/// `plot`: the picture could not be drawn or written.
const NOT_DRAWN: u8 = 1;
const UNREADABLE: u8 = 2;

fn main() -> ExitCode {
    let Cli { command } = Cli::parse();
    match command {
        Command::Check { history } => run_check(&history),
        Command::Plot { report_dir } => run_plot(&report_dir),
    }
}

fn run_plot(report_dir: &Path) -> ExitCode {
    match write_timeline(report_dir) {
        Ok(picture) => {
            println!("{}", picture.display());
            ExitCode::from(VALID)
        }
        Err(err) => {
            eprintln!("idem-chaos: {err}");
            ExitCode::from(if err.is_unreadable_input() {
                UNREADABLE
            } else {
                NOT_DRAWN
            })
        }
    }
}

fn run_check(path: &Path) -> ExitCode {
    let ops = match load(path) {
        Ok(ops) => ops,
        Err(err) => {
            eprintln!("idem-chaos: {err}");
            return ExitCode::from(UNREADABLE);
        }
    };
    let verdict = check(&ops);
    let printed = serde_json::to_string_pretty(&verdict)
        .map_err(io::Error::from)
        .and_then(|json| writeln!(io::stdout().lock(), "{json}"));
    if let Err(err) = printed {
        eprintln!("idem-chaos: cannot print the verdict: {err}");
        return ExitCode::from(UNREADABLE);
    }
    eprintln!("{}", summary(path, &verdict));
    ExitCode::from(if verdict.valid { VALID } else { ANOMALIES })
}

/// The history, or why it cannot be read (the error names the line).
fn load(path: &Path) -> Result<Vec<idem_chaos::Op>, String> {
    let file = File::open(path).map_err(|err| format!("cannot open {}: {err}", path.display()))?;
    read_history(BufReader::new(file)).map_err(|err| format!("{}: {err}", path.display()))
}

fn summary(path: &Path, verdict: &Verdict) -> String {
    let stats = &verdict.stats;
    let events: usize = stats
        .ops
        .values()
        .flat_map(|by_type| by_type.values())
        .sum();
    let found: Vec<String> = verdict
        .anomalies
        .counts()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| format!("{kind} {n}"))
        .collect();
    format!(
        "{}: {} ({events} events; values sent {}, acked {}, unknown {}, read {}){}",
        path.display(),
        if verdict.valid { "valid" } else { "INVALID" },
        stats.values_sent,
        stats.values_acked,
        stats.values_unknown,
        stats.values_read,
        if found.is_empty() {
            String::new()
        } else {
            format!(": {}", found.join(", "))
        }
    )
}
