//! Per-topic settings (Kafka's topic configs): the values a topic overrides, the
//! broker's defaults for the rest, and the rule each value must follow. A topic records
//! only its overrides, so a changed broker default reaches every topic that did not set
//! its own. Pure: parsing, validation and resolution; the catalog stores the overrides
//! and the partitions act on the resolved [`TopicSettings`].

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub const RETENTION_MS: &str = "retention.ms";
pub const RETENTION_BYTES: &str = "retention.bytes";
pub const SEGMENT_BYTES: &str = "segment.bytes";
pub const SEGMENT_MS: &str = "segment.ms";
pub const CLEANUP_POLICY: &str = "cleanup.policy";
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
pub const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
pub const MIN_COMPACTION_LAG_MS: &str = "min.compaction.lag.ms";
pub const DELETE_RETENTION_MS: &str = "delete.retention.ms";

/// What a value of one key must be.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// An integer in `min..=max`.
    Integer { min: i64, max: i64 },
    /// `delete`, `compact`, or both separated by a comma.
    CleanupPolicy,
}

/// Every key a topic may set, with its rule. The smallest segment is 1 KiB (tests and
/// tiny topics roll often); index positions are `u32`, so segments stop at 2 GiB.
const KEYS: &[(&str, Rule)] = &[
    (
        RETENTION_MS,
        Rule::Integer {
            min: -1,
            max: i64::MAX,
        },
    ),
    (
        RETENTION_BYTES,
        Rule::Integer {
            min: -1,
            max: i64::MAX,
        },
    ),
    (
        SEGMENT_BYTES,
        Rule::Integer {
            min: 1024,
            max: i32::MAX as i64,
        },
    ),
    (
        SEGMENT_MS,
        Rule::Integer {
            min: 1,
            max: i64::MAX,
        },
    ),
    (CLEANUP_POLICY, Rule::CleanupPolicy),
    (
        MIN_INSYNC_REPLICAS,
        Rule::Integer {
            min: 1,
            max: i32::MAX as i64,
        },
    ),
    (
        MAX_MESSAGE_BYTES,
        Rule::Integer {
            min: 1,
            max: i32::MAX as i64,
        },
    ),
    (
        MIN_COMPACTION_LAG_MS,
        Rule::Integer {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        DELETE_RETENTION_MS,
        Rule::Integer {
            min: 0,
            max: i64::MAX,
        },
    ),
];

/// A topic setting refused, naming the key (and the value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicConfigError {
    #[error("unknown topic config {key:?}; known: {}", known_keys())]
    UnknownKey { key: String },
    #[error("topic config {key}={value:?} is invalid: {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: String,
    },
    #[error("topic config {key:?} is given more than once")]
    Repeated { key: String },
}

fn known_keys() -> String {
    KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
}

fn rule_of(key: &str) -> Result<Rule, TopicConfigError> {
    KEYS.iter()
        .find(|(k, _)| *k == key)
        .map(|(_, rule)| *rule)
        .ok_or_else(|| TopicConfigError::UnknownKey {
            key: key.to_string(),
        })
}

/// What kind of value a key holds, as admin clients show it (Kafka's config types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// An integer that fits 32 bits.
    Int,
    /// A 64-bit integer.
    Long,
    /// Comma-separated names (`cleanup.policy`).
    List,
}

/// The kind of `key`'s values; `None` for a key no topic may set.
pub fn value_kind(key: &str) -> Option<ValueKind> {
    match rule_of(key).ok()? {
        Rule::Integer { max, .. } if max <= i64::from(i32::MAX) => Some(ValueKind::Int),
        Rule::Integer { .. } => Some(ValueKind::Long),
        Rule::CleanupPolicy => Some(ValueKind::List),
    }
}

/// Which cleanups a topic gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: CleanupPolicy = CleanupPolicy {
        delete: true,
        compact: false,
    };

    fn parse(value: &str) -> Option<CleanupPolicy> {
        let mut policy = CleanupPolicy {
            delete: false,
            compact: false,
        };
        for word in value.split(',').map(str::trim) {
            match word {
                "delete" if !policy.delete => policy.delete = true,
                "compact" if !policy.compact => policy.compact = true,
                _ => return None,
            }
        }
        Some(policy)
    }
}

impl fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.delete, self.compact) {
            (true, true) => f.write_str("compact,delete"),
            (false, true) => f.write_str("compact"),
            _ => f.write_str("delete"),
        }
    }
}

/// Checks one value against its key's rule; returns it in canonical spelling.
fn check(key: &str, value: &str) -> Result<String, TopicConfigError> {
    let bad = |expected: String| TopicConfigError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        expected,
    };
    match rule_of(key)? {
        Rule::Integer { min, max } => match value.trim().parse::<i64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n.to_string()),
            _ if max == i64::MAX => Err(bad(format!("an integer >= {min}"))),
            _ => Err(bad(format!("an integer from {min} to {max}"))),
        },
        Rule::CleanupPolicy => CleanupPolicy::parse(value)
            .map(|p| p.to_string())
            .ok_or_else(|| bad("\"delete\", \"compact\" or \"compact,delete\"".into())),
    }
}

/// The settings a topic overrides, each one valid for its key. Stored with the topic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TopicConfig {
    overrides: BTreeMap<String, String>,
}

impl TopicConfig {
    /// A config from `key=value` pairs; the first bad (or repeated) one refuses them all.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<TopicConfig, TopicConfigError> {
        let mut config = TopicConfig::default();
        for (key, value) in pairs {
            if config.get(key).is_some() {
                return Err(TopicConfigError::Repeated {
                    key: key.to_string(),
                });
            }
            config.set(key, value)?;
        }
        Ok(config)
    }

    /// This config with `ops` applied in order, or the first refusal (a key named
    /// twice is one). `self` is untouched either way: the caller stores the result only
    /// once the whole of it passes [`TopicConfig::check_for_topic`].
    pub fn altered(&self, ops: &[ConfigOp]) -> Result<TopicConfig, TopicConfigError> {
        let mut config = self.clone();
        let mut seen = std::collections::BTreeSet::new();
        for op in ops {
            if !seen.insert(op.key()) {
                return Err(TopicConfigError::Repeated {
                    key: op.key().to_string(),
                });
            }
            match op {
                ConfigOp::Set { key, value } => config.set(key, value)?,
                ConfigOp::Delete { key } => config.unset(key)?,
            }
        }
        Ok(config)
    }

    /// An internal topic's cleanup policy is its coordinator's to choose (Kafka lets
    /// operators alter internal topics, but a compacted state log that starts deleting
    /// loses state): refuses `altered` unless it keeps this config's policy.
    pub fn check_keeps_cleanup_policy(
        &self,
        altered: &TopicConfig,
    ) -> Result<(), TopicConfigError> {
        let (before, after) = (self.get(CLEANUP_POLICY), altered.get(CLEANUP_POLICY));
        if before == after {
            return Ok(());
        }
        Err(TopicConfigError::BadValue {
            key: CLEANUP_POLICY.to_string(),
            value: after.unwrap_or("(default)").to_string(),
            expected: format!(
                "unchanged ({}): an internal topic keeps its cleanup policy",
                before.unwrap_or("the default")
            ),
        })
    }

    /// Overrides `key`; nothing changes when the key or value is refused.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), TopicConfigError> {
        let value = check(key, value)?;
        self.overrides.insert(key.to_string(), value);
        Ok(())
    }

    /// Back to the broker's default for `key`.
    pub fn unset(&mut self, key: &str) -> Result<(), TopicConfigError> {
        rule_of(key)?;
        self.overrides.remove(key);
        Ok(())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.overrides.get(key).map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.overrides.is_empty()
    }

    /// The overrides, by key.
    pub fn overrides(&self) -> impl Iterator<Item = (&str, &str)> {
        self.overrides.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// An integer override; one that no longer parses (hand-edited catalog) counts as
    /// unset, with a warning, rather than stopping the broker.
    fn integer(&self, key: &str) -> Option<i64> {
        let value = self.get(key)?;
        match check(key, value).ok().and_then(|v| v.parse().ok()) {
            Some(n) => Some(n),
            None => {
                tracing::warn!(key, value, "ignoring an invalid stored topic config");
                None
            }
        }
    }

    /// Every setting in effect: the overrides over `defaults`.
    pub fn resolve(&self, defaults: &TopicDefaults) -> TopicSettings {
        let limit = |key: &str, default: i64| {
            let n = self.integer(key).unwrap_or(default);
            (n >= 0).then_some(n as u64)
        };
        TopicSettings {
            retention_ms: limit(RETENTION_MS, defaults.retention_ms),
            retention_bytes: limit(RETENTION_BYTES, defaults.retention_bytes),
            segment_bytes: self
                .integer(SEGMENT_BYTES)
                .map_or(defaults.segment_bytes, |n| n as u64),
            segment_ms: self
                .integer(SEGMENT_MS)
                .map_or(defaults.segment_ms, |n| n as u64),
            cleanup_policy: self
                .get(CLEANUP_POLICY)
                .and_then(CleanupPolicy::parse)
                .unwrap_or(CleanupPolicy::DELETE),
            min_insync_replicas: self.integer(MIN_INSYNC_REPLICAS).map(|n| n as i32),
            max_message_bytes: self
                .integer(MAX_MESSAGE_BYTES)
                .map_or(defaults.max_message_bytes, |n| n as usize),
            min_compaction_lag_ms: self
                .integer(MIN_COMPACTION_LAG_MS)
                .map_or(defaults.min_compaction_lag_ms, |n| n as u64),
            delete_retention_ms: self
                .integer(DELETE_RETENTION_MS)
                .map_or(defaults.delete_retention_ms, |n| n as u64),
        }
    }

    /// Every key with the value in effect and whether the topic set it (for describe).
    pub fn describe(&self, defaults: &TopicDefaults, min_insync_default: i32) -> Vec<ConfigEntry> {
        let settings = self.resolve(defaults);
        let or_unlimited = |v: Option<u64>| v.map_or("-1".to_string(), |n| n.to_string());
        KEYS.iter()
            .map(|(key, _)| {
                let value = match *key {
                    RETENTION_MS => or_unlimited(settings.retention_ms),
                    RETENTION_BYTES => or_unlimited(settings.retention_bytes),
                    SEGMENT_BYTES => settings.segment_bytes.to_string(),
                    SEGMENT_MS => settings.segment_ms.to_string(),
                    CLEANUP_POLICY => settings.cleanup_policy.to_string(),
                    MIN_INSYNC_REPLICAS => settings
                        .min_insync_replicas
                        .unwrap_or(min_insync_default)
                        .to_string(),
                    MAX_MESSAGE_BYTES => settings.max_message_bytes.to_string(),
                    MIN_COMPACTION_LAG_MS => settings.min_compaction_lag_ms.to_string(),
                    _ => settings.delete_retention_ms.to_string(),
                };
                ConfigEntry {
                    name: key.to_string(),
                    value,
                    from_topic: self.overrides.contains_key(*key),
                }
            })
            .collect()
    }

    /// Checks what needs the topic and the broker: `min.insync.replicas` within the
    /// replication factor and `max.message.bytes` within what the broker accepts.
    pub fn check_for_topic(
        &self,
        replication_factor: i32,
        broker_max_message_bytes: usize,
    ) -> Result<(), TopicConfigError> {
        let bad = |key: &str, expected: String| TopicConfigError::BadValue {
            key: key.to_string(),
            value: self.get(key).unwrap_or_default().to_string(),
            expected,
        };
        if let Some(min) = self.integer(MIN_INSYNC_REPLICAS) {
            if min > i64::from(replication_factor) {
                return Err(bad(
                    MIN_INSYNC_REPLICAS,
                    format!("at most the replication factor {replication_factor}"),
                ));
            }
        }
        if let Some(max) = self.integer(MAX_MESSAGE_BYTES) {
            if max as u64 > broker_max_message_bytes as u64 {
                return Err(bad(
                    MAX_MESSAGE_BYTES,
                    format!("at most the broker's limit {broker_max_message_bytes}"),
                ));
            }
        }
        Ok(())
    }
}

/// One change of IncrementalAlterConfigs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOp {
    Set {
        key: String,
        value: String,
    },
    /// Back to the broker's default.
    Delete {
        key: String,
    },
}

impl ConfigOp {
    pub fn key(&self) -> &str {
        match self {
            ConfigOp::Set { key, .. } | ConfigOp::Delete { key } => key,
        }
    }
}

/// One line of a topic's described config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: String,
    /// Set on the topic (else the broker's default).
    pub from_topic: bool,
}

/// The broker's defaults for topics that do not set their own (Kafka's `log.*`
/// broker settings). `-1` retention means unlimited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDefaults {
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub segment_bytes: u64,
    pub segment_ms: u64,
    pub max_message_bytes: usize,
    pub min_compaction_lag_ms: u64,
    pub delete_retention_ms: u64,
}

impl TopicDefaults {
    /// Kafka's: 7 days of retention, no size limit, 7-day segments, tombstones kept
    /// a day; `segment_bytes` and `max_message_bytes` come from the broker's flags.
    pub fn new(segment_bytes: u64, max_message_bytes: usize) -> TopicDefaults {
        const WEEK_MS: u64 = 7 * 24 * 3600 * 1000;
        TopicDefaults {
            retention_ms: WEEK_MS as i64,
            retention_bytes: -1,
            segment_bytes,
            segment_ms: WEEK_MS,
            max_message_bytes,
            min_compaction_lag_ms: 0,
            delete_retention_ms: 24 * 3600 * 1000,
        }
    }
}

/// The settings in effect for one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSettings {
    /// Sealed segments whose newest record is older are deleted (None: kept forever).
    pub retention_ms: Option<u64>,
    /// Oldest sealed segments are deleted while the log is larger (None: no limit).
    pub retention_bytes: Option<u64>,
    pub segment_bytes: u64,
    /// The active segment rolls once its first record is this old.
    pub segment_ms: u64,
    pub cleanup_policy: CleanupPolicy,
    /// None: the replication factor's default.
    pub min_insync_replicas: Option<i32>,
    pub max_message_bytes: usize,
    pub min_compaction_lag_ms: u64,
    pub delete_retention_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn defaults() -> TopicDefaults {
        TopicDefaults::new(64 * 1024 * 1024, 1024 * 1024)
    }

    #[test]
    fn each_key_has_the_kind_kafka_gives_it() {
        use ValueKind::{Int, List, Long};
        let kinds: Vec<_> = KEYS.iter().map(|(k, _)| (*k, value_kind(k))).collect();
        assert_eq!(
            kinds,
            [
                (RETENTION_MS, Some(Long)),
                (RETENTION_BYTES, Some(Long)),
                (SEGMENT_BYTES, Some(Int)),
                (SEGMENT_MS, Some(Long)),
                (CLEANUP_POLICY, Some(List)),
                (MIN_INSYNC_REPLICAS, Some(Int)),
                (MAX_MESSAGE_BYTES, Some(Int)),
                (MIN_COMPACTION_LAG_MS, Some(Long)),
                (DELETE_RETENTION_MS, Some(Long)),
            ]
        );
        assert_eq!(value_kind("retention.hours"), None);
    }

    #[test]
    fn given_no_overrides_then_the_broker_defaults_apply() {
        let settings = TopicConfig::default().resolve(&defaults());
        assert_eq!(settings.retention_ms, Some(7 * 24 * 3600 * 1000));
        assert_eq!(settings.retention_bytes, None);
        assert_eq!(settings.segment_bytes, 64 * 1024 * 1024);
        assert_eq!(settings.cleanup_policy, CleanupPolicy::DELETE);
        assert_eq!(settings.min_insync_replicas, None);
        assert_eq!(settings.max_message_bytes, 1024 * 1024);
    }

    #[test]
    fn given_overrides_then_they_win_and_minus_one_means_unlimited() {
        let config = TopicConfig::from_pairs([
            (RETENTION_MS, "-1"),
            (RETENTION_BYTES, "1048576"),
            (SEGMENT_BYTES, "65536"),
            (SEGMENT_MS, "1000"),
            (MIN_INSYNC_REPLICAS, "2"),
        ])
        .expect("valid");
        let settings = config.resolve(&defaults());
        assert_eq!(settings.retention_ms, None);
        assert_eq!(settings.retention_bytes, Some(1_048_576));
        assert_eq!(settings.segment_bytes, 65_536);
        assert_eq!(settings.segment_ms, 1000);
        assert_eq!(settings.min_insync_replicas, Some(2));
    }

    #[test]
    fn given_an_unknown_key_or_a_bad_value_then_it_is_refused_by_name_and_nothing_changes() {
        let mut config = TopicConfig::from_pairs([(RETENTION_MS, "1000")]).expect("valid");
        let before = config.clone();
        let unknown = config.set("retention.hours", "5").expect_err("unknown");
        assert!(
            unknown.to_string().contains("\"retention.hours\""),
            "{unknown}"
        );
        for (key, value) in [
            (RETENTION_MS, "-2"),
            (RETENTION_MS, "soon"),
            (RETENTION_BYTES, "-5"),
            (SEGMENT_BYTES, "100"),
            (SEGMENT_BYTES, "4294967296"),
            (SEGMENT_MS, "0"),
            (CLEANUP_POLICY, "purge"),
            (CLEANUP_POLICY, "delete,delete"),
            (MIN_INSYNC_REPLICAS, "0"),
            (MAX_MESSAGE_BYTES, "0"),
            (DELETE_RETENTION_MS, "-1"),
        ] {
            let e = config.set(key, value).expect_err(value);
            let text = e.to_string();
            assert!(text.contains(key) && text.contains(value), "{text}");
        }
        assert_eq!(config, before);
        assert!(TopicConfig::from_pairs([(SEGMENT_MS, "5"), ("x", "1")]).is_err());
    }

    #[test]
    fn given_a_topic_then_min_isr_above_the_replication_factor_is_refused() {
        let min = TopicConfig::from_pairs([(MIN_INSYNC_REPLICAS, "3")]).expect("valid");
        assert!(min.check_for_topic(3, 1 << 20).is_ok());
        let e = min.check_for_topic(2, 1 << 20).expect_err("3 > 2");
        assert!(e.to_string().contains(MIN_INSYNC_REPLICAS), "{e}");
        let big = TopicConfig::from_pairs([(MAX_MESSAGE_BYTES, "2000000")]).expect("valid");
        assert!(big.check_for_topic(1, 1 << 20).is_err());
        let compact = TopicConfig::from_pairs([(CLEANUP_POLICY, "compact")]).expect("valid");
        assert!(compact.check_for_topic(1, 1 << 20).is_ok());
    }

    #[test]
    fn describe_lists_every_key_and_marks_the_overrides() {
        let config = TopicConfig::from_pairs([(RETENTION_BYTES, "4096")]).expect("valid");
        let entries = config.describe(&defaults(), 2);
        assert_eq!(entries.len(), KEYS.len());
        let bytes = entries
            .iter()
            .find(|e| e.name == RETENTION_BYTES)
            .expect("listed");
        assert_eq!((bytes.value.as_str(), bytes.from_topic), ("4096", true));
        let min = entries
            .iter()
            .find(|e| e.name == MIN_INSYNC_REPLICAS)
            .expect("listed");
        assert_eq!((min.value.as_str(), min.from_topic), ("2", false));
    }

    #[test]
    fn unset_returns_a_key_to_the_default_and_refuses_unknown_keys() {
        let mut config = TopicConfig::from_pairs([(SEGMENT_MS, "5")]).expect("valid");
        config.unset(SEGMENT_MS).expect("known");
        assert!(config.is_empty());
        assert!(config.unset("nope").is_err());
    }

    #[test]
    fn stored_form_is_a_plain_map_that_reads_back() {
        let config = TopicConfig::from_pairs([(RETENTION_MS, "60000"), (CLEANUP_POLICY, "delete")])
            .expect("valid");
        let json = serde_json::to_string(&config).expect("json");
        assert_eq!(
            json,
            r#"{"cleanup.policy":"delete","retention.ms":"60000"}"#
        );
        assert_eq!(
            serde_json::from_str::<TopicConfig>(&json).expect("read"),
            config
        );
    }

    fn set(key: &str, value: &str) -> ConfigOp {
        ConfigOp::Set {
            key: key.into(),
            value: value.into(),
        }
    }

    fn delete(key: &str) -> ConfigOp {
        ConfigOp::Delete { key: key.into() }
    }

    #[test]
    fn given_ops_then_they_apply_in_order_and_the_original_is_untouched() {
        let config =
            TopicConfig::from_pairs([(RETENTION_MS, "1000"), (SEGMENT_MS, "5")]).expect("valid");
        let altered = config
            .altered(&[
                set(RETENTION_MS, "2000"),
                delete(SEGMENT_MS),
                set(MAX_MESSAGE_BYTES, "10"),
            ])
            .expect("valid ops");
        assert_eq!(
            altered.overrides().collect::<Vec<_>>(),
            vec![(MAX_MESSAGE_BYTES, "10"), (RETENTION_MS, "2000")]
        );
        assert_eq!(config.get(RETENTION_MS), Some("1000"));
        assert_eq!(
            config.altered(&[delete(RETENTION_BYTES)]).expect("no-op"),
            config,
            "deleting a key the topic does not set changes nothing"
        );
    }

    #[test]
    fn given_one_bad_or_repeated_op_then_the_whole_alteration_is_refused_by_key() {
        let config = TopicConfig::default();
        for (ops, key) in [
            (
                vec![set(RETENTION_MS, "5"), set("retention.hours", "1")],
                "retention.hours",
            ),
            (vec![set(RETENTION_MS, "-2")], RETENTION_MS),
            (vec![delete("nope")], "nope"),
            (vec![set(SEGMENT_MS, "5"), delete(SEGMENT_MS)], SEGMENT_MS),
        ] {
            let e = config.altered(&ops).expect_err("refused");
            assert!(e.to_string().contains(key), "{e}");
        }
        assert!(TopicConfig::from_pairs([(SEGMENT_MS, "5"), (SEGMENT_MS, "6")]).is_err());
    }

    #[test]
    fn given_an_internal_topic_then_only_an_unchanged_cleanup_policy_passes() {
        let config = TopicConfig::from_pairs([(CLEANUP_POLICY, "delete")]).expect("valid");
        let retention = config.altered(&[set(RETENTION_MS, "5")]).expect("valid");
        assert!(config.check_keeps_cleanup_policy(&retention).is_ok());
        for ops in [
            vec![delete(CLEANUP_POLICY)],
            vec![set(CLEANUP_POLICY, "compact")],
        ] {
            let altered = config.altered(&ops).expect("valid ops");
            let e = config
                .check_keeps_cleanup_policy(&altered)
                .expect_err("changed");
            assert!(e.to_string().contains(CLEANUP_POLICY), "{e}");
        }
    }

    proptest! {
        /// Whatever a topic sets, describe shows exactly it, and setting the described
        /// values again changes nothing.
        #[test]
        fn describe_round_trips_every_valid_override(
            retention in -1i64..1_000_000_000,
            bytes in -1i64..1_000_000_000,
            segment in 1024i64..(i32::MAX as i64),
            policy in prop::sample::select(vec!["delete", "compact", "compact,delete", "delete,compact"]),
        ) {
            let config = TopicConfig::from_pairs([
                (RETENTION_MS, retention.to_string().as_str()),
                (RETENTION_BYTES, bytes.to_string().as_str()),
                (SEGMENT_BYTES, segment.to_string().as_str()),
                (CLEANUP_POLICY, policy),
            ]).expect("valid");
            let described = config.describe(&defaults(), 1);
            let mut again = TopicConfig::default();
            for e in described.iter().filter(|e| e.from_topic) {
                again.set(&e.name, &e.value).expect("described values are valid");
            }
            prop_assert_eq!(again, config);
        }
    }
}
