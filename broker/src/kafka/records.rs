//! Record batches at the Kafka edge. idem's batch (docs/format.md) has Kafka v2's
//! 61-byte header but magic 1, fixed-width record fields and no compression; Kafka
//! clients speak magic 2 with varint records, possibly compressed. Produced batches are
//! decoded (CRC checked, decompressed) by the `kafka-protocol` crate and re-encoded as
//! idem batches; fetched idem batches get the same header with magic 2, varint records
//! and a recomputed CRC32C. Offsets, producer id, epoch, base sequence, timestamps and
//! the transactional bit pass through unchanged, so an idempotent Kafka producer's
//! retry is the same batch to the producer state as an SDK retry (docs/kafka.md).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use idem_proto::batch::{self, ProducerInfo, Record, HEADER_LEN, LOG_OVERHEAD};
use kafka_protocol::records::RecordBatchDecoder;

/// Kafka's record batch format version: the only one this listener takes or gives.
pub const KAFKA_MAGIC: u8 = 2;

const OFF_BATCH_LENGTH: usize = 8;
const OFF_MAGIC: usize = 16;
const OFF_CRC: usize = 17;
const OFF_ATTRIBUTES: usize = 21;
const OFF_PRODUCER_ID: usize = 43;
const OFF_PRODUCER_EPOCH: usize = 51;
const OFF_BASE_SEQUENCE: usize = 53;

/// Kafka's attribute bits idem keeps: transactional and control. The compression
/// (bits 0-2) is undone here and the timestamp type (bit 3) is always create time.
const KEPT_ATTRIBUTES: u16 = batch::ATTR_TRANSACTIONAL | batch::ATTR_CONTROL;

/// Why a produced Kafka batch cannot become an idem batch (Kafka's CORRUPT_MESSAGE,
/// except [`ConversionError::Magic`]: UNSUPPORTED_FOR_MESSAGE_FORMAT).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error("record batch truncated: {0} bytes")]
    Truncated(usize),
    #[error("record batch magic {0}: only record batch v2 (magic 2) is accepted")]
    Magic(u8),
    #[error("a produce request must carry exactly one record batch per partition ({declared} bytes declared, {received} received)")]
    NotOneBatch { declared: usize, received: usize },
    #[error("record batch does not decode: {0}")]
    Decode(String),
    #[error("record {index} has offset delta {found}, expected {index}")]
    OffsetDelta { index: usize, found: i64 },
    #[error("stored batch unreadable: {0}")]
    Stored(#[from] batch::BatchError),
}

/// The idem batch for one produced Kafka v2 batch: decompressed, records re-encoded,
/// producer id, epoch, base sequence and the transactional/control bits kept.
pub fn produced_to_idem(kafka: &Bytes) -> Result<Bytes, ConversionError> {
    if kafka.len() < HEADER_LEN {
        return Err(ConversionError::Truncated(kafka.len()));
    }
    let magic = kafka[OFF_MAGIC];
    if magic != KAFKA_MAGIC {
        return Err(ConversionError::Magic(magic));
    }
    // Big-endian header fields, read by `Buf` (the length was checked above).
    let field = |at: usize| &kafka[at..];
    let batch_length = field(OFF_BATCH_LENGTH).get_i32();
    let declared = usize::try_from(batch_length)
        .map(|l| l + LOG_OVERHEAD)
        .unwrap_or(0);
    if declared != kafka.len() {
        return Err(ConversionError::NotOneBatch {
            declared,
            received: kafka.len(),
        });
    }
    let producer = ProducerInfo {
        producer_id: field(OFF_PRODUCER_ID).get_i64(),
        producer_epoch: field(OFF_PRODUCER_EPOCH).get_i16(),
        base_sequence: field(OFF_BASE_SEQUENCE).get_i32(),
    };
    let attributes = field(OFF_ATTRIBUTES).get_u16();
    let base_offset = field(0).get_i64();
    // The crate checks the CRC and undoes the compression.
    let mut buf = kafka.clone();
    let set = RecordBatchDecoder::decode(&mut buf)
        .map_err(|e| ConversionError::Decode(format!("{e:#}")))?;
    let mut records = Vec::with_capacity(set.records.len());
    for (index, record) in set.records.into_iter().enumerate() {
        // idem's records carry offset deltas 0, 1, 2, … (what every producer sends).
        let found = record.offset - base_offset;
        if found != index as i64 {
            return Err(ConversionError::OffsetDelta { index, found });
        }
        records.push(Record {
            key: record.key,
            value: record.value,
            headers: record
                .headers
                .into_iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.unwrap_or_default()))
                .collect(),
            timestamp_ms: record.timestamp,
        });
    }
    Ok(batch::encode(
        producer,
        attributes & KEPT_ATTRIBUTES,
        &records,
    ))
}

/// Appends to `out` the Kafka v2 form of every idem batch in `stored` (whole batches,
/// as a fetch reads them): same header but magic 2, varint records, CRC recomputed.
pub fn stored_to_kafka(stored: &[u8], out: &mut BytesMut) -> Result<(), ConversionError> {
    for found in batch::Batches::new(stored) {
        let (header, raw) = found?;
        let start = out.len();
        out.put_slice(&raw[..HEADER_LEN]);
        out[start + OFF_MAGIC] = KAFKA_MAGIC;
        let mut body = BytesMut::new();
        for record in batch::records(raw)? {
            body.clear();
            // Kafka record: attributes i8 | timestamp delta varlong | offset delta
            // varint | key | value | headers (lengths as varints, -1 = null).
            body.put_i8(0);
            put_varlong(
                &mut body,
                record.timestamp_ms.wrapping_sub(header.base_timestamp),
            );
            put_varint(
                &mut body,
                i32::try_from(record.offset - header.base_offset).unwrap_or(i32::MAX),
            );
            put_bytes(&mut body, record.key.as_deref());
            put_bytes(&mut body, record.value.as_deref());
            put_varint(&mut body, len_i32(record.headers.len()));
            for (key, value) in &record.headers {
                put_bytes(&mut body, Some(key.as_bytes()));
                put_bytes(&mut body, Some(value));
            }
            put_varint(out, len_i32(body.len()));
            out.put_slice(&body);
        }
        let batch_length = len_i32(out.len() - start - LOG_OVERHEAD);
        out[start + OFF_BATCH_LENGTH..start + OFF_BATCH_LENGTH + 4]
            .copy_from_slice(&batch_length.to_be_bytes());
        let crc = crc32c::crc32c(&out[start + OFF_ATTRIBUTES..]);
        out[start + OFF_CRC..start + OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    }
    Ok(())
}

/// A Kafka batch with no record standing for `base_offset .. next_offset`: tells a
/// Kafka consumer to move past offsets a read_committed fetch filtered out (aborted
/// batches), which it would otherwise ask for again and again. Kafka clients skip such
/// batches as they skip what compaction emptied.
pub fn skipped_range(base_offset: i64, next_offset: i64, out: &mut BytesMut) {
    let delta = i32::try_from(next_offset - 1 - base_offset).unwrap_or(i32::MAX);
    let filler = batch::filler(base_offset, delta, -1, -1);
    // A filler of idem's own encoder always reads back.
    if let Err(e) = stored_to_kafka(&filler, out) {
        tracing::error!(error = %e, "filler batch did not convert");
    }
}

fn len_i32(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

// Kafka's zigzag varints: the zigzag mapping here, the base-128 varint from prost (the
// same encoding protobuf uses), since kafka-protocol keeps its `Encoder` private (0.18);
// the tests read every converted batch back with the crate's decoder.
fn put_varint(buf: &mut BytesMut, value: i32) {
    put_varlong(buf, i64::from(value));
}

fn put_varlong(buf: &mut BytesMut, value: i64) {
    prost::encoding::encode_varint(((value << 1) ^ (value >> 63)) as u64, buf);
}

fn put_bytes(buf: &mut BytesMut, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(buf, -1),
        Some(b) => {
            put_varint(buf, len_i32(b.len()));
            buf.put_slice(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression, Record as KafkaRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    use proptest::prelude::*;

    fn kafka_record(i: i64, producer: ProducerInfo, value: Vec<u8>) -> KafkaRecord {
        let mut headers = IndexMap::new();
        headers.insert(
            StrBytes::from_static_str("h"),
            Some(Bytes::from(format!("v{i}"))),
        );
        KafkaRecord {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: producer.producer_id,
            producer_epoch: producer.producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i,
            // The crate's encoder starts a new batch where `offset - sequence` changes;
            // it takes the batch's base sequence from the first record's: -1 here
            // without a producer id.
            sequence: producer.base_sequence + i as i32,
            timestamp: 1_700_000_000_000 + i,
            key: (i % 2 == 0).then(|| Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(value)),
            headers,
        }
    }

    fn kafka_batch(records: &[KafkaRecord], compression: Compression) -> Bytes {
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .expect("encodes");
        buf.freeze()
    }

    /// Produced (any compression) -> idem -> stored at an offset -> fetched as Kafka
    /// -> decoded by the crate: the same records, offsets and producer fields.
    fn round_trip(compression: Compression, values: Vec<Vec<u8>>, idempotent: bool) {
        let producer = if idempotent {
            ProducerInfo {
                producer_id: 42,
                producer_epoch: 3,
                base_sequence: 7,
            }
        } else {
            ProducerInfo::NONE
        };
        let sent: Vec<KafkaRecord> = values
            .into_iter()
            .enumerate()
            .map(|(i, v)| kafka_record(i as i64, producer, v))
            .collect();
        let kafka = kafka_batch(&sent, compression);
        let idem = produced_to_idem(&kafka).expect("converts");
        let header = batch::validate_produced(&idem).expect("a valid idem batch");
        assert_eq!(header.producer(), producer);
        let mut stored = idem.to_vec();
        batch::assign(&mut stored, 1000, 5);
        let mut fetched = BytesMut::new();
        stored_to_kafka(&stored, &mut fetched).expect("converts back");
        let set = RecordBatchDecoder::decode(&mut fetched.freeze()).expect("kafka decodes");
        assert_eq!(set.compression, Compression::None);
        assert_eq!(set.records.len(), sent.len());
        for (got, want) in set.records.iter().zip(&sent) {
            assert_eq!(got.offset, 1000 + want.offset);
            assert_eq!(got.partition_leader_epoch, 5);
            assert_eq!(got.key, want.key);
            assert_eq!(got.value, want.value);
            assert_eq!(got.headers, want.headers);
            assert_eq!(got.timestamp, want.timestamp);
            assert_eq!(got.producer_id, want.producer_id);
            assert_eq!(got.producer_epoch, want.producer_epoch);
            assert_eq!(got.sequence, want.sequence);
        }
    }

    #[test]
    fn given_each_compression_when_produced_and_fetched_then_records_are_unchanged() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            round_trip(
                compression,
                vec![b"a".to_vec(), vec![7; 3000], Vec::new()],
                true,
            );
        }
    }

    proptest! {
        #[test]
        fn given_any_records_when_converted_both_ways_then_nothing_changes(
            values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..20),
            idempotent in any::<bool>(),
            compression in 0..5u8,
        ) {
            let compression = [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd][compression as usize];
            round_trip(compression, values, idempotent);
        }
    }

    #[test]
    fn given_a_corrupted_byte_when_produced_then_it_is_refused() {
        let sent = [kafka_record(0, ProducerInfo::NONE, b"x".to_vec())];
        let mut kafka = kafka_batch(&sent, Compression::None).to_vec();
        let last = kafka.len() - 1;
        kafka[last] ^= 0xff;
        assert!(matches!(
            produced_to_idem(&Bytes::from(kafka)),
            Err(ConversionError::Decode(_))
        ));
    }

    #[test]
    fn given_two_batches_or_a_short_one_when_produced_then_they_are_refused() {
        let sent = [kafka_record(0, ProducerInfo::NONE, b"x".to_vec())];
        let one = kafka_batch(&sent, Compression::None);
        let two = Bytes::from([one.to_vec(), one.to_vec()].concat());
        assert!(matches!(
            produced_to_idem(&two),
            Err(ConversionError::NotOneBatch { .. })
        ));
        assert_eq!(
            produced_to_idem(&one.slice(..20)),
            Err(ConversionError::Truncated(20))
        );
        let mut v1 = one.to_vec();
        v1[OFF_MAGIC] = 1;
        assert_eq!(
            produced_to_idem(&Bytes::from(v1)),
            Err(ConversionError::Magic(1))
        );
    }

    #[test]
    fn given_a_skipped_range_then_kafka_reads_an_empty_batch_spanning_it() {
        let mut out = BytesMut::new();
        skipped_range(10, 25, &mut out);
        let infos =
            RecordBatchDecoder::decode_batch_info(&mut out.clone().freeze()).expect("decodes");
        assert_eq!(infos.len(), 1);
        assert_eq!(infos[0].min_offset, 10);
        assert_eq!(infos[0].record_count, 0);
        assert_eq!(
            (&out[23..]).get_i32(),
            14,
            "last offset delta spans 10..=24"
        );
    }
}
