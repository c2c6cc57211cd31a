//! The flags of `idem bench produce` and `idem bench e2e`, and their parsers: durations
//! such as `30s`, `500ms` or `2m`, and mode lists such as `exactly-once,transactional`
//! or `all`.

use std::path::PathBuf;
use std::time::Duration;

use idem_broker::log::FlushPolicy;

use super::modes::Mode;

/// What every bench shares: the load, where it runs and how it is reported.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Bytes of each record's value (at least the 20-byte stamp every value starts with).
    #[arg(long, default_value_t = 1024)]
    pub record_size: usize,
    /// Partitions of each topic the bench creates.
    #[arg(long, default_value_t = 6)]
    pub partitions: i32,
    /// Replicas per partition of each topic the bench creates.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i32,
    /// How long each mode sends (`30s`, `500ms`, `2m`); default 10s unless `--records`.
    #[arg(long, value_parser = parse_duration, conflicts_with = "records")]
    pub duration: Option<Duration>,
    /// Send this many records per mode (across all producers) instead of a duration.
    #[arg(long)]
    pub records: Option<u64>,
    /// How long a partition's open batch waits for more records, in milliseconds
    /// (Kafka's linger.ms); default: the SDK's (5).
    #[arg(long)]
    pub linger_ms: Option<u64>,
    /// A batch is sealed once it holds about this many bytes (Kafka's batch.size);
    /// default: the SDK's (262144).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Commit interval of the transactional mode, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub txn_ms: u64,
    /// The transactional mode commits with `commit_and_begin` (the commit goes on in
    /// the background while the next transaction is sent) instead of waiting in
    /// `commit` and then calling `begin`, as a Kafka producer does.
    #[arg(long)]
    pub txn_pipelined: bool,
    /// Start an in-process `idem dev` (broker and coordinator) in a temporary directory
    /// instead of using `--bootstrap`.
    #[arg(long)]
    pub embedded: bool,
    /// Where `--embedded` makes its temporary directory (default: the system's).
    #[arg(long, requires = "embedded")]
    pub data_dir: Option<PathBuf>,
    /// The embedded broker's flush policy: `every-append` (the default: each
    /// acknowledged batch is on disk, group commit) or `never` (leave it to the OS, like
    /// Kafka's default, which its published figures use).
    #[arg(long, requires = "embedded", default_value = "every-append")]
    pub flush: FlushPolicy,
    /// Print one JSON document on stdout and nothing else; no progress bar.
    #[arg(long)]
    pub json: bool,
    /// Topics are named `<prefix>-<mode>-<unix ms>`.
    #[arg(long, default_value = "bench")]
    pub topic_prefix: String,
}

impl LoadArgs {
    /// The producer's linger, when `--linger-ms` overrides the SDK's.
    pub fn linger(&self) -> Option<Duration> {
        self.linger_ms.map(Duration::from_millis)
    }
}

/// How long or how much a run sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    Duration(Duration),
    Records(u64),
}

impl LoadArgs {
    pub fn amount(&self) -> Amount {
        match (self.records, self.duration) {
            (Some(n), _) => Amount::Records(n),
            (None, Some(d)) => Amount::Duration(d),
            (None, None) => Amount::Duration(Duration::from_secs(10)),
        }
    }

    /// Refuses settings no run can use, before anything starts.
    pub fn validate(&self) -> anyhow::Result<()> {
        let min = super::payload::STAMP_LEN;
        anyhow::ensure!(
            self.record_size >= min,
            "--record-size must be at least {min} bytes (each value starts with a stamp of producer, sequence and send time), got {}",
            self.record_size
        );
        anyhow::ensure!(self.partitions >= 1, "--partitions must be at least 1");
        anyhow::ensure!(
            self.replication_factor >= 1,
            "--replication-factor must be at least 1"
        );
        anyhow::ensure!(self.records != Some(0), "--records must be at least 1");
        anyhow::ensure!(
            self.duration.is_none_or(|d| !d.is_zero()),
            "--duration must be positive"
        );
        anyhow::ensure!(self.txn_ms >= 1, "--txn-ms must be at least 1");
        anyhow::ensure!(
            self.batch_size.is_none_or(|b| b >= self.record_size),
            "--batch-size must hold at least one record of --record-size bytes"
        );
        anyhow::ensure!(
            !self.topic_prefix.is_empty(),
            "--topic-prefix must not be empty"
        );
        Ok(())
    }
}

/// Parses `30s`, `500ms`, `2m`, `1h`, `1.5s`; a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 30s, 500ms or 2m"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use ms, s, m or h"
            ))
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

/// The modes a run compares, in the order they run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeList(pub Vec<Mode>);

/// Parses `all` or a comma list of modes; keeps the order given, drops repeats.
pub fn parse_modes(text: &str) -> Result<ModeList, String> {
    if text.trim().eq_ignore_ascii_case("all") {
        return Ok(ModeList(Mode::ALL.to_vec()));
    }
    let mut modes = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let mode = name.parse::<Mode>()?;
        if !modes.contains(&mode) {
            modes.push(mode);
        }
    }
    if modes.is_empty() {
        return Err("no mode given: name at least one, or `all`".into());
    }
    Ok(ModeList(modes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_the_usual_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn modes_parse_lists_and_all() {
        assert_eq!(parse_modes("all"), Ok(ModeList(Mode::ALL.to_vec())));
        assert_eq!(
            parse_modes("transactional, exactly-once,transactional"),
            Ok(ModeList(vec![Mode::Transactional, Mode::ExactlyOnce]))
        );
        assert!(parse_modes("twice").is_err());
        assert!(parse_modes(" , ").is_err());
    }
}
