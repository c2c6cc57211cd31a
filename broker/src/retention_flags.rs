//! The broker's log-lifecycle flags (Kafka's `log.retention.*`, `log.roll.ms` and
//! `log.retention.check.interval.ms`): the defaults of topics that set no retention of
//! their own, and how often the retention duty looks. One set of flags for
//! `idem-broker` and `idem dev`.

use idem_runtime::config_error::ConfigError;

use crate::topic_config::TopicDefaults;

const WEEK_MS: i64 = 7 * 24 * 3600 * 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct RetentionFlags {
    /// Default `retention.ms`: sealed segments whose newest record is older are
    /// deleted; -1 keeps them forever.
    #[arg(long, env = "IDEM_LOG_RETENTION_MS", default_value_t = WEEK_MS, allow_negative_numbers = true)]
    pub log_retention_ms: i64,

    /// Default `retention.bytes` per partition: the oldest sealed segments are deleted
    /// while the log is larger; -1 means no limit.
    #[arg(long, env = "IDEM_LOG_RETENTION_BYTES", default_value_t = -1, allow_negative_numbers = true)]
    pub log_retention_bytes: i64,

    /// Default `segment.ms`: the active segment rolls once its first record is this
    /// old, so time retention also reaches quiet partitions.
    #[arg(long, env = "IDEM_LOG_SEGMENT_MS", default_value_t = WEEK_MS as u64)]
    pub log_segment_ms: u64,

    /// How often each partition's retention is checked.
    #[arg(
        long,
        env = "IDEM_LOG_RETENTION_CHECK_INTERVAL_MS",
        default_value_t = 30_000
    )]
    pub log_retention_check_interval_ms: u64,
}

impl Default for RetentionFlags {
    fn default() -> Self {
        RetentionFlags {
            log_retention_ms: WEEK_MS,
            log_retention_bytes: -1,
            log_segment_ms: WEEK_MS as u64,
            log_retention_check_interval_ms: 30_000,
        }
    }
}

impl RetentionFlags {
    /// Refuses, naming the flag, values no topic could use.
    pub fn check(&self) -> Result<(), ConfigError> {
        ConfigError::unless(
            self.log_retention_ms >= -1,
            "--log-retention-ms",
            "must be -1 (forever) or more",
        )?;
        ConfigError::unless(
            self.log_retention_bytes >= -1,
            "--log-retention-bytes",
            "must be -1 (no limit) or more",
        )?;
        ConfigError::unless(
            self.log_segment_ms >= 1,
            "--log-segment-ms",
            "must be at least 1",
        )?;
        ConfigError::unless(
            self.log_retention_check_interval_ms >= 1,
            "--log-retention-check-interval-ms",
            "must be at least 1",
        )
    }

    /// The defaults of topics that do not set their own.
    pub fn topic_defaults(&self, segment_bytes: u64, max_message_bytes: usize) -> TopicDefaults {
        TopicDefaults {
            retention_ms: self.log_retention_ms,
            retention_bytes: self.log_retention_bytes,
            segment_ms: self.log_segment_ms,
            ..TopicDefaults::new(segment_bytes, max_message_bytes)
        }
    }
}
