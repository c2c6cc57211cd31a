//! A topic's incarnation (Kafka's KIP-516 topic id): 128 random bits given at creation,
//! stored with the topic's spec and in a `topic-id` file in each of its partition
//! directories. A name is reused after a deletion; the id is not, so a directory whose
//! id differs from the catalog's belongs to a deleted topic of the same name and must
//! not be served as the new one. The all-zero id (Kafka's `ZERO_UUID`) means "none
//! recorded": a topic written before ids existed, or a directory created before them.

use std::fmt;
use std::io;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The file in a partition directory that names the topic incarnation it belongs to.
pub const TOPIC_ID_FILE: &str = "topic-id";

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TopicId([u8; 16]);

impl TopicId {
    /// No id recorded.
    pub const ZERO: TopicId = TopicId([0; 16]);

    /// A fresh id, never the zero one.
    pub fn random() -> TopicId {
        loop {
            let id = TopicId(rand::random());
            if !id.is_zero() {
                return id;
            }
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == TopicId::ZERO
    }

    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for TopicId {
    /// 32 lowercase hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId({self})")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a topic id (32 hex digits)")]
pub struct BadTopicId(String);

impl FromStr for TopicId {
    type Err = BadTopicId;

    fn from_str(s: &str) -> Result<TopicId, BadTopicId> {
        let bad = || BadTopicId(s.to_string());
        let s = s.trim();
        if s.len() != 32 || !s.is_ascii() {
            return Err(bad());
        }
        let mut bytes = [0u8; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(TopicId(bytes))
    }
}

impl Serialize for TopicId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TopicId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<TopicId, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What to do with a partition directory before opening it for topic incarnation
/// `catalog` (pure: the caller reads the directory and acts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirVerdict {
    /// No directory yet: open it, then record the id.
    Fresh,
    /// The directory belongs to this incarnation: open it as it is.
    Same,
    /// The directory records no id (written before ids existed), or the catalog has
    /// none yet: it is taken as this incarnation's, and the id recorded when known.
    Adopt,
    /// The directory belongs to an older incarnation of the name: delete it, then open
    /// an empty partition.
    OlderIncarnation { found: TopicId },
}

/// `found`: `None` when the directory does not exist, else the id its file records
/// (`ZERO` when it has none).
pub fn verdict(found: Option<TopicId>, catalog: TopicId) -> DirVerdict {
    match found {
        None => DirVerdict::Fresh,
        Some(found) if found == catalog => DirVerdict::Same,
        Some(found) if found.is_zero() || catalog.is_zero() => DirVerdict::Adopt,
        Some(found) => DirVerdict::OlderIncarnation { found },
    }
}

/// The id a partition directory records: `None` when the directory does not exist,
/// `ZERO` when it has no (readable) id file.
pub fn read_dir_id(dir: &Path) -> io::Result<Option<TopicId>> {
    if !dir.exists() {
        return Ok(None);
    }
    match std::fs::read_to_string(dir.join(TOPIC_ID_FILE)) {
        Ok(text) => Ok(Some(text.parse().unwrap_or_else(|e| {
            tracing::warn!(dir = %dir.display(), error = %e, "unreadable topic id file; taken as none");
            TopicId::ZERO
        }))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Some(TopicId::ZERO)),
        Err(e) => Err(e),
    }
}

/// Records `id` in the existing partition directory `dir` (atomically and durably).
pub fn record_dir_id(dir: &Path, id: TopicId) -> io::Result<()> {
    idem_runtime::atomic_file::replace(&dir.join(TOPIC_ID_FILE), format!("{id}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_an_id_then_its_text_and_json_forms_read_back_the_same() {
        let id = TopicId::random();
        assert!(!id.is_zero());
        assert_eq!(id.to_string().len(), 32);
        assert_eq!(id.to_string().parse::<TopicId>(), Ok(id));
        let json = serde_json::to_string(&id).expect("encode");
        assert_eq!(json, format!("\"{id}\""));
        assert_eq!(serde_json::from_str::<TopicId>(&json).expect("decode"), id);
        assert_ne!(TopicId::random(), id, "two ids differ");
    }

    #[test]
    fn given_text_that_is_not_32_hex_digits_then_it_is_refused() {
        for bad in ["", "abc", &"g".repeat(32), &"0".repeat(31), &"0".repeat(33)] {
            assert!(bad.parse::<TopicId>().is_err(), "{bad:?}");
        }
        assert_eq!("0".repeat(32).parse::<TopicId>(), Ok(TopicId::ZERO));
    }

    #[test]
    fn given_a_directory_and_the_catalog_id_then_the_verdict_keeps_only_the_same_incarnation() {
        let (a, b) = (TopicId::random(), TopicId::random());
        assert_eq!(verdict(None, a), DirVerdict::Fresh);
        assert_eq!(verdict(None, TopicId::ZERO), DirVerdict::Fresh);
        assert_eq!(verdict(Some(a), a), DirVerdict::Same);
        assert_eq!(verdict(Some(TopicId::ZERO), a), DirVerdict::Adopt);
        assert_eq!(verdict(Some(a), TopicId::ZERO), DirVerdict::Adopt);
        assert_eq!(
            verdict(Some(TopicId::ZERO), TopicId::ZERO),
            DirVerdict::Same
        );
        assert_eq!(
            verdict(Some(b), a),
            DirVerdict::OlderIncarnation { found: b }
        );
    }

    #[test]
    fn given_a_partition_dir_then_its_recorded_id_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("orders-0");
        assert_eq!(read_dir_id(&missing).expect("read"), None);
        std::fs::create_dir(&missing).expect("mkdir");
        assert_eq!(read_dir_id(&missing).expect("read"), Some(TopicId::ZERO));
        let id = TopicId::random();
        record_dir_id(&missing, id).expect("record");
        assert_eq!(read_dir_id(&missing).expect("read"), Some(id));
        std::fs::write(missing.join(TOPIC_ID_FILE), "junk").expect("write");
        assert_eq!(read_dir_id(&missing).expect("read"), Some(TopicId::ZERO));
    }
}
