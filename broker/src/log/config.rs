//! How a partition log is shaped and when it reaches the disk. One typed struct, with
//! documented defaults, that the broker's configuration fills in.

use std::fmt;
use std::str::FromStr;

/// When appended data is fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlushPolicy {
    /// Every append is on disk before it is acknowledged. The caller fsyncs through
    /// [`SyncPoint`](super::SyncPoint) after releasing the log, so one fsync covers every
    /// batch appended meanwhile (group commit). The default.
    #[default]
    EveryAppend,
    /// The log fsyncs itself once this many milliseconds have passed since the last
    /// flush (checked on append and by [`PartitionLog::flush_if_due`](super::PartitionLog::flush_if_due)).
    IntervalMs(u64),
    /// The log never fsyncs on its own: only `flush`, `close` and explicit syncs do.
    Never,
}

impl fmt::Display for FlushPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlushPolicy::EveryAppend => f.write_str("every-append"),
            FlushPolicy::IntervalMs(ms) => write!(f, "interval:{ms}"),
            FlushPolicy::Never => f.write_str("never"),
        }
    }
}

/// A flush policy string that is not `every-append`, `interval:<ms>` or `never`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid flush policy {0:?}: expected \"every-append\", \"interval:<ms>\" or \"never\"")]
pub struct ParseFlushPolicyError(pub String);

impl FromStr for FlushPolicy {
    type Err = ParseFlushPolicyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || ParseFlushPolicyError(s.to_string());
        match s.trim() {
            "every-append" => Ok(FlushPolicy::EveryAppend),
            "never" => Ok(FlushPolicy::Never),
            other => match other.strip_prefix("interval:") {
                Some(ms) => match ms.trim().parse::<u64>() {
                    Ok(ms) if ms > 0 => Ok(FlushPolicy::IntervalMs(ms)),
                    _ => Err(invalid()),
                },
                None => Err(invalid()),
            },
        }
    }
}

/// Shape and durability of one partition log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// A new segment is rolled before an append that would make the active segment
    /// larger than this (default 64 MiB). A single batch larger than this still gets a
    /// segment of its own. Capped at `u32::MAX`, the reach of an index position.
    pub segment_bytes: u64,
    /// Bytes of appended data between two sparse index entries (default 4096).
    pub index_interval_bytes: u32,
    /// When appended data is fsynced (default [`FlushPolicy::EveryAppend`]).
    pub flush: FlushPolicy,
}

impl LogConfig {
    pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
    pub const DEFAULT_INDEX_INTERVAL_BYTES: u32 = 4096;

    /// The segment size actually enforced: index positions are `u32`.
    pub(crate) fn effective_segment_bytes(&self) -> u64 {
        self.segment_bytes.clamp(1, u64::from(u32::MAX))
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: Self::DEFAULT_SEGMENT_BYTES,
            index_interval_bytes: Self::DEFAULT_INDEX_INTERVAL_BYTES,
            flush: FlushPolicy::EveryAppend,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_policy_parses_what_it_displays() {
        for policy in [
            FlushPolicy::EveryAppend,
            FlushPolicy::IntervalMs(250),
            FlushPolicy::Never,
        ] {
            assert_eq!(policy.to_string().parse::<FlushPolicy>(), Ok(policy));
        }
        assert_eq!("interval:1000".parse(), Ok(FlushPolicy::IntervalMs(1000)));
    }

    #[test]
    fn flush_policy_rejects_nonsense() {
        for bad in [
            "",
            "always",
            "interval:",
            "interval:abc",
            "interval:0",
            "interval:-5",
        ] {
            assert!(bad.parse::<FlushPolicy>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn default_config_is_64_mib_segments_4_kib_index_every_append() {
        let config = LogConfig::default();
        assert_eq!(config.segment_bytes, 64 * 1024 * 1024);
        assert_eq!(config.index_interval_bytes, 4096);
        assert_eq!(config.flush, FlushPolicy::EveryAppend);
    }
}
