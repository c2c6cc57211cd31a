//! The idempotency key of a record: the producer-supplied business key when the record
//! carries the [`IDEMPOTENCY_KEY_HEADER`] header (so an upstream that sends the same
//! business event again, under a new producer id and at a new offset, is still
//! deduplicated), else its place in the log, `topic/partition/offset`. The two kinds
//! get distinct prefixes so a business key can never equal a log place.

use crate::consumer::ConsumerRecord;
pub use crate::producer::IDEMPOTENCY_KEY_HEADER;

/// The key the Inbox stores for `record` (the last header wins if it was set twice).
pub fn idempotency_key(record: &ConsumerRecord) -> String {
    let supplied = record
        .headers
        .iter()
        .rev()
        .find(|(name, _)| name == IDEMPOTENCY_KEY_HEADER)
        .map(|(_, value)| value);
    match supplied {
        Some(value) => match std::str::from_utf8(value) {
            Ok(text) => format!("key:{text}"),
            // Stored as text: bytes that are not UTF-8 are spelled in hex, losslessly.
            Err(_) => format!("hex:{}", hex(value)),
        },
        None => format!(
            "log:{}/{}/{}",
            record.topic, record.partition, record.offset
        ),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;

    fn record(topic: &str, partition: i32, offset: i64, key: Option<Vec<u8>>) -> ConsumerRecord {
        ConsumerRecord {
            topic: topic.into(),
            partition,
            offset,
            key: None,
            value: Some(Bytes::from_static(b"v")),
            headers: key
                .map(|k| vec![(IDEMPOTENCY_KEY_HEADER.to_string(), Bytes::from(k))])
                .unwrap_or_default(),
            timestamp_ms: 0,
        }
    }

    #[test]
    fn given_no_header_then_the_key_is_the_log_place() {
        assert_eq!(idempotency_key(&record("t", 3, 17, None)), "log:t/3/17");
    }

    #[test]
    fn given_a_header_then_the_key_ignores_where_the_record_landed() {
        let a = record("t", 0, 1, Some(b"transfer-9".to_vec()));
        let b = record("t", 5, 900, Some(b"transfer-9".to_vec()));
        assert_eq!(idempotency_key(&a), idempotency_key(&b));
        assert_eq!(idempotency_key(&a), "key:transfer-9");
    }

    #[test]
    fn given_a_business_key_spelled_like_a_log_place_then_the_keys_differ() {
        let by_place = record("t", 0, 1, None);
        let by_business = record("x", 9, 9, Some(b"t/0/1".to_vec()));
        assert_ne!(idempotency_key(&by_place), idempotency_key(&by_business));
    }

    proptest! {
        /// Distinct business keys (any bytes) and distinct log places never share a key.
        #[test]
        fn distinct_inputs_give_distinct_keys(
            a in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..12)),
            b in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..12)),
            pa in 0i32..4, pb in 0i32..4, oa in 0i64..4, ob in 0i64..4,
        ) {
            let ra = record("t", pa, oa, a.clone());
            let rb = record("t", pb, ob, b.clone());
            let same_input = match (&a, &b) {
                (Some(x), Some(y)) => x == y,
                (None, None) => (pa, oa) == (pb, ob),
                _ => false,
            };
            prop_assert_eq!(idempotency_key(&ra) == idempotency_key(&rb), same_input);
        }
    }
}
