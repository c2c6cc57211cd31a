//! `idem bench report FILE...`: one table from the `--json` documents of several
//! `bench produce` runs, as if they were rounds of one run. For benches that need a
//! fresh cluster per run (`scripts/bench-cluster.sh --fresh`), where one process cannot
//! restart the cluster between modes. Rows keep their file order, so the n-th row of a
//! mode pairs with the n-th row of another for the per-round ratios.

use std::path::PathBuf;

use anyhow::Context;

use super::report::{self, ModeReport};
use super::targets;

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// `idem bench produce --json` outputs, in the order they were run.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Deserialize)]
struct Document {
    modes: Vec<ModeReport>,
}

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for file in &args.files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let document: Document = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not the --json output of idem bench produce",
                file.display()
            )
        })?;
        // Each file's row stands for one round; its own rounds, if any, are not kept.
        rows.extend(document.modes.into_iter().map(|mut row| {
            row.round_records_per_sec = vec![row.records_per_sec];
            row
        }));
    }
    let mut rows = report::median_of_rounds(rows);
    report::add_ratios(&mut rows);
    let checks = targets::check(&rows);
    if args.json {
        println!("{}", report::json(&rows, &checks)?);
    } else {
        print!("{}{}", report::table(&rows), targets::table(&checks));
    }
    Ok(())
}
