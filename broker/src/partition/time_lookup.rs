//! ListOffsets by timestamp on a replica: the log's answer (`log::time_lookup`), given
//! only below what the isolation level may read (the high watermark, or the last stable
//! offset for read_committed), as Kafka answers it: a record past that bound is "not
//! found" rather than an offset a consumer could not read yet.

use idem_proto::v1::IsolationLevel;

use super::Partition;
use crate::error::BrokerError;
use crate::log::TimestampedOffset;

/// What ListOffsets looks a record up by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeTarget {
    /// The first record whose timestamp is at or after this (ms since the epoch).
    AtOrAfter(i64),
    /// The record with the largest timestamp (Kafka's MAX_TIMESTAMP, -3).
    Newest,
}

impl Partition {
    /// The record `target` names among those `isolation` may read; `None` if there is
    /// none.
    pub fn offset_for_timestamp(
        &self,
        target: TimeTarget,
        isolation: IsolationLevel,
    ) -> Result<Option<TimestampedOffset>, BrokerError> {
        let mut inner = self.lock();
        let high_watermark = *self.high_watermark.borrow();
        let readable_end = match isolation {
            IsolationLevel::ReadCommitted => inner.txns.last_stable_offset(high_watermark),
            IsolationLevel::ReadUncommitted => high_watermark,
        };
        let found = match target {
            TimeTarget::AtOrAfter(timestamp) => inner.log.offset_for_timestamp(timestamp)?,
            TimeTarget::Newest => inner.log.offset_of_max_timestamp()?,
        };
        Ok(found.filter(|f| f.offset < readable_end))
    }
}
