//! Consumer fetch (no `replica_id`): read_uncommitted reads up to the high watermark,
//! read_committed up to the last stable offset; control batches are returned only to a
//! reader that asks for them (the group coordinator reading `__consumer_offsets`'s
//! markers), and read_committed drops every batch of an aborted transaction. `next_fetch_offset` is
//! past every batch examined, so a run of filtered batches never stalls a consumer.
//!
//! The partition lock is held only to copy raw batches and the aborted ranges that
//! overlap them; filtering happens outside it.

use idem_proto::batch;
use idem_proto::v1::IsolationLevel;

use super::{check_in_range, Partition, PartitionOffsets};
use crate::error::BrokerError;
use crate::log::ReadLimit;
use crate::txn_index::AbortedTxn;

/// How many reads one fetch makes while everything it reads is filtered out, before it
/// answers with no records and a `next_fetch_offset` past what it skipped.
const MAX_FILTERED_READS: usize = 16;

/// What a consumer fetch of one partition answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRead {
    /// Whole batches, concatenated; offsets keep their gaps.
    pub records: Vec<u8>,
    /// Past the last batch examined (returned or filtered); the fetch offset when none.
    pub next_fetch_offset: i64,
    pub offsets: PartitionOffsets,
}

impl Partition {
    /// Batches from the one containing `offset`, within `limit`, never past what
    /// `isolation` may see; no control batch.
    pub fn read_for_consumer(
        &self,
        offset: i64,
        limit: ReadLimit,
        isolation: IsolationLevel,
    ) -> Result<ConsumerRead, BrokerError> {
        self.read_visible(offset, limit, isolation, false)
    }

    /// [`Partition::read_for_consumer`], with the control batches too when
    /// `with_control` (FetchRequest.include_control_batches).
    pub fn read_visible(
        &self,
        offset: i64,
        limit: ReadLimit,
        isolation: IsolationLevel,
        with_control: bool,
    ) -> Result<ConsumerRead, BrokerError> {
        let committed = isolation == IsolationLevel::ReadCommitted;
        let mut records = Vec::new();
        let mut next = offset;
        for _ in 0..MAX_FILTERED_READS {
            let (raw, aborted) = {
                let inner = self.lock();
                check_in_range(&inner.log, next)?;
                let high_watermark = *self.high_watermark.borrow();
                let bound = if committed {
                    inner.txns.last_stable_offset(high_watermark)
                } else {
                    high_watermark
                };
                if next >= bound {
                    break;
                }
                let raw = inner.log.read_within(next, limit, bound)?;
                let aborted = if committed {
                    inner.txns.aborted_overlapping(next, bound)
                } else {
                    Vec::new()
                };
                (raw, aborted)
            };
            let Some(examined_to) = keep_visible(&raw, &aborted, with_control, &mut records)?
            else {
                break;
            };
            next = examined_to;
            if !records.is_empty() {
                break;
            }
        }
        Ok(ConsumerRead {
            records,
            next_fetch_offset: next,
            offsets: self.offsets(),
        })
    }
}

/// Appends to `out` every batch of `raw` a consumer may see: no control batch (unless
/// `with_control`), and no transactional batch covered by one of `aborted`. Returns the
/// offset after the last batch examined, `None` when `raw` holds none.
fn keep_visible(
    raw: &[u8],
    aborted: &[AbortedTxn],
    with_control: bool,
    out: &mut Vec<u8>,
) -> Result<Option<i64>, BrokerError> {
    let mut examined_to = None;
    for item in stored_batches(raw) {
        let (header, bytes) = item?;
        examined_to = Some(header.next_offset());
        if header.is_control() {
            if with_control {
                out.extend_from_slice(bytes);
            }
            continue;
        }
        let aborted = header.is_transactional()
            && aborted
                .iter()
                .any(|a| a.covers(header.producer_id, header.base_offset));
        if !aborted {
            out.extend_from_slice(bytes);
        }
    }
    Ok(examined_to)
}

/// The batches of bytes the log already verified, split by their headers alone (the
/// CRC was checked when they were read).
pub fn stored_batches(
    raw: &[u8],
) -> impl Iterator<Item = Result<(batch::BatchHeader, &[u8]), batch::BatchError>> {
    let mut rest = raw;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let item = batch::decode_header(rest).and_then(|header| {
            if header.size() > rest.len() {
                return Err(batch::BatchError::Truncated {
                    needed: header.size(),
                    available: rest.len(),
                });
            }
            let (bytes, tail) = rest.split_at(header.size());
            rest = tail;
            Ok((header, bytes))
        });
        if item.is_err() {
            rest = &[];
        }
        Some(item)
    })
}

#[cfg(test)]
mod tests {
    use idem_proto::batch::{ProducerInfo, Record, ATTR_TRANSACTIONAL};
    use idem_proto::control::{self, ControlMarker};
    use idem_proto::v1::ControlType;

    use super::*;

    fn at(mut buf: Vec<u8>, offset: i64) -> Vec<u8> {
        batch::assign(&mut buf, offset, 0);
        buf
    }

    fn data(producer_id: i64, transactional: bool, offset: i64) -> Vec<u8> {
        let producer = ProducerInfo {
            producer_id,
            producer_epoch: 0,
            base_sequence: 0,
        };
        let attributes = if transactional { ATTR_TRANSACTIONAL } else { 0 };
        at(
            batch::encode(
                producer,
                attributes,
                &[Record::default(), Record::default()],
            )
            .to_vec(),
            offset,
        )
    }

    fn marker(producer_id: i64, control_type: ControlType, offset: i64) -> Vec<u8> {
        let marker = ControlMarker {
            control_type,
            coordinator_epoch: 0,
        };
        at(
            control::encode_control(producer_id, 0, marker, 0).to_vec(),
            offset,
        )
    }

    fn bases(buf: &[u8]) -> Vec<i64> {
        batch::Batches::new(buf)
            .map(|b| b.expect("batch").0.base_offset)
            .collect()
    }

    #[test]
    fn given_nothing_read_then_nothing_examined() {
        let mut out = Vec::new();
        assert_eq!(
            keep_visible(&[], &[], false, &mut out).expect("filter"),
            None
        );
        assert!(out.is_empty());
    }

    #[test]
    fn given_control_batches_then_they_are_never_returned_but_examined() {
        let raw = [
            marker(1, ControlType::Begin, 0),
            data(1, true, 1),
            marker(1, ControlType::Commit, 3),
        ]
        .concat();
        let mut out = Vec::new();
        assert_eq!(
            keep_visible(&raw, &[], false, &mut out).expect("filter"),
            Some(4)
        );
        assert_eq!(bases(&out), vec![1]);
    }

    #[test]
    fn given_control_batches_asked_for_then_they_are_returned_in_log_order() {
        let raw = [
            marker(1, ControlType::Begin, 0),
            data(1, true, 1),
            marker(1, ControlType::Commit, 3),
        ]
        .concat();
        let mut out = Vec::new();
        assert_eq!(
            keep_visible(&raw, &[], true, &mut out).expect("filter"),
            Some(4)
        );
        assert_eq!(bases(&out), vec![0, 1, 3]);
    }

    #[test]
    fn given_an_aborted_transaction_then_only_its_producers_batches_in_range_are_dropped() {
        let raw = [
            marker(1, ControlType::Begin, 0),
            data(1, true, 1),
            data(2, true, 3),
            data(9, false, 5),
            data(1, true, 7),
            marker(1, ControlType::Abort, 9),
            data(1, false, 10),
        ]
        .concat();
        let aborted = [AbortedTxn {
            producer_id: 1,
            first_offset: 0,
            last_offset: 9,
        }];
        let mut out = Vec::new();
        assert_eq!(
            keep_visible(&raw, &aborted, false, &mut out).expect("filter"),
            Some(12)
        );
        assert_eq!(bases(&out), vec![3, 5, 10]);
    }

    #[test]
    fn given_only_filtered_batches_then_the_offset_after_them_is_reported() {
        let raw = [
            marker(1, ControlType::Begin, 0),
            data(1, true, 1),
            marker(1, ControlType::Abort, 3),
        ]
        .concat();
        let aborted = [AbortedTxn {
            producer_id: 1,
            first_offset: 0,
            last_offset: 3,
        }];
        let mut out = Vec::new();
        assert_eq!(
            keep_visible(&raw, &aborted, false, &mut out).expect("filter"),
            Some(4)
        );
        assert!(out.is_empty());
    }
}
