//! A block of producer ids leased to one broker, and the pure rule that picks the next
//! block from the latest one (Kafka's `ProducerIdManager`): the first block is
//! `[0, BLOCK_SIZE - 1]`, each next block starts right after the previous end, and
//! nothing wraps: past `i64::MAX` the id space is exhausted.

use serde::Deserialize;

use crate::PidStoreError;

/// Producer ids per block.
pub const BLOCK_SIZE: i64 = 1000;

/// Producer ids `block_start..=block_end`, leased to broker `owner`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerIdBlock {
    pub owner: i32,
    pub block_start: i64,
    pub block_end: i64,
}

/// The stored form as parsed; written by [`ProducerIdBlock::to_json`] byte for byte as
/// Kafka's `/latest_producer_id_block` znode:
/// `{"version":1,"broker":5,"block_start":"15000","block_end":"15999"}`.
#[derive(Deserialize)]
struct BlockJson {
    version: i32,
    broker: i32,
    block_start: String,
    block_end: String,
}

const JSON_VERSION: i32 = 1;

impl ProducerIdBlock {
    /// The block handed out when none was ever written.
    pub fn first(owner: i32) -> Self {
        ProducerIdBlock {
            owner,
            block_start: 0,
            block_end: BLOCK_SIZE - 1,
        }
    }

    /// The block after `latest`, or [`PidStoreError::Exhausted`] if its end would pass
    /// `i64::MAX`.
    pub fn next_after(latest: Option<&ProducerIdBlock>, owner: i32) -> Result<Self, PidStoreError> {
        let Some(latest) = latest else {
            return Ok(Self::first(owner));
        };
        let block_start = latest.block_end.checked_add(1);
        let block_end = latest.block_end.checked_add(BLOCK_SIZE);
        match (block_start, block_end) {
            (Some(block_start), Some(block_end)) => Ok(ProducerIdBlock {
                owner,
                block_start,
                block_end,
            }),
            _ => Err(PidStoreError::Exhausted),
        }
    }

    /// How many ids the block holds.
    pub fn len(&self) -> u64 {
        self.block_end.abs_diff(self.block_start) + 1
    }

    /// Never true for a valid block; present for API symmetry with [`len`](Self::len).
    pub fn is_empty(&self) -> bool {
        self.block_end < self.block_start
    }

    pub fn contains(&self, producer_id: i64) -> bool {
        (self.block_start..=self.block_end).contains(&producer_id)
    }

    /// The stored JSON (Kafka's format, numbers as strings).
    pub fn to_json(&self) -> String {
        format!(
            r#"{{"version":{JSON_VERSION},"broker":{},"block_start":"{}","block_end":"{}"}}"#,
            self.owner, self.block_start, self.block_end
        )
    }

    /// Parses the stored JSON; anything unexpected is [`PidStoreError::Corrupt`].
    pub fn from_json(bytes: &[u8]) -> Result<Self, PidStoreError> {
        let corrupt = |why: String| {
            PidStoreError::Corrupt(format!(
                "producer id block {:?}: {why}",
                String::from_utf8_lossy(bytes)
            ))
        };
        let json: BlockJson = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
        if json.version != JSON_VERSION {
            return Err(corrupt(format!("unsupported version {}", json.version)));
        }
        let parse = |field: &str, value: &str| {
            value
                .parse::<i64>()
                .map_err(|e| corrupt(format!("{field}: {e}")))
        };
        let block = ProducerIdBlock {
            owner: json.broker,
            block_start: parse("block_start", &json.block_start)?,
            block_end: parse("block_end", &json.block_end)?,
        };
        if block.block_start < 0 || block.block_end < block.block_start {
            return Err(corrupt("block_start must be >= 0 and <= block_end".into()));
        }
        Ok(block)
    }
}

impl std::fmt::Display for ProducerIdBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}, {}] (broker {})",
            self.block_start, self.block_end, self.owner
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_byte_for_byte_kafkas() {
        let block = ProducerIdBlock {
            owner: 5,
            block_start: 15000,
            block_end: 15999,
        };
        assert_eq!(
            block.to_json(),
            r#"{"version":1,"broker":5,"block_start":"15000","block_end":"15999"}"#
        );
        assert_eq!(
            ProducerIdBlock::from_json(block.to_json().as_bytes()).expect("parse"),
            block
        );
    }

    #[test]
    fn kafka_written_json_with_other_field_order_and_spaces_parses() {
        let json = br#"{ "block_end": "1999", "broker": 2, "version": 1, "block_start": "1000" }"#;
        assert_eq!(
            ProducerIdBlock::from_json(json).expect("parse"),
            ProducerIdBlock {
                owner: 2,
                block_start: 1000,
                block_end: 1999
            }
        );
    }

    #[test]
    fn bad_json_is_corrupt() {
        for bad in [
            &br#"not json"#[..],
            br#"{"version":2,"broker":1,"block_start":"0","block_end":"999"}"#,
            br#"{"version":1,"broker":1,"block_start":0,"block_end":999}"#,
            br#"{"version":1,"broker":1,"block_start":"x","block_end":"999"}"#,
            br#"{"version":1,"broker":1,"block_start":"-1","block_end":"999"}"#,
            br#"{"version":1,"broker":1,"block_start":"10","block_end":"9"}"#,
            br#"{"version":1,"broker":1,"block_start":"0"}"#,
        ] {
            assert!(
                matches!(
                    ProducerIdBlock::from_json(bad),
                    Err(PidStoreError::Corrupt(_))
                ),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn first_block_then_contiguous_blocks() {
        let first = ProducerIdBlock::next_after(None, 3).expect("first");
        assert_eq!(
            (first.block_start, first.block_end, first.owner),
            (0, 999, 3)
        );
        assert_eq!(first.len(), 1000);
        let second = ProducerIdBlock::next_after(Some(&first), 4).expect("second");
        assert_eq!(
            (second.block_start, second.block_end, second.owner),
            (1000, 1999, 4)
        );
    }

    #[test]
    fn the_last_block_ends_at_i64_max_and_then_ids_are_exhausted() {
        let before_last = ProducerIdBlock {
            owner: 0,
            block_start: i64::MAX - 1999,
            block_end: i64::MAX - 1000,
        };
        let last = ProducerIdBlock::next_after(Some(&before_last), 0).expect("last");
        assert_eq!(last.block_end, i64::MAX);
        assert_eq!(last.len(), 1000);
        assert_eq!(
            ProducerIdBlock::next_after(Some(&last), 0),
            Err(PidStoreError::Exhausted)
        );
        let almost = ProducerIdBlock {
            owner: 0,
            block_start: 0,
            block_end: i64::MAX - 999,
        };
        assert_eq!(
            ProducerIdBlock::next_after(Some(&almost), 0),
            Err(PidStoreError::Exhausted)
        );
    }
}
