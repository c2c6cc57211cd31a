//! DeleteRecords (Kafka's KIP-107) on a partition's leader: the log start moves up to a
//! requested offset, and the followers take it from the next fetch answer as they do
//! retention's. The start moves as far as the last stable offset and no further: the
//! records of a transaction still open stay until it ends, so no read_committed
//! consumer ever sees a committed transaction with its first records missing, and
//! retention and DeleteRecords keep one rule. Offset -1 means "everything that may go
//! now": the last stable offset, which is the high watermark when no transaction is
//! open. Where the start goes is `delete_target`'s decision.

use crate::error::BrokerError;

use super::delete_target::delete_target;
use super::Partition;

impl Partition {
    /// Leader: deletes every record below `offset` (see [`delete_target`]) and returns
    /// the log start after it (Kafka's low watermark). The caller has checked that this
    /// broker leads the partition.
    pub fn delete_records(&self, offset: i64) -> Result<i64, BrokerError> {
        let mut inner = self.lock();
        if self.is_retired() {
            return Err(BrokerError::NotLeaderOrFollower {
                topic: self.topic.clone(),
                partition: self.index,
                leader: -1,
            });
        }
        let log_start = inner.log.log_start_offset();
        let high_watermark = *self.high_watermark.borrow();
        let last_stable_offset = inner.txns.last_stable_offset(high_watermark);
        let start = delete_target(offset, log_start, high_watermark, last_stable_offset).map_err(
            |refusal| BrokerError::DeleteRecords {
                topic: self.topic.clone(),
                partition: self.index,
                refusal,
            },
        )?;
        if start == log_start {
            return Ok(log_start);
        }
        self.move_log_start(&mut inner, start)?;
        let now = inner.log.log_start_offset();
        tracing::info!(topic = %self.topic, partition = self.index, log_start = now, requested = offset, "records deleted: the log start moved");
        Ok(now)
    }
}
