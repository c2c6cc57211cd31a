//! Transaction markers on the leader: a BEGIN, COMMIT or ABORT control batch decided by
//! the producer state's rules and appended under the partition lock. A COMMIT or ABORT
//! is awaited like acks=all, so `WriteTxnMarkers` answers only once every in-sync
//! replica holds the marker and no failover can take the transaction's outcome back.
//!
//! A BEGIN is answered once it is in the leader's log, neither fsynced nor replicated:
//! all it has to guarantee is that the transaction's data lands after it, and that data
//! is acknowledged only once durable and past the high watermark, which takes the BEGIN
//! before it along (the log is a prefix on every replica). A BEGIN lost with its leader
//! before any data followed costs liveness only: the new leader refuses the
//! transaction's data (INVALID_TXN_STATE), so the transaction aborts; a COMMIT or ABORT
//! without its BEGIN is accepted. Waiting would put a replicated fsync between every
//! partition's registration and its first record (docs/benchmarks.md).

use std::time::Duration;

use idem_proto::control::{self, ControlMarker};
use idem_proto::v1::ControlType;

use super::{now_ms, Partition};
use crate::error::BrokerError;
use crate::producer_state::{MarkerDecision, MarkerEpoch, ProducerEntry};

/// A transaction open in this partition (ListOpenTransactions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTransaction {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The BEGIN offset.
    pub first_offset: i64,
    /// Broker clock of the producer's last batch or marker here.
    pub last_update_ms: i64,
}

impl Partition {
    /// Writes a marker of `control_type` for `producer_id` at `producer_epoch` from a
    /// coordinator at `coordinator_epoch` (see docs/transactions.md for the rules).
    /// `Ok(Some(offset))`: appended at `offset`; `Ok(None)`: a retry whose effect is in the
    /// log already, nothing appended. For a COMMIT or ABORT the answer comes once the
    /// high watermark passed the marker (for a retry: the log end seen when deciding,
    /// which is past the earlier marker), or `timeout` ran out (REQUEST_TIMED_OUT: retry
    /// it); a BEGIN is answered at once (see the module's comment).
    pub async fn append_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        control_type: ControlType,
        coordinator_epoch: i32,
        end_epoch: MarkerEpoch,
        timeout: Duration,
    ) -> Result<Option<i64>, BrokerError> {
        if let Some((isr, min)) = self.insync_shortfall() {
            return Err(BrokerError::NotEnoughReplicas { isr, min });
        }
        let leader_epoch = self.replica_set().leader_epoch;
        let (appended, end) = {
            let mut inner = self.lock();
            let decision = inner.producers.check_marker(
                producer_id,
                producer_epoch,
                control_type,
                coordinator_epoch,
                end_epoch,
            );
            match decision {
                MarkerDecision::Append => {
                    let marker = ControlMarker {
                        control_type,
                        coordinator_epoch,
                    };
                    let buf =
                        control::encode_control(producer_id, producer_epoch, marker, now_ms());
                    let info = self.append_to_log(&mut inner, &buf, leader_epoch)?;
                    (Some(info.base_offset), info.last_offset + 1)
                }
                MarkerDecision::AlreadyApplied => (None, inner.log.log_end_offset()),
                MarkerDecision::InvalidEpoch { current, got } => {
                    return Err(BrokerError::InvalidProducerEpoch {
                        producer_id,
                        current,
                        got,
                    })
                }
                MarkerDecision::CoordinatorFenced { current, got } => {
                    return Err(BrokerError::CoordinatorFenced {
                        producer_id,
                        current,
                        got,
                    })
                }
                MarkerDecision::InvalidTxnState(refusal) => {
                    return Err(BrokerError::InvalidTxnState {
                        producer_id,
                        refusal,
                    })
                }
            }
        };
        tracing::debug!(
            topic = %self.topic,
            partition = self.index,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            marker = control_type.as_str_name(),
            offset = appended.unwrap_or(-1),
            "transaction marker"
        );
        if control_type == ControlType::Begin {
            self.publish_log_end(end);
            return Ok(appended);
        }
        self.make_visible(end).await?;
        self.await_high_watermark(end, timeout, leader_epoch)
            .await?;
        Ok(appended)
    }

    /// Every producer id this partition keeps state for, with that state (Kafka's
    /// DescribeProducers), by producer id.
    pub fn producers(&self) -> Vec<(i64, ProducerEntry)> {
        let inner = self.lock();
        let mut producers: Vec<(i64, ProducerEntry)> = inner
            .producers
            .iter()
            .map(|(producer_id, entry)| (producer_id, entry.clone()))
            .collect();
        producers.sort_unstable_by_key(|(producer_id, _)| *producer_id);
        producers
    }

    /// The transactions open in this partition, by first offset.
    pub fn open_transactions(&self) -> Vec<OpenTransaction> {
        let inner = self.lock();
        let mut open: Vec<OpenTransaction> = inner
            .producers
            .iter()
            .filter_map(|(producer_id, entry)| {
                entry.txn_first_offset.map(|first_offset| OpenTransaction {
                    producer_id,
                    producer_epoch: entry.producer_epoch,
                    first_offset,
                    last_update_ms: entry.last_update_ms,
                })
            })
            .collect();
        open.sort_unstable_by_key(|t| (t.first_offset, t.producer_id));
        open
    }
}
