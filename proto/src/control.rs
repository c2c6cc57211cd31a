//! Control batches: the transaction markers a coordinator has a broker write. One
//! record per batch; its key says what the marker is, its value which coordinator epoch
//! wrote it (Kafka's layout, plus idem's BEGIN):
//!
//! ```text
//! key   := version i16 (0) | type i16 (0 = ABORT, 1 = COMMIT, 2 = BEGIN)
//! value := version i16 (0) | coordinator_epoch i32
//! ```
//! The batch has the transactional and control attributes, the producer's id and epoch,
//! and no sequence (-1): markers are not part of the producer's sequence.

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{self, BatchError, ProducerInfo, Record, ATTR_CONTROL, ATTR_TRANSACTIONAL};
use crate::v1::ControlType;

const KEY_VERSION: i16 = 0;
const VALUE_VERSION: i16 = 0;

/// What one control batch says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlMarker {
    pub control_type: ControlType,
    pub coordinator_epoch: i32,
}

/// Encodes a control batch for `producer_id` at `producer_epoch`.
pub fn encode_control(
    producer_id: i64,
    producer_epoch: i16,
    marker: ControlMarker,
    timestamp_ms: i64,
) -> Bytes {
    let mut key = BytesMut::with_capacity(4);
    key.put_i16(KEY_VERSION);
    key.put_i16(marker.control_type as i16);
    let mut value = BytesMut::with_capacity(6);
    value.put_i16(VALUE_VERSION);
    value.put_i32(marker.coordinator_epoch);
    let record = Record {
        key: Some(key.freeze()),
        value: Some(value.freeze()),
        headers: Vec::new(),
        timestamp_ms,
    };
    batch::encode(
        ProducerInfo {
            producer_id,
            producer_epoch,
            base_sequence: batch::NO_SEQUENCE,
        },
        ATTR_CONTROL | ATTR_TRANSACTIONAL,
        &[record],
    )
}

/// Reads the marker of the control batch at the start of `buf` (CRC not checked).
pub fn decode_control(buf: &[u8]) -> Result<ControlMarker, BatchError> {
    let header = batch::decode_header(buf)?;
    if !header.is_control() {
        return Err(BatchError::MalformedRecords("not a control batch"));
    }
    let records = batch::records(buf)?;
    let [record] = records.as_slice() else {
        return Err(BatchError::MalformedRecords(
            "a control batch holds exactly one record",
        ));
    };
    let key = record.key.as_deref().unwrap_or_default();
    let value = record.value.as_deref().unwrap_or_default();
    if key.len() < 4 || value.len() < 6 {
        return Err(BatchError::MalformedRecords("control record too short"));
    }
    let control_type = i16::from_be_bytes([key[2], key[3]]);
    let control_type = ControlType::try_from(i32::from(control_type))
        .map_err(|_| BatchError::MalformedRecords("unknown control type"))?;
    let coordinator_epoch = i32::from_be_bytes([value[2], value[3], value[4], value[5]]);
    Ok(ControlMarker {
        control_type,
        coordinator_epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_with_control_attributes_and_no_sequence() {
        for control_type in [ControlType::Abort, ControlType::Commit, ControlType::Begin] {
            let marker = ControlMarker {
                control_type,
                coordinator_epoch: 7,
            };
            let buf = encode_control(42, 3, marker, 1_000);
            let header = batch::verify(&buf).expect("valid batch");
            assert!(header.is_control() && header.is_transactional());
            assert_eq!((header.producer_id, header.producer_epoch), (42, 3));
            assert_eq!(header.base_sequence, batch::NO_SEQUENCE);
            assert_eq!(decode_control(&buf), Ok(marker));
        }
    }

    #[test]
    fn a_marker_with_a_delete_horizon_still_says_what_it_said() {
        let marker = ControlMarker {
            control_type: ControlType::Abort,
            coordinator_epoch: 4,
        };
        let mut buf = encode_control(9, 3, marker, 100).to_vec();
        batch::set_delete_horizon(&mut buf, 86_400_100).expect("a control batch");
        let header = batch::verify(&buf).expect("valid batch");
        assert_eq!(header.delete_horizon(), Some(86_400_100));
        assert_eq!(decode_control(&buf), Ok(marker));
    }

    #[test]
    fn a_data_batch_is_not_a_marker() {
        let buf = batch::encode(ProducerInfo::NONE, 0, &[Record::default()]);
        assert!(decode_control(&buf).is_err());
    }
}
