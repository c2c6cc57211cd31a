//! The value of every bench record: a stamp of who sent it, its place in that sender's
//! sequence and when it was sent, padded to the record size. Verification reads the
//! stamp back to find lost, duplicated and reordered records; `bench e2e` reads the
//! send time to measure end-to-end latency.
//!
//! Layout (big-endian): producer index u32, sequence u64, nanoseconds since the run's
//! start u64, then zero padding.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes of the stamp; the smallest record size.
pub const STAMP_LEN: usize = 20;

/// What a value says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub producer: u32,
    pub sequence: u64,
    /// Send time, nanoseconds since the run's shared start `Instant`.
    pub sent_nanos: u64,
}

/// A value of `size` bytes (at least [`STAMP_LEN`]) starting with `stamp`.
pub fn encode(stamp: Stamp, size: usize) -> Bytes {
    let mut value = BytesMut::with_capacity(size.max(STAMP_LEN));
    value.put_u32(stamp.producer);
    value.put_u64(stamp.sequence);
    value.put_u64(stamp.sent_nanos);
    value.resize(size.max(STAMP_LEN), 0);
    value.freeze()
}

/// The stamp of a value, or `None` if it is too short to be a bench record.
pub fn decode(value: &[u8]) -> Option<Stamp> {
    let producer = u32::from_be_bytes(value.get(0..4)?.try_into().ok()?);
    let sequence = u64::from_be_bytes(value.get(4..12)?.try_into().ok()?);
    let sent_nanos = u64::from_be_bytes(value.get(12..20)?.try_into().ok()?);
    Some(Stamp {
        producer,
        sequence,
        sent_nanos,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_round_trips_at_any_size() {
        let stamp = Stamp {
            producer: 3,
            sequence: 1 << 40,
            sent_nanos: 123_456_789,
        };
        for size in [STAMP_LEN, 21, 1024] {
            let value = encode(stamp, size);
            assert_eq!(value.len(), size);
            assert_eq!(decode(&value), Some(stamp));
        }
        assert_eq!(decode(&encode(stamp, STAMP_LEN)[..19]), None);
    }
}
