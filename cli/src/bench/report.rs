//! The results of `idem bench produce`: one row per mode, as a table for people or as
//! `{"modes": [...]}` for machines. Throughput counts acknowledged records only (for a
//! transactional run, committed ones) over the mode's wall time, drain included. The
//! read-back columns are the verifying consumer's rate (records, and MB of values, per
//! second of its read); the memory column is the broker's peak resident set in the run.

use std::time::Duration;

use super::latency::Percentiles;
use super::memory::BrokerMemory;
use super::verify::{ReadOutcome, Verification};

pub const AT_LEAST_ONCE: &str = "at-least-once";

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ModeReport {
    pub mode: String,
    pub records_per_sec: f64,
    pub mb_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// `None` when the run is not verified (`--null`).
    pub verified: Option<bool>,
    /// Records acknowledged (committed, for a transactional run).
    pub records: u64,
    /// Records handed to `send`.
    pub sent: u64,
    pub failed: u64,
    pub aborted_transactions: u64,
    pub seconds: f64,
    /// This mode's records/s over at-least-once's, when at-least-once ran too.
    pub ratio_vs_at_least_once: Option<f64>,
    /// records/s of every round of this mode (`--rounds`), in run order; the row is the
    /// median one.
    pub round_records_per_sec: Vec<f64>,
    pub check: Option<Verification>,
    /// The verifying read-back: records per second of its read (`None`: not read back).
    pub read_records_per_sec: Option<f64>,
    /// The same in MB (10^6 bytes) of record values per second.
    pub read_mb_per_sec: Option<f64>,
    /// The broker's resident memory during the run, when it could be measured.
    pub broker_memory: Option<BrokerMemory>,
}

/// The measured part of a mode's row.
pub struct Measured {
    pub acked: u64,
    pub sent: u64,
    pub failed: u64,
    pub aborted_transactions: u64,
    pub record_size: usize,
    pub elapsed: Duration,
    pub latency: Percentiles,
}

impl ModeReport {
    /// A row with nothing measured (tests build rows from it).
    #[cfg(test)]
    pub fn empty() -> Self {
        ModeReport {
            mode: String::new(),
            records_per_sec: 0.0,
            mb_per_sec: 0.0,
            p50_ms: 0.0,
            p99_ms: 0.0,
            p999_ms: 0.0,
            max_ms: 0.0,
            verified: None,
            records: 0,
            sent: 0,
            failed: 0,
            aborted_transactions: 0,
            seconds: 0.0,
            ratio_vs_at_least_once: None,
            round_records_per_sec: Vec::new(),
            check: None,
            read_records_per_sec: None,
            read_mb_per_sec: None,
            broker_memory: None,
        }
    }

    pub fn new(mode: String, m: Measured, check: Option<(ReadOutcome, bool)>) -> Self {
        let seconds = m.elapsed.as_secs_f64().max(1e-9);
        let records_per_sec = m.acked as f64 / seconds;
        let read_seconds = check.map(|(read, _)| read.elapsed.as_secs_f64().max(1e-9));
        ModeReport {
            mode,
            records_per_sec,
            mb_per_sec: records_per_sec * m.record_size as f64 / 1e6,
            p50_ms: m.latency.p50_ms,
            p99_ms: m.latency.p99_ms,
            p999_ms: m.latency.p999_ms,
            max_ms: m.latency.max_ms,
            verified: check.map(|(_, passed)| passed),
            records: m.acked,
            sent: m.sent,
            failed: m.failed,
            aborted_transactions: m.aborted_transactions,
            seconds,
            ratio_vs_at_least_once: None,
            round_records_per_sec: vec![records_per_sec],
            check: check.map(|(read, _)| read.verification),
            read_records_per_sec: check
                .zip(read_seconds)
                .map(|((read, _), s)| read.verification.read as f64 / s),
            read_mb_per_sec: check
                .zip(read_seconds)
                .map(|((read, _), s)| read.value_bytes as f64 / s / 1e6),
            broker_memory: None,
        }
    }
}

/// One row per mode (in first-run order) from the rows of every round: the round with
/// the median records/s, carrying every round's rate; verified only if every round was.
pub fn median_of_rounds(rows: Vec<ModeReport>) -> Vec<ModeReport> {
    let mut by_mode: Vec<(String, Vec<ModeReport>)> = Vec::new();
    for row in rows {
        match by_mode.iter_mut().find(|(mode, _)| *mode == row.mode) {
            Some((_, rounds)) => rounds.push(row),
            None => by_mode.push((row.mode.clone(), vec![row])),
        }
    }
    by_mode
        .into_iter()
        .filter_map(|(_, mut rounds)| {
            let rates: Vec<f64> = rounds.iter().map(|r| r.records_per_sec).collect();
            let verified = rounds
                .iter()
                .try_fold(true, |all, r| Some(all && r.verified?));
            rounds.sort_by(|a, b| a.records_per_sec.total_cmp(&b.records_per_sec));
            let middle = (rounds.len() - 1) / 2;
            let mut median = rounds.into_iter().nth(middle)?;
            median.round_records_per_sec = rates;
            median.verified = verified;
            Some(median)
        })
        .collect()
}

/// `a`'s throughput over `b`'s: the median of the per-round ratios when both ran the
/// same rounds, else the ratio of their rows.
pub fn paired_ratio(a: &ModeReport, b: &ModeReport) -> Option<f64> {
    let (x, y) = (&a.round_records_per_sec, &b.round_records_per_sec);
    let mut ratios: Vec<f64> = if x.len() == y.len() && !x.is_empty() {
        x.iter()
            .zip(y)
            .filter(|(_, d)| **d > 0.0)
            .map(|(n, d)| n / d)
            .collect()
    } else if b.records_per_sec > 0.0 {
        vec![a.records_per_sec / b.records_per_sec]
    } else {
        Vec::new()
    };
    ratios.sort_by(f64::total_cmp);
    let len = ratios.len();
    match len {
        0 => None,
        _ if len % 2 == 1 => Some(ratios[len / 2]),
        _ => Some((ratios[len / 2 - 1] + ratios[len / 2]) / 2.0),
    }
}

/// Fills in each row's ratio to at-least-once (paired per round), when that mode ran.
pub fn add_ratios(rows: &mut [ModeReport]) {
    let Some(base) = rows.iter().find(|r| r.mode == AT_LEAST_ONCE).cloned() else {
        return;
    };
    for row in rows {
        row.ratio_vs_at_least_once = paired_ratio(row, &base);
    }
}

#[derive(serde::Serialize)]
struct Document<'a, T: serde::Serialize> {
    modes: &'a [ModeReport],
    targets: &'a T,
}

/// The rows and the target checks (see `targets.rs`) as one JSON document.
pub fn json<T: serde::Serialize>(rows: &[ModeReport], targets: &T) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(&Document {
        modes: rows,
        targets,
    })?)
}

pub fn table(rows: &[ModeReport]) -> String {
    let with_ratio = rows.iter().any(|r| r.ratio_vs_at_least_once.is_some());
    let with_read = rows.iter().any(|r| r.read_records_per_sec.is_some());
    let with_memory = rows.iter().any(|r| r.broker_memory.is_some());
    let mut out = format!(
        "{:<32} {:>11} {:>9} {:>9} {:>9} {:>9}",
        "mode", "records/s", "MB/s", "p50 ms", "p99 ms", "p99.9 ms"
    );
    if with_ratio {
        out.push_str(&format!(" {:>16}", "vs at-least-once"));
    }
    if with_read {
        out.push_str(&format!(" {:>11} {:>9}", "read rec/s", "read MB/s"));
    }
    if with_memory {
        out.push_str(&format!(" {:>13}", "peak RSS MiB"));
    }
    out.push_str("  verified\n");
    for r in rows {
        out.push_str(&format!(
            "{:<32} {:>11.0} {:>9.1} {:>9.2} {:>9.2} {:>9.2}",
            r.mode, r.records_per_sec, r.mb_per_sec, r.p50_ms, r.p99_ms, r.p999_ms
        ));
        if with_ratio {
            let ratio = r
                .ratio_vs_at_least_once
                .map_or("-".to_string(), |x| format!("{x:.3}"));
            out.push_str(&format!(" {ratio:>16}"));
        }
        if with_read {
            let (records, mb) = match (r.read_records_per_sec, r.read_mb_per_sec) {
                (Some(records), Some(mb)) => (format!("{records:.0}"), format!("{mb:.1}")),
                _ => ("-".into(), "-".into()),
            };
            out.push_str(&format!(" {records:>11} {mb:>9}"));
        }
        if with_memory {
            let peak = r.broker_memory.as_ref().map_or("-".to_string(), |m| {
                let mark = if m.peak_since_process_start { "*" } else { "" };
                format!("{:.0}{mark}", m.rss_peak_mib)
            });
            out.push_str(&format!(" {peak:>13}"));
        }
        out.push_str(&format!("  {}", verdict(r)));
        if r.round_records_per_sec.len() > 1 {
            let (lo, hi) = r
                .round_records_per_sec
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
            out.push_str(&format!("  [rounds {lo:.0}..{hi:.0}]"));
        }
        out.push('\n');
    }
    out
}

fn verdict(r: &ModeReport) -> String {
    let (Some(passed), Some(v)) = (r.verified, r.check) else {
        return "n/a".into();
    };
    let mut notes = Vec::new();
    for (count, what) in [
        (v.lost, "lost"),
        (v.duplicates, "duplicates"),
        (v.out_of_order, "out of order"),
        (v.unacked_read, "unacked read"),
        (v.foreign, "foreign"),
    ] {
        if count > 0 {
            notes.push(format!("{count} {what}"));
        }
    }
    if v.stalled {
        notes.push("read stalled".into());
    }
    match (passed, notes.is_empty()) {
        (true, true) => "yes".into(),
        (true, false) => format!("yes ({})", notes.join(", ")),
        (false, _) => format!("NO ({})", notes.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(mode: &str, acked: u64) -> ModeReport {
        let read = ReadOutcome {
            verification: Verification {
                read: acked,
                ..Verification::default()
            },
            value_bytes: acked * 1000,
            elapsed: Duration::from_secs(1),
        };
        ModeReport::new(
            mode.into(),
            Measured {
                acked,
                sent: acked,
                failed: 0,
                aborted_transactions: 0,
                record_size: 1000,
                elapsed: Duration::from_secs(2),
                latency: Percentiles::default(),
            },
            Some((read, true)),
        )
    }

    #[test]
    fn rates_and_ratios_follow_at_least_once() {
        let mut rows = vec![row("exactly-once", 1000), row(AT_LEAST_ONCE, 2000)];
        add_ratios(&mut rows);
        assert_eq!(rows[0].records_per_sec, 500.0);
        assert_eq!(rows[0].mb_per_sec, 0.5);
        assert_eq!(rows[0].ratio_vs_at_least_once, Some(0.5));
        assert!(table(&rows).contains("vs at-least-once"));
        let doc: serde_json::Value =
            serde_json::from_str(&json(&rows, &[(); 0]).expect("json")).expect("valid json");
        let first = &doc["modes"][0];
        for key in [
            "mode",
            "records_per_sec",
            "mb_per_sec",
            "p50_ms",
            "p99_ms",
            "p999_ms",
            "verified",
            "read_records_per_sec",
            "read_mb_per_sec",
        ] {
            assert!(!first[key].is_null(), "{key}");
        }
    }

    #[test]
    fn the_read_back_rate_is_its_records_and_bytes_over_its_own_time() {
        let mut rows = vec![row("exactly-once", 1000)];
        assert_eq!(rows[0].records_per_sec, 500.0, "over the 2 s of producing");
        assert_eq!(
            rows[0].read_records_per_sec,
            Some(1000.0),
            "over the 1 s read"
        );
        assert_eq!(rows[0].read_mb_per_sec, Some(1.0));
        assert!(!table(&rows).contains("peak RSS"), "nothing measured");
        rows[0].broker_memory = Some(BrokerMemory {
            process: "pid 1".into(),
            rss_start_mib: 10.0,
            rss_peak_mib: 123.4,
            rss_end_mib: 20.0,
            peak_since_process_start: false,
        });
        let table = table(&rows);
        assert!(table.contains("read rec/s") && table.contains("peak RSS MiB"));
        assert!(table.contains(" 123 "), "{table}");
        let doc: serde_json::Value =
            serde_json::from_str(&json(&rows, &[(); 0]).expect("json")).expect("valid json");
        assert_eq!(doc["modes"][0]["broker_memory"]["rss_peak_mib"], 123.4);
    }

    #[test]
    fn documents_written_before_the_read_back_columns_still_load() {
        let mut old = serde_json::to_value(row("exactly-once", 1000)).expect("json");
        let fields = old.as_object_mut().expect("an object");
        for key in ["read_records_per_sec", "read_mb_per_sec", "broker_memory"] {
            fields.remove(key);
        }
        let back: ModeReport = serde_json::from_value(old).expect("loads");
        assert_eq!(back.read_records_per_sec, None);
        assert_eq!(back.broker_memory, None);
    }

    #[test]
    fn rounds_reduce_to_the_median_round_and_all_must_verify() {
        let mut failed = row("exactly-once", 3000);
        failed.verified = Some(false);
        let rows = median_of_rounds(vec![
            row("exactly-once", 1000),
            row(AT_LEAST_ONCE, 2000),
            failed,
            row(AT_LEAST_ONCE, 4000),
            row("exactly-once", 2000),
            row(AT_LEAST_ONCE, 1000),
        ]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].mode, "exactly-once");
        assert_eq!(rows[0].records_per_sec, 1000.0, "median of 500, 1500, 1000");
        assert_eq!(rows[0].round_records_per_sec, vec![500.0, 1500.0, 1000.0]);
        assert_eq!(rows[0].verified, Some(false), "one round failed");
        assert_eq!(rows[1].records_per_sec, 1000.0);
        assert_eq!(rows[1].verified, Some(true));
    }

    #[test]
    fn without_at_least_once_there_is_no_ratio_column() {
        let mut rows = vec![row("exactly-once", 1000)];
        add_ratios(&mut rows);
        assert_eq!(rows[0].ratio_vs_at_least_once, None);
        assert!(!table(&rows).contains("vs at-least-once"));
    }
}
